"""The stream writer's ready days read without Spark (``cdc_platform.lake.ready_days_from_metastore``,
what merge's readiness API gives the scheduler): the summary of the progress table's current
snapshot, as the Hive metastore's PostgreSQL database keeps it among the table's parameters.
The progress table on local disk and S3 in every run, on HDFS as well with CDC_TEST_HDFS=1."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from cdc_platform.iceberg import OFFSETS_PROPERTY, WRITER_PROPERTY, KafkaOffsets, LakeCatalog
from cdc_platform.lake import (
    PROGRESS_TABLE,
    READY_DAYS_PROPERTY,
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
    read_all_writer_progress,
    ready_days_from_metastore,
)
from tests.integration.lake.conftest import TESTED_STORAGES, LakeSpark


@pytest.mark.parametrize("kind", TESTED_STORAGES)
def test_the_writers_ready_days_are_read_from_the_metastore(
    lake_spark: LakeSpark, kind: str
) -> None:
    settings = lake_spark.settings[kind]
    catalog = LakeCatalog.open(lake_spark.spark, settings)
    ns = f"lk_{uuid.uuid4().hex[:10]}"
    try:
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
    finally:
        catalog.drop_namespace(ns)


# The commit protocol is the metastore's (a compare-and-swap of the metadata location), the same
# on every storage.
@pytest.mark.parametrize("kind", ["local"])
def test_two_writers_committing_progress_at_once_keep_both_rows(
    lake_spark: LakeSpark, kind: str
) -> None:
    settings = lake_spark.settings[kind]
    catalog = LakeCatalog.open(lake_spark.spark, settings)
    ns = f"lk_{uuid.uuid4().hex[:10]}"
    batches = 6
    try:
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
    finally:
        catalog.drop_namespace(ns)
