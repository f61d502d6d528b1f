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

A table mirror with **hourly snapshots** (``snapshots: hourly``) is merged an hour at a time
while its day is not ready yet, and still a day at a time once it is:

- its next day not merged is the one in progress; while that day is not ready, each of its
  hours that has *closed* is merged by itself (``cdc-mirror merge --hour``), in order: an hour
  is closed once the clock passed its end plus the stream writer's lateness budget and
  delays (``HourClosing``: the clock half of merge's hour readiness; merge checks the
  watermark half itself and refuses an hour the writer has not passed yet: see *waiting*);
- the day's last hour is not merged by itself: the day's own merge (``cdc-mirror merge
  --dt``) runs once the day is ready, as for every table; for an hourly table it merges the
  hours not merged yet (its last one at least) and sets the day's tag. A day caught up
  after it became ready is thus one run, not one per hour;
- an hour that failed is tried again after the same back-off, at most ``max_attempts``
  times; the later hours of its day wait behind it (the day's merge, once the day is ready,
  merges it with them);
- hours start only after the table's first merged day (a new table starts with a ready day,
  like a daily one), and an hour's run is kept in the history under (table, day, hour).

A merge that finds its day or hour **not ready** yet (exit code NOT_READY: the stream writer
lags) ends ``waiting``: it is tried again after ``scheduler.not_ready_retry_s``, neither red
nor counted against ``max_attempts``, and the hours after it wait behind it; once
``scheduler.max_wait_ready_h`` have passed since that day or hour closed (``overdue``), not
ready counts as a failed attempt (red, back-off, gave up after ``max_attempts``).

A re-run an operator requested runs first, whatever the order.

**Merged outside the scheduler.** The lake's tags say which days and hours are merged
whoever merged them (``cdc-mirror merge`` by hand, a scheduler whose history was lost): a
day or hour with its tag is merged unless the scheduler's own latest run of it failed (or was
left running) before the tag's snapshot was committed: that tag may be the failed attempt's
own, set before its check failed to run, and the retry redoes it (``merged_outside``). A tag
the runs do not explain is recorded once as a succeeded run "by a merge outside the
scheduler" (the Runs page shows it; a red day or hour merged again by hand turns green).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from cdc_platform.config import StreamWriterSettings
from cdc_platform.control import RunKind, RunRecord
from merge.hours import HOUR_MS, hours_in_day, midnight_ms

DONE_STATES = ("succeeded", "mismatch")
RED_STATES = ("failed", "mismatch")
BUSY_OR_FAILED = ("failed", "running")
# Who "requested" the succeeded run recorded for a day or hour merged outside the scheduler
# (the Runs page shows "succeeded (by a merge outside the scheduler)").
MERGED_OUTSIDE = "a merge outside the scheduler"


@dataclass(frozen=True, slots=True)
class Due:
    """A run to start now."""

    kind: RunKind
    table: str
    dt: date
    attempt: int = 1
    request: RunRecord | None = None  # the operator's request this run answers
    hour: int | None = None  # a merge of one hour of ``dt`` (hourly snapshots); None: the day

    @property
    def when(self) -> str:
        """``2026-11-25``, or ``2026-11-25T13`` for an hour (``cdc-mirror merge --hour``)."""
        return when(self.dt, self.hour)


