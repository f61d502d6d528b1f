"""Mirror appliers against unguarded baselines, on the same changes in the same run.

    .venv/bin/python -m bench.mirror_bench [--changes 1000000] [--keys 100000] [--batch 5000]
                                           [--only redis|warehouse]

Changes: ``--changes`` row changes (80 % writes, 10 % deletes, 10 % carrying an offset up to
50,000 lower than the stream's, as a replay would; those older than the key's stored offset
are rejected by the guard) over ``--keys`` keys of one logical table with 8
columns (BIGINT UNSIGNED key, DECIMAL, VARCHAR, ENUM, DATETIME(3), TIMESTAMP(6), INT, DOUBLE),
applied in batches of ``--batch`` (``mirror.batch_size``).

- Redis: ``RedisApplier`` (one Lua script call per ``mirror.redis_keys_per_call`` keys, offset
  guard, tombstones) vs redis-py pipelined plain ``HSET`` of the same rows without a version
  check. Target ≥ 100,000 rows/s and ≥ 60 % of the baseline.
- PostgreSQL: ``WarehouseApplier`` (COPY into staging + guarded upsert + hard deletes with
  tombstones, one transaction per batch) vs plain ``COPY`` of the same rows into a staging
  table. Target ≥ 50,000 rows/s.

Only the apply calls are timed (the changes are generated outside the timers).

``--freshness-seconds N`` (default 20, 0: skip) adds freshness, for ``--freshness-source``
``kafka``, ``mysql`` or ``both`` (default), at ``--rate`` rows/s:

- ``kafka`` (the mirror's share): changes stamped with the current time are produced to a
  Kafka topic and ``cdc-mirror``'s consumer loop applies them to Redis; p50/p99 of
  "executeTime → applied in Redis".
- ``mysql`` (the issue's figure): single-row autocommit INSERTs paced at ``--rate`` by 4 writer
  processes into 4 shards of a fresh MariaDB database; a real collector (``collector.service
  .Collector`` with its Kafka publisher, exactly-once on, in a process of its own as in
  production) publishes them, and the mirror's consumer loop (in this process) applies them
  to Redis; p50/p99 of "the INSERT's autocommit returned → the row is in Redis" (both clocks
  are this machine's). Target p99 < 500 ms.

  Measured for each named configuration of ``--freshness-configs`` (default: ``before`` and
  ``current``), one after the other and ``--freshness-rounds`` times alternated, in the same
  run: ``current`` is what the entry points run now, ``before`` the code and settings the
  issue measured p99 694–884 ms with (``FRESHNESS_CONFIGS``). The figure is ``current``'s,
  with ``before``'s p99 of the same run as its baseline.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis
from psycopg import sql

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import KafkaSettings, Settings, TableMirror, load_settings
from mirror.plan import RowChange
from mirror.redis_applier import RedisApplier, redis_key
from mirror.warehouse import WarehouseApplier, connect_warehouse
from stack.manager import LocalStack

TABLE = "bench_orders"
TYPES = {
    "id": "bigint(20) unsigned",
    "amount": "decimal(12,2)",
    "note": "varchar(64)",
    "status": "enum('NEW','PAID','SHIPPED')",
    "created_at": "datetime(3)",
    "updated_at": "timestamp(6)",
    "user_id": "int(11)",
    "ratio": "double",
}
KEY = ("id",)


@dataclass(frozen=True)
class FreshnessConfig:
    """A named configuration of the MySQL → Redis path: what it changes against the settings
    in force (``load_settings()``) and whether the mirror's process tunes its garbage
    collector as ``cdc-mirror mirror run`` does (``cdc_platform.gc_tuning``)."""

    description: str
    mirror_gc_tuned: bool
    collector: dict[str, Any] = field(default_factory=dict)
    mirror: dict[str, Any] = field(default_factory=dict)
    # True: the collector as before 2026-11-26 (bench.collector_bench's 'before': the
    # positions partition joins each Kafka transaction at its commit, the commit interval
    # counted from the commit's return, the reader's gathering unbounded in time).
    collector_before: bool = False


FRESHNESS_CONFIGS: dict[str, FreshnessConfig] = {
    # The figure (p99 694–884 ms): the mirror ran with CPython's default garbage
    # collection thresholds, whose full collections paused its loop for hundreds of ms.
    "before": FreshnessConfig("mirror process with CPython's default GC", mirror_gc_tuned=False),
    # Shorter waits on both sides (more Kafka transactions a second), tried against 'before';
    # not the defaults.
    "short-waits": FreshnessConfig(
        "tuned GC, collector.commit_interval_ms 20, mirror.max_wait_ms 5",
        mirror_gc_tuned=True,
        collector={"commit_interval_ms": 20},
        mirror={"max_wait_ms": 5},
    ),
    "current": FreshnessConfig(
        "mirror process with tuned GC (cdc_platform.gc_tuning), as 'mirror run'",
        mirror_gc_tuned=True,
    ),
    # The collector's share: 'current' with the collector as it was before 2026-11-26.
    "collector-before": FreshnessConfig(
        "as 'current', the collector as before 2026-11-26 (its commit -> readable changes "
        "left out)",
        mirror_gc_tuned=True,
        collector_before=True,
    ),
}


def batches(changes: int, keys: int, batch: int, seed: int = 1) -> Iterator[list[RowChange]]:
    rng = random.Random(seed)
    offset = 1_795_333_510_000_000
    done = 0
    while done < changes:
        size = min(batch, changes - done)
        chunk = []
        for _ in range(size):
            offset += 1
            key = rng.randrange(keys)
            roll = rng.random()
            change_offset = offset - rng.randrange(1, 50_000) if roll < 0.1 else offset
            row = {
                "id": str(18_446_744_073_700_000_000 + key),
                "amount": f"{rng.randrange(10**6) / 100:.2f}",
                "note": rng.choice((None, "", "gift", "express")),
                "status": rng.choice(("NEW", "PAID", "SHIPPED")),
                "created_at": "2026-11-21 10:00:00.123",
                "updated_at": "2026-11-21 10:00:01.123456",
                "user_id": rng.randrange(10**6),
                "ratio": rng.random(),
            }
            chunk.append(
                RowChange(
                    TABLE,
                    (row["id"],),
                    change_offset,
                    0.1 <= roll < 0.2,
                    row,
                    TYPES,
                    KEY,
                    "bench_00.orders_00",
                    0,
                )
            )
        done += size
        yield chunk


def _timed(label: str, changes: int, run) -> float:
    started = time.perf_counter()
    busy = run()
    wall = time.perf_counter() - started
    rate = changes / busy
    print(f"  {label:<52} {rate:>12,.0f} rows/s  ({busy:.1f} s applying, {wall:.1f} s wall)")
    return rate


def bench_redis(settings: Settings, args: argparse.Namespace) -> Figure:
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    redis_settings = settings.redis.model_copy(update={"key_prefix": prefix})
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    print(f"Redis: {args.changes:,} changes over {args.keys:,} keys, batches of {args.batch:,}")

    def baseline() -> float:
        busy = 0.0
        for chunk in batches(args.changes, args.keys, args.batch):
            started = time.perf_counter()
            pipe = client.pipeline(transaction=False)
            for change in chunk:
                pipe.hset(
                    redis_key(f"{prefix}b", TABLE, change.key),
                    mapping={
                        "_offset": change.offset,
                        "_shard": change.shard,
                        "row": orjson.dumps(change.row),
                    },
                )
            pipe.execute()
            busy += time.perf_counter() - started
        return busy

    applier = RedisApplier(
        redis_settings, settings.mirror, [TableMirror(db_prefix="bench", table_prefix="orders")]
    )
    stale = 0

    def guarded() -> float:
        nonlocal stale
        busy = 0.0
        for chunk in batches(args.changes, args.keys, args.batch):
            started = time.perf_counter()
            stale += applier.apply_batch(chunk).stale
            busy += time.perf_counter() - started
        return busy

    try:
        base = _timed("baseline: redis-py pipelined HSET, no version check", args.changes, baseline)
        mine = _timed("RedisApplier: Lua batch with offset guard", args.changes, guarded)
        print(f"  ratio RedisApplier / baseline: {mine / base:.0%}; rejected as stale: {stale:,}")
        figure = Figure(
            "mirror.redis",
            f"Redis: {args.changes:,} changes over {args.keys:,} keys",
            mine,
            "rows/s",
            base,
            "redis-py pipelined HSET, no version check",
            extra={"stale": stale},
        )
    finally:
        applier.close()
        for pattern in (f"{prefix}:*", f"{prefix}b:*"):
            keys = list(client.scan_iter(pattern, count=10_000))
            for start in range(0, len(keys), 10_000):
                client.delete(*keys[start : start + 10_000])
        client.close()
    return figure


def bench_warehouse(settings: Settings, args: argparse.Namespace) -> Figure:
    schema = f"bench_{uuid.uuid4().hex[:6]}"
    mirror = settings.mirror.model_copy(update={"warehouse_schema": schema})
    print(
        f"PostgreSQL: {args.changes:,} changes over {args.keys:,} keys, batches of {args.batch:,}"
    )
    conn = connect_warehouse(settings.postgres)
    conn.autocommit = True
    columns = list(TYPES)
    applier = WarehouseApplier(
        settings.postgres, mirror, [TableMirror(db_prefix="bench", table_prefix="orders")]
    )

    def baseline() -> float:
        from mirror.pgtypes import pg_text, pg_type

        stage = sql.Identifier(schema, "plain_stage")
        conn.execute(
            sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(
                stage,
                sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(pg_type(TYPES[c])))
                    for c in columns
                )
                + sql.SQL(", _binlog_offset bigint, _shard text"),
            )
        )
        busy = 0.0
        copy_sql = sql.SQL("COPY {} FROM STDIN").format(stage)
        for chunk in batches(args.changes, args.keys, args.batch):
            started = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur, cur.copy(copy_sql) as copy:
                for change in chunk:
                    copy.write_row(
                        [
                            *(pg_text(TYPES[c], change.row[c]) for c in columns),
                            str(change.offset),
                            change.shard,
                        ]
                    )
            busy += time.perf_counter() - started
        return busy

    stale = 0

    def guarded() -> float:
        nonlocal stale
        busy = 0.0
        for chunk in batches(args.changes, args.keys, args.batch):
            started = time.perf_counter()
            stale += applier.apply_batch(chunk).stale
            busy += time.perf_counter() - started
        return busy

    try:
        base = _timed("baseline: plain COPY into a staging table", args.changes, baseline)
        mine = _timed("WarehouseApplier: COPY + guarded upsert/delete", args.changes, guarded)
        print(
            f"  ratio WarehouseApplier / baseline: {mine / base:.0%}; rejected as stale: {stale:,}"
        )
        figure = Figure(
            "mirror.warehouse",
            f"PostgreSQL: {args.changes:,} changes over {args.keys:,} keys",
            mine,
            "rows/s",
            base,
            "plain COPY into a staging table",
            extra={"stale": stale},
        )
    finally:
        applier.close()
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()
    return figure


def _produce_stamped(kafka, topic: str, total: int, rate: int, keys: int) -> None:
    """``total`` updates at ``rate`` per second, each stamped with the time it is sent."""
    from confluent_kafka import Producer

    from cdc_platform.kafka import producer_config
    from simple_binlog.message import EventType, SimpleBinlog, Source
    from simple_binlog.routing import partition_key

    producer = Producer(producer_config(kafka, client_id="bench-freshness"))
    rng = random.Random(3)
    started = time.monotonic()
    offset = 1_795_333_510_000_000
    for n in range(total):
        pause = started + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the producer to the rate
        offset += 1
        shard = ("bench_00", f"orders_{n % 4:02d}")
        message = SimpleBinlog(
            binlog_offset=offset,
            execute_time=int(time.time() * 1000),
            event_type=EventType.UPDATE,
            schema_name=shard[0],
            table_name=shard[1],
            source=Source.BINLOG,
            content={"id": str(rng.randrange(keys)), "v": rng.randrange(10**6)},
            column_types={"id": "bigint(20) unsigned", "v": "int(11)"},
            primary_keys=("id",),
        )
        producer.produce(topic, key=partition_key(*shard), value=message.encode())
        producer.poll(0)
    producer.flush(30)


def bench_freshness(settings: Settings, args: argparse.Namespace) -> Figure | None:
    import threading

    from cdc_platform.kafka import ensure_topic
    from mirror.applier import ApplyResult
    from mirror.consumer import MirrorConsumer
    from mirror.metrics import MirrorMetrics
    from mirror.plan import ChangeRouter
    from simple_binlog.naming import topic_name
    from simple_binlog.routing import ShardRouter

    tag = uuid.uuid4().hex[:6]
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"benchf{tag}."})
    topic = topic_name(kafka, "local")
    ensure_topic(kafka, topic)
    tables = [TableMirror(db_prefix="bench", table_prefix="orders", targets=["redis"])]
    redis_settings = settings.redis.model_copy(update={"key_prefix": f"benchf{tag}"})
    mirror = settings.mirror.model_copy(update={"group_prefix": f"benchf{tag}"})
    lags: list[float] = []

    class Timed(RedisApplier):
        def apply_batch(self, changes):  # type: ignore[no-untyped-def]
            changes = list(changes)
            result: ApplyResult = super().apply_batch(changes)
            now_ms = time.time() * 1000
            lags.extend(now_ms - c.execute_time_ms for c in changes)
            return result

    applier = Timed(redis_settings, mirror, tables)
    stop = threading.Event()
    router = ChangeRouter(tables, ShardRouter(list(settings.shard_rules)), "redis")
    consumer = MirrorConsumer(
        kafka, mirror, "redis", ["local"], router, applier, MirrorMetrics("redis"), stop
    )
    thread = threading.Thread(target=consumer.run)
    thread.start()
    total = int(args.rate * args.freshness_seconds)
    print(f"Freshness (Kafka → Redis, no collector): {total:,} changes at {args.rate:,} rows/s")
    join_deadline = time.monotonic() + 60
    while not consumer.assignment and time.monotonic() < join_deadline:
        time.sleep(0.1)  # the clock starts once the consumer owns its partitions
    # A second of warm-up, not counted: the first fetches of a new topic and consumer group
    # (metadata, offset lookup) took several hundred ms, a one-off that said nothing about
    # the steady state and alone made up the p99.
    warm_up = args.rate
    _produce_stamped(kafka, topic, warm_up, args.rate, args.keys)
    deadline = time.monotonic() + 60
    while len(lags) < warm_up and time.monotonic() < deadline:
        time.sleep(0.1)
    lags.clear()
    _produce_stamped(kafka, topic, total, args.rate, args.keys)
    deadline = time.monotonic() + 60
    while len(lags) < total and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    thread.join(30)
    applier.close()
    _drop_run_data(settings, redis_settings.key_prefix, kafka)
    ordered = sorted(lags)
    if not ordered:
        print("  nothing was applied")
        return None
    p50, p99 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]
    print(
        f"  applied {len(ordered):,} of {total:,}; executeTime → in Redis: p50 {p50:.0f} ms, p99 {p99:.0f} ms"
        f" (mirror.max_wait_ms = {mirror.max_wait_ms})"
    )
    return Figure(
        "mirror.freshness",
        f"executeTime → in Redis (Kafka → Redis, no collector), "
        f"{len(ordered):,} changes at {args.rate:,} rows/s",
        p99,
        "ms",
        higher_is_better=False,
        extra={"p50": p50, "p99": p99, "applied": len(ordered), "sent": total},
    )


def _run_collector(
    instance_name: str,
    server_id: int,
    start_gtid: str,
    include: str,
    topic_prefix: str,
    started: Any,
    stop: Any,
    overrides: dict[str, Any] | None = None,
    collector_before: bool = False,
) -> None:
    """A collector publishing ``include`` from ``start_gtid`` until ``stop`` is set; runs in a
    process of its own (spawned), so it does not share a GIL with the mirror, and tunes its
    garbage collector as its entry point does (``collector.app``)."""
    import threading

    from collector.decoding import fix_reader_quirks
    from collector.metrics import CollectorMetrics
    from collector.publisher import KafkaPublisher
    from collector.service import Collector, tune_gc

    settings = load_settings()
    fix_reader_quirks()
    kafka = settings.kafka.model_copy(update={"topic_prefix": topic_prefix})
    collector_settings = settings.collector.model_copy(
        update={**(overrides or {}), "start": start_gtid, "include": [include]}
    )
    # An instance name and replica server id of its own: a collector running on the same
    # stack (a test, the demo) is neither fenced nor disconnected by this one.
    instance = settings.instances[0].model_copy(
        update={"name": instance_name, "replica_server_id": server_id}
    )
    halt = threading.Event()
    kind, publisher = Collector, KafkaPublisher(kafka, instance.name)
    if collector_before:
        from bench import collector_bench
        from collector import service

        service._GATHER_S = float("inf")
        kind = collector_bench._IntervalFromReturn
        publisher = collector_bench._TimedLatePublisher(kafka, instance.name)
    collector = kind(instance, collector_settings, publisher, CollectorMetrics(), stop=halt)
    thread = threading.Thread(target=collector.run)
    tune_gc()
    thread.start()
    if collector.started.wait(60):
        started.set()
    stop.wait()
    halt.set()
    thread.join(60)


def _mysql_admin(settings: Settings):
    import pymysql

    return pymysql.connect(
        host=settings.instances[0].host,
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
    )


def _paced_inserts(
    database: str, worker: int, writers: int, total: int, rate: int, start_at: float, first_id: int
) -> dict[int, float]:
    """One writer process: ids ``worker+1, worker+1+writers, …`` into shard table
    ``orders_<worker>``, paced to ``rate`` rows/s over all writers from ``start_at``; returns
    id → wall-clock time its autocommit returned. (One connection's round trips cap a writer
    near 2,500 rows/s, hence several processes.)"""
    settings = load_settings()
    committed: dict[int, float] = {}
    with _mysql_admin(settings) as conn, conn.cursor() as cursor:
        statement = (
            f"INSERT INTO {database}.orders_{worker:02d} (id, amount, note) VALUES (%s, %s, %s)"
        )
        for n in range(1 + worker, total + 1, writers):
            ahead = start_at + n / rate - time.time()
            if ahead > 0:
                time.sleep(ahead)  # pacing the writer to the rate
            key = first_id - 1 + n
            cursor.execute(statement, (key, f"{n % 10**6 / 100:.2f}", "gift"))
            committed[key] = time.time()
    return committed


def _wait_until(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _create_shards(settings: Settings, database: str, shards: int) -> str:
    """``database`` with tables ``orders_00…``; returns the GTID position before them."""
    from collector.reader import server_position

    with _mysql_admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {database}")
        for shard in range(shards):
            cursor.execute(
                f"CREATE TABLE {database}.orders_{shard:02d} (id BIGINT NOT NULL PRIMARY KEY, "
                "amount DECIMAL(12,2) NOT NULL, note VARCHAR(64) NULL)"
            )
        return server_position(cursor).gtid


def _drop_redis_keys(settings: Settings, prefix: str) -> None:
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    for key in client.scan_iter(f"{prefix}:*", count=10_000):
        client.delete(key)
    client.close()


def _drop_run_data(settings: Settings, redis_prefix: str, kafka: KafkaSettings) -> None:
    """The run's Redis keys and topics (named by its own prefixes): runs leave nothing behind."""
    _drop_redis_keys(settings, redis_prefix)
    from confluent_kafka.admin import AdminClient

    from cdc_platform.kafka import admin_config

    admin = AdminClient(admin_config(kafka))
    listed = admin.list_topics(timeout=10).topics
    topics = [name for name in listed if name.startswith(kafka.topic_prefix)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result()


def _write_paced(
    database: str, writers: int, total: int, rate: int, first_id: int = 1
) -> tuple[dict[int, float], float]:
    """id → commit time of ``total`` paced INSERTs, and the rate the writers achieved."""
    import multiprocessing

    start_at = time.time() + 2.0  # every writer paces from the same wall-clock start
    with multiprocessing.get_context("spawn").Pool(writers) as pool:
        results = pool.starmap(
            _paced_inserts,
            [(database, w, writers, total, rate, start_at, first_id) for w in range(writers)],
        )
    committed_at = {key: at for result in results for key, at in result.items()}
    return committed_at, total / (max(committed_at.values()) - start_at)


class _KeyTimedRedisApplier(RedisApplier):
    """Notes when each key (first key column) was first applied."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.applied_at: dict[object, float] = {}

    def apply_batch(self, changes):  # type: ignore[no-untyped-def]
        changes = list(changes)
        result = super().apply_batch(changes)
        now = time.time()
        for change in changes:
            self.applied_at.setdefault(change.key[0], now)
        return result


@dataclass
class FreshnessRun:
    delays_ms: list[float]
    sent: int
    achieved: float


def bench_mysql_freshness(  # noqa: PLR0915 - one scenario, set up and torn down in order
    settings: Settings, args: argparse.Namespace, config: FreshnessConfig
) -> FreshnessRun:
    """MySQL commit → visible in Redis, with a real collector in front (see the docstring),
    in one named configuration."""
    import multiprocessing
    import threading

    from cdc_platform.gc_tuning import tune_gc, untune_gc
    from mirror.consumer import MirrorConsumer
    from mirror.metrics import MirrorMetrics
    from mirror.plan import ChangeRouter
    from simple_binlog.routing import ShardRouter

    writers = 4
    tag = uuid.uuid4().hex[:6]
    database = f"bmf{tag}_00"
    instance_name = f"bench-mf{tag}"
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"benchmf{tag}."})
    tables = [
        TableMirror(
            instance=instance_name, db_prefix=f"bmf{tag}", table_prefix="orders", targets=["redis"]
        )
    ]
    redis_settings = settings.redis.model_copy(update={"key_prefix": f"benchmf{tag}"})
    mirror = settings.mirror.model_copy(update={**config.mirror, "group_prefix": f"benchmf{tag}"})
    start_gtid = _create_shards(settings, database, writers)
    spawn = multiprocessing.get_context("spawn")
    started, stop_collector = spawn.Event(), spawn.Event()
    collector = spawn.Process(
        target=_run_collector,
        args=(
            instance_name,
            random.randrange(2 * 10**6, 3 * 10**6),
            start_gtid,
            rf"{database}\..*",
            kafka.topic_prefix,
            started,
            stop_collector,
            config.collector,
            config.collector_before,
        ),
    )
    collector.start()
    applier = _KeyTimedRedisApplier(redis_settings, mirror, tables)
    applied_at = applier.applied_at
    stop = threading.Event()
    router = ChangeRouter(tables, ShardRouter(list(settings.shard_rules)), "redis")
    consumer = MirrorConsumer(
        kafka, mirror, "redis", [instance_name], router, applier, MirrorMetrics("redis"), stop
    )
    thread = threading.Thread(target=consumer.run)
    total = int(args.rate * args.freshness_seconds)
    print(
        f"Freshness (MySQL commit → Redis, collector in front): {total:,} single-row autocommits "
        f"at {args.rate:,} rows/s by {writers} writers"
    )
    committed_at: dict[int, float] = {}
    achieved = 0.0
    try:
        if not started.wait(90):
            raise SystemExit("error: the collector did not start within 90 s")
        # The mirror's process, as its entry point leaves it (or CPython's defaults).
        if config.mirror_gc_tuned:
            tune_gc()
        else:
            untune_gc()
        thread.start()
        join_deadline = time.monotonic() + 60
        while not consumer.assignment and time.monotonic() < join_deadline:
            time.sleep(0.1)  # the clock starts once the consumer owns its partitions
        # A second of warm-up with ids above the measured ones, not counted (see
        # bench_freshness).
        warm_up, _ = _write_paced(database, writers, args.rate, args.rate, first_id=10**9)
        _wait_until(lambda: warm_up.keys() <= applied_at.keys(), 60)
        committed_at, achieved = _write_paced(database, writers, total, args.rate)
        _wait_until(lambda: committed_at.keys() <= applied_at.keys(), 60)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(30)
        stop_collector.set()
        collector.join(60)
        applier.close()
        _drop_run_data(settings, redis_settings.key_prefix, kafka)
        with _mysql_admin(settings) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database}")
        untune_gc()
    delays = [
        (applied_at[key] - at) * 1000 for key, at in committed_at.items() if key in applied_at
    ]
    p50, p99 = _percentiles(delays)
    print(
        f"  {len(delays):,} of {total:,} in Redis (writers achieved {achieved:,.0f} rows/s); "
        f"MySQL commit → in Redis: p50 {p50:.0f} ms, p99 {p99:.0f} ms"
    )
    if len(delays) < total:
        print(f"  {total - len(delays):,} rows did not reach Redis within 60 s")
    return FreshnessRun(delays, total, achieved)


def _percentiles(delays: list[float]) -> tuple[float, float]:
    ordered = sorted(delays)
    if not ordered:
        return float("nan"), float("nan")
    return ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]


def bench_mysql_freshness_configs(settings: Settings, args: argparse.Namespace) -> list[Figure]:
    """Each named configuration ``--freshness-rounds`` times, alternated, in this run; one
    figure per configuration after the first, whose p99 of the same run is their baseline
    (``mirror.freshness_mysql`` for ``current``, ``mirror.freshness_mysql.<name>`` else)."""
    names: list[str] = args.freshness_configs
    runs: dict[str, list[FreshnessRun]] = {name: [] for name in names}
    for round_index in range(args.freshness_rounds):
        for name in names:
            config = FRESHNESS_CONFIGS[name]
            print(f"configuration {name!r} ({config.description}), round {round_index + 1}")
            runs[name].append(bench_mysql_freshness(settings, args, config))
    for name, measured in runs.items():
        p50, p99 = _percentiles([d for r in measured for d in r.delays_ms])
        print(f"{name}: p50 {p50:.0f} ms, p99 {p99:.0f} ms over {len(measured)} round(s)")
    first = names[0]
    base_p50, base_p99 = _percentiles([d for r in runs[first] for d in r.delays_ms])
    compared = names[1:] or names
    figures = []
    for name in compared:
        delays = [d for r in runs[name] for d in r.delays_ms]
        if not delays:
            print(f"  {name}: nothing was applied")
            continue
        p50, p99 = _percentiles(delays)
        sent = sum(r.sent for r in runs[name])
        achieved = sum(r.achieved for r in runs[name]) / len(runs[name])
        extra = {"p50": p50, "p99": p99, "applied": len(delays), "sent": sent,
                 "achieved rows/s": achieved, "rounds": args.freshness_rounds}  # fmt: skip
        baseline = baseline_label = None
        if name != first:
            baseline = base_p99
            baseline_label = (
                f"p99 of configuration '{first}': {FRESHNESS_CONFIGS[first].description}"
            )
            extra |= {f"{first} p50": base_p50, f"{first} p99": base_p99}
        figures.append(
            Figure(
                "mirror.freshness_mysql" if name == "current" else f"mirror.freshness_mysql.{name}",
                f"MySQL commit → in Redis (collector + mirror), configuration '{name}': "
                f"{FRESHNESS_CONFIGS[name].description}; {len(delays):,} autocommits at "
                f"{achieved:,.0f} rows/s",
                p99,
                "ms",
                baseline,
                baseline_label,
                higher_is_better=False,
                extra=extra,
            )
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--only", choices=("redis", "warehouse", "freshness"))
    parser.add_argument("--freshness-seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument(
        "--freshness-source",
        choices=("kafka", "mysql", "both"),
        default="both",
        help="kafka: the mirror's share; mysql: MySQL commit → Redis with a collector in front",
    )
    parser.add_argument(
        "--freshness-configs",
        nargs="+",
        choices=list(FRESHNESS_CONFIGS),
        default=["before", "current"],
        help="named configurations of the MySQL → Redis run; the figure is the last one's, "
        "the first one's p99 its baseline",
    )
    parser.add_argument(
        "--freshness-rounds", type=int, default=2, help="alternated rounds per configuration"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the figures to PATH (for bench.report)"
    )
    args = parser.parse_args()
    settings = load_settings()
    services = ["redis", "postgresql", "kafka"]
    if args.freshness_source != "kafka":
        services.append("mariadb")
    LocalStack(settings).up(services)
    print(f"machine: {describe_machine()}")
    figures: list[Figure] = []
    if args.only in (None, "redis"):
        figures.append(bench_redis(settings, args))
    if args.only in (None, "warehouse"):
        figures.append(bench_warehouse(settings, args))
    if args.only in (None, "freshness") and args.freshness_seconds > 0:
        if args.freshness_source in ("kafka", "both"):
            freshness = bench_freshness(settings, args)
            if freshness is not None:
                figures.append(freshness)
        if args.freshness_source in ("mysql", "both"):
            figures += bench_mysql_freshness_configs(settings, args)
    write_figures(args.json, "mirror", figures)


if __name__ == "__main__":
    main()
