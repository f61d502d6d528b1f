"""History replay throughput against the read limit, on the same rows.

    .venv/bin/python -m bench.replay_bench [--rows 2000000] [--shards 16] [--workers 1 2]
                                           [--batch-size 10000] [--keep]

Builds one logical table of ``--rows`` rows spread over ``--shards`` physical tables
(``bench_replay_<id>_00..03`` × ``orders_00..``, a 12-column order row), then measures:

* the read limit (baseline): PyMySQL with an unbuffered ``SSCursor`` streaming the same
  columns of the same rows, table after table, publishing nothing;
* the replay: ``mock_replay`` reading in keyset chunks, encoding every row as a SimpleBinlog
  MOCK message and publishing it into Kafka exactly once (one transaction per chunk with its
  progress), once per ``--workers`` value (reader processes).

Prints rows/s of each, the ratio to the read limit, and the machine. Targets (issue 4):
≥ 100,000 rows/s and ≥ 50 % of the read limit. Starts the local stack if needed; drops its
databases and topics at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors
from confluent_kafka.admin import AdminClient

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, load_settings
from cdc_platform.kafka import admin_config
from mock_replay.plan import chunk_query
from mock_replay.publish import KafkaProgressStore, progress_topic
from mock_replay.runner import Cancellation, ReplayRequest, execute_run, start_run
from simple_binlog.naming import topic_name
from stack.manager import LocalStack
from stack.process import PidFile

COLUMNS = """
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY, user_id INT NOT NULL, shop_id INT NOT NULL,
  amount DECIMAL(12,2) NOT NULL, fee DECIMAL(10,4) NULL, status ENUM('NEW','PAID','SHIPPED') NOT NULL,
  note VARCHAR(64) NULL, channel CHAR(8) NOT NULL, created_at DATETIME(3) NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL, flags BIT(8) NOT NULL, ratio DOUBLE NULL
"""
FILL = """
INSERT INTO {table}
SELECT s.seq * 100 + {shard}, s.seq % 1000003, s.seq % 997, (s.seq % 100000) / 100,
       IF(s.seq % 5 = 0, NULL, (s.seq % 10000) / 10000), ELT(1 + s.seq % 3, 'NEW', 'PAID', 'SHIPPED'),
       IF(s.seq % 4 = 0, NULL, CONCAT('note ', s.seq)), 'app',
       TIMESTAMP'2026-11-01 00:00:00.123' + INTERVAL s.seq SECOND,
       TIMESTAMP'2026-11-02 00:00:00.654321' + INTERVAL s.seq SECOND, b'101', s.seq / 7
FROM seq_1_to_{rows} AS s
"""


class CpuMeter:
    """CPU seconds spent during a measurement by MariaDB, the Kafka broker and this process
    with its reader processes: where the 2 cores went, and how far from their ceiling."""

    def __init__(self, stack: LocalStack) -> None:
        self._pids = {
            name: PidFile(stack.paths.run / f"{name}.pid").read() for name in ("mariadb", "kafka")
        }
        self.seconds: dict[str, float] = {}

    @staticmethod
    def _of(pid: int | None) -> float:
        if pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _now(self) -> dict[str, float]:
        own = os.times()
        mine = own.user + own.system + own.children_user + own.children_system
        return {"replay": mine} | {name: self._of(pid) for name, pid in self._pids.items()}

    def measure(self, work: Callable[[], Any]) -> Any:
        before = self._now()
        result = work()
        self.seconds = {name: value - before[name] for name, value in self._now().items()}
        return result

    def describe(self, rows: int, label: str = "replay") -> str:
        parts = [f"{name if name != 'replay' else label} {seconds:.1f} s"
                 for name, seconds in self.seconds.items()]  # fmt: skip
        total = sum(self.seconds.values())
        return f"cpu: {', '.join(parts)} = {1e6 * total / max(rows, 1):.1f} µs of CPU per row"


def _admin(settings: Settings) -> pymysql.connections.Connection:
    return pymysql.connect(
        host=settings.instances[0].host,
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
        database="mysql",
    )


def build(settings: Settings, prefix: str, rows: int, shards: int) -> list[str]:
    databases = 4 if shards >= 4 else 1
    per_db = shards // databases
    per_table = rows // shards
    tables = []
    with _admin(settings) as conn, conn.cursor() as cursor:
        for d in range(databases):
            cursor.execute(f"CREATE DATABASE {prefix}_{d:02d}")
            for t in range(per_db):
                table = f"{prefix}_{d:02d}.orders_{t:02d}"
                cursor.execute(f"CREATE TABLE {table} ({COLUMNS})")
                cursor.execute(FILL.format(table=table, shard=d * per_db + t, rows=per_table))
                cursor.execute(f"ANALYZE TABLE {table}")
                tables.append(table)
    return tables


def read_limit(settings: Settings, shapes) -> tuple[int, float]:
    """The same columns of the same rows streamed by PyMySQL's unbuffered cursor."""
    instance = settings.instances[0]
    connection = pymysql.connect(
        host=instance.host, port=instance.port, user=instance.user,
        password=instance.password.get_secret_value(), init_command="SET time_zone = '+00:00'",
    )  # fmt: skip
    count = 0
    started = time.perf_counter()
    with connection.cursor(pymysql.cursors.SSCursor) as cursor:
        for shape in shapes:
            sql, params = chunk_query(shape, None, None, 10**12)
            cursor.execute(sql, params)
            for _row in cursor.fetchall_unbuffered():
                count += 1
    elapsed = time.perf_counter() - started
    connection.close()
    return count, elapsed