BlockedReason = Literal["not ready", "waiting for readiness", "retry later", "gave up"]


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a table's next day does not run now: waiting for its readiness, for its retry
    time, or given up until a re-run is requested."""

    table: str
    dt: date
    reason: BlockedReason
    retry_at: float | None = None
    hour: int | None = None  # the hour of ``dt`` that waits (hourly snapshots)


def when(dt: date, hour: int | None) -> str:
    return dt.isoformat() if hour is None else f"{dt.isoformat()}T{hour:02d}"


@dataclass(frozen=True, slots=True)
class HourClosing:
    """When an hour of a table with hourly snapshots is closed: the hours of a day are those
    of ``merge.hours`` in the stream writer's zone, and one is closed ``settle_ms`` after its
    end (the writer's lateness budget plus its pipeline delays: before that, merge would find
    it not ready)."""

    zone: ZoneInfo
    settle_ms: int

    def hours(self, day: date) -> int:
        return hours_in_day(day, self.zone)

    def closed(self, day: date, index: int, now: float) -> bool:
        end = midnight_ms(day, self.zone) + (index + 1) * HOUR_MS
        return now * 1000 >= end + self.settle_ms

    def end(self, day: date, index: int) -> float:
        """The hour's end (Unix time)."""
        return (midnight_ms(day, self.zone) + (index + 1) * HOUR_MS) / 1000

    @classmethod
    def of(cls, writer: StreamWriterSettings) -> HourClosing:
        """The stream writer's zone and its readiness rule's budget and delays."""
        settle_s = (
            writer.lateness_budget_s
            + writer.collector_delay_s
            + writer.kafka_delay_s
            + writer.writer_delay_s
        )
        return cls(ZoneInfo(writer.time_zone), int(settle_s * 1000))


def window(today: date, catch_up_days: int, first_day: date | None) -> list[date]:
    """The days considered, oldest first."""
    start = today - timedelta(days=catch_up_days)
    if first_day is not None and first_day > start:
        start = first_day
    return [start + timedelta(days=n) for n in range((today - start).days + 1)]


def merged_outside(run: RunRecord | None, committed_ms: int) -> bool:
    """Whether a day's or hour's tag (its snapshot committed at ``committed_ms``) was set by a
    merge the scheduler did not run, given the scheduler's latest run of it: none, one that
    found it not ready, or one that failed or found a mismatch before that snapshot."""
    if run is None or run.state == "waiting":
        return True
    if run.state in ("failed", "mismatch"):
        return run.ended_at is not None and committed_ms > run.ended_at * 1000
    return False  # succeeded: its own tag; running (its scheduler died): retried at once


def tagged_done(tagged: Iterable[date], runs: Mapping[date, RunRecord]) -> set[date]:
    """The tagged days that count as merged: all but those whose latest run failed or was
    left running (a tag such a run may have set itself; ``merged_outside`` recorded the
    others as succeeded runs before)."""
    return {
        day for day in tagged if (run := runs.get(day)) is None or run.state not in BUSY_OR_FAILED
    }


def latest_runs(runs: Iterable[RunRecord]) -> dict[tuple[RunKind, str, date], RunRecord]:
    """The latest run (highest id) of each kind, table and day; requests are not runs, and
    neither are the runs of single hours (``latest_hour_runs``)."""
    latest: dict[tuple[RunKind, str, date], RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.id or 0):
        if run.state != "requested" and run.hour is None:
            latest[(run.kind, run.table, run.dt)] = run
    return latest


def latest_hour_runs(runs: Iterable[RunRecord]) -> dict[tuple[str, date, int], RunRecord]:
    """The latest merge run (highest id) of each table's hours (hourly snapshots)."""
    latest: dict[tuple[str, date, int], RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.id or 0):
        if run.state != "requested" and run.kind == "merge" and run.hour is not None:
            latest[(run.table, run.dt, run.hour)] = run
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
    table: str,
    day: date,
    run: RunRecord | None,
    now: float,
    max_attempts: int,
    hour: int | None = None,
) -> Due | Blocked:
    """The next merge of a ready day (or closed hour) not merged yet, given its latest run."""
    if run is None:
        return Due("merge", table, day, hour=hour)
    if run.state == "running":  # its scheduler died with it: try again now
        return Due("merge", table, day, run.attempt + 1, hour=hour)
    # Not ready yet: the same attempt again after a short delay; it used none up.
    waiting = run.state == "waiting"
    if not waiting and run.attempt >= max_attempts:  # failed every time
        return Blocked(table, day, "gave up", hour=hour)
    if run.retry_at is not None and now < run.retry_at:
        reason: BlockedReason = "waiting for readiness" if waiting else "retry later"
        return Blocked(table, day, reason, run.retry_at, hour=hour)
    return Due("merge", table, day, run.attempt if waiting else run.attempt + 1, hour=hour)


