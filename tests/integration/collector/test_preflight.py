"""The startup checks against a real MariaDB: the failover pair's primary (``mariadb-primary``,
reset for each test), so changing global variables, users and binlogs disturbs no one.

- a user without REPLICATION SLAVE: refused, naming the privilege and the GRANT;
- binlog_row_image=MINIMAL: a collector process refuses at connect, one sentence, exit 1;
- a resume position already purged (FLUSH + PURGE BINARY LOGS): refused, naming the oldest
  available GTID and the replay command; the server's own dump error agrees.

About 10 s.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from collector.binlog_stream import BinlogStream
from collector.preflight import Preflight, Subject, read_snapshot
from collector.reader import connect
from simple_binlog.errors import ConfigError
from stack.replication import PRIMARY_PORT, REPLICA_PORT
from tests.integration.collector.harness import CollectorProcess
from tests.integration.collector.pair import FailoverPair
from tests.integration.mirror.harness import free_port


def _check(pair: FailoverPair, resume: str, user: str | None = None, password: str = "") -> None:
    instance = pair.instance(PRIMARY_PORT, "fo")
    if user is not None:
        instance = instance.model_copy(update={"user": user, "password": password})
    with connect(instance) as connection, connection.cursor() as cursor:
        snapshot = read_snapshot(cursor)
    Preflight().check(snapshot, Subject("fo", 4101, resume, (r"fo_p\..*",)))


def _purge_to(cursor: pymysql.cursors.Cursor, file: str) -> None:
    """PURGE BINARY LOGS, retried until done: MariaDB keeps a binlog until its binlog
    checkpoint has passed (InnoDB flushed its commits), a moment after the FLUSH."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        cursor.execute("PURGE BINARY LOGS TO %s", (file,))
        cursor.execute("SHOW BINARY LOGS")
        if [row[0] for row in cursor.fetchall()] == [file]:
            return
        time.sleep(0.2)
    raise AssertionError(f"the binlogs before {file} were not purged")


@pytest.fixture()
def no_replication_user(failover_pair: FailoverPair) -> Iterator[tuple[str, str]]:
    user, password = f"fo_u{uuid.uuid4().hex[:6]}", "Fo-local-1"
    with failover_pair.admin() as connection, connection.cursor() as cursor:
        cursor.execute("CREATE USER %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
        cursor.execute("GRANT BINLOG MONITOR, SELECT ON *.* TO %s@'127.0.0.1'", (user,))
    yield user, password
    with failover_pair.admin() as connection, connection.cursor() as cursor:
        cursor.execute("DROP USER IF EXISTS %s@'127.0.0.1'", (user,))


def test_a_user_without_replication_slave_is_refused(
    failover_pair: FailoverPair, no_replication_user: tuple[str, str]
) -> None:
    user, password = no_replication_user
    _check(failover_pair, failover_pair.position().gtid)  # the stack's user: fit
    with pytest.raises(ConfigError) as refused:
        _check(failover_pair, failover_pair.position().gtid, user, password)
    assert str(refused.value) == (
        f"the collector's user '{user}'@'127.0.0.1' on MySQL instance 'fo' lacks REPLICATION "
        f"SLAVE: run GRANT REPLICATION SLAVE ON *.* TO '{user}'@'127.0.0.1' (or grant them to "
        "its default role)."
    )


@pytest.fixture()
def minimal_row_image(failover_pair: FailoverPair) -> Iterator[None]:
    with failover_pair.admin() as connection, connection.cursor() as cursor:
        cursor.execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        yield
    finally:
        with failover_pair.admin() as connection, connection.cursor() as cursor:
            cursor.execute("SET GLOBAL binlog_row_image = 'FULL'")


def test_a_collector_refuses_binlog_row_image_minimal(
    failover_pair: FailoverPair, minimal_row_image: None, tmp_path: Path
) -> None:
    start = failover_pair.position()
    env = {
        **os.environ,
        "CDC_MIRROR_INSTANCES": json.dumps(
            [
                {
                    "name": "fo",
                    "host": "127.0.0.1",
                    "port": PRIMARY_PORT,
                    "replica_server_id": random.randrange(3_000_000, 4_000_000),
                }
            ]
        ),
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": f"fo{uuid.uuid4().hex[:6]}.",
        "CDC_MIRROR_COLLECTOR__START": start.gtid,
    }
    env.pop("CDC_MIRROR_CONFIG", None)
    collector = CollectorProcess(env, free_port(), tmp_path / "collector.log", instance="fo")
    collector.start()
    assert collector.process is not None
    try:
        collector.process.wait(60)
    finally:
        collector.stop()
    output = collector.log.read_text()
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: MySQL instance 'fo' has binlog_row_image=MINIMAL, which logs only the primary "
        "key in before images and only the changed columns in after images, so the mirrors "
        "could not rebuild rows: set binlog_row_image=FULL (SET GLOBAL and in the config "
        "file) and restart the collector."
    ], output[-3000:]
    assert collector.process.returncode != 0 and "Traceback" not in output


def test_a_purged_resume_position_names_the_oldest_and_the_replay(
    failover_pair: FailoverPair,
) -> None:
    pair = failover_pair
    with pair.admin() as connection, connection.cursor() as cursor:
        cursor.execute("CREATE DATABASE fo_p")
        cursor.execute("CREATE TABLE fo_p.t (id INT PRIMARY KEY)")
        cursor.execute("INSERT INTO fo_p.t VALUES (1)")
        resume = pair.position().gtid
        cursor.execute("INSERT INTO fo_p.t VALUES (2)")
        cursor.execute("FLUSH BINARY LOGS")
        cursor.execute("INSERT INTO fo_p.t VALUES (3)")
        oldest = pair.position()
        pair.replica_applied_all()
        # A binlog a dump thread still reads is not purged: the replica stops reading.
        with pair.admin(REPLICA_PORT) as replica, replica.cursor() as on_replica:
            on_replica.execute("STOP SLAVE")
        _purge_to(cursor, oldest.file)
    _check(pair, oldest.gtid)  # still there: fit
    with pytest.raises(ConfigError) as refused:
        _check(pair, resume)
    purged_after = f"0-11-{int(resume.split('-')[2]) + 1}"  # the INSERT of 2
    assert str(refused.value) == (
        f"MySQL instance 'fo' purged the binlog after GTID {resume} (its oldest binlog, "
        f"{oldest.file}, starts after GTID {purged_after}); the changes after {resume} up to "
        f"{purged_after} are lost to the binlog: start the collector afresh from "
        f"{purged_after} (collector.start) and re-seed the tables it collects (fo_p\\..*) with "
        "'cdc-mirror replay --instance fo --db-prefix DB --table-prefix TABLE' for each of them."
    )
    # The server agrees: its dump refuses that position (what the check spares the user).
    stream = BinlogStream(
        pair.instance(PRIMARY_PORT), random.randrange(5_000_000, 6_000_000), resume
    )
    with pytest.raises(pymysql.MySQLError) as dump:
        next(iter(stream))
    stream.close()
    assert dump.value.args[0] == 1236
