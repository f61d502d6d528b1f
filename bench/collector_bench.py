"""Collector throughput against plain python-mysql-replication, on the same binlog.

    .venv/bin/python -m bench.collector_bench [--single-rows 200000] [--transactions 1000]

Workload A: single-row autocommit INSERT/UPDATE/DELETE on a 12-column table.
Workload B: transactions of 1,000 rows.
Baseline: python-mysql-replication reading the same binlog range and decoding every row,
doing nothing else. Measured: the collector publishing the same range into Kafka with
exactly-once on (transactions, acks=all, positions committed). Prints rows/s of both, the
ratio, and the machine. Starts the local stack if needed.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
import uuid
from decimal import Decimal

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, load_settings
from collector.decoding import fix_reader_quirks
from collector.metrics import CollectorMetrics
from collector.position import parse_gtid
from collector.publisher import KafkaPublisher
from collector.reader import ServerPosition, connect, server_position
from collector.service import Collector, tune_gc
from simple_binlog.naming import topic_name
from stack.manager import LocalStack

DB = "bench_collector"
DDL = f"""
CREATE TABLE {DB}.orders (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY, user_id INT NOT NULL, shop_id INT NOT NULL,
  amount DECIMAL(12,2) NOT NULL, fee DECIMAL(10,4) NULL, status ENUM('NEW','PAID','SHIPPED') NOT NULL,
  note VARCHAR(64) NULL, channel CHAR(8) NOT NULL, created_at DATETIME(3) NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), flags BIT(8) NOT NULL, ratio DOUBLE NULL
)"""
INSERT = (
    f"INSERT INTO {DB}.orders (id, user_id, shop_id, amount, fee, status, note, channel,"
    " created_at, flags, ratio) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, NOW(3), b'101', %s)"
)


def _admin(settings: Settings):
    instance = settings.instances[0].model_copy(
        update={"user": settings.stack.admin_user, "password": settings.stack.admin_password}
    )
    return connect(instance, autocommit=True)


def _row(rng: random.Random, key: int) -> tuple:
    return (key, rng.randrange(10**6), rng.randrange(1000), Decimal(rng.randrange(10**6)) / 100,
            Decimal(rng.randrange(10**5)) / 10**4, rng.choice(("NEW", "PAID", "SHIPPED")),
            rng.choice((None, "", "gift")), "app", rng.random())


def workload_a(settings: Settings, changes: int) -> tuple[ServerPosition, ServerPosition]:
    rng = random.Random(1)
    with _admin(settings) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
        live: list[int] = []
        key = 0
        for _ in range(changes):
            action = rng.random()
            if action < 0.5 or len(live) < 10:
                key += 1
                cursor.execute(INSERT, _row(rng, key))
                live.append(key)
            elif action < 0.85:
                cursor.execute(f"UPDATE {DB}.orders SET status = 'PAID', amount = amount + 1 WHERE id = %s", (rng.choice(live),))
            else:
                cursor.execute(f"DELETE FROM {DB}.orders WHERE id = %s", (live.pop(rng.randrange(len(live))),))
        return start, server_position(cursor)


def workload_b(settings: Settings, transactions: int) -> tuple[ServerPosition, ServerPosition]:
    rng = random.Random(2)
    with _admin(settings) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
        key = 10**9
        for _ in range(transactions):
            conn.begin()
            rows = []
            for _ in range(1000):
                key += 1
                rows.append(_row(rng, key))
            cursor.executemany(INSERT.replace("NOW(3)", "'2026-11-21 00:00:00.000'"), rows)
            conn.commit()
        return start, server_position(cursor)


def baseline(settings: Settings, start: ServerPosition, stop: ServerPosition) -> tuple[int, float]:
    """python-mysql-replication alone: decode every row of the range, nothing else."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    instance = settings.instances[0]
    reader = BinLogStreamReader(
        connection_settings={"host": instance.host, "port": instance.port, "user": instance.user,
                             "password": instance.password.get_secret_value()},
        server_id=random.randrange(2_000_000_000, 2_100_000_000),
        auto_position=start.gtid, blocking=True, is_mariadb=True,
        # Only the benchmark's rows count (other clients may write to the same server), and
        # the library skips decoding other schemas' rows, as the collector's filter does.
        only_schemas=[DB],
    )
    rows = 0
    began = time.perf_counter()
    for event in reader:
        if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            rows += len(event.rows)
        if (reader.log_file, reader.log_pos) >= (stop.file, stop.pos):
            break
    elapsed = time.perf_counter() - began
    reader.close()
    return rows, elapsed


