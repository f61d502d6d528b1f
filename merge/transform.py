"""The Spark side of a merge: ``DataFrame -> DataFrame`` functions, no I/O of their own.

``flatten`` turns the raw layer's rows (``content`` as JSON text) into typed snapshot columns
plus ``_binlog_offset``, ``_event_type`` and ``_shard``. An UPDATE that changes the key also
yields a DELETE of the old key at the same offset (``beforeContent``), as the reference
mirror (``mirror.memory``) does. ``latest`` keeps, per key, the change with the highest
binlogOffset of (previous snapshot as INSERTs ∪ the day's changes) and drops DELETEs.

Values are JSON scalars; ``from_json`` with string fields keeps each one's JSON text (numbers
as written, strings unquoted), then ANSI casts turn the text into the column type, failing on
a value that does not fit rather than writing NULL (see ``merge.types``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from merge.archive import DeleteCounts
from merge.schema import OFFSET_COLUMN, SHARD_COLUMN, SchemaPlan
from merge.types import snapshot_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EVENT_COLUMN = "_event_type"
_CONTENT = "_content"
_BEFORE = "_before"


def _typed(raw: Column, hive: str) -> Column:
    return snapshot_value(raw, hive)  # zero-part dates included (merge.types)


def _image_schema(names: list[str]) -> StructType:
    return StructType([StructField(name, StringType()) for name in names])


def flatten(raw: DataFrame, plan: SchemaPlan) -> DataFrame:
    """Raw layer rows → data columns (typed by ``plan``) + ``_binlog_offset``, ``_event_type``,
    ``_shard``. Columns a row's image lacks (added later, or dropped) are NULL."""
    names = [name for name, _ in plan.columns]
    schema = _image_schema(names)
    parsed = raw.select(
        F.col("binlogOffset").alias(OFFSET_COLUMN),
        F.col("eventType").alias(EVENT_COLUMN),
        F.concat_ws(".", "schemaName", "tableName").alias(SHARD_COLUMN),
        F.from_json("content", schema).alias(_CONTENT),
        F.from_json("beforeContent", schema).alias(_BEFORE),
    )

    def image(struct: str, event: Column) -> list[Column]:
        return [
            *(_typed(F.col(f"{struct}.`{name}`"), hive).alias(name) for name, hive in plan.columns),
            F.col(OFFSET_COLUMN),
            event.alias(EVENT_COLUMN),
            F.col(SHARD_COLUMN),
        ]

    changes = parsed.select(*image(_CONTENT, F.col(EVENT_COLUMN)))
    key_changed = F.lit(False)
    for name in plan.key:
        key_changed = key_changed | ~F.col(f"{_BEFORE}.`{name}`").eqNullSafe(
            F.col(f"{_CONTENT}.`{name}`")
        )
    old_keys = parsed.where(
        (F.col(EVENT_COLUMN) == "UPDATE") & F.col(_BEFORE).isNotNull() & key_changed
    ).select(*image(_BEFORE, F.lit("DELETE")))
    return changes.unionByName(old_keys)


@dataclass(frozen=True, slots=True)
class KeySpan:
    """How many changes there are (at least the number of keys they change), the range of the
    key's first column they span, and how many have a NULL in a key column (none: the MERGE
    can match keys by plain equality, ``merge.snapshot``)."""

    count: int
    low: Any
    high: Any
    nulls: int = 0


@dataclass(frozen=True, slots=True)
class ChangeSummary:
    """What the merge needs to know of a day's changes before it plans the snapshot."""

    count: int
    deletes: DeleteCounts
    keys: KeySpan  # over every change, archived DELETEs included


def widen_span(first: KeySpan, second: KeySpan) -> KeySpan:
    """Pure: a span covering both (keys counted in both are counted twice: the count is an
    upper bound, the MERGE only uses the range and whether a key was NULL)."""
    if not second.count:
        return first
    if not first.count:
        return second
    lows = [v for v in (first.low, second.low) if v is not None]
    highs = [v for v in (first.high, second.high) if v is not None]
    return KeySpan(
        first.count + second.count,
        min(lows) if lows else None,
        max(highs) if highs else None,
        first.nulls + second.nulls,
    )


