"""What the scheduler runs next: pure functions over what it knows (the ready days, the days
merged, the latest run of each day, the clock), tested with plain values.

The rules, per table mirrored to Hive:

- the days considered are the window ``[today − catch_up_days, today]`` (from
  ``scheduler.first_day`` at the earliest), and never a day before the table's first merged
  day: a table added today is not merged for the days before it existed;
- days are merged **in order**: merge builds a day on the snapshot of the day before, so the
  first day not merged yet is the only candidate; a later ready day waits behind it;
- a day is merged once the stream writer declared it ready; a provisional merge (made before
  the day was ready) does not count;
- a failed merge is tried again after an exponential back-off with jitter
  (``cdc_platform.retry.RetryPolicy.delay``: the wait is drawn once, when the run fails, and
  kept with the run as ``retry_at``), at most ``max_attempts`` times; then the day *gave up*
  and waits for a re-run requested in the web admin, and so do the days after it;
- a run left ``running`` by a scheduler that died is tried again at once (its attempt counts);
- after the newest merged day of a table, validation and maintenance run once for that day
  (not for each day caught up: both look at the stores as they are now);
- a table mirror with ``validation_every_h`` is validated on that cadence instead, whether
  it is mirrored to Hive or not: when its latest validation started that long ago (or it has
  none), one more runs, recorded under today's date;
- a table mirror with ``validation: off``, or none of the targets it validates
  (``TableMirror.scheduled_validation_targets``), is not validated at all.

A re-run an operator requested runs first, whatever the order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

from cdc_platform.control import RunKind, RunRecord

DONE_STATES = ("succeeded", "mismatch")


@dataclass(frozen=True, slots=True)
class Due:
    """A run to start now."""

    kind: RunKind
    table: str
    dt: date
    attempt: int = 1
    request: RunRecord | None = None  # the operator's request this run answers


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a table's next day does not run now: waiting for its readiness, for its retry
    time, or given up until a re-run is requested."""

    table: str
    dt: date
    reason: Literal["not ready", "retry later", "gave up"]
    retry_at: float | None = None


def window(today: date, catch_up_days: int, first_day: date | None) -> list[date]:
    """The days considered, oldest first."""
    start = today - timedelta(days=catch_up_days)
    if first_day is not None and first_day > start:
        start = first_day
    return [start + timedelta(days=n) for n in range((today - start).days + 1)]


def latest_runs(runs: Iterable[RunRecord]) -> dict[tuple[RunKind, str, date], RunRecord]:
    """The latest run (highest id) of each kind, table and day; requests are not runs."""
    latest: dict[tuple[RunKind, str, date], RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.id or 0):
        if run.state != "requested":
            latest[(run.kind, run.table, run.dt)] = run
    return latest


def next_merge(
    table: str,
    days: list[date],
    ready: set[date],
    merged: set[date],
    runs: Mapping[date, RunRecord],
    now: float,
    max_attempts: int,
) -> Due | Blocked | None:
    """The table's next merge: ``days`` the window, ``merged`` the days with a final
    (not provisional) snapshot, ``runs`` the latest merge run of each day. None: nothing to
    do (every day of the window merged, or the window holds no ready day)."""
    merged = merged | {day for day, run in runs.items() if run.state in DONE_STATES}
    if merged:
        first = min(merged)
        days = [day for day in days if day >= first]
    for day in days:
        if day in merged:
            continue
        if day not in ready:
            if merged:  # the next day to merge is not ready: nothing after it may run
                return Blocked(table, day, "not ready")
            continue  # before the table's first snapshot: its first ready day starts it
        return _attempt(table, day, runs.get(day), now, max_attempts)
    return None


def _attempt(
    table: str, day: date, run: RunRecord | None, now: float, max_attempts: int
) -> Due | Blocked:
    """The next merge of a ready day not merged yet, given its latest run."""
    if run is None:
        return Due("merge", table, day)
    if run.state == "running":  # its scheduler died with it: try again now
        return Due("merge", table, day, run.attempt + 1)
    if run.attempt >= max_attempts:  # failed every time
        return Blocked(table, day, "gave up")
    if run.retry_at is not None and now < run.retry_at:
        return Blocked(table, day, "retry later", run.retry_at)
    return Due("merge", table, day, run.attempt + 1)


def follow_ups(
    table: str,
    merged: set[date],
    runs: Mapping[tuple[RunKind, str, date], RunRecord],
    kinds: Iterable[RunKind],
) -> list[Due]:
    """Validation and maintenance of the table's newest merged day, each once."""
    if not merged:
        return []
    newest = max(merged)
    return [Due(kind, table, newest) for kind in kinds if (kind, table, newest) not in runs]


def validation_due(every_h: float, latest: RunRecord | None, now: float) -> bool:
    """A table validated every ``every_h`` hours: is its next validation due? ``latest``: its
    newest validation run (a run still ``running`` was left by a scheduler that died)."""
    if latest is None or latest.state == "running":
        return True
    started = latest.started_at or latest.requested_at or 0.0
    return now >= started + every_h * 3600.0


def days_behind(days: list[date], ready: set[date], merged: set[date]) -> int:
    """Ready days of the window not merged yet (the backlog)."""
    first = min(merged) if merged else None
    return sum(1 for d in days if d in ready and d not in merged and (first is None or d > first))


def red_days(runs: Mapping[date, RunRecord]) -> list[date]:
    """Days whose latest merge failed or whose check found a mismatch."""
    return sorted(day for day, run in runs.items() if run.state in ("failed", "mismatch"))