def start_collector(settings: Settings, start: ServerPosition, governance=None):
    """A collector publishing from ``start`` in a thread, into topics of its own (with the
    ``GovernanceRuntime`` given: detection and policies on, for bench.governance_bench)."""
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"bench{uuid.uuid4().hex[:6]}."})
    collector_settings = settings.collector.model_copy(
        update={"start": start.gtid, "include": [rf"{DB}\..*"]}
    )
    # An instance name and replica server id of the benchmark's own: a collector running on the
    # same stack (a test, the demo) is neither fenced nor disconnected by this one.
    instance = settings.instances[0].model_copy(
        update={"name": f"bench-{uuid.uuid4().hex[:6]}", "replica_server_id": random.randrange(10**6, 2 * 10**6)}
    )
    metrics = CollectorMetrics()
    halt = threading.Event()
    collector = Collector(instance, collector_settings, KafkaPublisher(kafka, instance.name),
                          metrics, stop=halt, governance=governance)
    thread = threading.Thread(target=collector.run)
    thread.start()
    return collector, metrics, halt, thread, topic_name(kafka, instance.name), kafka


def collector_run(settings: Settings, start: ServerPosition, stop: ServerPosition,
                  governance=None) -> tuple[int, float]:
    """The collector publishing the range into Kafka, exactly once, until it has committed it;
    timed from the moment it publishes (its topics made, earlier owners fenced: a one-off of
    about a second at a new instance's start, not a cost per row)."""
    collector, metrics, halt, thread, _topic, _kafka = start_collector(settings, start, governance)
    if not collector.started.wait(60):
        raise SystemExit("the collector did not start within 60 s")
    began = time.perf_counter()
    target = parse_gtid(stop.gtid.split(",")[0])[2]
    while True:
        committed = collector.committed
        if committed and committed.partial is None and committed.gtid and parse_gtid(committed.gtid.split(",")[0])[2] >= target:
            break
        if not thread.is_alive():  # e.g. the range's binlog was purged: its error is printed
            raise SystemExit("the collector stopped before publishing the whole range")
        time.sleep(0.01)
    elapsed = time.perf_counter() - began
    halt.set()
    thread.join()
    rows = int(sum(s.value for m in metrics.rows.collect() for s in m.samples if s.name.endswith("_total")))
    return rows, elapsed


def _paced_writer(worker: int, writers: int, total: int, rate: int, start_at: float) -> dict[int, float]:
    """One writer process: every ``writers``-th key, paced to ``rate`` rows/s overall from
    ``start_at``; returns key → wall-clock time its autocommit returned."""
    settings = load_settings()
    rng = random.Random(worker)
    committed: dict[int, float] = {}
    with _admin(settings) as conn, conn.cursor() as cursor:
        for key in range(1 + worker, total + 1, writers):
            ahead = start_at + key / rate - time.time()
            if ahead > 0:
                time.sleep(ahead)
            cursor.execute(INSERT, _row(rng, 10**12 + key))
            committed[10**12 + key] = time.time()
    return committed


def simple_binlog_id(value: bytes) -> int | None:
    """The key of a SimpleBinlog message's row (``content.id``)."""
    import orjson

    return int(orjson.loads(value)["content"]["id"])


