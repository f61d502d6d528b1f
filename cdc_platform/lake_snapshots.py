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

A table mirror with ``snapshots: hourly`` also has a tag per merged hour,
``hr-YYYY-MM-DD-HH`` (``hour_tag``; ``HH`` counts the hours since the day's midnight in the
stream writer's time zone: the wall-clock hour wherever the zone has no daylight saving):

    SELECT … FROM lake.ods_snapshot.orders VERSION AS OF 'hr-2026-11-25-13' -- 13:00-14:00
    SELECT … FROM ods_snapshot_hr.orders WHERE dt = '2026-11-25' AND hr = '13'

The day's tag names the same snapshot as the day's last hour (the day cut).
"""

from __future__ import annotations

import re
from datetime import date
from typing import TYPE_CHECKING

from cdc_platform.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TAG_PREFIX = "dt-"
# Table properties holding, per tag, the facts its merge stored (JSON: ``merge.job.merge_facts``);
# the scheduler reads ``provisional`` there (``cdc_platform.snapshot_tags``).
FACTS_PREFIX = "cdc-mirror.merge."
_TAG = re.compile(r"^dt-(\d{4}-\d{2}-\d{2})$")
HOUR_TAG_PREFIX = "hr-"
_HOUR_TAG = re.compile(r"^hr-(\d{4}-\d{2}-\d{2})-(\d{2})$")
# The database of the dt-layout views: ``<merge.database>`` + this.
DAYS_DATABASE_SUFFIX = "_dt"
# The database of the hourly views (``dt`` and ``hr`` columns): ``<merge.database>`` + this.
HOURS_DATABASE_SUFFIX = "_hr"
# A day has at most 25 hours (the day a daylight-saving zone turns its clocks back).
MAX_HOURS_PER_DAY = 25


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


def hour_tag(day: date | str, hour: int) -> str:
    """The Iceberg tag of a merged hour: ``hr-2026-11-25-13`` (``hour``: hours since the
    day's midnight)."""
    if not 0 <= hour < MAX_HOURS_PER_DAY:
        raise ValueError(f"hour {hour} is not an hour of a day (0 to {MAX_HOURS_PER_DAY - 1})")
    text = day.isoformat() if isinstance(day, date) else date.fromisoformat(day).isoformat()
    return f"{HOUR_TAG_PREFIX}{text}-{hour:02d}"


def tag_hour(tag: str) -> tuple[date, int] | None:
    """The day and hour a tag names, None for any other reference."""
    match = _HOUR_TAG.match(tag)
    if match is None or int(match.group(2)) >= MAX_HOURS_PER_DAY:
        return None
    try:
        return date.fromisoformat(match.group(1)), int(match.group(2))
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


def hours_view(settings: Settings, table: str) -> str:
    """The quoted name of the table's hourly view (``<merge.database>_hr.<table>``)."""
    return f"{_ident(settings.merge.database + HOURS_DATABASE_SUFFIX)}.{_ident(table)}"


def snapshot_as_of(spark: SparkSession, settings: Settings, table: str, day: date) -> DataFrame:
    """The snapshot of logical table ``table`` as merged for ``day`` (the rows MySQL held at
    the end of that day), with the bookkeeping columns ``_binlog_offset`` and ``_shard``.

    Read from the day's tag, in the session of a ``cdc_platform.iceberg.lake_session``; an
    AnalysisException names the tag when the day was never merged or has expired."""
    name = snapshot_table(settings, table)
    return spark.sql(f"SELECT * FROM {name} VERSION AS OF '{day_tag(day)}'")  # noqa: S608 - quoted names


def snapshot_as_of_hour(
    spark: SparkSession, settings: Settings, table: str, day: date, hour: int
) -> DataFrame:
    """The snapshot of ``table`` as merged for hour ``hour`` of ``day`` (the rows MySQL held at
    the hour's end), for a table mirror with hourly snapshots; read from the hour's tag."""
    name = snapshot_table(settings, table)
    return spark.sql(f"SELECT * FROM {name} VERSION AS OF '{hour_tag(day, hour)}'")  # noqa: S608 - quoted names