def summarize_changes(
    raw: DataFrame,
    changes: DataFrame,
    key: list[str],
    time_column: str | None,
    cutoff: date | None,
) -> ChangeSummary:
    """The number of changes, what the archive rule needs and the changed keys' span, in one
    aggregation over the flattened changes (every Spark job costs a fixed ~0.1–0.3 s here, a
    large part of a small merge); the raw day is read again for the increment only when a
    DELETE of an old row makes the rule possible."""
    is_delete = F.col(EVENT_COLUMN) == "DELETE"
    old = (
        is_delete & (F.col(time_column) < F.lit(cutoff).cast("timestamp"))
        if time_column is not None and cutoff is not None
        else F.lit(False)
    )
    key_columns = [F.col(f"`{k}`") for k in key]
    null_key = F.lit(False)
    for column in key_columns:
        null_key = null_key | column.isNull()
    # No distinct count of the keys: it costs its own shuffle (a Spark job), and the merge
    # needs only whether there are changes, their range and whether a key is NULL.
    row = changes.agg(
        F.count(F.lit(1)).alias("changes"),
        F.count(F.when(is_delete, 1)).alias("deletes"),
        F.count(F.when(old, 1)).alias("old"),
        F.count(F.when(null_key, 1)).alias("nulls"),
        F.min(key_columns[0]).alias("low"),
        F.max(key_columns[0]).alias("high"),
    ).first()
    assert row is not None
    increment = (
        raw.where((F.col("eventType") == "INSERT") & (F.col("source") == "BINLOG")).count()
        if row["old"]
        else None
    )
    counts = DeleteCounts(
        deletes=int(row["deletes"]), old_deletes=int(row["old"]), increment=increment
    )
    return ChangeSummary(
        int(row["changes"]),
        counts,
        KeySpan(int(row["changes"]), row["low"], row["high"], int(row["nulls"])),
    )


def drop_archived(changes: DataFrame, time_column: str, cutoff: date) -> DataFrame:
    """Leave out the DELETEs of rows older than the cut-off (they were archived, not deleted)."""
    archived = (F.col(EVENT_COLUMN) == "DELETE") & (
        F.col(time_column) < F.lit(cutoff).cast("timestamp")
    )
    return changes.where(~F.coalesce(archived, F.lit(False)))


def align(previous: DataFrame, plan: SchemaPlan) -> DataFrame:
    """The previous snapshot in this merge's schema, as INSERTs: new columns NULL, widened
    columns cast (the plan only widens, so no value changes)."""
    present = {name.lower() for name in previous.columns}
    columns = [
        (
            F.col(f"`{name}`").cast(hive) if name.lower() in present else F.lit(None).cast(hive)
        ).alias(name)
        for name, hive in plan.columns
    ]
    return previous.select(
        *columns, F.col(OFFSET_COLUMN), F.lit("INSERT").alias(EVENT_COLUMN), F.col(SHARD_COLUMN)
    )


def latest(rows: DataFrame, key: list[str]) -> DataFrame:
    """Per key the row with the highest ``_binlog_offset``; DELETEs dropped afterwards.

    A window ``row_number()`` (the seed's query). Offsets are unique per MySQL instance, and a
    logical table lives on one instance, so there are no ties to break.
    """
    window = Window.partitionBy(*[F.col(f"`{k}`") for k in key]).orderBy(
        F.col(OFFSET_COLUMN).desc()
    )
    ranked = rows.withColumn("_rank", F.row_number().over(window))
    return ranked.where((F.col("_rank") == 1) & (F.col(EVENT_COLUMN) != "DELETE")).drop(
        "_rank", EVENT_COLUMN
    )


def latest_change(changes: DataFrame, key: list[str]) -> DataFrame:
    """Per key the change with the highest ``_binlog_offset``, DELETEs kept (the MERGE's
    source: a DELETE removes the snapshot's row, anything else replaces or inserts it)."""
    window = Window.partitionBy(*[F.col(f"`{k}`") for k in key]).orderBy(
        F.col(OFFSET_COLUMN).desc()
    )
    ranked = changes.withColumn("_rank", F.row_number().over(window))
    return ranked.where(F.col("_rank") == 1).drop("_rank")
