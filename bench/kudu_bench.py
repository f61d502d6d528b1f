"""The Kudu mirror target (issue 27, item 5): guarded apply against an unguarded batch upsert,
and MySQL commit → visible in Kudu, in one run.

    .venv/bin/python -m bench.kudu_bench [--changes 200000] [--keys 50000] [--batch 5000]
                                         [--reference-changes 10000] [--freshness-seconds 20]
                                         [--rate 1000] [--json PATH]

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
of its own publishes them to Kafka and the mirror's consumer loop (in this process) applies them
to Kudu; p50/p99 of "the INSERT's autocommit returned → its batch's flush to Kudu returned"
(visible to a READ_LATEST scan from then on). Target p99 < 1 s.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

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
from mirror.kudu import KuduApplier
from mirror.plan import RowChange
from stack.manager import LocalStack


def _applier(settings: Settings, prefix: str, writer: str = "java") -> KuduApplier:
    kudu = settings.kudu.model_copy(update={"table_prefix": prefix})
    jars = settings.kudu.client_jars or settings.stack.home / "jars" / "kudu"
    tables = [TableMirror(db_prefix="bench", table_prefix="orders", targets=["kudu"])]
    return KuduApplier(kudu, settings.mirror, tables, jars.resolve(), writer=writer)  # type: ignore[arg-type]


def _drop(applier: KuduApplier, prefix: str) -> None:
    client = applier._client
    for name in client.getTablesList(prefix).getTablesList():
        if str(name).startswith(prefix):
            client.deleteTable(name)


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
        _drop(cleaner, prefix)
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


class _KeyTimedKudu(KuduApplier):
    """Notes when each key (first key column) was first applied: its flush returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied_at: dict[object, float] = {}

    def apply_batch(self, changes):  # type: ignore[no-untyped-def]
        changes = list(changes)
        result = super().apply_batch(changes)
        now = time.time()
        for change in changes:
            self.applied_at.setdefault(change.key[0], now)
        return result


def bench_freshness(settings: Settings, args: argparse.Namespace) -> Figure | None:
    """MySQL commit → visible in Kudu, a real collector in front (see the docstring)."""
    from mirror.consumer import MirrorConsumer
    from mirror.metrics import MirrorMetrics
    from mirror.plan import ChangeRouter
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
    prefix = f"benchkf{tag}."
    kudu = settings.kudu.model_copy(update={"table_prefix": prefix})
    jars = (settings.kudu.client_jars or settings.stack.home / "jars" / "kudu").resolve()
    applier = _KeyTimedKudu(kudu, mirror, tables, jars)
    start_gtid = _create_shards(settings, database, writers)
    spawn = multiprocessing.get_context("spawn")
    started, stop_collector = spawn.Event(), spawn.Event()
    collector = spawn.Process(
        target=_run_collector,
        args=(
            instance_name,
            random.randrange(3 * 10**6, 4 * 10**6),
            start_gtid,
            rf"{database}\..*",
            kafka.topic_prefix,
            started,
            stop_collector,
        ),
    )
    collector.start()
    stop = threading.Event()
    router = ChangeRouter(tables, ShardRouter(list(settings.shard_rules)), "kudu")
    consumer = MirrorConsumer(
        kafka, mirror, "kudu", [instance_name], router, applier, MirrorMetrics("kudu"), stop
    )
    thread = threading.Thread(target=consumer.run)
    total = int(args.rate * args.freshness_seconds)
    print(
        f"Freshness (MySQL commit → Kudu, collector in front): {total:,} single-row autocommits "
        f"at {args.rate:,} rows/s by {writers} writers"
    )
    committed_at: dict[int, float] = {}
    achieved = 0.0
    try:
        if not started.wait(90):
            print("  the collector did not start within 90 s")
            return None
        thread.start()
        _wait_until(lambda: bool(consumer.assignment), 60)
        # A second of warm-up (ids above the measured ones), not counted: the Kudu table is
        # created by its first batch.
        warm_up, _ = _write_paced(database, writers, args.rate, args.rate, first_id=10**9)
        _wait_until(lambda: warm_up.keys() <= applier.applied_at.keys(), 60)
        committed_at, achieved = _write_paced(database, writers, total, args.rate)
        _wait_until(lambda: committed_at.keys() <= applier.applied_at.keys(), 60)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(30)
        stop_collector.set()
        collector.join(60)
        _drop(applier, prefix)
        applier.close()
        _drop_run_data(settings, f"benchkf{tag}", kafka)
        with _mysql_admin(settings) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database}")
    return _figure(committed_at, applier.applied_at, total, achieved, mirror.max_wait_ms)


def _figure(
    committed_at: dict[int, float],
    applied_at: dict[object, float],
    total: int,
    achieved: float,
    max_wait_ms: int,
) -> Figure | None:
    delays = sorted(
        (applied_at[k] - at) * 1000 for k, at in committed_at.items() if k in applied_at
    )
    if not delays:
        print("  nothing was applied")
        return None
    p50, p99 = delays[len(delays) // 2], delays[int(len(delays) * 0.99)]
    print(
        f"  {len(delays):,} of {total:,} in Kudu (writers achieved {achieved:,.0f} rows/s); "
        f"MySQL commit → visible in Kudu: p50 {p50:.0f} ms, p99 {p99:.0f} ms "
        f"(max_wait_ms = {max_wait_ms})"
    )
    return Figure(
        "kudu.freshness_mysql",
        f"MySQL commit → visible in Kudu (collector + mirror), {len(delays):,} autocommits at "
        f"{achieved:,.0f} rows/s",
        p99,
        "ms",
        higher_is_better=False,
        extra={"p50": p50, "p99": p99, "applied": len(delays), "sent": total},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--reference-changes", type=int, default=10_000)
    parser.add_argument("--freshness-seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    settings = load_settings()
    LocalStack(settings).up(["kudu-master", "kudu-tserver", "kafka", "mariadb"])
    print(f"machine: {describe_machine()}")
    figures = [bench_apply(settings, args)]
    if args.freshness_seconds > 0:
        freshness = bench_freshness(settings, args)
        if freshness is not None:
            figures.append(freshness)
    write_figures(args.json, "kudu", figures)


if __name__ == "__main__":
    main()
