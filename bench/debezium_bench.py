"""The collector against Debezium's MariaDB connector, on the same binlog and the same Kafka.

    .venv/bin/python -m bench.debezium_bench [--single-rows 200000] [--latency-seconds 10]

The peer users would otherwise pick: Debezium 3.5's MariaDB connector in its embedded engine
(bench/jvm/debezium, built here with Maven on first use, outside the stack's pom), every change
event sent to the stack's Kafka by a producer with acks=all and marked processed only after
Kafka acknowledged it (at least once, as Kafka Connect runs it). The collector publishes the
same changes exactly once (transactions, positions committed).

Throughput: both read the same range of single-row autocommits (bench.collector_bench's
workload A) from the binlog after it was written, and are timed from their first row in Kafka
to their last. Latency: a paced live workload of single-row autocommits, MySQL commit →
readable by a consumer of the topic, p50/p99, for each in turn (never both at once: two cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.collector_bench import DB, DDL, _admin, collector_run, latency, timed_rows, workload_a
from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, load_settings
from cdc_platform.kafka import ensure_topic
from collector.decoding import fix_reader_quirks
from collector.reader import server_position
from collector.service import tune_gc
from stack.manager import LocalStack

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "bench" / "jvm" / "debezium" / "pom.xml"
PEER = "Debezium 3.5.0 MariaDB connector, embedded engine → Kafka (acks=all, at least once)"


def build_jars(home: Path) -> Path:
    """The runner's jar and its dependencies in ``home`` (Maven, once per pom change)."""
    stamp = home / ".built"
    digest = str(POM.stat().st_mtime_ns) + "".join(
        str(p.stat().st_mtime_ns) for p in sorted(POM.parent.rglob("*.java"))
    )
    if stamp.is_file() and stamp.read_text() == digest:
        return home
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), "package", f"-Dlib.root={home}"], check=True
    )
    stamp.write_text(digest)
    return home


