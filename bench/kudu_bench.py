"""The Kudu mirror target (issue 27, item 5): guarded apply against an unguarded batch upsert,
and MySQL commit → visible in Kudu, in one run.

    .venv/bin/python -m bench.kudu_bench [--changes 200000] [--keys 50000] [--batch 5000]
                                         [--reference-changes 10000] [--freshness-seconds 20]
                                         [--rate 1000] [--freshness-configs before current memory]
                                         [--freshness-rounds 2] [--json PATH]

Apply: ``--changes`` row changes of ``bench.mirror_bench``'s workload (8 columns: BIGINT
UNSIGNED key, DECIMAL, VARCHAR, ENUM, DATETIME(3), TIMESTAMP(6), INT, DOUBLE; 10 % deletes, 10 %
replays with an older offset) in batches of ``--batch``:

- measured: ``KuduApplier.apply_batch`` — the mirror's path: newest change per key, the batch as
  one buffer to ``io.cdcmirror.kudu.GuardedBatch``, which reads the stored ``_binlog_offset``
  of the batch's keys (the guard) and upserts the newer changes in one flush;
- baseline: the same batches upserted as they come through the same client and the same batch
  writer, without the version read (``write_columns(guarded=False)``) into a table of its own.
  Target: guarded ≥ 60 % of the baseline.
- shown, no target: the call-by-call Python reference path (``writer="python"``) on the first
  ``--reference-changes`` changes, what the batch writer replaced.

Freshness (``--freshness-seconds``, 0 skips): single-row autocommit INSERTs paced at ``--rate``
by 4 writer processes into 4 shards of a fresh MariaDB database; a real collector in a process
of its own publishes them to Kafka and the mirror's consumer loop (in this process) applies
them; p50/p99 of "the INSERT's autocommit returned → its batch's apply returned" (for Kudu:
its flush returned, visible to a READ_LATEST scan from then on). Named configurations
(``--freshness-configs``, ``FRESHNESS_CONFIGS``), one after the other, ``--freshness-rounds``
times with each round starting one configuration later, in the same run:

- ``before``: Kudu, the mirror's process with CPython's default garbage collection — what the
  first figure (p99 4,316 ms) was measured with; the baseline;
- ``current``: Kudu, the process's GC tuned as ``cdc-mirror mirror run`` does
  (``cdc_platform.gc_tuning``): the figure ``kudu.freshness_mysql``, target p99 < 1 s;
- ``memory``: the in-memory reference applier in Kudu's place (the collector and the consumer
  loop alone, tuned GC): how much of the delay is not Kudu's.

Each key's delay is split into steps (p50/p99): *collector* (commit → the collector produced
the message: the record's CreateTime, read back from the topic), *queue* (produced → the apply
of its batch started: the collector's transaction commit, Kafka, the consumer's batching and
decoding), *apply* (the target's apply_batch); for Kudu also per batch the Python share and the
batch writer's guard read and upsert flush (``BatchTimings``). The machine is shared: compare
the configurations of one run, not runs with each other.

Full size (the issue's load; a quiet machine wants about 5 minutes):

    .venv/bin/python -m bench.report --only kudu --out bench/results/<date>-kudu

which runs ``bench.kudu_bench`` with its defaults (200,000 changes over 50,000 keys; two rounds
of 20 s of freshness per configuration at 1,000 rows/s); ``--quick`` scales it down. The
collector runs in a process of its own, untouched by the configurations: its step differing
between configurations measures how much the machine's load drifted during the run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from bench.mirror_bench import (
    TABLE,
    _create_shards,
    _drop_run_data,
    _mysql_admin,
    _run_collector,
    _timed,
    _wait_until,
    _write_paced,
    batches,
)
from cdc_platform.config import Settings, TableMirror, load_settings
from mirror.applier import MemoryApplier
from mirror.kudu import BatchTimings, KuduApplier
from mirror.plan import RowChange
from stack.manager import LocalStack


def _applier(settings: Settings, prefix: str, writer: str = "java") -> KuduApplier:
    kudu = settings.kudu.model_copy(update={"table_prefix": prefix})
    jars = settings.kudu.client_jars or settings.stack.home / "jars" / "kudu"
    tables = [TableMirror(db_prefix="bench", table_prefix="orders", targets=["kudu"])]
    return KuduApplier(kudu, settings.mirror, tables, jars.resolve(), writer=writer)  # type: ignore[arg-type]


def _apply_all(applier: KuduApplier, chunks: Sequence[list[RowChange]]) -> tuple[float, int]:
    busy, stale = 0.0, 0
    for chunk in chunks:
        started = time.perf_counter()
        stale += applier.apply_batch(chunk).stale
        busy += time.perf_counter() - started
    return busy, stale


def bench_apply(settings: Settings, args: argparse.Namespace) -> Figure:
    prefix = f"benchk{uuid.uuid4().hex[:6]}."
    print(f"Kudu: {args.changes:,} changes over {args.keys:,} keys, batches of {args.batch:,}")
    chunks = list(batches(args.changes, args.keys, args.batch))
    guarded = _applier(settings, prefix + "guarded.")
    plain = _applier(settings, prefix + "plain.")
    reference = _applier(settings, prefix + "reference.", writer="python")
    stale = 0
    try:
        # Each table made (and the JVM warmed) by a first batch of its own, not timed.
        warm = list(batches(args.batch, args.keys, args.batch, seed=99))
        for applier in (guarded, plain, reference):
            applier.apply_batch(warm[0])
        opened = plain._open[TABLE]

        def baseline() -> float:
            busy = 0.0
            for chunk in chunks:
                started = time.perf_counter()
                plain.write_columns(TABLE, opened, chunk, guarded=False)
                busy += time.perf_counter() - started
            return busy

        def mine() -> float:
            nonlocal stale
            busy, stale = _apply_all(guarded, chunks)
            return busy

        base = _timed("baseline: unguarded batch upsert, same client", args.changes, baseline)
        rate = _timed("KuduApplier: guarded (version read + upsert)", args.changes, mine)
        cut = max(1, args.reference_changes // args.batch)
        counted = sum(len(c) for c in chunks[:cut])
        python = _timed(
            "reference: call-by-call through JPype (guarded)",
            counted,
            lambda: _apply_all(reference, chunks[:cut])[0],
        )
        print(
            f"  ratio guarded / unguarded: {rate / base:.0%}; rejected as stale: {stale:,}; "
            f"batch writer vs call-by-call reference: {rate / python:.1f}×"
        )
    finally:
        for applier in (guarded, plain, reference):
            applier.close()
        cleaner = _applier(settings, prefix)
        cleaner.drop_tables()
        cleaner.close()
    return Figure(
        "kudu.apply",
        f"Kudu apply with the guard: {args.changes:,} changes over {args.keys:,} keys",
        rate,
        "rows/s",
        base,
        "unguarded batch upsert through the same client",
        extra={"stale": stale, "call-by-call reference rows/s": python},
    )


class _KeyTimed:
    """Notes, per key (first key column), when the batch that first applied it started and
    when its apply returned (visible from then on); a Kudu applier's step timings too."""

    applied_at: dict[object, float]
    started_at: dict[object, float]
    timings: list[BatchTimings]

    def apply_batch(self, changes: Any) -> Any:
        changes = list(changes)
        started = time.time()
        result = super().apply_batch(changes)  # type: ignore[misc]
        now = time.time()
        for change in changes:
            if change.key[0] not in self.applied_at:
                self.applied_at[change.key[0]] = now
                self.started_at[change.key[0]] = started
        timings = getattr(self, "last_timings", None)
        if timings is not None:
            self.timings.append(timings)
        return result


