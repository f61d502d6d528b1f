"""Helpers for the web admin's integration tests: sharded test tables in the real MariaDB,
the admin served by its real command (``cdc-mirror webui``) in a subprocess, and Debian's
chromium for the browser tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cdc_platform.config import Settings
from simple_binlog.errors import StackError
from tests.integration.mariadb_admin import admin_connection as mariadb_admin

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "webui"


@dataclass(frozen=True)
class ShardedTable:
    db_prefix: str
    table_prefix: str
    schemas: tuple[str, ...]

    @property
    def logical_name(self) -> str:
        return f"{self.db_prefix}_{self.table_prefix}"


@contextmanager
def sharded_table(settings: Settings, shards: int = 2) -> Iterator[ShardedTable]:
    """``wui<hex>_00..`` × ``orders_00, orders_01``; plus ``nokey_00`` without a primary key."""
    prefix = f"wui{uuid.uuid4().hex[:8]}"
    schemas = tuple(f"{prefix}_{i:02d}" for i in range(shards))
    with mariadb_admin(settings) as conn, conn.cursor() as cursor:
        for schema in schemas:
            cursor.execute(f"CREATE DATABASE {schema}")
            for table in ("orders_00", "orders_01"):
                cursor.execute(
                    f"CREATE TABLE {schema}.{table} (id BIGINT UNSIGNED PRIMARY KEY, "
                    "user_id BIGINT NOT NULL, amount DECIMAL(12,2), created_at DATETIME(6))"
                )
            cursor.execute(f"CREATE TABLE {schema}.nokey_00 (a INT, b VARCHAR(10))")
    try:
        yield ShardedTable(prefix, "orders", schemas)
    finally:
        with mariadb_admin(settings) as conn, conn.cursor() as cursor:
            for schema in schemas:
                cursor.execute(f"DROP DATABASE IF EXISTS {schema}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check, timeout_s: float, what: str, interval_s: float = 0.2):
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_file: Path
    replay_worker: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        _stop(self.process)
        if self.replay_worker is not None:
            _stop(self.replay_worker)


@contextmanager
def replay_worker(env: dict[str, str], log_file: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``cdc-mirror replay-worker`` over the admin database named in ``env``, stopped after."""
    process = start_replay_worker(env, log_file)
    try:
        yield process
    finally:
        _stop(process)


def start_replay_worker(env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cdc_mirror", "replay-worker", "--poll-s", "0.5"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def start_server(home: Path, env: dict[str, str], with_replay_worker: bool = True) -> Server:
    """``cdc-mirror webui --port N`` with its own database and key, and a replay worker
    over the same database; waits until the admin answers."""
    port = free_port()
    log_file = home / "webui.log"
    full_env = {
        **os.environ,
        "CDC_MIRROR_WEBUI__DATABASE_URL": f"sqlite:///{home / 'admin.sqlite'}",
        "CDC_MIRROR_WEBUI__SECRET_KEY_FILE": str(home / "admin.key"),
        **env,
    }
    with log_file.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cdc_mirror",
                "webui",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log_file)

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"cdc-mirror webui exited: {log_file.read_text()[-2000:]}")
        try:
            return httpx.get(f"{server.url}/login", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answers, 60, "the web admin to answer")
    if with_replay_worker:  # the admin has migrated its database by now
        server.replay_worker = start_replay_worker(
            {k: v for k, v in full_env.items() if k.startswith("CDC_MIRROR_")},
            home / "replay-worker.log",
        )
    return server


def chromium_executable() -> str:
    """Debian's chromium, installed the way the stack installs packages when missing.

    Fails (not skips) with the stack's one sentence when it cannot be installed.
    """
    found = shutil.which("chromium")
    if found:
        return found
    from stack.install import apt_install

    try:
        apt_install("chromium (browser tests)", ("chromium",))
    except StackError as exc:
        pytest.fail(f"the browser tests need Debian's chromium: {exc}")
    found = shutil.which("chromium")
    if not found:
        pytest.fail("apt-get installed chromium but no 'chromium' executable is on PATH.")
    return found


def fill_rows(settings: Settings, table: ShardedTable, rows_per_table: int) -> int:
    """Rows with ids 1..n in every ``orders_*`` shard table; returns the total."""
    with mariadb_admin(settings) as conn, conn.cursor() as cursor:
        for schema in table.schemas:
            for name in ("orders_00", "orders_01"):
                cursor.executemany(
                    f"INSERT INTO {schema}.{name} (id, user_id, amount, created_at) "
                    "VALUES (%s, %s, %s, NOW(6))",
                    [(i, i % 97, f"{i}.25") for i in range(1, rows_per_table + 1)],
                )
    return rows_per_table * 2 * len(table.schemas)
