"""The archive-delete rule: are a day's DELETEs archiving (old rows moved out of MySQL)?

Pure logic. OLTP tables are kept small by deleting rows older than some months; the Hive
snapshot must keep them. A day's DELETEs are **archiving** when

* their count exceeds ``min_deletes`` (default 5,000,000) **or** ``increment_factor`` (7) ×
  the day's increment (the day's BINLOG INSERTs; replayed MOCK rows are history, not growth),
* **and** the rows they delete are older than ``older_than_days`` (30) by the time column
  (``archive_delete.time_column``, else the table's ``check_column``), measured from the start
  of ``dt``.

When the rule fires, the DELETEs of rows older than the cut-off are ignored (the snapshot
keeps those rows) and the others still apply: an archiving job never hides a real delete of
a recent row. Per run the rule can be overridden: ``ignore`` applies every DELETE,
``force`` ignores the DELETEs of old rows whatever their count. Every merge records the
decision with its numbers (``ArchiveDecision.to_json``) so it can be audited and, if wrong,
re-run with an override.

Without a time column the age of deleted rows is unknown, so the rule never fires (unless
forced, which then cannot select rows either and is refused) and the record says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum
from typing import Any

from cdc_platform.config import ArchiveDeleteRule, TableMirror
from simple_binlog.errors import ConfigError


class ArchiveOverride(StrEnum):
    NONE = "none"
    IGNORE = "ignore"  # --ignore-archive-rule: every DELETE applies
    FORCE = "force"  # --force-archive-rule: DELETEs of old rows are archiving, whatever the count


@dataclass(frozen=True, slots=True)
class DeleteCounts:
    """What the day's changes hold, counted by Spark in one pass."""

    deletes: int
    old_deletes: int  # DELETEs whose row is older than the cut-off by the time column
    # BINLOG INSERTs of the day. None: not counted, because without a DELETE of an old row
    # the rule cannot fire whatever the increment (it saves a pass over the raw day).
    increment: int | None


@dataclass(frozen=True, slots=True)
class ArchiveDecision:
    archiving: bool
    reason: str
    counts: DeleteCounts
    threshold: int | None  # None when the increment was not counted
    time_column: str | None
    cutoff: date | None
    override: ArchiveOverride

    @property
    def ignored_deletes(self) -> int:
        return self.counts.old_deletes if self.archiving else 0

    def to_json(self) -> dict[str, object]:
        return {
            "archiving": self.archiving,
            "reason": self.reason,
            "deletes": self.counts.deletes,
            "oldDeletes": self.counts.old_deletes,
            "increment": self.counts.increment,
            "threshold": self.threshold,
            "ignoredDeletes": self.ignored_deletes,
            "timeColumn": self.time_column,
            "cutoff": self.cutoff.isoformat() if self.cutoff else None,
            "override": self.override.value,
        }


def recorded_cut(document: dict[str, Any] | None) -> tuple[str, date] | None:
    """Pure: from a merge's recorded decision (``ArchiveDecision.to_json``), the time column
    and cut-off of the DELETEs it ignored; None when it ignored none (or there is no record)."""
    if not document or not document.get("archiving"):
        return None
    column, cutoff = document.get("timeColumn"), document.get("cutoff")
    if not column or not cutoff:
        return None
    return str(column), date.fromisoformat(str(cutoff))


def time_column(mirror: TableMirror) -> str | None:
    return mirror.archive_delete.time_column or mirror.check_column


def cutoff_day(rule: ArchiveDeleteRule, dt: date) -> date:
    """Rows whose time column is before this day (00:00) count as old."""
    return dt - timedelta(days=rule.older_than_days)


def threshold(rule: ArchiveDeleteRule, increment: int | None) -> int | None:
    """DELETEs above this count are archiving-sized: the smaller of the two limits."""
    if increment is None:
        return None
    return min(rule.min_deletes, int(rule.increment_factor * increment))


def decide(
    rule: ArchiveDeleteRule,
    column: str | None,
    dt: date,
    counts: DeleteCounts,
    override: ArchiveOverride = ArchiveOverride.NONE,
) -> ArchiveDecision:
    limit = threshold(rule, counts.increment)
    cutoff = cutoff_day(rule, dt) if column else None

    def decision(archiving: bool, reason: str) -> ArchiveDecision:
        return ArchiveDecision(archiving, reason, counts, limit, column, cutoff, override)

    if override is ArchiveOverride.IGNORE:
        return decision(False, "rule ignored for this run: every DELETE applies")
    if column is None:
        if override is ArchiveOverride.FORCE:
            raise ConfigError(
                "--force-archive-rule needs a time column to tell old rows from new ones; "
                "set tables[].archive_delete.time_column or tables[].check_column."
            )
        return decision(False, "no time column configured: the age of deleted rows is unknown")
    if counts.old_deletes == 0:
        return decision(False, "no DELETE of a row older than the cut-off")
    if override is ArchiveOverride.FORCE:
        return decision(True, "rule forced for this run: DELETEs of old rows are ignored")
    if limit is None:
        raise ValueError("the day's increment must be counted when old rows were deleted")
    if counts.deletes > limit:
        return decision(
            True,
            f"{counts.deletes} DELETEs exceed {limit} (min of {rule.min_deletes} and "
            f"{rule.increment_factor:g} × {counts.increment} inserts): DELETEs of rows older "
            f"than {cutoff} are archiving",
        )
    return decision(False, f"{counts.deletes} DELETEs do not exceed {limit}")