class _KeyTimedKudu(_KeyTimed, KuduApplier):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied_at, self.started_at, self.timings = {}, {}, []


class _KeyTimedMemory(_KeyTimed, MemoryApplier):
    """The baseline target: the in-memory reference applier (no store, no round trip)."""

    def __init__(self) -> None:
        super().__init__()
        self.applied_at, self.started_at, self.timings = {}, {}, []


def _produced_at(kafka: Any, topic: str) -> dict[object, float]:
    """id → when the collector produced its message (the record's CreateTime), read back
    from the run's topic after the run."""
    from confluent_kafka import Consumer, TopicPartition

    from cdc_platform.kafka import consumer_config

    consumer = Consumer(consumer_config(kafka, group_id=f"{topic}.stamps"))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        produced: dict[object, float] = {}
        done = {p for p, end in ends.items() if end <= 0}
        deadline = time.monotonic() + 60
        while len(done) < len(ends) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is not None:
                    continue
                partition, offset = message.partition() or 0, message.offset() or 0
                if offset + 1 >= ends[partition]:
                    done.add(partition)
                content = orjson.loads(message.value() or b"{}").get("content") or {}
                if "id" in content:
                    produced.setdefault(content["id"], message.timestamp()[1] / 1000)
        return produced
    finally:
        consumer.close()


