"""The stream writer's ready days read without Spark (``cdc_platform.lake.ready_days_from_metastore``,
what merge's readiness API gives the scheduler): the summary of the progress table's current
snapshot, as the Hive metastore's PostgreSQL database keeps it among the table's parameters.
The progress table on local disk and S3 in every run, on HDFS as well with CDC_TEST_HDFS=1."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cdc_platform.config import Settings
from cdc_platform.iceberg import OFFSETS_PROPERTY, WRITER_PROPERTY, KafkaOffsets, LakeCatalog
from cdc_platform.lake import (
    METADATA_CLEANUP_PROPERTIES,
    PROGRESS_COLUMNS,
    PROGRESS_TABLE,
    PROGRESS_TABLE_PROPERTIES,
    RAW_TABLE,
    RAW_TABLE_COLUMNS,
    RAW_TABLE_PARTITIONING,
    READY_DAYS_PROPERTY,
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
    ensure_raw_table,
    progress_commit,
    read_all_writer_progress,
    ready_days_from_metastore,
)
from tests.integration.lake.conftest import TESTED_STORAGES, LakeSpark


@pytest.fixture
def progress_db(lake_spark: LakeSpark, kind: str) -> Iterator[tuple[Settings, LakeCatalog, str]]:
    """The settings of storage ``kind`` (the test's parameter), their catalog and a database
    of its own, dropped with every file afterwards."""
    settings = lake_spark.settings[kind]
    catalog = LakeCatalog.open(lake_spark.spark, settings)
    ns = f"lk_{uuid.uuid4().hex[:10]}"
    yield settings, catalog, ns
    catalog.drop_namespace(ns)


@pytest.mark.parametrize("kind", TESTED_STORAGES)
def test_the_writers_ready_days_are_read_from_the_metastore(
    lake_spark: LakeSpark, progress_db: tuple[Settings, LakeCatalog, str]
) -> None:
    settings, catalog, ns = progress_db
    # Before the database, then the table, exists: no commit yet.
    assert ready_days_from_metastore(settings, ns, "east") == []
    ensure_progress_table(catalog, ns)
    assert ready_days_from_metastore(settings, ns, "east") == []

    state = {"readyDays": ["2026-11-25", "2026-11-24"]}
    offsets = KafkaOffsets({("cdc.east.shop", 0): 7})
    commit_writer_progress(catalog, ns, WriterProgress("east", 1, 1_000, state), offsets)
    assert ready_days_from_metastore(settings, ns, "east") == ["2026-11-24", "2026-11-25"]
    # The metastore keeps names in lower case; a name in another case finds the same table.
    assert ready_days_from_metastore(settings, ns.upper(), "east") == [
        "2026-11-24",
        "2026-11-25",
    ]

    # The current snapshot is another writer's: only Spark can tell this writer's days.
    commit_writer_progress(catalog, ns, WriterProgress("west", 1, 2_000, {}), offsets)
    assert ready_days_from_metastore(settings, ns, "east") is None
    assert ready_days_from_metastore(settings, ns, "west") == []


# The commit protocol is the metastore's (a compare-and-swap of the metadata location), the same
# on every storage.
@pytest.mark.parametrize("kind", ["local"])
def test_two_writers_committing_progress_at_once_keep_both_rows(
    lake_spark: LakeSpark, progress_db: tuple[Settings, LakeCatalog, str]
) -> None:
    settings, catalog, ns = progress_db
    batches = 6
    ensure_progress_table(catalog, ns)

    def commit_batches(writer: str) -> None:
        # A catalog of its own: its own table object, as another writer process has.
        lake = LakeCatalog.open(lake_spark.spark, settings, check=False)
        for batch in range(batches):
            state = {"readyDays": [f"2026-11-{batch + 1:02d}"]}
            offsets = KafkaOffsets({(f"cdc.{writer}.shop", 0): batch + 1})
            progress = WriterProgress(writer, batch, 1_000 + batch, state)
            commit_writer_progress(lake, ns, progress, offsets, {"cdc-mirror.batch-id": "b"})

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(commit_batches, ["east", "west"]))

    # A commit that lost the race to the other writer's was retried from a fresh read:
    # each writer's last row is there, and only that one (its partition replaced).
    progress = read_all_writer_progress(catalog, ns)
    assert {w: (p.batch_id, p.ready_days) for w, p in progress.items()} == {
        "east": (batches - 1, [f"2026-11-{batches:02d}"]),
        "west": (batches - 1, [f"2026-11-{batches:02d}"]),
    }
    assert lake_spark.spark.table(catalog.name(ns, PROGRESS_TABLE)).count() == 2
    table = catalog._table(ns, PROGRESS_TABLE)
    snapshots = list(table.snapshots())
    assert len(snapshots) == 2 * batches
    # Each commit's summary: what Spark's overwritePartitions of the row recorded.
    summary = {str(k): str(v) for k, v in dict(table.currentSnapshot().summary()).items()}
    writer = summary[WRITER_PROPERTY]
    assert summary[OFFSETS_PROPERTY] == f'{{"cdc.{writer}.shop":{{"0":{batches}}}}}'
    assert summary[READY_DAYS_PROPERTY] == f"2026-11-{batches:02d}"
    assert summary["cdc-mirror.batch-id"] == "b"
    assert summary["spark.app.id"] == lake_spark.spark.sparkContext.applicationId
    assert summary["replace-partitions"] == "true"
    assert str(table.currentSnapshot().operation()) == "overwrite"


def _data_files(lake_spark: LakeSpark, catalog: LakeCatalog, ns: str) -> list[str]:
    """The files under the progress table's data folder, through Hadoop's FileSystem."""
    jvm = lake_spark.spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(catalog.location.child(f"{ns}.db", PROGRESS_TABLE, "data"))
    fs = path.getFileSystem(lake_spark.spark._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return []
    found, files = [], fs.listFiles(path, True)
    while files.hasNext():
        name = str(files.next().getPath())
        if not name.endswith(".crc"):
            found.append(name)
    return sorted(found)


@pytest.mark.parametrize("kind", TESTED_STORAGES)
def test_a_failed_progress_commit_deletes_its_file(
    lake_spark: LakeSpark, progress_db: tuple[Settings, LakeCatalog, str]
) -> None:
    _, catalog, ns = progress_db
    offsets = KafkaOffsets({("cdc.east.shop", 0): 1})
    ensure_progress_table(catalog, ns)
    commit_writer_progress(catalog, ns, WriterProgress("east", 1, 1_000, {}), offsets)
    [committed] = _data_files(lake_spark, catalog, ns)
    # The table dropped under the writer (its files stay): the commit of the next row,
    # written first, fails on the table's refresh.
    lake_spark.spark.sql(f"DROP TABLE {catalog.name(ns, PROGRESS_TABLE)}")
    with pytest.raises(Exception, match=r"NoSuchTable|[Nn]o such table|not exist"):
        commit_writer_progress(catalog, ns, WriterProgress("east", 2, 2_000, {}), offsets)
    assert _data_files(lake_spark, catalog, ns) == [committed]


@pytest.mark.parametrize("kind", ["local"])
@pytest.mark.parametrize(
    ("failing", "error"),
    [
        ("replacePartitionWithUnknownOutcome", "CommitStateUnknownException"),
        # Hive's commit rethrows the swap's error when its status check missed the new
        # metadata: not a CleanableFailure, so the commit may have happened.
        ("replacePartitionFailingAfterSwap", "the swap's answer was an error"),
    ],
)
def test_a_progress_commit_of_unknown_outcome_keeps_its_file(
    lake_spark: LakeSpark, progress_db: tuple[Settings, LakeCatalog, str], failing: str, error: str
) -> None:
    _, catalog, ns = progress_db
    ensure_progress_table(catalog, ns)
    row, summary = progress_commit(WriterProgress("east", 1, 1_000, {"readyDays": ["2026-11-01"]}))
    values, java_summary = catalog.java_row_commit(row, KafkaOffsets({("cdc.east", 0): 1}), summary)
    race = catalog._jar_class("io.cdcmirror.spark.ProgressCommitRace")
    with pytest.raises(Exception, match=error):
        getattr(race, failing)(catalog._cached_table(ns, PROGRESS_TABLE), values, java_summary)
    # The swap was made: the file is the writer's row, so it was kept (deleted, the table
    # would name a missing file and every read of it would fail).
    [written] = _data_files(lake_spark, catalog, ns)
    assert lake_spark.spark.table(catalog.name(ns, PROGRESS_TABLE)).count() == 1
    assert read_all_writer_progress(catalog, ns)["east"].ready_days == ["2026-11-01"]
    assert written.endswith(".parquet")


@pytest.mark.parametrize("kind", ["local"])
def test_a_lost_progress_race_is_retried_and_keeps_both_rows(
    lake_spark: LakeSpark, progress_db: tuple[Settings, LakeCatalog, str]
) -> None:
    settings, catalog, ns = progress_db
    # Another writer process: a catalog and a table object of its own.
    rival = LakeCatalog.open(lake_spark.spark, settings, check=False)

    def commit(writer: str, batch: int) -> tuple[Any, Any]:
        progress = WriterProgress(
            writer, batch, 1_000 + batch, {"readyDays": [f"2026-11-0{batch}"]}
        )
        row, summary = progress_commit(progress)
        return catalog.java_row_commit(row, KafkaOffsets({(f"cdc.{writer}", 0): batch}), summary)

    def column_days() -> dict[str, list[str]]:
        rows = lake_spark.spark.table(catalog.name(ns, PROGRESS_TABLE)).collect()
        return {row["writer"]: list(row["ready_days"]) for row in rows}

    ensure_progress_table(catalog, ns)
    for writer in ("east", "west"):
        row, summary = progress_commit(WriterProgress(writer, 1, 1_001, {}))
        catalog.replace_row(ns, PROGRESS_TABLE, row, KafkaOffsets({}), summary)
    assert column_days() == {"east": [], "west": []}
    race = catalog._jar_class("io.cdcmirror.spark.ProgressCommitRace")
    mine, rivals = commit("east", 2), commit("west", 2)
    attempts = race.replacePartitionLosingTo(
        catalog._cached_table(ns, PROGRESS_TABLE),
        *mine,
        rival._table(ns, PROGRESS_TABLE),
        *rivals,
    )
    # The first swap failed on west's commit; the retry, from a fresh read, replaced
    # east's partition only: both new rows, neither old one back.
    assert attempts == 2
    progress = read_all_writer_progress(catalog, ns)
    assert {w: (p.batch_id, p.ready_days) for w, p in progress.items()} == {
        "east": (2, ["2026-11-02"]),
        "west": (2, ["2026-11-02"]),
    }
    # The ready days column, passed to the jar as one text.
    assert column_days() == {"east": ["2026-11-02"], "west": ["2026-11-02"]}
    table = catalog._table(ns, PROGRESS_TABLE)
    current = table.currentSnapshot()
    assert str(current.summary().get(WRITER_PROPERTY)) == "east"
    parent = table.snapshot(current.parentId())
    assert str(parent.summary().get(WRITER_PROPERTY)) == "west"
    assert len(list(table.snapshots())) == 4


# The old files are deleted through the storage's own FileIO (Hadoop's on HDFS, S3FileIO).
@pytest.mark.parametrize("kind", TESTED_STORAGES)
def test_the_progress_tables_old_metadata_files_are_deleted(
    lake_spark: LakeSpark, progress_db: tuple[Settings, LakeCatalog, str]
) -> None:
    _, catalog, ns = progress_db
    # A table made as an earlier version made it (no cleanup properties): the writer's
    # start (ensure_progress_table) gives it them.
    catalog.create_namespace(ns)
    catalog.create_table(ns, PROGRESS_TABLE, PROGRESS_COLUMNS, partitioned_by=("writer",))
    ensure_progress_table(catalog, ns)
    properties = dict(catalog._table(ns, PROGRESS_TABLE).properties())
    assert {k: properties.get(k) for k in PROGRESS_TABLE_PROPERTIES} == (PROGRESS_TABLE_PROPERTIES)
    kept = int(PROGRESS_TABLE_PROPERTIES["write.metadata.previous-versions-max"])
    offsets = KafkaOffsets({("cdc.east.shop", 0): 1})
    for batch in range(kept + 5):
        commit_writer_progress(catalog, ns, WriterProgress("east", batch, batch, {}), offsets)
    jvm = lake_spark.spark.sparkContext._jvm
    metadata = jvm.org.apache.hadoop.fs.Path(
        catalog.location.child(f"{ns}.db", PROGRESS_TABLE, "metadata")
    )
    fs = metadata.getFileSystem(lake_spark.spark._jsc.hadoopConfiguration())
    names = [str(s.getPath().getName()) for s in fs.listStatus(metadata)]
    # The current metadata file and the newest `kept` before it.
    assert len([n for n in names if n.endswith(".metadata.json")]) == kept + 1


@pytest.mark.parametrize("kind", ["local"])
def test_the_raw_table_gets_the_metadata_cleanup_properties(
    progress_db: tuple[Settings, LakeCatalog, str],
) -> None:
    """The raw table is committed to every batch too: made with them, and one an earlier
    version made without them gets them at the writer's start (ensure_raw_table)."""
    _, catalog, ns = progress_db
    catalog.create_namespace(ns)
    catalog.create_table(ns, RAW_TABLE, RAW_TABLE_COLUMNS, partitioned_by=RAW_TABLE_PARTITIONING)

    def cleanup() -> dict[str, str | None]:
        held = dict(catalog._table(ns, RAW_TABLE).properties())
        return {k: held.get(k) for k in METADATA_CLEANUP_PROPERTIES}

    assert cleanup() != METADATA_CLEANUP_PROPERTIES
    ensure_raw_table(catalog, ns)
    assert cleanup() == METADATA_CLEANUP_PROPERTIES
