"""Rows of logical tables written into the lake's one raw table the way the stream writer
writes them (``cdc_platform.lake``: ``RAW_TABLE``, every logical table's changes with its name
in ``logicalTable``), for tests and benchmarks that need a raw layer without running the writer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_platform.iceberg import KafkaOffsets, LakeCatalog
from cdc_platform.lake import LOGICAL_TABLE_COLUMN, RAW_TABLE, RAW_TABLE_COLUMNS, ensure_raw_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def as_raw_rows(frame: DataFrame, table: str) -> DataFrame:
    """``frame`` (rows of logical table ``table``: its columns, ``table_columns``) with the raw
    table's columns, in its order: ``logicalTable`` set, the columns it lacks null."""
    from pyspark.sql import functions as F

    present = set(frame.columns)
    return frame.select(
        *(
            F.lit(table).alias(name)
            if name == LOGICAL_TABLE_COLUMN
            else F.col(name).cast(kind).alias(name)
            if name in present
            else F.lit(None).cast(kind).alias(name)
            for name, kind in RAW_TABLE_COLUMNS
        )
    )


def append_raw(
    lake: LakeCatalog,
    database: str,
    table: str,
    frame: DataFrame,
    offsets: KafkaOffsets | None = None,
) -> None:
    """Append the rows of ``frame`` as rows of logical table ``table`` to the raw table (made
    first when missing): one commit, recording ``offsets`` when given."""
    ensure_raw_table(lake, database)
    rows = as_raw_rows(frame, table)
    if offsets is None:
        rows.writeTo(lake.name(database, RAW_TABLE)).append()
    else:
        lake.append(rows, database, RAW_TABLE, offsets)