@dataclass
class _Freshness:
    """One configuration's run: per key, when MySQL committed it, when the collector produced
    it, when the batch applying it started and when that apply returned."""

    name: str
    committed_at: dict[object, float]
    produced_at: dict[object, float]
    started_at: dict[object, float]
    applied_at: dict[object, float]
    timings: list[BatchTimings]
    achieved: float


def _start_collector(
    instance_name: str, start_gtid: str, database: str, topic_prefix: str
) -> tuple[Any, Any, Any]:
    """A collector in a process of its own: the process, its "started" and "stop" events."""
    spawn = multiprocessing.get_context("spawn")
    started, stop = spawn.Event(), spawn.Event()
    collector = spawn.Process(
        target=_run_collector,
        args=(
            instance_name,
            random.randrange(3 * 10**6, 4 * 10**6),
            start_gtid,
            rf"{database}\..*",
            topic_prefix,
            started,
            stop,
        ),
    )
    collector.start()
    return collector, started, stop


def _timed_applier(
    settings: Settings,
    config: FreshnessConfig,
    mirror: Any,
    tables: list[TableMirror],
    prefix: str,
) -> _KeyTimedKudu | _KeyTimedMemory:
    if config.target != "kudu":
        return _KeyTimedMemory()
    kudu = settings.kudu.model_copy(update={"table_prefix": prefix})
    jars = (settings.kudu.client_jars or settings.stack.home / "jars" / "kudu").resolve()
    return _KeyTimedKudu(kudu, mirror, tables, jars)


def _freshness_run(
    settings: Settings, args: argparse.Namespace, name: str, config: FreshnessConfig
) -> _Freshness | None:
    """MySQL commit → applied by the mirror's consumer loop to the configuration's target, a
    real collector in front (the module docstring)."""
    from cdc_platform.gc_tuning import tune_gc, untune_gc
    from mirror.consumer import MirrorConsumer
    from mirror.metrics import MirrorMetrics
    from mirror.plan import ChangeRouter
    from simple_binlog.naming import topic_name
    from simple_binlog.routing import ShardRouter

    writers, tag = 4, uuid.uuid4().hex[:6]
    database, instance_name = f"bkf{tag}_00", f"bench-kf{tag}"
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"benchkf{tag}."})
    tables = [
        TableMirror(
            instance=instance_name, db_prefix=f"bkf{tag}", table_prefix="orders", targets=["kudu"]
        )
    ]
    mirror = settings.mirror.model_copy(update={"group_prefix": f"benchkf{tag}"})
    applier = _timed_applier(settings, config, mirror, tables, prefix=f"benchkf{tag}.")
    start_gtid = _create_shards(settings, database, writers)
    collector, started, stop_collector = _start_collector(
        instance_name, start_gtid, database, kafka.topic_prefix
    )
    stop = threading.Event()
    router = ChangeRouter(tables, ShardRouter(list(settings.shard_rules)), "kudu")
    consumer = MirrorConsumer(
        kafka, mirror, "kudu", [instance_name], router, applier, MirrorMetrics("kudu"), stop
    )
    thread = threading.Thread(target=consumer.run)
    total = int(args.rate * args.freshness_seconds)
    committed_at: dict[int, float] = {}
    produced_at: dict[object, float] = {}
    achieved = 0.0
    try:
        if not started.wait(90):
            print("  the collector did not start within 90 s")
            return None
        if config.gc_tuned:
            tune_gc()  # as 'mirror run' does just before its consumer loop
        thread.start()
        _wait_until(lambda: bool(consumer.assignment), 60)
        # A second of warm-up (ids above the measured ones), not counted: the Kudu table is
        # created by its first batch.
        warm_up, _ = _write_paced(database, writers, args.rate, args.rate, first_id=10**9)
        _wait_until(lambda: warm_up.keys() <= applier.applied_at.keys(), 60)
        committed_at, achieved = _write_paced(database, writers, total, args.rate)
        _wait_until(lambda: committed_at.keys() <= applier.applied_at.keys(), 60)
        produced_at = _produced_at(kafka, topic_name(kafka, instance_name))
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(30)
        untune_gc()  # the next configuration starts from CPython's defaults
        stop_collector.set()
        collector.join(60)
        if isinstance(applier, KuduApplier):
            applier.drop_tables()  # the run's own table prefix
        applier.close()
        _drop_run_data(settings, f"benchkf{tag}", kafka)
        with _mysql_admin(settings) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database}")
    return _Freshness(
        name,
        cast("dict[object, float]", committed_at),
        produced_at,
        applier.started_at,
        applier.applied_at,
        applier.timings,
        achieved,
    )