def _receiver(kafka, topic: str, total: int, ready, writers_done, results, key_of=simple_binlog_id) -> None:
    """A read_committed consumer in a process of its own (in the collector's process it would
    compete with it for the GIL): key → wall-clock time each row became readable. ``key_of``
    reads a record's row key (a module-level function: the process is spawned)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from cdc_platform.kafka import consumer_config

    consumer = Consumer(consumer_config(kafka, group_id=f"bench-{uuid.uuid4().hex[:6]}"))
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    received_at: dict[int, float] = {}
    ready.set()
    deadline = None
    while len(received_at) < total:
        for record in consumer.consume(1000, 0.05):
            if record.error() is None and record.value():
                key = key_of(record.value())
                if key is not None:
                    received_at[key] = time.time()
        if deadline is None and writers_done.is_set():  # then wait at most 60 s more
            deadline = time.monotonic() + 60
        if deadline and time.monotonic() > deadline:
            break
    consumer.close()
    results.put(received_at)


def timed_rows(kafka, topic: str, seconds: float, rate: int, writers: int = 4,
               key_of=simple_binlog_id) -> tuple[float, float, float, int]:
    """Single-row autocommits paced at ``rate`` rows/s by ``writers`` processes, each timed from
    its commit to its arrival in ``topic`` (whatever publishes there is already running).
    Returns (p50 ms, p99 ms, achieved rows/s, rows)."""
    import multiprocessing

    total = int(seconds * rate)
    context = multiprocessing.get_context("spawn")
    ready, writers_done, results = context.Event(), context.Event(), context.Queue()
    receiver = context.Process(
        target=_receiver, args=(kafka, topic, total, ready, writers_done, results, key_of)
    )
    receiver.start()
    if not ready.wait(60):
        raise SystemExit("the bench's consumer did not start within 60 s")
    start_at = time.time() + 2.0  # every writer paces from the same wall-clock start
    with context.Pool(writers) as pool:
        results_by_writer = pool.starmap(
            _paced_writer, [(w, writers, total, rate, start_at) for w in range(writers)]
        )
    committed_at: dict[int, float] = {}
    for result in results_by_writer:
        committed_at.update(result)
    achieved = total / (max(committed_at.values()) - start_at)
    writers_done.set()
    received_at: dict[int, float] = results.get(timeout=120)
    receiver.join(10)
    delays = sorted((received_at[k] - committed_at[k]) * 1000 for k in committed_at if k in received_at)
    if len(delays) < total:
        raise SystemExit(f"only {len(delays)} of {total} rows arrived within 60 s")
    return delays[len(delays) // 2], delays[int(len(delays) * 0.99)], achieved, total


def latency(settings: Settings, seconds: float, rate: int, writers: int = 4) -> tuple[float, float, float, int]:
    """MySQL commit → readable by a read_committed consumer, for single-row autocommits paced
    at ``rate`` rows/s by ``writers`` connections. Returns (p50 ms, p99 ms, achieved rows/s,
    rows). Writers and the consumer are processes of their own, so the collector's process
    runs the collector only."""
    with _admin(settings) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
    collector, _metrics, halt, thread, topic, kafka = start_collector(settings, start)
    if not collector.started.wait(60):
        raise SystemExit("the collector did not start within 60 s")
    try:
        return timed_rows(kafka, topic, seconds, rate, writers)
    finally:
        halt.set()
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single-rows", type=int, default=20_000, help="workload A size (issue: 200000)")
    parser.add_argument("--transactions", type=int, default=100, help="workload B size (issue: 1000)")
    parser.add_argument("--latency-seconds", type=float, default=10, help="length of the latency run (0: skip)")
    parser.add_argument("--latency-rate", type=int, default=5000, help="rows/s written during the latency run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    args = parser.parse_args()
    # The collector's entry point tunes the garbage collector (collector.service.tune_gc);
    # here it is done before anything runs, so the baseline runs with the same settings.
    tune_gc()
    settings = load_settings()
    LocalStack(settings).up()
    fix_reader_quirks()
    with _admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")
        cursor.execute(f"CREATE DATABASE {DB}")
        cursor.execute(DDL)
    results = []
    figures: list[Figure] = []
    for key, name, make in (
        ("collector.single_rows", f"A: {args.single_rows:,} single-row autocommits", lambda: workload_a(settings, args.single_rows)),
        ("collector.transactions", f"B: {args.transactions:,} transactions x 1,000 rows", lambda: workload_b(settings, args.transactions)),
    ):
        start, stop = make()
        base_rows, base_s = baseline(settings, start, stop)
        coll_rows, coll_s = collector_run(settings, start, stop)
        results.append((name, base_rows, base_rows / base_s, coll_rows, coll_rows / coll_s))
        figures.append(Figure(key, name, coll_rows / coll_s, "rows/s", base_rows / base_s,
                              "python-mysql-replication decoding only", extra={"rows": coll_rows}))
    print(f"machine: {describe_machine()}")
    print("baseline: python-mysql-replication decoding the same binlog range, nothing else")
    print(f"{'workload':<44} {'rows':>9} {'baseline rows/s':>16} {'collector rows/s':>17} {'ratio':>6}")
    for name, base_rows, base_rate, coll_rows, coll_rate in results:
        assert coll_rows == base_rows, f"{name}: collector published {coll_rows}, baseline read {base_rows}"
        print(f"{name:<44} {base_rows:>9,} {base_rate:>16,.0f} {coll_rate:>17,.0f} {coll_rate / base_rate:>6.2f}")
    if args.latency_seconds > 0:
        p50, p99, achieved, rows = latency(settings, args.latency_seconds, args.latency_rate)
        print(f"latency MySQL commit -> readable (read_committed), {rows:,} single-row autocommits "
              f"at {achieved:,.0f} rows/s (target {args.latency_rate:,}): p50 {p50:.0f} ms, p99 {p99:.0f} ms")
        figures.append(Figure("collector.latency", f"MySQL commit → readable, {rows:,} autocommits at "
                              f"{achieved:,.0f} rows/s", p99, "ms", higher_is_better=False,
                              extra={"p50": p50, "p99": p99, "rows/s": achieved}))
    write_figures(args.json, "collector", figures)


if __name__ == "__main__":
    main()
