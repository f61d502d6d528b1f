"""Daily merge against a naive full rewrite, in the same run, Spark session and storage.

    .venv/bin/python -m bench.merge_bench [--rows 10000000] [--changes 1000000]
        [--small-changes 10000] [--pattern recent|random] [--buckets 8] [--file-size-mb 32]
        [--write-mode merge-on-read|copy-on-write] [--storage local|s3|hdfs]
        [--location PATH|hdfs://…|s3://…]

Builds a snapshot table of ``--rows`` rows (the merge's own Iceberg table, tagged as day 1),
then two cases, each a day of the table's rows in the one raw Iceberg table (SimpleBinlog
JSON in ``content``: 20 % inserts of new keys, 70 % updates, 10 % deletes):

1. ``--changes`` changes (day 2, merged over day 1);
2. ``--small-changes`` changes (day 3, merged over day 2);
3. hourly snapshots (the table mirror switched to ``snapshots: hourly``): ``--small-changes``
   changes in hour 00 of day 4, merged over day 3's tag (not measured: it makes the next
   hour's base an hour tag, as for 23 of a day's 24 hours), then ``--small-changes`` changes
   whose ``executeTime`` lies in hour 01, merged as that hour over hour 00's tag (measured).
   Issue 20 item 4: an hour's merge costs what that hour's change costs.

Per case, on the same input and the same lake:

* baseline: flatten the changes (same parser), union the previous day's snapshot as INSERTs,
  a window ``row_number() over (partition by key order by offset desc) = 1``, DELETEs
  dropped, the whole result written as a new Iceberg table (a full rewrite);
* measured: ``merge.job.Merger.merge`` (schema, archive rule, MERGE INTO of the day's
  changes, the day's tag, the dt view, record); for the hour,
  ``MergeRequest(table, day, hour=1)``: the hour's changes only, tagged ``hr-…``, the hour view.

The hour's baseline is the same naive rewrite of the hour before's tag with the hour's
changes (the raw rows of ``dt`` = day 4 whose ``executeTime`` lies in hour 01).

``--pattern recent`` puts updates and deletes on the newest 2 % of keys (order tables: recent
orders change), ``random`` spreads them over all keys. Prints seconds, rows/s, the ratio,
the JVM's peak resident memory per phase (VmHWM, reset before each phase) and the machine.
The issue's sizes are the defaults; scale down with the flags.

``--storage`` puts the lake in a local temporary folder, or under a prefix of its own per run
on the stack's HDFS or SeaweedFS S3 (deleted at the end); the figures of S3 and HDFS have keys
of their own (``merge.small_changes_s3``, ``…_hdfs``, ``merge.hourly_small_changes_s3``, …). ``--location`` names a lake instead.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
import time
import uuid
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Literal

from bench import storages
from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import MergeSettings, Settings, TableMirror, load_settings
from cdc_platform.iceberg import LakeCatalog, lake_session
from cdc_platform.lake import (
    LOGICAL_TABLE_COLUMN,
    RAW_TABLE,
    RAW_TABLE_COLUMNS,
    ROW_COLUMNS,
    ensure_raw_table,
    raw_rows,
)
from cdc_platform.lake_snapshots import DAYS_DATABASE_SUFFIX, HOURS_DATABASE_SUFFIX, day_tag
from cdc_platform.mysql_schema import LiveSchema
from merge.hours import HOUR_MS, Hour
from merge.job import Merger, MergeRequest, MergeResult
from merge.schema import plan_schema
from merge.transform import align, flatten, latest

DAY1 = date(2026, 11, 19)
# The hourly case: hour 00 of this day merged over day 3's tag, then hour 01 measured.
HOURLY_DAY = DAY1 + timedelta(days=3)
MEASURED_HOUR = Hour(HOURLY_DAY, 1)
# The daily cases' changes: from 01:00 of their day, one per millisecond (80,000 s at most).
DAY_SPAN_MS = 80_000_000
COLUMNS = {
    "id": "bigint(20)",
    "user_id": "int(11)",
    "amount": "decimal(12,2)",
    "status": "varchar(16)",
    "note": "varchar(64)",
    "created_at": "datetime(6)",
}
SHARD = "bench_00.orders_00"
ROW_COLUMNS_NAMES = tuple(name for name, _ in ROW_COLUMNS)


class JvmMemory:
    """Peak resident memory of the Spark JVM (driver and executors in local mode)."""

    def __init__(self, spark: Any) -> None:
        self.pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    def reset(self) -> None:
        # Writing 5 to clear_refs resets the peak (VmHWM) to the current RSS.
        with open(f"/proc/{self.pid}/clear_refs", "w") as handle:
            handle.write("5")

    def peak_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
        return float("nan")


class MergePhases:
    """Seconds and calls of named steps of a merge: methods of the merger, its snapshot store
    and catalogs wrapped on the instances (the product code is unchanged), and the Spark jobs
    it ran, printed per measured merge. Steps nest (``publish`` holds ``_tag``, the view
    refresh, ...): its rest, ``publish`` minus the steps inside it, is the MERGE statement."""

    MERGER_STEPS = (
        "_check_layouts",
        "writer_progress",
        "_raw_snapshot",
        "_day_changes",
        "_archive_decision",
        "_raw_java",
    )
    # The steps ``publish`` calls (its rest is the MERGE statement).
    INSIDE_PUBLISH = (
        "only_compacted_since",
        "_current",
        "_tag",
        "refresh_days_view",
        "refresh_hours_view",
        "_published",
    )
    STORE_STEPS = (
        "state",
        "merge_facts",
        "data_columns",
        "evolve",
        "publish",
        *INSIDE_PUBLISH,
        "_java",
    )
    CATALOG_STEPS = ("table_names",)
    # Steps of an hour's merge (instead of ``_day_changes``): its base (called twice: before
    # the read and in the MERGE's planning), late rows since the base's raw snapshot.
    HOUR_STEPS = ("_hour_base", "_late_since", "_overtaking")

    def __init__(self, merger: Merger, hourly: bool = False) -> None:
        self.spark = merger.spark
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.jobs_before = 0
        for owner, names in (
            (merger, self.MERGER_STEPS + (self.HOUR_STEPS if hourly else ())),
            (merger.store, self.STORE_STEPS),
            (merger.raw_lake, self.CATALOG_STEPS),
            (merger.store.lake, self.CATALOG_STEPS),
        ):
            for name in names:
                if hasattr(owner, name):  # a step another version has not
                    setattr(owner, name, self._timed(name, getattr(owner, name)))

    def _timed(self, name: str, method: Any) -> Any:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started
                self.calls[name] = self.calls.get(name, 0) + 1

        return timed

    def _jobs(self) -> int:
        """The next Spark job's id (ids count up from 0; the tracker forgets old jobs)."""
        ids = self.spark.sparkContext.statusTracker().getJobIdsForGroup(None)
        return max(ids, default=-1) + 1

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.jobs_before = self._jobs()

    def tasks(self) -> str:
        """The tasks of each Spark job since ``reset``, stage by stage (``3+200``: a job of
        two stages; skipped stages, whose output was reused, count 0)."""
        tracker = self.spark.sparkContext.statusTracker()
        shown = []
        for job_id in range(self.jobs_before, self._jobs()):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            stages = [tracker.getStageInfo(stage_id) for stage_id in sorted(job.stageIds)]
            shown.append("+".join(str(0 if s is None else s.numTasks) for s in stages))
        return " ".join(shown)

    def line(self) -> str:
        """One line: each step's seconds (and calls when more than one), the MERGE statement,
        the snapshot and raw table loads, SHOW TABLES and the Spark jobs."""
        shown = []
        for name, seconds in self.seconds.items():
            calls = self.calls[name]
            shown.append(f"{name} {seconds:.2f}" + (f" ({calls}x)" if calls > 1 else ""))
        inside = sum(self.seconds.get(name, 0.0) for name in self.INSIDE_PUBLISH)
        statement = self.seconds.get("publish", 0.0) - inside
        return (
            f"phases (s): {'; '.join(shown)} | MERGE statement ~{statement:.2f} | loads: "
            f"snapshot {self.calls.get('_java', 0)}, raw {self.calls.get('_raw_java', 0)}, "
            f"SHOW TABLES {self.calls.get('table_names', 0)} | "
            f"Spark jobs {self._jobs() - self.jobs_before}"
        )


