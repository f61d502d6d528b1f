"""The collector's commit cadence (``collector.commit_interval_ms``) on a real binlog.

MySQL transactions that arrive within one interval share a Kafka transaction, and the last of
them is committed once the interval is over even when nothing follows it: not at the next
binlog heartbeat (set to a minute here, so waiting for it would fail the test's deadline).
The collector publishes into a ``MemoryPublisher`` so the test sees each commit.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

from cdc_platform.config import Settings
from collector.metrics import CollectorMetrics
from collector.publisher import MemoryPublisher
from collector.reader import server_position
from collector.service import Collector
from tests.integration.collector.harness import admin


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_lone_transaction_is_committed_after_the_interval(local_stack: Settings) -> None:
    db = f"cad_{uuid.uuid4().hex[:8]}"
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {db}")
        cursor.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10))")
        start = server_position(cursor)
    settings = local_stack.collector.model_copy(
        update={
            "start": start.gtid,
            "include": [rf"{db}\..*"],
            "commit_interval_ms": 2_000,
            "heartbeat_s": 60.0,
        }
    )
    instance = local_stack.instances[0].model_copy(
        update={"name": db, "replica_server_id": random.randrange(3 * 10**6, 4 * 10**6)}
    )
    publisher = MemoryPublisher()
    metrics = CollectorMetrics()
    stop = threading.Event()
    collector = Collector(instance, settings, publisher, metrics, stop=stop)
    thread = threading.Thread(target=collector.run)
    thread.start()
    try:
        assert collector.started.wait(60)
        with admin(local_stack) as conn, conn.cursor() as cursor:
            cursor.execute(f"INSERT INTO {db}.t VALUES (1, 'a')")
            wait_for(lambda: len(publisher.committed) == 1, 20, "the first row")
            commits = len(publisher.positions)
            cursor.execute(f"INSERT INTO {db}.t VALUES (2, 'b')")
            cursor.execute(f"UPDATE {db}.t SET v = 'c' WHERE id = 2")
            wait_for(lambda: len(publisher.committed) == 3, 20, "the next two rows")
        # Both arrived within one interval of the first commit: one Kafka transaction.
        assert len(publisher.positions) == commits + 1
        assert [m.content["id"] for m in publisher.committed] == [1, 2, 2]
        assert publisher.positions[-1].partial is None
        rows = metrics.registry.get_sample_value(
            "cdc_collector_rows_total", {"instance": db, "schema": db, "table": "t"}
        )
        assert rows == 3  # counted once per commit, per table
    finally:
        stop.set()
        thread.join(30)
        with admin(local_stack) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {db}")
