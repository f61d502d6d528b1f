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
  table. Target ≥ 50,000 rows/s. Then the write cost of the stored row hash
  (``_cdc_row_hash``, which PostgreSQL computes on every INSERT and UPDATE): the same changes
  applied by the applier into a fresh table with it and into one without it (its column
  dropped after the applier made the table, as a table made before it had none), taking
  turns ``--row-hash-rounds`` times; figure ``mirror.warehouse_row_hash``, the rate with it
  against the rate without it (medians).

Only the apply calls are timed (the changes are generated outside the timers).

``--freshness-seconds N`` (default 20, 0: skip) adds freshness, for ``--freshness-source``
``kafka``, ``mysql`` or ``both`` (default), at ``--rate`` rows/s:

- ``kafka`` (the mirror's share): changes stamped with the current time are produced to a
  Kafka topic by a producer process of its own (started and warmed up before the measured
  changes) and ``cdc-mirror``'s consumer loop applies them to Redis in this process, with its
  garbage collector tuned as ``mirror run`` does; p50/p99 of "executeTime → applied in
  Redis".
- ``mysql`` (the issue's figure): single-row autocommit INSERTs paced at ``--rate`` by 4 writer
  processes into 4 shards of a fresh MariaDB database; a real collector (``collector.service
  .Collector`` with its Kafka publisher, exactly-once on, in a process of its own as in
  production) publishes them, and the mirror's consumer loop (in this process) applies them
  to Redis; p50/p99 of "the INSERT's autocommit returned → the row is in Redis" (both clocks
  are this machine's). Target p99 < 500 ms. The writers start their schedule together once
  each has connected.

  Both print each row's delay split into stages (median of all rows and of the slowest 1 %):
  → read from Kafka by the mirror (the source's share: producer or collector, broker, and
  the batch wait), → apply began (decoding, routing), → applied (the Redis call); the MySQL
  run also prints the CPU each process used over the measured phase (cores busy).

  Measured for each named configuration of ``--freshness-configs`` (default: ``before`` and
  ``current``), one after the other and ``--freshness-rounds`` times alternated, in the same
  run: ``current`` is what the entry points run now, ``before`` the code and settings the
  issue measured p99 694–884 ms with (``FRESHNESS_CONFIGS``). The figure is ``current``'s,
  with ``before``'s p99 of the same run as its baseline.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
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
    # librdkafka properties of the mirror's Kafka clients (kafka.client_properties).
    consumer: dict[str, str] = field(default_factory=dict)
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
    # The mirror consumer's fetch wait, a suspect: with read_committed the broker might hold
    # a fetch until fetch.wait.max.ms (librdkafka's default 500 ms) although a transaction
    # had committed meanwhile. It does not: with the default, a transaction committed every
    # 50 ms reached a read_committed consumer 2 ms (p50) after its commit returned, 59 ms at
    # most on the loaded machine (bench/results/2026-11-26-redis-tail-s11/notes.md), so the
    # product keeps the default; this configuration lets a run show it side by side.
    "fetch-wait-10": FreshnessConfig(
        "as 'current', the mirror consumer's fetch.wait.max.ms 10 (librdkafka's default 500)",
        mirror_gc_tuned=True,
        consumer={"fetch.wait.max.ms": "10"},
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


def bench_warehouse_row_hash(settings: Settings, args: argparse.Namespace) -> Figure:
    """The applier's rate into a table with the stored row hash against one without it."""
    conn = connect_warehouse(settings.postgres)
    conn.autocommit = True
    table_mirror = TableMirror(db_prefix="bench", table_prefix="orders")  # name: TABLE

    def applied(row_hash: bool) -> float:
        schema = f"bench_{uuid.uuid4().hex[:6]}"
        mirror = settings.mirror.model_copy(update={"warehouse_schema": schema})
        applier = WarehouseApplier(settings.postgres, mirror, [table_mirror])
        try:
            applier.prepare_table(table_mirror, TYPES, KEY)
            if not row_hash:
                # The applier knows its table has the current row hash and does not look
                # again until the columns change: the batches below run without it.
                conn.execute(
                    sql.SQL("ALTER TABLE {} DROP COLUMN _cdc_row_hash").format(
                        sql.Identifier(schema, TABLE)
                    )
                )

            def run() -> float:
                busy = 0.0
                for chunk in batches(args.changes, args.keys, args.batch):
                    started = time.perf_counter()
                    applier.apply_batch(chunk)
                    busy += time.perf_counter() - started
                return busy

            label = "with the stored row hash" if row_hash else "without the stored row hash"
            return _timed(f"WarehouseApplier {label}", args.changes, run)
        finally:
            applier.close()
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    print(f"PostgreSQL, the stored row hash's write cost ({args.row_hash_rounds} rounds):")
    try:
        without, with_hash = [], []
        for _ in range(args.row_hash_rounds):
            without.append(applied(row_hash=False))
            with_hash.append(applied(row_hash=True))
    finally:
        conn.close()
    value, base = statistics.median(with_hash), statistics.median(without)
    print(f"  with / without: {value / base:.0%}")
    return Figure(
        "mirror.warehouse_row_hash",
        f"PostgreSQL: {args.changes:,} changes over {args.keys:,} keys, with the stored row hash",
        value,
        "rows/s",
        base,
        "the same applier into a table without it",
        extra={
            **{f"with, round {i + 1}": r for i, r in enumerate(with_hash)},
            **{f"without, round {i + 1}": r for i, r in enumerate(without)},
        },
    )


def _produce_stamped(
    topic_prefix: str, topic: str, warm_up: int, total: int, rate: int, keys: int,
    warmed: Any, go: Any,
) -> None:  # fmt: skip
    """A producer process: ``warm_up`` updates, then (once ``go`` is set) ``total`` more, each
    paced at ``rate`` per second and stamped with the time it is sent (its executeTime).

    A process of its own, as the collector is in production: its pauses (garbage collection,
    the GIL) are not the mirror's. One producer for both phases: an idempotent producer
    delivers nothing for its first ~500 ms (librdkafka acquires its producer id), so a
    producer made for the measured changes alone held their first 100 ms for ~500 ms, which
    was the p99 of 50,000 (bench/results/2026-11-26-redis-tail-s11)."""
    from confluent_kafka import Producer

    from cdc_platform.gc_tuning import tune_gc
    from cdc_platform.kafka import producer_config
    from simple_binlog.message import EventType, SimpleBinlog, Source
    from simple_binlog.routing import partition_key

    kafka = load_settings().kafka.model_copy(update={"topic_prefix": topic_prefix})
    producer = Producer(producer_config(kafka, client_id="bench-freshness"))
    tune_gc()  # as the collector's entry point does
    rng = random.Random(3)
    offset = 1_795_333_510_000_000
    for phase, count in enumerate((warm_up, total)):
        started = time.monotonic()
        for n in range(count):
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
        if phase == 0:
            warmed.set()
            if not go.wait(120):
                return


class _BatchClock:
    """When the mirror's loop closed its last batch: its rows had been read from Kafka
    (at most ``mirror.max_wait_ms`` after the batch's first row)."""

    closed_at = 0.0


def _timed_consumer(clock: _BatchClock) -> type:
    from mirror.consumer import MirrorConsumer

    class TimedConsumer(MirrorConsumer):
        def _poll_batch(self) -> None:
            super()._poll_batch()
            clock.closed_at = time.time()

    return TimedConsumer


@dataclass
class RowStages:
    """Per row (wall clock, s): the mirror's batch holding it closed (read from Kafka),
    its apply began, it was applied."""

    closed: dict[object, float] = field(default_factory=dict)
    started: dict[object, float] = field(default_factory=dict)
    applied: dict[object, float] = field(default_factory=dict)

    def note(self, identities: list[object], clock: _BatchClock, started: float) -> None:
        now = time.time()
        for identity in identities:
            if identity not in self.applied:
                self.closed[identity] = clock.closed_at
                self.started[identity] = started
                self.applied[identity] = now


StageRow = tuple[float, float, float, float]  # total, → read, → apply began, → applied (ms)


def _stage_rows(sent_at: dict[object, float], stages: RowStages) -> list[StageRow]:
    return [
        (
            (stages.applied[key] - at) * 1000,
            (stages.closed[key] - at) * 1000,
            (stages.started[key] - stages.closed[key]) * 1000,
            (stages.applied[key] - stages.started[key]) * 1000,
        )
        for key, at in sent_at.items()
        if key in stages.applied
    ]


def _stage_split(rows: list[StageRow]) -> dict[str, float]:
    """Medians of each stage over every row and over the slowest 1 % (ms): sent → the mirror
    closed the batch (the source's share, Kafka and the batch wait) → apply began (decoding,
    routing) → applied (the Redis call)."""
    if not rows:
        return {}
    ordered = sorted(rows)
    slow = ordered[int(len(ordered) * 0.99) :]

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    split: dict[str, float] = {}
    for index, stage in enumerate(("to read", "decode", "apply"), start=1):
        split[f"{stage} p50"] = median([r[index] for r in ordered])
        split[f"slowest 1% {stage}"] = median([r[index] for r in slow])
    return split


def _print_split(split: dict[str, float]) -> None:
    if split:
        print(
            "  stages, median of all rows / of the slowest 1 %: → read from Kafka by the mirror "
            f"{split['to read p50']:.0f} / {split['slowest 1% to read']:.0f} ms, → apply began "
            f"{split['decode p50']:.0f} / {split['slowest 1% decode']:.0f} ms, → applied "
            f"{split['apply p50']:.0f} / {split['slowest 1% apply']:.0f} ms"
        )


def bench_freshness(  # noqa: PLR0915 - one scenario, set up and torn down in order
    settings: Settings, args: argparse.Namespace
) -> Figure | None:
    import multiprocessing
    import threading

    from cdc_platform.gc_tuning import tune_gc, untune_gc
    from cdc_platform.kafka import ensure_topic
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
    sent_at: dict[object, float] = {}  # binlog offset → executeTime (s)
    stages = RowStages()
    clock = _BatchClock()

    class Timed(RedisApplier):
        def apply_batch(self, changes):  # type: ignore[no-untyped-def]
            changes = list(changes)
            started = time.time()
            result = super().apply_batch(changes)
            for change in changes:
                sent_at.setdefault(change.offset, change.execute_time_ms / 1000)
            stages.note([c.offset for c in changes], clock, started)
            return result

    applier = Timed(redis_settings, mirror, tables)
    stop = threading.Event()
    router = ChangeRouter(tables, ShardRouter(list(settings.shard_rules)), "redis")
    consumer = _timed_consumer(clock)(
        kafka, mirror, "redis", ["local"], router, applier, MirrorMetrics("redis"), stop
    )
    thread = threading.Thread(target=consumer.run)
    total = int(args.rate * args.freshness_seconds)
    # A second of warm-up, not counted: the first fetches of a new topic and consumer group
    # (metadata, offset lookup) and the producer's start took several hundred ms, a one-off
    # that said nothing about the steady state and alone made up the p99.
    warm_up = args.rate
    spawn = multiprocessing.get_context("spawn")
    warmed, go = spawn.Event(), spawn.Event()
    producer = spawn.Process(
        target=_produce_stamped,
        args=(kafka.topic_prefix, topic, warm_up, total, args.rate, args.keys, warmed, go),
    )
    print(f"Freshness (Kafka → Redis, no collector): {total:,} changes at {args.rate:,} rows/s")
    tune_gc()  # the mirror's process, as 'cdc-mirror mirror run' leaves it
    try:
        thread.start()
        _wait_until(lambda: bool(consumer.assignment), 60)  # the consumer owns its partitions
        producer.start()
        if not warmed.wait(90) or not _wait_until(lambda: len(stages.applied) >= warm_up, 60):
            raise SystemExit("error: the warm-up changes did not reach Redis within 60 s")
        sent_at.clear()
        stages = RowStages()
        go.set()
        _wait_until(lambda: len(stages.applied) >= total, 60 + args.freshness_seconds)
    finally:
        go.set()
        stop.set()
        thread.join(30)
        if producer.pid is not None:  # started
            producer.join(30)
        applier.close()
        _drop_run_data(settings, redis_settings.key_prefix, kafka)
        untune_gc()
    lags = [(stages.applied[key] - at) * 1000 for key, at in sent_at.items()]
    if not lags:
        print("  nothing was applied")
        return None
    p50, p99 = _percentiles(lags)
    print(
        f"  applied {len(lags):,} of {total:,}; executeTime → in Redis: p50 {p50:.0f} ms, "
        f"p99 {p99:.0f} ms (mirror.max_wait_ms = {mirror.max_wait_ms})"
    )
    split = _stage_split(_stage_rows(sent_at, stages))
    _print_split(split)
    return Figure(
        "mirror.freshness",
        f"executeTime → in Redis (Kafka → Redis, no collector; producer in its own process, "
        f"mirror with tuned GC), {len(lags):,} changes at {args.rate:,} rows/s",
        p99,
        "ms",
        higher_is_better=False,
        extra={"p50": p50, "p99": p99, "applied": len(lags), "sent": total, **split},
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
    database: str, worker: int, writers: int, total: int, rate: int, first_id: int,
    connected: Any, go: Any, start_at: Any, results: Any,
) -> None:  # fmt: skip
    """One writer process: ids ``worker+1, worker+1+writers, …`` into shard table
    ``orders_<worker>``, paced to ``rate`` rows/s over all writers from ``start_at`` (set once
    every writer is connected); puts (id → wall-clock time its autocommit returned, the
    latest any commit returned after its schedule in s, the CPU time its INSERTs took) on
    ``results``. (One connection's round
    trips cap a writer near 2,500 rows/s, hence several processes.)"""
    settings = load_settings()
    committed: dict[int, float] = {}
    behind = 0.0
    with _mysql_admin(settings) as conn, conn.cursor() as cursor:
        statement = (
            f"INSERT INTO {database}.orders_{worker:02d} (id, amount, note) VALUES (%s, %s, %s)"
        )
        connected.wait(120)
        go.wait(120)
        cpu_started = time.process_time()
        for n in range(1 + worker, total + 1, writers):
            due = start_at.value + n / rate
            ahead = due - time.time()
            if ahead > 0:
                time.sleep(ahead)  # pacing the writer to the rate
            key = first_id - 1 + n
            cursor.execute(statement, (key, f"{n % 10**6 / 100:.2f}", "gift"))
            committed[key] = time.time()
            behind = max(behind, committed[key] - due)
        cpu = time.process_time() - cpu_started
    results.put((committed, behind, cpu))


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


@dataclass
class PacedWrites:
    committed_at: dict[int, float]  # id → when its autocommit returned (wall clock, s)
    achieved: float  # rows/s from the scheduled start to the last commit
    behind_ms: float  # the latest a commit returned after its schedule (a writer lagging)
    cpu_s: float  # CPU time the writer processes spent on their INSERTs


def _write_paced(
    database: str, writers: int, total: int, rate: int, first_id: int = 1
) -> tuple[dict[int, float], float]:
    """id → commit time of ``total`` paced INSERTs, and the rate the writers achieved."""
    writes = _paced_writes(database, writers, total, rate, first_id)
    return writes.committed_at, writes.achieved


def _paced_writes(
    database: str, writers: int, total: int, rate: int, first_id: int = 1
) -> PacedWrites:
    """``total`` paced INSERTs by ``writers`` processes, scheduled from one start once every
    writer has started and connected: the start of a process (interpreter, imports,
    connection) took seconds on a loaded machine, and writers that started late caught up
    at full speed, a burst above the rate asked."""
    import multiprocessing
    import queue
    import threading

    spawn = multiprocessing.get_context("spawn")
    connected, go = spawn.Barrier(writers + 1), spawn.Event()
    start_at, results = spawn.Value("d", 0.0), spawn.Queue()
    processes = [
        spawn.Process(
            target=_paced_inserts,
            args=(database, w, writers, total, rate, first_id, connected, go, start_at, results),
        )
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    try:
        connected.wait(120)
    except threading.BrokenBarrierError:
        raise SystemExit("error: the writer processes did not connect within 120 s") from None
    start_at.value = time.time() + 0.1
    go.set()
    committed_at: dict[int, float] = {}
    behind = cpu = 0.0
    for _ in processes:
        try:
            committed, lag, spent = results.get(timeout=120 + total / rate)
        except queue.Empty:
            raise SystemExit("error: a writer process did not finish its INSERTs") from None
        committed_at |= committed
        behind = max(behind, lag)
        cpu += spent
    for process in processes:
        process.join(30)
    achieved = total / (max(committed_at.values()) - start_at.value)
    return PacedWrites(committed_at, achieved, behind * 1000, cpu)


class _CpuUsage:
    """CPU time over the measured phase of a MySQL → Redis round, from Linux's /proc: the
    collector's process, this process (the mirror's loop; the bench's main thread only
    waits), the writers (they report their own), the stack's MariaDB, Kafka and Redis (other
    clients' work counts too) and the whole machine, in cores busy on average: a tail made
    by queueing for the CPU shows as a machine near its core count."""

    SERVICES = ("mariadb", "kafka", "redis")

    def __init__(self, settings: Settings) -> None:
        from stack.process import PidFile

        run = Path(settings.stack.home) / "run"
        self._pids = {name: PidFile(run / f"{name}.pid").read() for name in self.SERVICES}
        self.wall = 0.0

    def _sample(self, collector_pid: int | None) -> dict[str, float]:
        sample = {name: _process_cpu_s(pid) for name, pid in self._pids.items()}
        sample |= {"collector": _process_cpu_s(collector_pid), "machine": _machine_busy_s()}
        return sample | {"mirror process": time.process_time(), "wall": time.monotonic()}

    def start(self, collector_pid: int | None) -> None:
        self._started = self._sample(collector_pid)

    def stop(self, collector_pid: int | None) -> None:
        ended = self._sample(collector_pid)
        self.used = {name: ended[name] - self._started[name] for name in ended}
        self.wall = self.used.pop("wall")

    def report(self, writers_cpu_s: float) -> None:
        if not self.wall:
            return
        cores = {"writers": writers_cpu_s / self.wall} | {
            name: used / self.wall for name, used in self.used.items() if name != "machine"
        }
        print(
            f"  CPU, cores busy on average over the {self.wall:.1f} s measured: "
            + ", ".join(f"{name} {busy:.2f}" for name, busy in cores.items())
            + f"; the whole machine {self.used['machine'] / self.wall:.2f} of {os.cpu_count()}"
        )


def _process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process (0 when it is gone or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine spent not idle since boot (Linux)."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


@dataclass
class FreshnessRun:
    delays_ms: list[float]
    sent: int
    achieved: float
    stages: list[StageRow] = field(default_factory=list)  # per row, _stage_rows
    behind_ms: float = 0.0  # PacedWrites.behind_ms


def bench_mysql_freshness(  # noqa: PLR0915 - one scenario, set up and torn down in order
    settings: Settings, args: argparse.Namespace, config: FreshnessConfig
) -> FreshnessRun:
    """MySQL commit → visible in Redis, with a real collector in front (see the docstring),
    in one named configuration."""
    import multiprocessing
    import threading

    from cdc_platform.gc_tuning import tune_gc, untune_gc
    from mirror.metrics import MirrorMetrics
    from mirror.plan import ChangeRouter
    from simple_binlog.routing import ShardRouter

    writers = 4
    tag = uuid.uuid4().hex[:6]
    database = f"bmf{tag}_00"
    instance_name = f"bench-mf{tag}"
    kafka = settings.kafka.model_copy(
        update={
            "topic_prefix": f"benchmf{tag}.",
            "client_properties": {**settings.kafka.client_properties, **config.consumer},
        }
    )
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
    stages = RowStages()
    clock = _BatchClock()

    class Timed(RedisApplier):
        def apply_batch(self, changes):  # type: ignore[no-untyped-def]
            changes = list(changes)
            started = time.time()
            result = super().apply_batch(changes)
            stages.note([c.key[0] for c in changes], clock, started)
            return result

    applier = Timed(redis_settings, mirror, tables)
    stop = threading.Event()
    router = ChangeRouter(tables, ShardRouter(list(settings.shard_rules)), "redis")
    consumer = _timed_consumer(clock)(
        kafka, mirror, "redis", [instance_name], router, applier, MirrorMetrics("redis"), stop
    )
    thread = threading.Thread(target=consumer.run)
    total = int(args.rate * args.freshness_seconds)
    print(
        f"Freshness (MySQL commit → Redis, collector in front): {total:,} single-row autocommits "
        f"at {args.rate:,} rows/s by {writers} writers"
    )
    writes = PacedWrites({}, 0.0, 0.0, 0.0)
    usage = _CpuUsage(settings)
    try:
        if not started.wait(90):
            raise SystemExit("error: the collector did not start within 90 s")
        # The mirror's process, as its entry point leaves it (or CPython's defaults).
        if config.mirror_gc_tuned:
            tune_gc()
        else:
            untune_gc()
        thread.start()
        # The clock starts once the consumer owns its partitions.
        _wait_until(lambda: bool(consumer.assignment), 60)
        # A second of warm-up with ids above the measured ones, not counted (see
        # bench_freshness).
        warm_up = _paced_writes(database, writers, args.rate, args.rate, first_id=10**9)
        _wait_until(lambda: warm_up.committed_at.keys() <= stages.applied.keys(), 60)
        usage.start(collector.pid)
        writes = _paced_writes(database, writers, total, args.rate)
        _wait_until(lambda: writes.committed_at.keys() <= stages.applied.keys(), 60)
        usage.stop(collector.pid)
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
    applied_at = stages.applied
    delays = [
        (applied_at[key] - at) * 1000
        for key, at in writes.committed_at.items()
        if key in applied_at
    ]
    p50, p99 = _percentiles(delays)
    print(
        f"  {len(delays):,} of {total:,} in Redis (writers achieved {writes.achieved:,.0f} "
        f"rows/s, at most {writes.behind_ms:,.0f} ms behind their schedule); MySQL commit → in "
        f"Redis: p50 {p50:.0f} ms, p99 {p99:.0f} ms"
    )
    rows = _stage_rows(dict(writes.committed_at), stages)
    _print_split(_stage_split(rows))
    usage.report(writes.cpu_s)
    if len(delays) < total:
        print(f"  {total - len(delays):,} rows did not reach Redis within 60 s")
    return FreshnessRun(delays, total, writes.achieved, rows, writes.behind_ms)


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
        _print_split(_stage_split([row for r in measured for row in r.stages]))
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
                 "achieved rows/s": achieved, "rounds": args.freshness_rounds,
                 "writers behind ms": max(r.behind_ms for r in runs[name]),
                 **_stage_split([row for r in runs[name] for row in r.stages])}  # fmt: skip
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
    parser.add_argument(
        "--row-hash-rounds",
        type=int,
        default=2,
        help="rounds of the warehouse's stored row hash write cost (0: skip)",
    )
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
        if args.row_hash_rounds:
            figures.append(bench_warehouse_row_hash(settings, args))
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
