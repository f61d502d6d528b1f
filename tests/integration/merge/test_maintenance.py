"""``cdc-mirror maintain`` on real tables: the raw layer and a snapshot merged over days, in
the lake's Iceberg catalog on the stack's metastore, on each storage: local disk and S3 (the
stack's SeaweedFS) in every run, HDFS as well with ``CDC_TEST_HDFS=1`` (one Spark session and
one start of the storage's services per storage).

1. The command in a process of its own (its progress lines on stdout): raw days and day tags
   past their retention go, small and delete files are compacted, snapshots expire, an old
   orphan file goes and fresh files stay; the retained day reads as before, and the next
   merge applies over the compacted table. An S3 object's modification time cannot be set,
   so on S3 no old orphan is planted (the step runs, and the fresh orphan must stay).
2. Safe while the writer and merge run: maintenance in a loop while a thread appends raw
   rows and the main thread merges; no row is lost or repeated, the snapshot equals MySQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from cdc_platform.config import Settings
from cdc_platform.iceberg import WRITER_PROPERTY, KafkaOffsets
from cdc_platform.lake import (
    PROGRESS_TABLE,
    RAW_TABLE,
    RAW_TABLE_BUCKETS,
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
    ensure_raw_table,
    raw_rows,
    raw_table_condition,
    read_all_writer_progress,
)
from cdc_platform.lake_snapshots import day_tag, days_view
from merge.job import Merger, MergeRequest
from merge.maintenance import Maintainer, MaintenanceReport, Step
from tests.integration.lake.conftest import TESTED_STORAGES
from tests.integration.merge.conftest import lake_on
from tests.integration.merge.harness import Shop, snapshot_rows
from tests.integration.merge.test_merge import (
    DAY1,
    DAY2,
    ROOT,
    SPARK_TIMEOUT_S,
    assert_snapshot_equals_mysql,
    merged_first_day,
    random_day,
)
from tests.support.raw_layer import append_raw, as_raw_rows

DAY3 = DAY2 + timedelta(days=1)
OLD_DAY = DAY1 - timedelta(days=40)


@pytest.fixture(scope="module", params=TESTED_STORAGES)
def merge_stack(request: pytest.FixtureRequest, local_stack: Settings) -> Iterator[Settings]:
    yield from lake_on(local_stack, request.param)


class LakeFiles:
    """Files of the lake through Hadoop's FileSystem in the session's JVM (any storage)."""

    def __init__(self, spark: Any) -> None:
        self.jvm = spark.sparkContext._jvm
        self.conf = spark._jsc.hadoopConfiguration()

    def _fs(self, uri: str) -> tuple[Any, Any]:
        path = self.jvm.org.apache.hadoop.fs.Path(uri)
        fs = path.getFileSystem(self.conf)
        if fs.getScheme() == "file":
            fs = fs.getRawFileSystem()  # no .crc file beside it (an orphan of its own)
        return fs, path

    def plant(self, uri: str, modified: datetime | None = None) -> bool:
        """Write a file no snapshot references; False when its modification time cannot be
        set to ``modified`` (S3: an object's time is its upload's)."""
        fs, path = self._fs(uri)
        out = fs.create(path, True)
        out.write(bytearray(b"not referenced"))
        out.close()
        if modified is None:
            return True
        millis = int(modified.timestamp() * 1000)
        fs.setTimes(path, millis, -1)
        return int(fs.getFileStatus(path).getModificationTime()) == millis

    def exists(self, uri: str) -> bool:
        fs, path = self._fs(uri)
        return bool(fs.exists(path))

    def delete(self, uri: str) -> None:
        fs, path = self._fs(uri)
        fs.delete(path, False)


def run_maintain(config: Path) -> list[str]:
    """``cdc-mirror --config <config> maintain`` in a process of its own, which must exit 0:
    the lines of its stdout (its progress)."""
    command = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "cdc-mirror"), "--config", str(config), "maintain"],
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=SPARK_TIMEOUT_S,
        check=False,
    )
    assert command.returncode == 0, command.stdout[-3000:] + command.stderr[-3000:]
    return command.stdout.splitlines()


def raw_days(spark: Any, shop: Shop) -> dict[str, int]:
    """The shop's table's rows in the raw layer, per day."""
    lake = shop.lake_catalog(spark)
    rows = raw_rows(lake, shop.raw_database, shop.table, "TRUE").groupBy("dt").count().collect()
    return {row["dt"]: row["count"] for row in rows}


def snapshot_count(spark: Any, name: str) -> int:
    return int(spark.sql(f"SELECT count(*) AS n FROM {name}.snapshots").first()["n"])


def with_maintenance(settings: Settings, **changes: Any) -> Settings:
    """``settings`` with these ``maintenance`` settings changed."""
    return settings.model_copy(
        update={"maintenance": settings.maintenance.model_copy(update=changes)}
    )


def maintain_once(settings: Settings, spark: Any, merger: Merger, table: str) -> list[Step]:
    """One maintenance run of ``table`` (the runner and ``merger`` closed after): its steps
    named after ``table`` (on its raw rows and, when it exists, its snapshot table)."""
    runner = Maintainer(settings, spark, merger.config)
    try:
        report = runner.run([table])
    finally:
        runner.close()
        merger.close()
    return [step for step in report.steps if step.table.endswith(f".{table}")]


def test_maintain_command_applies_retention_compacts_expires_and_removes_orphans(
    spark: Any, shop: Shop, tmp_path: Path
) -> None:
    settings = shop.merge_settings(check=False, buckets=2)
    merger = Merger(settings, spark)
    # A raw day long past any retention, then DAY1 and DAY2 merged.
    shop.start_day(OLD_DAY)
    shop.insert(0, datetime(OLD_DAY.year, OLD_DAY.month, OLD_DAY.day, 9))
    shop.write_raw(spark, OLD_DAY, ready=False)
    # A writer that crashed between its raw commit and its progress commit (it has no
    # progress row): it resumes from that raw commit, so expiry must keep it, however old
    # (expired, the writer would write its rows again).
    crashed = KafkaOffsets({("crashed-topic", 0): 42})
    one_row = spark.createDataFrame([(1, str(OLD_DAY))], "binlogOffset BIGINT, dt STRING")
    merger.raw_lake.append(
        as_raw_rows(one_row, "crashed_writer_rows"),
        shop.raw_database,
        RAW_TABLE,
        crashed,
        {WRITER_PROPERTY: "crashed-writer"},
    )
    placed = merged_first_day(spark, shop, merger, 20)
    first_day = merger.store.state(shop.table).days[DAY1]
    shop.start_day(DAY2)
    random_day(shop, DAY2, placed, 20)
    shop.write_raw(spark, DAY2)
    merger.merge(MergeRequest(shop.table, DAY2))
    day2 = snapshot_rows(spark, settings, shop.table, DAY2)
    name = merger.store.name(shop.table)
    assert spark.sql(f"SELECT count(*) AS n FROM {name}.delete_files").first()["n"] > 0

    # An orphan (a file no snapshot references) left long ago, and one left just now.
    files = LakeFiles(spark)
    data = settings.lake_location.child(f"{settings.merge.database}.db", shop.table, "data")
    old_orphan, new_orphan = f"{data}/orphan-old.parquet", f"{data}/orphan-new.parquet"
    planted_old = files.plant(old_orphan, datetime.now(UTC) - timedelta(days=10))
    if not planted_old:
        assert settings.lake_location.kind == "s3"
        files.delete(old_orphan)
    files.plant(new_orphan)
    # The writers' progress table: a commit per batch (three here), an old orphan too.
    progress_before = read_all_writer_progress(merger.raw_lake, shop.raw_database)
    progress_data = settings.lake_location.child(f"{shop.raw_database}.db", PROGRESS_TABLE, "data")
    progress_orphan = f"{progress_data}/orphan-old.parquet"
    if not files.plant(progress_orphan, datetime.now(UTC) - timedelta(days=10)):
        files.delete(progress_orphan)
    progress_name = merger.raw_lake.name(shop.raw_database, PROGRESS_TABLE)
    assert snapshot_count(spark, progress_name) > 1

    # Keep the days from DAY2 on: DAY1's tag and the raw days before DAY2 go.
    keep = (datetime.now(UTC).date() - DAY2).days
    config = shop.write_config(
        tmp_path / "maintain.yaml",
        {"maintenance": {"expire_after_hours": 0, "retain_snapshots": 1}},
        retention={"snapshot_days": keep, "raw_days": keep},
    )
    lines = run_maintain(config)
    raw = f"{shop.raw_database}.{shop.table}"
    changes = f"{shop.raw_database}.{RAW_TABLE}"
    snap = f"{settings.merge.database}.{shop.table}"
    progress = f"{shop.raw_database}.{PROGRESS_TABLE}"
    for table, action in [
        (raw, "expire days"),
        (raw, "compact"),
        (changes, "expire snapshots"),
        (changes, "remove orphans"),
        (snap, "drop tags"),
        (snap, "compact"),
        (snap, "expire snapshots"),
        (snap, "remove orphans"),
        (progress, "expire snapshots"),
        (progress, "remove orphans"),
    ]:
        assert any(f"{table}: {action}:" in line for line in lines), (table, action, lines)
    assert any(f"{snap}: drop tags: 1 day tags dropped, 1 kept" in line for line in lines), lines

    assert sorted(raw_days(spark, shop)) == [str(DAY2)]
    assert (
        merger.raw_lake.committed_offsets(shop.raw_database, RAW_TABLE, writer="crashed-writer")
        == crashed
    )
    state = merger.store.state(shop.table)
    assert sorted(state.days) == [DAY2]
    assert snapshot_rows(spark, settings, shop.table, DAY2) == day2
    view = days_view(settings, shop.table)
    assert [r["dt"] for r in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()] == [str(DAY2)]
    # Compacted: a data file's deletes folded in once they make half its rows, the others'
    # rewritten into one delete file per data file (docs/merge.md "Cost and storage").
    counts = spark.sql(f"SELECT content, count(*) AS n FROM {name}.files GROUP BY content")
    files_of = {row["content"]: row["n"] for row in counts.collect()}
    assert files_of.get(1, 0) <= files_of[0], files_of
    # Expired: DAY1's snapshot and every other one but main's lineage back to DAY2's tag.
    rows = spark.sql(f"SELECT snapshot_id, parent_id FROM {name}.snapshots").collect()
    parents = {row["snapshot_id"]: row["parent_id"] for row in rows}
    lineage, snapshot_id = set(), state.current
    while snapshot_id != state.days[DAY2]:
        lineage.add(snapshot_id)
        snapshot_id = parents[snapshot_id]
    assert set(parents) == lineage | {state.days[DAY2]}
    assert first_day not in parents
    assert not files.exists(old_orphan) and files.exists(new_orphan)
    files.delete(new_orphan)
    # The progress table: its newest snapshot only, every writer's row as before.
    assert snapshot_count(spark, progress_name) == 1
    assert read_all_writer_progress(merger.raw_lake, shop.raw_database) == progress_before
    assert not files.exists(progress_orphan)

    # The next day merges over the compacted table, on main.
    shop.start_day(DAY3)
    random_day(shop, DAY3, placed, 20)
    shop.write_raw(spark, DAY3)
    third = merger.merge(MergeRequest(shop.table, DAY3))
    assert third.mode == "merge"
    assert third.rows == len(shop.mysql_rows())
    assert_snapshot_equals_mysql(spark, shop, merger, DAY3)
    assert spark.sql(f"SELECT count(*) FROM {name} VERSION AS OF '{day_tag(DAY2)}'").first()[
        0
    ] == len(day2)


def test_maintenance_is_safe_while_the_writer_appends_and_merge_runs(
    spark: Any, shop: Shop
) -> None:
    settings = shop.merge_settings(check=False, buckets=2)
    merger = Merger(settings, spark)
    placed = merged_first_day(spark, shop, merger, 30)
    shop.start_day(DAY2)
    random_day(shop, DAY2, placed, 30)
    shop.write_raw(spark, DAY2)
    lake = shop.lake_catalog(spark)
    appended_before = sum(raw_days(spark, shop).values())

    stop = threading.Event()
    appended: list[int] = []
    reports: list[MaintenanceReport] = []
    failures: list[BaseException] = []

    def writer() -> None:
        # Small appends to a later day, as the stream writer commits its micro-batches.
        template = raw_rows(lake, shop.raw_database, shop.table, f"dt = '{DAY2}'").limit(5)
        rows = template.withColumn("dt", F.lit(str(DAY3))).localCheckpoint()
        batch = 0
        try:
            while not stop.is_set() or batch < 3:
                append_raw(lake, shop.raw_database, shop.table, rows)
                appended.append(rows.count())
                batch += 1
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)

    def maintain() -> None:
        runner = Maintainer(settings, spark, merger.config)
        try:
            while not stop.is_set() or not reports:
                reports.append(runner.run([shop.table]))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=maintain)]
    for thread in threads:
        thread.start()
    try:
        merged = merger.merge(MergeRequest(shop.table, DAY2))
        again = merger.merge(MergeRequest(shop.table, DAY2))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=SPARK_TIMEOUT_S)
    assert not failures, failures
    assert merged.rows == again.rows == len(shop.mysql_rows())
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    # Every appended row is there once, whatever the compactions did meanwhile.
    assert sum(raw_days(spark, shop).values()) == appended_before + sum(appended)
    # A step may lose a race (reported, done by the next run); nothing else failed.
    errors = [step.error or "" for report in reports for step in report.failed]
    conflicts = ("ValidationException", "CommitFailedException", "onflict")
    assert all(any(marker in error for marker in conflicts) for error in errors), errors


def test_progress_maintenance_is_safe_while_writers_commit_progress(spark: Any, shop: Shop) -> None:
    settings = shop.merge_settings(check=False, buckets=2)
    # Every snapshot but the newest expires at once: the runs race the writers' commits.
    settings = with_maintenance(settings, expire_after_hours=0, retain_snapshots=1)
    lake = shop.lake_catalog(spark)
    ensure_progress_table(lake, shop.raw_database)
    stop = threading.Event()
    # Set once each writer committed a few batches: snapshots older than the first run's
    # expiry, whose replaced files it must delete (without it, a fast run could start and end
    # before any commit but the first).
    several_committed = threading.Event()
    committed: dict[str, int] = {}
    failures: list[BaseException] = []

    def progress_writers() -> None:
        # Two writers' progress commits, one per batch, as the stream writers make them.
        own = shop.lake_catalog(spark)
        batch = 0
        try:
            while not stop.is_set():
                for name in ("writer-a", "writer-b"):
                    progress = WriterProgress(name, batch, batch, {"readyDays": [str(DAY2)]})
                    offsets = KafkaOffsets({(f"cdc.{name}", 0): batch})
                    commit_writer_progress(own, shop.raw_database, progress, offsets)
                    committed[name] = batch
                batch += 1
                if batch == 3:
                    several_committed.set()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failures.append(exc)
            several_committed.set()

    thread = threading.Thread(target=progress_writers)
    thread.start()
    assert several_committed.wait(SPARK_TIMEOUT_S)
    progress = f"{settings.lake.catalog}.{shop.raw_database}.{PROGRESS_TABLE}"
    runner = Maintainer(settings, spark, Merger(settings, spark).config)
    try:
        reports = [runner.run([shop.table]) for _ in range(2)]
    finally:
        stop.set()
        thread.join(timeout=SPARK_TIMEOUT_S)
    assert not failures, failures
    steps = [s for r in reports for s in r.steps if s.table == progress]
    assert [s.action for s in steps] == ["expire snapshots", "remove orphans"] * 2, steps
    errors = [s.error for s in steps if s.error is not None]
    # An expiry that lost its race with a commit is reported (the next run expires).
    assert all("CommitFailedException" in e for e in errors), errors
    # Files of replaced rows were deleted while the writers committed.
    assert any(s.error is None and not s.detail.startswith("0 ") for s in steps), steps
    # Each writer's last commit is its row, whatever was expired and deleted meanwhile.
    rows = read_all_writer_progress(lake, shop.raw_database)
    assert {name: rows[name].batch_id for name in committed} == committed
    assert {rows[name].ready_days[0] for name in committed} == {str(DAY2)}


def test_a_crashed_writers_raw_commit_survives_a_commit_landing_while_maintain_runs(
    spark: Any, shop: Shop
) -> None:
    """Expiry counts the raw snapshots it keeps from the head it read; another writer's commit
    landing before Iceberg's expiry runs must not push the crashed writer's commit out."""
    settings = shop.merge_settings(check=False, buckets=2)
    settings = with_maintenance(settings, expire_after_hours=0, retain_snapshots=1)
    merger = Merger(settings, spark)
    lake = merger.raw_lake
    ensure_raw_table(lake, shop.raw_database)
    one_row = spark.createDataFrame([(1, str(OLD_DAY))], "binlogOffset BIGINT, dt STRING")
    crashed = KafkaOffsets({("crashed-topic", 0): 42})
    lake.append(
        as_raw_rows(one_row, "crashed_writer_rows"),
        shop.raw_database,
        RAW_TABLE,
        crashed,
        {WRITER_PROPERTY: "crashed-writer"},
    )
    runner = Maintainer(settings, spark, merger.config)
    expire = runner._expire

    def another_commit_first(report: Any, database: str, table: str, **kwargs: Any) -> None:
        if table == RAW_TABLE:
            lake.append(
                as_raw_rows(one_row, "another_writer_rows"),
                shop.raw_database,
                RAW_TABLE,
                KafkaOffsets({("another-topic", 0): 7}),
                {WRITER_PROPERTY: "another-writer"},
            )
        expire(report, database, table, **kwargs)

    runner._expire = another_commit_first  # type: ignore[method-assign]
    try:
        report = runner.run([shop.table])
    finally:
        runner.close()
        merger.close()
    changes = f"{settings.lake.catalog}.{shop.raw_database}.{RAW_TABLE}"
    assert [s.error for s in report.steps if s.table == changes] == [None, None], report.steps
    assert lake.committed_offsets(shop.raw_database, RAW_TABLE, writer="crashed-writer") == crashed


def same_bucket_table(table: str) -> str:
    """A logical table name whose raw rows share ``table``'s bucket (``RAW_TABLE_BUCKETS``),
    by Iceberg's bucket function (pyiceberg's is the same murmur3 as the Java one; the test
    checks the files it got anyway)."""
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import StringType

    bucket = BucketTransform(RAW_TABLE_BUCKETS).transform(StringType())
    return next(
        peer for peer in (f"{table}_peer{i}" for i in range(1000)) if bucket(peer) == bucket(table)
    )


@pytest.mark.parametrize("peer_keeps_the_day", [True, False], ids=["peer-keeps", "all-expired"])
def test_a_tables_expiry_in_a_bucket_shared_with_another_table(
    spark: Any, shop: Shop, peer_keeps_the_day: bool
) -> None:
    """A raw file holds the rows of every table of its bucket and day. When another table of
    the bucket keeps the day (a longer retention), expiring one table deletes its rows only:
    the other's rows stay, each once (the file rewritten). When every table of the bucket is
    past its retention, the day's files of the bucket are dropped whole, in the metadata (no
    file rewritten), and a later day stays."""
    settings = shop.merge_settings(
        [shop.mirror(retention={"raw_days": 10})], check=False, buckets=2
    )
    settings = with_maintenance(settings, raw_days=1000 if peer_keeps_the_day else 10)
    merger = Merger(settings, spark)
    lake = merger.raw_lake
    ensure_raw_table(lake, shop.raw_database)
    name = lake.name(shop.raw_database, RAW_TABLE)
    peer = same_bucket_table(shop.table)
    old = spark.range(40).select(F.col("id").alias("binlogOffset"), F.lit(str(OLD_DAY)).alias("dt"))
    # One file for both tables' old day (one task, one partition).
    as_raw_rows(old, shop.table).unionByName(as_raw_rows(old, peer)).coalesce(1).writeTo(
        name
    ).append()
    recent = spark.range(5).select(F.col("id").alias("binlogOffset"), F.lit(str(DAY2)).alias("dt"))
    as_raw_rows(recent, shop.table).writeTo(name).append()
    bounds = "readable_metrics.logicalTable"
    shared = spark.sql(
        f"SELECT count(*) AS n FROM {name}.files WHERE partition.dt = '{OLD_DAY}' "
        f"AND {bounds}.lower_bound <> {bounds}.upper_bound"
    ).first()["n"]
    assert shared == 1, "the two tables' old rows are not in one file: the test proves nothing"

    expired = [
        s for s in maintain_once(settings, spark, merger, shop.table) if s.action == "expire days"
    ]
    whole = "" if peer_keeps_the_day else " (1 days of its bucket dropped whole)"
    assert [(s.error, s.detail) for s in expired] == [
        (
            None,
            f"40 rows of days before {datetime.now(UTC).date() - timedelta(days=10)} "
            f"deleted{whole}",
        )
    ], expired

    def offsets(table: str) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for row in raw_rows(lake, shop.raw_database, table, "TRUE").collect():
            found.setdefault(row["dt"], []).append(row["binlogOffset"])
        return {day: sorted(values) for day, values in found.items()}

    assert offsets(shop.table) == {str(DAY2): list(range(5))}
    assert offsets(peer) == ({str(OLD_DAY): list(range(40))} if peer_keeps_the_day else {})
    # The expiry's commit (the newest before compaction's, if any): a rewrite of the shared
    # file, or the file dropped with no file added.
    commits = spark.sql(
        f"SELECT operation, summary FROM {name}.snapshots ORDER BY committed_at"
    ).collect()
    expiry = next(c for c in reversed(commits) if c["operation"] in ("overwrite", "delete"))
    if peer_keeps_the_day:
        assert expiry["operation"] == "overwrite", commits
        assert expiry["summary"]["added-records"] == "40", expiry
    else:
        assert expiry["operation"] == "delete", commits
        assert "added-data-files" not in expiry["summary"], expiry
        assert expiry["summary"]["deleted-records"] == "80", expiry


def test_rows_rewritten_by_compaction_and_a_bucket_peers_expiry_are_not_read_as_late(
    spark: Any, shop: Shop
) -> None:
    """Compaction (a replace commit) and another table's expiry (an overwrite commit) both
    write the shop's merged rows of a day again, in new files of the raw table: the next
    day's merge must not take them for rows late since the day's merge (its incremental read
    takes appends only), so its changes start at its own midnight, and it equals MySQL."""
    settings = shop.merge_settings(
        [shop.mirror(retention={"raw_days": 1000})], check=False, buckets=2
    )
    settings = with_maintenance(settings, raw_days=3)
    merger = Merger(settings, spark)
    lake = merger.raw_lake
    name = lake.name(shop.raw_database, RAW_TABLE)
    placed = merged_first_day(spark, shop, merger, 20)
    # A table of the shop's table's bucket, with a shorter retention (the default: 3 days).
    peer = same_bucket_table(shop.table)
    peer_rows = spark.range(7).select(
        F.col("id").alias("binlogOffset"), F.lit(str(DAY1)).alias("dt")
    )
    as_raw_rows(peer_rows, peer).writeTo(name).append()
    spark.sql(
        f"CALL {settings.lake.catalog}.system.rewrite_data_files(table => "
        f"'{shop.raw_database}.{RAW_TABLE}', where => \"dt = '{DAY1}'\", "
        "options => map('min-input-files', '2', 'rewrite-all', 'true'))"
    ).collect()
    bounds = "readable_metrics.logicalTable"
    shared = spark.sql(
        f"SELECT count(*) AS n FROM {name}.files WHERE partition.dt = '{DAY1}' "
        f"AND {bounds}.lower_bound <> {bounds}.upper_bound"
    ).first()["n"]
    assert shared >= 1, "the shop's and the peer's rows share no file: the test proves nothing"
    mine = raw_days(spark, shop)[str(DAY1)]

    runner = Maintainer(settings, spark, merger.config)
    try:
        detail = runner._expire_raw_days(
            shop.raw_database,
            peer,
            datetime.now(UTC).date() - timedelta(days=3),
            raw_table_condition(peer),
        )
    finally:
        runner.close()
    assert detail.startswith("7 rows of days before") and "whole" not in detail, detail
    newest = spark.sql(
        f"SELECT operation, summary FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()
    assert newest["operation"] == "overwrite", newest
    assert int(newest["summary"]["added-records"]) >= mine, newest

    starts: list[int] = []
    day_changes = merger._day_changes

    def recorded(*args: Any, **kwargs: Any) -> Any:
        found = day_changes(*args, **kwargs)
        starts.append(found[0])
        return found

    merger._day_changes = recorded  # type: ignore[method-assign]
    shop.start_day(DAY2)
    random_day(shop, DAY2, placed, 20)
    shop.write_raw(spark, DAY2)
    try:
        merger.merge(MergeRequest(shop.table, DAY2))
        assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    finally:
        merger.close()
    midnight = int(datetime(DAY2.year, DAY2.month, DAY2.day, tzinfo=UTC).timestamp() * 1000)
    assert starts == [midnight], starts


def test_raw_compaction_sorts_a_bucket_day_so_each_tables_read_skips_the_others_files(
    spark: Any, shop: Shop
) -> None:
    """A day of a bucket whose small files each hold two tables' rows (as the writer's
    micro-batches do) is compacted, sorted by table and offset, into files of the target size
    that each hold a run of tables: the files whose ``logicalTable`` bounds may hold one table
    are fewer than the day's, so a read of that table skips the others' files. Bin-packing
    would leave both tables in every file. Every row is there once after."""
    settings = shop.merge_settings(check=False, buckets=2)
    merger = Merger(settings, spark)
    lake = merger.raw_lake
    ensure_raw_table(lake, shop.raw_database)
    name = lake.name(shop.raw_database, RAW_TABLE)
    peer = same_bucket_table(shop.table)
    for part in range(6):
        # A writer's batch: both tables' rows in one file, offsets interleaved between batches.
        rows = spark.range(part, 6 * 400, 6).select(
            F.col("id").alias("binlogOffset"),
            F.sha2(F.col("id").cast("string"), 512).alias("content"),
            F.lit(str(DAY2)).alias("dt"),
        )
        as_raw_rows(rows, shop.table).unionByName(as_raw_rows(rows, peer)).coalesce(1).writeTo(
            name
        ).append()
    bounds = "readable_metrics.logicalTable"
    files = (
        f"SELECT {bounds}.lower_bound AS low, {bounds}.upper_bound AS high, file_size_in_bytes "
        f"FROM {name}.files WHERE partition.dt = '{DAY2}'"
    )
    before = spark.sql(files).collect()
    assert len(before) == 6 and all(f["low"] != f["high"] for f in before), before
    # A target a quarter of the day: about four files out of the sort.
    quarter_mb = sum(f["file_size_in_bytes"] for f in before) / 4 / (1024 * 1024)
    settings = with_maintenance(settings, target_file_mb=quarter_mb)
    compacted = [
        s for s in maintain_once(settings, spark, merger, shop.table) if s.action == "compact"
    ]
    assert [s.error for s in compacted] == [None], compacted
    after = spark.sql(files).collect()
    assert len(after) >= 3, after

    def may_hold(table: str) -> int:
        return sum(1 for f in after if f["low"] <= table <= f["high"])

    assert may_hold(shop.table) < len(after) and may_hold(peer) < len(after), after
    for table in (shop.table, peer):
        offsets = [
            r["binlogOffset"] for r in raw_rows(lake, shop.raw_database, table, "TRUE").collect()
        ]
        assert sorted(offsets) == list(range(6 * 400)), table