def replay(settings: Settings, prefix: str, workers: int, batch_size: int) -> tuple[int, float]:
    store = KafkaProgressStore(settings.kafka, "local")
    request = ReplayRequest(
        "local", prefix, "orders", batch_size=batch_size, workers=workers, rate_limit=0,
        execute_day="2026-11-21",
    )  # fmt: skip
    prepared = start_run(settings, request, store)
    started = time.perf_counter()
    outcome = execute_run(settings, prepared, {}, store, Cancellation())
    elapsed = time.perf_counter() - started
    store.close()
    assert outcome.state == "done", outcome
    return outcome.rows, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--keep", action="store_true", help="keep the databases and topics")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    args = parser.parse_args()

    base = load_settings()
    stack = LocalStack(base)
    stack.up()
    prefix = f"bench_replay_{uuid.uuid4().hex[:6]}"
    kafka = base.kafka.model_copy(update={"topic_prefix": f"{prefix}."})
    settings = base.model_copy(update={"kafka": kafka})
    print(f"machine: {describe_machine()}")
    print(f"building {args.rows:,} rows in {args.shards} shards …", flush=True)
    started = time.perf_counter()
    tables = build(settings, prefix, args.rows, args.shards)
    figures: list[Figure] = []
    print(f"  built in {time.perf_counter() - started:.0f} s")
    try:
        from mock_replay.source import MySQLSource

        source = MySQLSource(settings.instances[0])
        shapes = [source.shape(*name.split(".")) for name in tables]
        source.close()
        cpu = CpuMeter(stack)
        rows, seconds = cpu.measure(lambda: read_limit(settings, shapes))
        limit_rate = rows / seconds
        print(f"read limit (PyMySQL SSCursor, nothing published): {rows:,} rows in {seconds:.1f} s"
              f" = {limit_rate:,.0f} rows/s")  # fmt: skip
        print(f"  {cpu.describe(rows, 'reader')}")
        for workers in args.workers:
            published, seconds = cpu.measure(
                lambda w=workers: replay(settings, prefix, w, args.batch_size)
            )
            rate = published / seconds
            print(f"replay, {workers} reader process(es), batch {args.batch_size:,}: {published:,} rows"
                  f" in {seconds:.1f} s = {rate:,.0f} rows/s = {rate / limit_rate:.0%} of the read limit"
                  f" (targets: 100,000 rows/s, 50 %)", flush=True)  # fmt: skip
            print(f"  {cpu.describe(published)}", flush=True)
            figures.append(Figure(f"replay.workers_{workers}", f"replay, {workers} reader process(es), "
                                  f"{published:,} rows in {args.shards} shards", rate, "rows/s",
                                  limit_rate, "read limit (PyMySQL SSCursor)"))  # fmt: skip
        write_figures(args.json, "replay", figures)
    finally:
        if not args.keep:
            with _admin(settings) as conn, conn.cursor() as cursor:
                for d in range(4):
                    cursor.execute(f"DROP DATABASE IF EXISTS {prefix}_{d:02d}")
            admin = AdminClient(admin_config(settings.kafka))
            topics = [topic_name(settings.kafka, "local"), progress_topic(settings.kafka, "local")]
            for future in admin.delete_topics(topics, operation_timeout=30).values():
                try:
                    future.result()
                except Exception as exc:  # noqa: BLE001 - cleanup: report and go on
                    print(f"  could not delete a topic: {exc}")
    print(f"measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC while other agents shared the cores")


if __name__ == "__main__":
    main()
