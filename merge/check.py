"""The check after a merge: the snapshot against MySQL, rows per day by the check column.

Pure logic here; the job counts the snapshot with Spark and MySQL across all shards now
(``cdc_platform.mysql_schema.LiveTables.count_per_day``, or the web admin counting for it
with ``config_store.source: webui``: ``cdc_platform.live_tables``; the web admin's cached
counts are refreshed by the mirror's nightly job, not by the merge). The days compared are the
``CHECK_DAYS`` days ending with ``dt``.

* MySQL is counted now and taken back to the cut (the end of ``dt``) through the stream: the
  changes the lake holds after ``dt`` (collected ones, not replays) are undone from its counts
  (``counts_at_cut``): an INSERT since the cut is one row fewer on its day, a DELETE one
  more, an UPDATE moves a row between the days of its before and after images. A day whose
  counts still differ is a **mismatch**; a change not yet in the lake when MySQL was counted
  can show up as one, and the record keeps both numbers for a person to judge.
* Late events (rows of ``dt`` written by the stream writer after ``dt`` was ready) are not
  guessed from counts: they are in the tags of the days merged after they reached the lake
  (``merge.job``), and a check of such a day counts them.
* A table is **stalled** when its snapshot counts did not move since the previous check
  while MySQL's did: the changes stopped reaching the lake. The previous check is the one
  stored with the previous day's (or hour's) tag in the lake (``check_facts``, with the
  tag's merge facts), so a check on any host, whatever the lake's storage, compares with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

CHECK_DAYS = 7


def check_days(dt: date) -> list[date]:
    return [dt - timedelta(days=n) for n in range(CHECK_DAYS - 1, -1, -1)]


@dataclass(frozen=True, slots=True)
class CheckResult:
    days: list[date]
    snapshot: dict[date, int]
    mysql: dict[date, int]
    mismatches: list[date]
    stalled: bool

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.stalled

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "stalled": self.stalled,
            "days": [
                {
                    "day": day.isoformat(),
                    "snapshot": self.snapshot.get(day, 0),
                    "mysql": self.mysql.get(day, 0),
                    "match": day not in self.mismatches,
                }
                for day in self.days
            ],
            "mismatches": [day.isoformat() for day in self.mismatches],
        }


def check_facts(result: CheckResult) -> dict[str, Any]:
    """Pure: what the next check compares with (``compare``'s ``previous_check``), stored
    with the checked tag's merge facts in the lake: both counts of each day."""
    document = result.to_json()
    return {
        "ok": document["ok"],
        "days": [
            {"day": day["day"], "snapshot": day["snapshot"], "mysql": day["mysql"]}
            for day in document["days"]
        ],
    }


def counts_at_cut(
    now: dict[date, int], changes: Iterable[tuple[str, date | None, date | None, int]]
) -> dict[date, int]:
    """MySQL's counts per day as of the cut, from its counts ``now`` and the changes made since
    the cut: ``(eventType, day of content, day of beforeContent, how many)``. ``content`` is
    the after image of an INSERT or UPDATE and the before image of a DELETE; a day is None
    when the check column is NULL or not a date."""
    at_cut = dict(now)
    for event, day, before_day, count in changes:
        if event == "INSERT" and day is not None:
            at_cut[day] = at_cut.get(day, 0) - count
        elif event == "DELETE" and day is not None:
            at_cut[day] = at_cut.get(day, 0) + count
        elif event == "UPDATE":
            if day is not None:
                at_cut[day] = at_cut.get(day, 0) - count
            if before_day is not None:
                at_cut[before_day] = at_cut.get(before_day, 0) + count
    return at_cut


def _totals(document: dict[str, Any] | None, side: str) -> dict[str, int]:
    if not document:
        return {}
    return {str(item["day"]): int(item[side]) for item in document.get("days", [])}


def compare(
    dt: date,
    snapshot: dict[date, int],
    mysql: dict[date, int],
    previous_check: dict[str, Any] | None = None,
) -> CheckResult:
    """Compare the counts of the ``CHECK_DAYS`` days ending with ``dt``.

    ``previous_check``: the stored result of the previous day's check (``to_json``), for the
    stalled flag: the days both checks cover kept their snapshot counts while MySQL's moved.
    """
    days = check_days(dt)
    mismatches = [day for day in days if snapshot.get(day, 0) != mysql.get(day, 0)]
    stalled = False
    before_snapshot = _totals(previous_check, "snapshot")
    before_mysql = _totals(previous_check, "mysql")
    common = [day for day in days if day.isoformat() in before_snapshot]
    if common:
        snapshot_moved = any(
            snapshot.get(day, 0) != before_snapshot[day.isoformat()] for day in common
        )
        mysql_moved = any(mysql.get(day, 0) != before_mysql[day.isoformat()] for day in common)
        stalled = mysql_moved and not snapshot_moved
    return CheckResult(days, snapshot, mysql, mismatches, stalled)