def bench_settings(
    work: Path,
    args: argparse.Namespace,
    tag: str,
    snapshots: Literal["daily", "hourly"] = "daily",
) -> Settings:
    base = load_settings()
    location = args.location or storages.lake_location(args.storage, work, f"merge_{tag}")
    lake = base.lake.model_copy(update={"location": location})
    return base.model_copy(
        update={
            "spark": base.spark.model_copy(update={"lake_dir": work / "lake"}),
            "lake": lake,
            "stream_writer": base.stream_writer.model_copy(
                update={"database": f"bench_raw_{tag}", "name": f"bench-{tag}"}
            ),
            "merge": MergeSettings(
                database=f"bench_snap_{tag}",
                check=False,
                buckets=args.buckets,
                file_size_mb=args.file_size_mb,
                write_mode=args.write_mode,
            ),
            "tables": [
                TableMirror(
                    db_prefix="bench",
                    table_prefix="orders",
                    key=["id"],
                    targets=["hive"],
                    snapshots=snapshots,
                )
            ],
        }
    )


def build_snapshot(merger: Merger, rows: int) -> None:
    """Day 1: ``rows`` rows written into the merge's table by one append, tagged."""
    from pyspark.sql import functions as F

    plan = plan_schema("bench_orders", None, COLUMNS, ["id"])
    merger.store.ensure_database()
    merger.store.evolve("bench_orders", plan, exists=False)
    frame = merger.spark.range(rows).select(
        F.col("id"),
        (F.col("id") % 100_000).cast("int").alias("user_id"),
        ((F.col("id") % 10_000) + F.lit(0.25)).cast("decimal(12,2)").alias("amount"),
        F.lit("PAID").alias("status"),
        F.concat(F.lit("order "), F.col("id").cast("string")).alias("note"),
        F.timestamp_seconds(F.lit(1_763_000_000) + F.col("id") % 86_400).alias("created_at"),
        F.lit(1_763_000_000_000_000).alias("_binlog_offset"),
        F.lit(SHARD).alias("_shard"),
    )
    name = merger.store.name("bench_orders")
    frame.writeTo(name).append()
    merger.spark.sql(f"ALTER TABLE {name} CREATE TAG `{day_tag(DAY1)}`")


