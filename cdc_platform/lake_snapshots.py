"""The daily snapshots of the lake as their readers see them: one Iceberg table per logical
table, ``<catalog>.<merge.database>.<table>`` (default ``lake.ods_snapshot.<table>``), whose
current state is the newest merged day and whose every retained day is an Iceberg tag
``dt-YYYY-MM-DD``. Merge writes them (``merge.snapshot``); validation, the demo and people
read them through the functions here or the SQL forms they document:

    SELECT … FROM lake.ods_snapshot.orders                               -- the newest day
    SELECT … FROM lake.ods_snapshot.orders VERSION AS OF 'dt-2026-11-25' -- one day
    SELECT … FROM ods_snapshot_dt.orders WHERE dt = '2026-11-25'         -- the old dt layout

The last form is a view per table in the database ``<merge.database>_dt`` (``days_view``):
one ``UNION ALL`` branch per retained day, each a ``VERSION AS OF`` read with a constant
``dt``, so Spark keeps only the branch the ``WHERE dt = …`` names. Merge and maintenance
rewrite it whenever a day tag is added or dropped.
"""

from __future__ import annotations

import re
from datetime import date
from typing import TYPE_CHECKING

from cdc_platform.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TAG_PREFIX = "dt-"
_TAG = re.compile(r"^dt-(\d{4}-\d{2}-\d{2})$")
# The database of the dt-layout views: ``<merge.database>`` + this.
DAYS_DATABASE_SUFFIX = "_dt"


def day_tag(day: date | str) -> str:
    """The Iceberg tag of a merged day: ``dt-2026-11-25``."""
    text = day.isoformat() if isinstance(day, date) else date.fromisoformat(day).isoformat()
    return f"{TAG_PREFIX}{text}"


def tag_day(tag: str) -> date | None:
    """The day a tag names, None for any other reference (``main``, a merge's branch)."""
    match = _TAG.match(tag)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def snapshot_table(settings: Settings, table: str) -> str:
    """The quoted Spark name of a logical table's snapshot table."""
    parts = (settings.lake.catalog, settings.merge.database, table)
    return ".".join(_ident(part) for part in parts)


def days_view(settings: Settings, table: str) -> str:
    """The quoted name of the table's dt-layout view (``<merge.database>_dt.<table>``)."""
    return f"{_ident(settings.merge.database + DAYS_DATABASE_SUFFIX)}.{_ident(table)}"


def snapshot_as_of(spark: SparkSession, settings: Settings, table: str, day: date) -> DataFrame:
    """The snapshot of logical table ``table`` as merged for ``day`` (the rows MySQL held at
    the end of that day), with the bookkeeping columns ``_binlog_offset`` and ``_shard``.

    Read from the day's tag, in the session of a ``cdc_platform.iceberg.lake_session``; an
    AnalysisException names the tag when the day was never merged or has expired."""
    name = snapshot_table(settings, table)
    return spark.sql(f"SELECT * FROM {name} VERSION AS OF '{day_tag(day)}'")  # noqa: S608 - quoted names