def next_hourly_merge(
    table: str,
    days: list[date],
    ready: set[date],
    merged: set[date],
    runs: Mapping[date, RunRecord],
    hour_runs: Mapping[tuple[date, int], RunRecord],
    closing: HourClosing,
    now: float,
    max_attempts: int,
) -> Due | Blocked | None:
    """The next merge of a table with hourly snapshots: the day in progress (the first not
    merged) by its own merge once it is ready, else its next closed hour not merged yet
    (``hour_runs``: the latest run of each of the table's hours). The day after the window
    counts too: in a zone ahead of UTC its first hours close before UTC's day ends."""
    done = merged | {day for day, run in runs.items() if run.state in DONE_STATES}
    if not done:  # not started: its first ready day starts it, as for a daily table
        return next_merge(table, days, ready, merged, runs, now, max_attempts)
    first = min(done)
    for day in [d for d in days if d >= first] + [days[-1] + timedelta(days=1)]:
        if day in done:
            continue
        if day in ready:
            return _attempt(table, day, runs.get(day), now, max_attempts)
        return _next_hour(table, day, hour_runs, closing, now, max_attempts)
    return None


def _next_hour(
    table: str,
    day: date,
    hour_runs: Mapping[tuple[date, int], RunRecord],
    closing: HourClosing,
    now: float,
    max_attempts: int,
) -> Due | Blocked:
    """The next hour of ``day`` (not ready yet) to merge by itself, in order; never the
    day's last hour, which the day's merge takes."""
    for index in range(closing.hours(day) - 1):
        run = hour_runs.get((day, index))
        if run is not None and run.state in DONE_STATES:
            continue
        if not closing.closed(day, index, now):
            return Blocked(table, day, "not ready", hour=index)
        return _attempt(table, day, run, now, max_attempts, hour=index)
    return Blocked(table, day, "not ready")  # every hour but the last: the day is next


def overdue(due: Due, closing: HourClosing, now: float, max_wait_s: float) -> bool:
    """Whether a merge its day or hour's readiness still holds back has waited too long: more
    than ``max_wait_s`` since that hour (a day: its last hour) closed. Not ready then counts
    as a failure: the stream writer is not lagging a little, it is stuck."""
    last = due.hour if due.hour is not None else closing.hours(due.dt) - 1
    closed_at = closing.end(due.dt, last) + closing.settle_ms / 1000
    return now >= closed_at + max_wait_s


def hours_behind(
    days: list[date],
    ready: set[date],
    merged: set[date],
    hour_runs: Mapping[tuple[date, int], RunRecord],
    closing: HourClosing,
    now: float,
) -> int:
    """Closed hours of the table's days not merged yet, not counting ready days (merged
    whole: ``days_behind``) nor the hours of a table not started (the hourly backlog)."""
    if not merged:
        return 0
    first = min(merged)
    behind = 0
    for day in [d for d in days if d > first] + [days[-1] + timedelta(days=1)]:
        if day in merged or day in ready:
            continue
        for index in range(closing.hours(day) - 1):
            run = hour_runs.get((day, index))
            if closing.closed(day, index, now) and (run is None or run.state not in DONE_STATES):
                behind += 1
    return behind


def red_hours(hour_runs: Mapping[tuple[date, int], RunRecord]) -> list[tuple[date, int]]:
    """Hours whose latest merge failed or whose check found a mismatch."""
    return sorted(key for key, run in hour_runs.items() if run.state in RED_STATES)


def newest_hour(hour_runs: Mapping[tuple[date, int], RunRecord]) -> tuple[date, int] | None:
    """The newest hour merged by itself (its latest run done)."""
    done = [key for key, run in hour_runs.items() if run.state in DONE_STATES]
    return max(done, default=None)


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
    return sorted(day for day, run in runs.items() if run.state in RED_STATES)