def _percentiles(values: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(values)
    if not ordered:
        return 0.0, 0.0
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _stages(run: _Freshness) -> dict[str, float]:
    """p50/p99 (ms) of commit → visible and of its steps: the collector (commit → produced),
    the queue (produced → its batch's apply started: the transaction's commit, Kafka, the
    consumer's batch and decoding), the target's apply (started → returned)."""
    keys = [k for k in run.committed_at if k in run.applied_at]
    steps = {
        "total": [(run.applied_at[k] - run.committed_at[k]) * 1000 for k in keys],
        "collector": [
            (run.produced_at[k] - run.committed_at[k]) * 1000 for k in keys if k in run.produced_at
        ],
        "queue": [
            (run.started_at[k] - run.produced_at[k]) * 1000 for k in keys if k in run.produced_at
        ],
        "apply": [(run.applied_at[k] - run.started_at[k]) * 1000 for k in keys],
    }
    if run.timings:
        for step in ("python", "java_read", "java_write"):
            steps[f"batch {step}"] = [getattr(t, step) * 1000 for t in run.timings]
    found: dict[str, float] = {"applied": float(len(keys))}
    for step, values in steps.items():
        p50, p99 = _percentiles(values)
        found[f"{step} p50" if step != "total" else "p50"] = p50
        found[f"{step} p99" if step != "total" else "p99"] = p99
    return found


@dataclass(frozen=True)
class FreshnessConfig:
    """A named configuration of the MySQL → Kudu path: the target the consumer loop applies to
    and whether the mirror's process tunes its garbage collector as ``cdc-mirror mirror run``
    does (``cdc_platform.gc_tuning``, called just before its consumer loop starts)."""

    description: str
    target: str  # "kudu", or "memory": the in-memory reference applier in Kudu's place
    gc_tuned: bool


FRESHNESS_CONFIGS: dict[str, FreshnessConfig] = {
    # What the 2026-11-25 figure (p99 4,316 ms) was measured with: the mirror's loop under
    # CPython's default GC thresholds, whose full collections walk every live object.
    "before": FreshnessConfig(
        "Kudu, the mirror's process with CPython's default GC", "kudu", False
    ),
    "current": FreshnessConfig(
        "Kudu, the mirror's process with tuned GC, as 'mirror run'", "kudu", True
    ),
    # Attribution: the same collector and consumer loop with nothing behind the applier.
    "memory": FreshnessConfig(
        "the in-memory reference applier in Kudu's place (collector + consumer loop), tuned GC",
        "memory",
        True,
    ),
}


def _print_run(name: str, run: _Freshness) -> None:
    found = _stages(run)
    steps = ", ".join(
        f"{step} {found[f'{step} p50']:.0f}/{found[f'{step} p99']:.0f}"
        for step in (
            "collector",
            "queue",
            "apply",
            "batch python",
            "batch java_read",
            "batch java_write",
        )
        if f"{step} p50" in found
    )
    print(
        f"    {name}: {int(found['applied']):,} applied (writers achieved {run.achieved:,.0f} "
        f"rows/s): p50 {found['p50']:.0f} ms, p99 {found['p99']:.0f} ms; steps p50/p99 ms: {steps}"
    )


def _merged(runs: Sequence[_Freshness]) -> _Freshness:
    """The rounds of one configuration as one run (each round's keys are its own)."""
    merged = _Freshness(runs[0].name, {}, {}, {}, {}, [], 0.0)
    for index, run in enumerate(runs):
        tag = f"r{index}:"
        merged.committed_at.update({f"{tag}{k}": v for k, v in run.committed_at.items()})
        for source, into in (
            (run.produced_at, merged.produced_at),
            (run.started_at, merged.started_at),
            (run.applied_at, merged.applied_at),
        ):
            into.update({f"{tag}{k}": v for k, v in source.items()})
        merged.timings.extend(run.timings)
    merged.achieved = sum(r.achieved for r in runs) / len(runs)
    return merged


def bench_freshness(settings: Settings, args: argparse.Namespace) -> list[Figure]:
    """Each named configuration ``--freshness-rounds`` times, alternated, in this run (the
    module docstring). ``kudu.freshness_mysql`` is 'current' with 'before''s p99 of the same run
    as its baseline; ``kudu.freshness_mysql.<name>`` the others, against 'before' too."""
    names: list[str] = args.freshness_configs
    print(f"Freshness (MySQL commit → applied, collector in front), {args.rate:,} rows/s:")
    rounds: dict[str, list[_Freshness]] = {name: [] for name in names}
    for round_index in range(args.freshness_rounds):
        # Each round starts one configuration later, so none is always the one right after
        # the apply benchmark, and a load that drifts through the run touches each alike.
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            config = FRESHNESS_CONFIGS[name]
            print(
                f"  configuration {name!r} ({config.description}), round {round_index + 1}: "
                f"{int(args.rate * args.freshness_seconds):,} single-row autocommits by 4 writers"
            )
            run = _freshness_run(settings, args, name, config)
            if run is not None:
                _print_run(name, run)
                rounds[name].append(run)
    found = {name: _stages(_merged(runs)) for name, runs in rounds.items() if runs}
    baseline = found.get("before") if "before" in names[:1] else None
    figures = []
    for name, stages in found.items():
        if (name == "before" and len(found) > 1) or not stages["applied"]:
            continue
        extra = dict(stages)
        if baseline is not None:
            extra |= {"before p50": baseline["p50"], "before p99": baseline["p99"]}
        figures.append(
            Figure(
                "kudu.freshness_mysql" if name == "current" else f"kudu.freshness_mysql.{name}",
                f"MySQL commit → applied (collector + mirror), configuration '{name}': "
                f"{FRESHNESS_CONFIGS[name].description}; {int(stages['applied']):,} autocommits",
                stages["p99"],
                "ms",
                baseline=None if baseline is None or name == "before" else baseline["p99"],
                baseline_label=f"p99 of configuration 'before': {FRESHNESS_CONFIGS['before'].description}",
                higher_is_better=False,
                extra=extra,
            )
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--reference-changes", type=int, default=10_000)
    parser.add_argument("--freshness-seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument(
        "--freshness-configs",
        nargs="+",
        choices=sorted(FRESHNESS_CONFIGS),
        default=["before", "current", "memory"],
        help="named configurations, the first is the baseline (default: before current memory)",
    )
    parser.add_argument("--freshness-rounds", type=int, default=2)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    settings = load_settings()
    LocalStack(settings).up(["kudu-master", "kudu-tserver", "kafka", "mariadb"])
    print(f"machine: {describe_machine()}")
    figures = [bench_apply(settings, args)]
    if args.freshness_seconds > 0:
        figures += bench_freshness(settings, args)
    write_figures(args.json, "kudu", figures)


if __name__ == "__main__":
    main()
