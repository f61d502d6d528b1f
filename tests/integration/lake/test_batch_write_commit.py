"""The stream writer's table commit (``IcebergBatchWrite.commit``) starts from the metadata
its process last saw instead of asking the metastore first; a commit another process made
meanwhile (maintenance, another writer) must still be kept: the metastore refuses the stale
swap and Iceberg retries from a fresh read, so both commits are in the table's lineage."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.lake.conftest import Lake

COLUMNS = (("id", "BIGINT"), ("dt", "STRING"))


def _append(jvm: Any, table: Any, name: str, marker: str) -> None:
    """Append one (made-up) data file with ``marker`` in the snapshot summary."""
    data_file = (
        jvm.org.apache.iceberg.DataFiles.builder(table.spec())
        .withPath(f"{table.location()}/data/dt=2026-11-26/{name}.parquet")
        .withFileSizeInBytes(1000)
        .withRecordCount(10)
        .withPartitionPath("dt=2026-11-26")
        .withFormat("PARQUET")
        .build()
    )
    append = table.newAppend()
    append.appendFile(data_file)
    append.set("test.marker", marker)
    append.commit()


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_a_commit_from_stale_metadata_lands_on_top_of_the_one_made_meanwhile(lake: Lake) -> None:
    jvm: Any = lake.catalog.spark.sparkContext._jvm
    lake.catalog.create_table(lake.namespace, "t", COLUMNS, partitioned_by=("dt",))
    writers = lake.catalog._table(lake.namespace, "t")
    _append(jvm, writers, "first", "writer-1")
    # Another process commits; the writer's table object does not know.
    _append(jvm, lake.catalog._table(lake.namespace, "t"), "other", "other")
    batch_write = jvm.io.cdcmirror.spark.IcebergBatchWrite
    _append(jvm, batch_write.startingFromLastSeen(writers), "second", "writer-2")

    fresh = lake.catalog._table(lake.namespace, "t")
    markers = []
    snapshot = fresh.currentSnapshot()
    while snapshot is not None:
        markers.append(str(snapshot.summary().get("test.marker")))
        parent = snapshot.parentId()
        snapshot = fresh.snapshot(parent) if parent is not None else None
    assert markers[:3] == ["writer-2", "other", "writer-1"]
    assert int(str(fresh.currentSnapshot().summary().get("total-data-files"))) == 3
