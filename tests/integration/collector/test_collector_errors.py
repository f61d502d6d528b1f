"""Failures the collector cannot cure end it with one clear sentence, never a silent skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from cdc_platform.config import Settings
from tests.integration.collector.harness import ROOT, admin


def _run_collector(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDC_MIRROR_KAFKA__TOPIC_PREFIX": f"e{uuid.uuid4().hex[:6]}.", **extra_env}
    return subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "collector", "run", "--no-ha", "--metrics-port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr[-2000:]
    return lines[0]


def test_wrong_password_is_named_and_the_password_is_not(local_stack: Settings) -> None:
    instance = {
        "name": "local",
        "host": "127.0.0.1",
        "port": local_stack.instances[0].port,
        "user": "cdc",
        "password": "not-the-password-x7",
    }
    result = _run_collector({"CDC_MIRROR_INSTANCES": json.dumps([instance])})
    assert result.returncode == 2  # a configuration error
    line = _error_line(result)
    assert "refused user 'cdc'" in line and "check the user and password" in line
    assert "not-the-password-x7" not in result.stderr + result.stdout


def test_purged_binlog_says_so_and_points_to_a_replay(local_stack: Settings) -> None:
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT @@gtid_binlog_pos")
        old = cursor.fetchone()[0]
        cursor.execute("CREATE DATABASE IF NOT EXISTS cdc_purge")
        cursor.execute("CREATE TABLE IF NOT EXISTS cdc_purge.t (id INT PRIMARY KEY)")
        cursor.execute("REPLACE INTO cdc_purge.t VALUES (1)")  # at least one GTID after `old`
        # MariaDB keeps a binlog until InnoDB has made its commits durable (the binlog
        # checkpoint; about a second with innodb_flush_log_at_trx_commit=2): purge until only
        # the newest file is left.
        cursor.execute("FLUSH BINARY LOGS")
        cursor.execute("SHOW MASTER STATUS")
        newest = cursor.fetchone()[0]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            cursor.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cursor.execute("SHOW BINARY LOGS")
            if len(cursor.fetchall()) == 1:
                break
            time.sleep(0.2)
        assert cursor.rowcount == 1, "the old binlogs could not be purged"
    result = _run_collector({"CDC_MIRROR_COLLECTOR__START": old})
    assert result.returncode == 2  # a configuration error
    line = _error_line(result)
    # The startup checks (collector.preflight) say so before the dump is opened.
    assert f"purged the binlog after GTID {old}" in line
    assert "'cdc-mirror replay --instance local" in line
