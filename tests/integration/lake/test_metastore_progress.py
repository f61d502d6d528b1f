"""The stream writer's ready days read without Spark (``cdc_platform.lake.ready_days_from_metastore``,
what merge's readiness API gives the scheduler): the summary of the progress table's current
snapshot, as the Hive metastore's PostgreSQL database keeps it among the table's parameters.
The progress table on local disk and S3 in every run, on HDFS as well with CDC_TEST_HDFS=1."""

from __future__ import annotations

import uuid

import pytest

from cdc_platform.iceberg import KafkaOffsets, LakeCatalog
from cdc_platform.lake import (
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
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