class Debezium:
    """One run of the embedded engine: started, read line by line, stopped by closing stdin.

    Offsets and schema history live in ``work`` so a second run resumes where the first
    stopped (the throughput run starts where an earlier run left the binlog)."""

    def __init__(self, settings: Settings, jars: Path, work: Path, prefix: str) -> None:
        self.topic = f"{prefix}.{DB}.orders"
        instance = settings.instances[0]
        engine = {
            "name": "bench-debezium",
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": instance.host,
            "database.port": str(instance.port),
            "database.user": settings.stack.admin_user,
            "database.password": settings.stack.admin_password.get_secret_value(),
            "database.server.id": str(random.randrange(3 * 10**6, 4 * 10**6)),
            "database.ssl.mode": "disable",
            "topic.prefix": prefix,
            "database.include.list": DB,
            "table.include.list": f"{DB}.orders",
            "include.schema.changes": "false",
            "tombstones.on.delete": "false",
            # The table's existing rows are not the benchmark's: read the binlog from now on.
            "snapshot.mode": "no_data",
            "snapshot.locking.mode": "none",
            "heartbeat.interval.ms": "200",
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(work / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": str(work / "history.dat"),
            # Only the captured table's DDL (other clients of the server create and drop
            # databases while the schema is read; the collector reads only its tables too).
            "schema.history.internal.store.only.captured.databases.ddl": "true",
            "schema.history.internal.store.only.captured.tables.ddl": "true",
            "converter.schemas.enable": "false",
            "bench.bootstrap": settings.kafka.bootstrap_servers,
            "bench.table.topic": self.topic,
        }
        work.mkdir(parents=True, exist_ok=True)
        self._properties = work / "engine.properties"
        self._properties.write_text("".join(f"{k}={v}\n" for k, v in engine.items()))
        self._jars = jars
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self._process: subprocess.Popen[str] | None = None
        self.started_ns = 0

    def start(self) -> None:
        self.started_ns = time.monotonic_ns()
        log = (self._properties.parent / "engine.log").open("a")  # the engine's own log
        self._process = subprocess.Popen(
            ["java", "-Xmx1g", "-cp", f"{self._jars}/*", "io.cdcmirror.bench.DebeziumToKafka",
             str(self._properties)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith("{"):
                self._lines.put(json.loads(line))
        self._lines.put({"exited": True})

    def wait_for(self, done: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(f"Debezium did not report within {timeout_s:.0f} s") from None
            if "error" in line or "exited" in line:
                where = self._properties.parent / "engine.log"
                raise SystemExit(f"Debezium stopped (its log: {where}): {line}")
            if done(line):
                return line

    def stop(self) -> None:
        """Close stdin (the engine stores its offsets and exits); kill it if it does not."""
        assert self._process is not None and self._process.stdin is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        try:
            self._process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def debezium_catch_up(
    settings: Settings, jars: Path, prefix: str, rows: int
) -> tuple[int, float, Any, Any]:
    """Debezium reads the range of workload A written while it was stopped: (rows, seconds
    from its first row in Kafka to its last, the range's start and stop)."""
    work = ROOT / "var" / "bench" / "debezium-run" / uuid.uuid4().hex[:8]
    engine = Debezium(settings, jars, work, prefix)
    engine.start()  # takes the binlog position of now, then stops and keeps it
    try:
        engine.wait_for(lambda line: bool(line.get("streaming")), 180)
    finally:
        engine.stop()
    start, stop = workload_a(settings, rows)
    engine = Debezium(settings, jars, work, prefix)
    engine.start()
    try:
        last = engine.wait_for(lambda line: line.get("records", 0) >= rows, 600)
    finally:
        engine.stop()
    return int(last["records"]), (last["last_ns"] - last["first_ns"]) / 1e9, start, stop


def debezium_row_id(value: bytes) -> int | None:
    """The key of a Debezium change event's row (``after.id``, or ``before.id`` for a delete)."""
    event = json.loads(value)
    return int((event.get("after") or event["before"])["id"])


def debezium_latency(settings: Settings, jars: Path, prefix: str, seconds: float, rate: int,
                     writers: int = 4) -> tuple[float, float, float, int]:
    """As bench.collector_bench.latency, with Debezium reading: (p50 ms, p99 ms, rows/s, rows)."""
    work = ROOT / "var" / "bench" / "debezium-run" / uuid.uuid4().hex[:8]
    # A topic of the run's own: the receiver counts every key it reads.
    engine = Debezium(settings, jars, work, f"{prefix}l")
    ensure_topic(settings.kafka, engine.topic, partitions=settings.kafka.partitions)
    engine.start()
    try:
        return _timed_live_rows(settings, engine, seconds, rate, writers)
    finally:
        engine.stop()


def _timed_live_rows(settings: Settings, engine: Debezium, seconds: float, rate: int,
                     writers: int) -> tuple[float, float, float, int]:
    engine.wait_for(lambda line: bool(line.get("streaming")), 180)
    return timed_rows(settings.kafka, engine.topic, seconds, rate, writers, debezium_row_id)


def _clear_latency_rows(settings: Settings) -> None:
    """The latency runs write the same keys (10**12 + n): each run starts without them."""
    with _admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DB}.orders WHERE id > 1000000000000")
        server_position(cursor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single-rows", type=int, default=20_000, help="catch-up size (issue: 200000)")
    parser.add_argument("--latency-seconds", type=float, default=10, help="length of each latency run (0: skip)")
    parser.add_argument("--latency-rate", type=int, default=2000, help="rows/s written during the latency runs")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    args = parser.parse_args()
    tune_gc()
    settings = load_settings()
    LocalStack(settings).up()
    fix_reader_quirks()
    jars = build_jars(ROOT / "var" / "bench" / "debezium")
    with _admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")
        cursor.execute(f"CREATE DATABASE {DB}")
        cursor.execute(DDL)
    prefix = f"benchdbz{uuid.uuid4().hex[:6]}"
    # Debezium's producer writes to topics of the same shape as the collector's.
    ensure_topic(settings.kafka, f"{prefix}.{DB}.orders", partitions=settings.kafka.partitions)
    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:+UseParallelGC")

    dbz_rows, dbz_s, start, stop = debezium_catch_up(settings, jars, prefix, args.single_rows)
    coll_rows, coll_s = collector_run(settings, start, stop)
    if coll_rows != dbz_rows:
        raise SystemExit(f"the collector published {coll_rows} rows, Debezium {dbz_rows}")
    name = f"{args.single_rows:,} single-row autocommits, read from the binlog after writing"
    figures = [Figure("debezium.single_rows", name, coll_rows / coll_s, "rows/s",
                      dbz_rows / dbz_s, PEER, extra={"rows": coll_rows})]
    print(f"machine: {describe_machine()}")
    print(f"peer: {PEER}")
    print(f"{'':<62} {'Debezium':>10} {'collector':>10} {'ratio':>6}")
    print(f"{name + ' (rows/s)':<62} {dbz_rows / dbz_s:>10,.0f} {coll_rows / coll_s:>10,.0f} "
          f"{(coll_rows / coll_s) / (dbz_rows / dbz_s):>6.2f}")
    if args.latency_seconds > 0:
        _clear_latency_rows(settings)
        d50, d99, d_rate, rows = debezium_latency(settings, jars, prefix, args.latency_seconds,
                                                   args.latency_rate)
        _clear_latency_rows(settings)
        c50, c99, c_rate, _ = latency(settings, args.latency_seconds, args.latency_rate)
        label = f"MySQL commit → readable, {rows:,} autocommits at ~{args.latency_rate:,} rows/s"
        print(f"{label + ' p50 (ms)':<62} {d50:>10.0f} {c50:>10.0f} {d50 / c50:>6.2f}")
        print(f"{label + ' p99 (ms)':<62} {d99:>10.0f} {c99:>10.0f} {d99 / c99:>6.2f}")
        figures.append(Figure("debezium.latency", label, c99, "ms", d99, PEER, higher_is_better=False,
                              extra={"p50": c50, "p99": c99, "peer_p50": d50, "peer_p99": d99,
                                     "rows/s": c_rate, "peer_rows/s": d_rate}))
    write_figures(args.json, "debezium", figures)


if __name__ == "__main__":
    main()