def raw_table(merger: Merger) -> str:
    """The one raw table of every logical table, as the stream writer makes it."""
    lake = LakeCatalog.open(merger.spark, merger.settings, check=False)
    database = merger.settings.stream_writer.database
    ensure_raw_table(lake, database)
    return lake.name(database, RAW_TABLE)


def write_changes(
    merger: Merger,
    day: date,
    changes: int,
    snapshot_rows: int,
    next_id: int,
    pattern: str,
    hour: Hour | None = None,
) -> int:
    """The day's rows of the raw table (partition ``dt`` = ``day``), from 01:00 of the day, or
    inside ``hour`` (its ``executeTime`` wraps within the hour); returns the next unused id."""
    from pyspark.sql import functions as F

    recent = max(1, snapshot_rows // 50)
    n = F.col("id")
    kind = F.when(n % 10 < 2, "INSERT").when(n % 10 < 9, "UPDATE").otherwise("DELETE")
    spread = F.abs(F.xxhash64(n)) % F.lit(recent if pattern == "recent" else snapshot_rows)
    base = F.lit(snapshot_rows - recent) if pattern == "recent" else F.lit(0)
    target = F.when(kind == "INSERT", F.lit(next_id) + n).otherwise(base + spread)
    if hour is None:
        first = int(time.mktime(day.timetuple())) + 3600
        span_ms = DAY_SPAN_MS
    else:
        first = hour.start_ms(merger.zone) // 1000
        span_ms = HOUR_MS
    frame = (
        merger.spark.range(changes)
        .select(
            (F.lit(first).cast("bigint") * 1_000_000 + n).alias("binlogOffset"),
            (F.lit(first).cast("bigint") * 1000 + n % span_ms).alias("executeTime"),
            kind.alias("eventType"),
            F.lit("bench_00").alias("schemaName"),
            F.lit("orders_00").alias("tableName"),
            F.lit("BINLOG").alias("source"),
            F.lit(1).cast("bigint").alias("version"),
            F.array(F.lit("id")).alias("primaryKeys"),
            F.lit(str(COLUMNS).replace("'", '"')).alias("columnTypes"),
            F.to_json(
                F.struct(
                    target.alias("id"),
                    (target % 100_000).alias("user_id"),
                    F.format_string("%d.%02d", n % 10_000, n % 100).alias("amount"),
                    F.lit("SHIPPED").alias("status"),
                    F.concat(F.lit("changed "), n.cast("string")).alias("note"),
                    F.lit("2026-11-19 10:00:00.000000").alias("created_at"),
                )
            ).alias("content"),
            F.lit(None).cast("string").alias("beforeContent"),
            F.lit(None).cast("string").alias("position"),
            F.lit("bench").alias("kafkaTopic"),
            F.lit(0).alias("kafkaPartition"),
            n.alias("kafkaOffset"),
            F.current_timestamp().alias("kafkaTimestamp"),
            F.lit("bench_orders").alias(LOGICAL_TABLE_COLUMN),
            F.lit(day.isoformat()).alias("dt"),
        )
        .select(
            *[
                (
                    F.col(name)
                    if name in (*ROW_COLUMNS_NAMES, LOGICAL_TABLE_COLUMN, "dt")
                    else F.lit(None)
                )
                .cast(kind_)
                .alias(name)
                for name, kind_ in RAW_TABLE_COLUMNS
            ]
        )
    )
    frame.writeTo(raw_table(merger)).append()
    return next_id + changes


def run_baseline(merger: Merger, day: date, hour: Hour | None = None) -> int:
    """Naive: flatten, union yesterday (or the hour before's tag) as INSERTs, row_number()
    over everything, rewrite all of it as a new Iceberg table in the same lake. An ``hour``
    (not the day's first) takes the rows of ``dt`` whose executeTime lies in it."""
    plan = plan_schema("bench_orders", None, COLUMNS, ["id"])
    lake = LakeCatalog.open(merger.spark, merger.settings, check=False)
    database = merger.settings.stream_writer.database
    where = f"dt = '{day}'"
    if hour is None:
        previous = merger.store.read("bench_orders", day - timedelta(days=1))
    else:
        where += (
            f" AND executeTime >= {hour.start_ms(merger.zone)}"
            f" AND executeTime < {hour.end_ms(merger.zone)}"
        )
        previous = merger.store.read("bench_orders", day, Hour(day, hour.index - 1))
    raw = raw_rows(lake, database, "bench_orders", where)
    rows = latest(flatten(raw, plan).unionByName(align(previous, plan)), ["id"])
    suffix = "" if hour is None else f"_{hour.index:02d}"
    name = merger.store.lake.name(merger.settings.merge.database, f"baseline_{day:%Y%m%d}{suffix}")
    rows.writeTo(name).using("iceberg").createOrReplace()
    return int(merger.spark.table(name).count())


def measure(
    merger: Merger, memory: JvmMemory, phases: MergePhases, day: date, hour: Hour | None = None
) -> tuple[float, float, float, float, MergeResult]:
    memory.reset()
    started = time.monotonic()
    baseline_rows = run_baseline(merger, day, hour)
    baseline_s = time.monotonic() - started
    baseline_mb = memory.peak_mb()
    memory.reset()
    phases.reset()
    started = time.monotonic()
    # Readiness is the stream writer's business: not part of what is measured.
    result = merger.merge(
        MergeRequest(
            "bench_orders", day, skip_readiness=True, hour=None if hour is None else hour.index
        )
    )
    merge_s = time.monotonic() - started
    merge_mb = memory.peak_mb()
    what = day.isoformat() if hour is None else hour.label
    print(f"merge of {what}: {phases.line()}; tasks per job (by stage): {phases.tasks()}")
    summary = merger.store.java_table("bench_orders").snapshot(result.snapshot_id).summary()
    written = ", ".join(
        f"{key} {summary.get(key)}"
        for key in ("added-data-files", "added-delete-files", "added-position-deletes")
    )
    print(f"merge of {what}: its commit: {written}")
    if hour is not None:
        print(
            f"merge of {what}: {result.raw_rows:,} raw rows read (from hour "
            f"{result.from_hour:02d}), {result.changes:,} changes, {result.mode}"
        )
    assert result.rows == baseline_rows, (result.rows, baseline_rows)
    return baseline_s, merge_s, baseline_mb, merge_mb, result


def case_figure(
    args: argparse.Namespace,
    settings: Settings,
    key: str,
    changes: int,
    changes_text: str,
    what: str,
    measured: tuple[float, float, float, float, MergeResult],
) -> Figure:
    """The case's line (printed) and its figure: rows/s of the merge against the baseline's,
    over the snapshot's rows and the case's changes."""
    baseline_s, merge_s, baseline_mb, merge_mb, result = measured
    total = result.rows + changes
    where = storages.storage_label(settings.lake_location.kind)
    print(
        f"{args.rows:,} rows + {changes_text} ({what}): "
        f"baseline {baseline_s:.1f} s ({total / baseline_s:,.0f} rows/s, peak "
        f"{baseline_mb:,.0f} MB) | merge {merge_s:.1f} s ({total / merge_s:,.0f} rows/s, "
        f"peak {merge_mb:,.0f} MB, {result.mode}, {result.files_kept} of {result.files} "
        f"files kept from the base) "
        f"| baseline/merge {baseline_s / merge_s:.2f}×"
    )
    return Figure(
        storages.figure_key("merge", key, settings.lake_location.kind),
        f"{args.rows:,}-row snapshot + {changes_text} ({args.pattern}), {where}",
        total / merge_s,
        "rows/s",
        total / baseline_s,
        f"naive full row_number() over snapshot ∪ delta, rewritten in full, {where}",
        extra={
            "seconds": merge_s,
            "baseline seconds": baseline_s,
            "peak MB": merge_mb,
            "baseline peak MB": baseline_mb,
        },
    )


def hourly_case(
    merger: Merger, memory: JvmMemory, args: argparse.Namespace, next_id: int
) -> Figure:
    """Hour 00 of ``HOURLY_DAY`` merged over day 3's tag (not measured), then the measured
    hour 01 over hour 00's tag, as a running day's hours are (the changes of each written
    before its merge, so hour 01's arrive after hour 00's raw snapshot, as they do live)."""
    warm_up = Hour(HOURLY_DAY, MEASURED_HOUR.index - 1)
    for hour in (warm_up, MEASURED_HOUR):
        next_id = write_changes(
            merger, HOURLY_DAY, args.small_changes, args.rows, next_id, args.pattern, hour
        )
        if hour == warm_up:
            merger.merge(
                MergeRequest("bench_orders", HOURLY_DAY, skip_readiness=True, hour=hour.index)
            )
    measured = measure(merger, memory, MergePhases(merger, hourly=True), HOURLY_DAY, MEASURED_HOUR)
    return case_figure(
        args,
        merger.settings,
        "hourly_small_changes",
        args.small_changes,
        f"{args.small_changes:,} changes of one hour, merged over the hour before's tag",
        MEASURED_HOUR.label,
        measured,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--small-changes", type=int, default=10_000)
    parser.add_argument("--pattern", choices=("recent", "random"), default="recent")
    parser.add_argument("--buckets", type=int, default=MergeSettings().buckets)
    parser.add_argument("--file-size-mb", type=int, default=MergeSettings().file_size_mb)
    parser.add_argument(
        "--write-mode",
        choices=("merge-on-read", "copy-on-write"),
        default=MergeSettings().write_mode,
    )
    parser.add_argument(
        "--storage",
        choices=storages.STORAGES,
        default="local",
        help="the lake: a local temporary folder, or a prefix of the run's own on the stack's "
        "SeaweedFS S3 or HDFS",
    )
    parser.add_argument("--location", help="the lake, instead of --storage's")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the figures to PATH (for bench.report)"
    )
    args = parser.parse_args(argv)

    tag = uuid.uuid4().hex[:6]
    work = Path(tempfile.mkdtemp(prefix="merge-bench-"))
    settings = bench_settings(work, args, tag)
    spark = lake_session(settings, "cdc-mirror-merge-bench")
    schema = LiveSchema("bench_orders", [SHARD], COLUMNS, ["id"], True)
    merger = Merger(settings, spark, live_schema=lambda _name: schema, daily_counts=lambda *_: {})
    mergers = [merger]
    memory = JvmMemory(spark)
    phases = MergePhases(merger)
    print(
        f"machine: {describe_machine()}; "
        f"Spark {spark.version} {settings.spark.master}; pattern {args.pattern}; "
        f"{args.write_mode}, {args.buckets} buckets, {args.file_size_mb} MB files; "
        f"lake {settings.lake_location.uri}"
    )
    try:
        started = time.monotonic()
        build_snapshot(merger, args.rows)
        print(f"snapshot of {args.rows:,} rows built in {time.monotonic() - started:.1f} s")
        next_id = args.rows
        figures: list[Figure] = []
        for key, day, changes in (
            ("changes", DAY1 + timedelta(days=1), args.changes),
            ("small_changes", DAY1 + timedelta(days=2), args.small_changes),
        ):
            next_id = write_changes(merger, day, changes, args.rows, next_id, args.pattern)
            measured = measure(merger, memory, phases, day)
            figures.append(
                case_figure(
                    args, settings, key, changes, f"{changes:,} changes", day.isoformat(), measured
                )
            )
        # The same table, its mirror switched to hourly snapshots.
        hourly = Merger(
            bench_settings(work, args, tag, snapshots="hourly"),
            spark,
            live_schema=lambda _name: schema,
            daily_counts=lambda *_: {},
        )
        mergers.append(hourly)
        figures.append(hourly_case(hourly, memory, args, next_id))
        write_figures(args.json, "merge", figures)
    finally:
        lake = LakeCatalog.open(spark, settings, check=False)
        for database in (settings.merge.database, settings.stream_writer.database):
            if spark.catalog.databaseExists(f"{lake.catalog}.{database}"):
                lake.drop_namespace(database)
        for suffix in (DAYS_DATABASE_SUFFIX, HOURS_DATABASE_SUFFIX):
            spark.sql(
                f"DROP DATABASE IF EXISTS spark_catalog.{settings.merge.database}{suffix} CASCADE"
            )
        if args.location is None and settings.lake_location.kind != "local":
            storages.delete_location(spark, settings.lake_location.uri)
        for each in mergers:
            each.close()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
