"""Merge's public view of which days can be merged and which were: what a scheduler asks
before it starts ``cdc-mirror merge`` (``scheduler``), without reading merge's records or the
stream writer's readiness itself. Everything else in ``merge`` is its own business.

- ``ready_days``: the days the stream writer (the one merge waits for) declared complete;
- ``merged_days``: the days of a table merge has published a snapshot for, and whether that
  snapshot was provisional (merged before the day was ready, ``--skip-readiness``) and how its
  check against MySQL came out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.lake import ready_days_from_metastore
from merge import records
from merge.job import writer_name

_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.json$")


@dataclass(frozen=True, slots=True)
class MergedDay:
    dt: date
    provisional: bool  # merged before the stream writer declared the day ready
    check_ok: bool | None  # None: not checked


def _days(names: list[str]) -> list[date]:
    found = []
    for name in names:
        match = _DAY_FILE.match(name)
        if match:
            try:
                found.append(date.fromisoformat(match.group(1)))
            except ValueError:
                continue
    return sorted(found)


def ready_days(settings: Settings, config: ConfigSnapshot) -> list[date]:
    """The days the stream writer merge waits for has declared ready (its committed progress,
    as the metastore holds it), oldest first; [] while that cannot be told without Spark
    (another writer committed last to the same database) — the next poll asks again."""
    writer = writer_name(settings, [i.name for i in config.instances] or None)
    days = ready_days_from_metastore(settings, settings.stream_writer.database, writer)
    return _days([f"{day}.json" for day in days or []])


def merged_days(settings: Settings, table: str) -> dict[date, MergedDay]:
    """The days of ``table`` merge published a snapshot for (its last merge of each)."""
    directory = records.merge_dir(settings.lake_dir, table)
    if not directory.is_dir():
        return {}
    merged: dict[date, MergedDay] = {}
    for day in _days([path.name for path in directory.iterdir()]):
        record = records.read_json(records.merge_record_path(settings.lake_dir, table, str(day)))
        if record is None:
            continue
        merged[day] = MergedDay(
            dt=day,
            provisional=record.get("readiness", "ready") != "ready",
            check_ok=record.get("checkOk"),
        )
    return merged
