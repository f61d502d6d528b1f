"""The data files of the stream writer's one-job write (``LakeCatalog.write_files``, the writer
jar's ``IcebergBatchWrite``): a batch's file holds one table's rows of one batch, whose values
are mostly distinct, so it is written without Parquet dictionaries (hashing every value into
one cost a third of a batch's CPU) unless the table asks for them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from cdc_platform.iceberg import KafkaOffsets
from tests.integration.lake.conftest import Lake

COLUMNS = (("id", "BIGINT"), ("note", "STRING"), ("dt", "STRING"))
DAYS = ("2026-11-25", "2026-11-26", "2026-11-27")
ROWS = 3000


def _days_frame(spark: Any, table: str, rows: int, counted: bool = False) -> Any:
    """The writer jar's input of ``rows`` rows of ``table`` over ``DAYS`` in two tasks, each
    row's day differing from the previous row's; ``counted``: with an event time and a source
    table per day (the counts then report them), else neither."""
    day = F.element_at(
        F.array(*[F.lit(d) for d in DAYS]), (F.col("id") % len(DAYS) + 1).cast("int")
    )
    return (
        spark.range(rows, numPartitions=2)
        .withColumn("day", day)
        .select(
            F.lit(table).alias("table"),
            F.lit(True).alias("write"),
            F.col("day"),
            F.lit("topic").alias("topic"),
            F.lit(0).cast("int").alias("partition"),
            F.col("id").alias("offset"),
            (F.col("id") if counted else F.lit(None).cast("long")).alias("eventMs"),
            (F.lit("schema") if counted else F.lit(None).cast("string")).alias("sourceSchema"),
            (
                F.concat(F.lit("source_"), F.col("day")) if counted else F.lit(None).cast("string")
            ).alias("sourceTable"),
            F.struct(
                F.col("id").alias("id"),
                # Few distinct values: a dictionary would be worth it here.
                F.lit("the same note").alias("note"),
                F.col("day").alias("dt"),
            ).alias("row"),
        )
    )


def _write_batch(lake: Lake, table: str) -> None:
    """``ROWS`` rows over ``DAYS`` (a file per day in each of two tasks), written and
    committed as the stream writer does."""
    frame = _days_frame(lake.catalog.spark, table, ROWS)
    staged = lake.catalog.write_files(frame, lake.namespace, [table], {table: 9})
    staged.commit(table, KafkaOffsets({("topic", 0): ROWS}))


def _data_files(lake: Lake, table: str) -> list[str]:
    rows = lake.catalog.spark.sql(
        f"SELECT file_path FROM {lake.catalog.name(lake.namespace, table)}.files"
    ).collect()
    return [str(row.file_path).removeprefix("file:") for row in rows]


def _columns_whose_chunks(path: str, has: Callable[[Any], bool]) -> set[str]:
    """The columns of a Parquet file with a column chunk for which ``has`` is true."""
    metadata: Any = pq.ParquetFile(Path(path)).metadata
    return {
        str(metadata.row_group(group).column(column).path_in_schema)
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
        if has(metadata.row_group(group).column(column))
    }


def _dictionary_columns(path: str) -> set[str]:
    return _columns_whose_chunks(path, lambda chunk: chunk.has_dictionary_page)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_batch_files_have_no_dictionaries_and_hold_every_row(lake: Lake) -> None:
    lake.catalog.create_table(lake.namespace, "t", COLUMNS, partitioned_by=("dt",))
    _write_batch(lake, "t")

    files = _data_files(lake, "t")
    assert len(files) == 2 * len(DAYS)  # a file per day in each task, all committed
    assert {path: _dictionary_columns(path) for path in files} == {path: set() for path in files}
    name = lake.catalog.name(lake.namespace, "t")
    counted = lake.catalog.spark.sql(f"SELECT count(DISTINCT id), count(*) FROM {name}").first()
    assert tuple(counted) == (ROWS, ROWS)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_a_table_that_asks_for_dictionaries_gets_them(lake: Lake) -> None:
    lake.catalog.create_table(
        lake.namespace,
        "t",
        COLUMNS,
        partitioned_by=("dt",),
        properties={"parquet.enable.dictionary": "true"},
    )
    _write_batch(lake, "t")

    files = _data_files(lake, "t")
    assert files
    assert all("note" in _dictionary_columns(path) for path in files)


def _columns_with_bounds(path: str) -> set[str]:
    """The columns of a Parquet file whose chunks carry min/max statistics."""
    return _columns_whose_chunks(
        path, lambda chunk: chunk.statistics is not None and chunk.statistics.has_min_max
    )


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_columns_without_iceberg_metrics_get_no_parquet_statistics(lake: Lake) -> None:
    # Nothing reads bounds Iceberg does not keep; computing them compared every value.
    lake.catalog.create_table(
        lake.namespace,
        "t",
        COLUMNS,
        partitioned_by=("dt",),
        properties={"write.metadata.metrics.column.note": "none"},
    )
    _write_batch(lake, "t")

    files = _data_files(lake, "t")
    assert files
    assert {path: _columns_with_bounds(path) for path in files} == {
        path: {"id", "dt"} for path in files
    }
    # Iceberg's own metrics of the other columns are kept (merge plans reads with them).
    bounds = lake.catalog.spark.sql(
        f"SELECT readable_metrics.id.lower_bound AS low, readable_metrics.note.lower_bound AS "
        f"note FROM {lake.catalog.name(lake.namespace, 't')}.files"
    ).collect()
    assert all(row.low is not None and row.note is None for row in bounds)


def _day_of_offset(offset: int) -> str:
    return DAYS[offset % len(DAYS)]


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_interleaved_days_land_in_their_own_files_and_counts_across_rolls(lake: Lake) -> None:
    # Each row's day differs from the previous row's, and a file rolls every 1,000 rows of a
    # day (a 1-byte target): the writer's per-row shortcuts (the last row's file, the last
    # row's group and source, kept as copies of Spark's reused row strings) must never put a
    # row in another day's file, write to a rolled file or count a row in another group.
    rows = 12_000
    lake.catalog.create_table(
        lake.namespace,
        "t",
        COLUMNS,
        partitioned_by=("dt",),
        properties={"write.target-file-size-bytes": "1"},
    )
    frame = _days_frame(lake.catalog.spark, "t", rows, counted=True)
    staged = lake.catalog.write_files(frame, lake.namespace, ["t"], {"t": 9})
    counts = staged.counts()
    staged.commit("t", KafkaOffsets({("topic", 0): rows}))

    per_day = rows // len(DAYS)
    expected_groups = sorted(
        ["t", d, "topic", 0, per_day, i, rows - len(DAYS) + i, rows - len(DAYS) + i]
        for i, d in enumerate(DAYS)
    )
    assert sorted(counts["groups"]) == expected_groups
    assert sorted(counts["sources"]) == sorted(
        ["t", "topic", "schema", f"source_{d}"] for d in DAYS
    )
    files = lake.catalog.spark.sql(
        f"SELECT file_path, partition.dt AS dt, record_count FROM "
        f"{lake.catalog.name(lake.namespace, 't')}.files"
    ).collect()
    # 2,000 rows of a day in each task: rolled at its 1,000th row, so two files each.
    assert sorted(row.record_count for row in files) == [1000] * (2 * 2 * len(DAYS))
    for row in files:
        table = pq.read_table(Path(str(row.file_path).removeprefix("file:")), columns=["id", "dt"])
        ids = table.column("id").to_pylist()
        assert set(table.column("dt").to_pylist()) == {row.dt}
        assert {_day_of_offset(i) for i in ids} == {row.dt}
