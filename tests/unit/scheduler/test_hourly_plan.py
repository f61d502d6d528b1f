"""The scheduler's choices for tables with hourly snapshots, pure: the hours of the day in
progress merged one by one in order once closed (the stream writer's zone, budget and
delays), never its last hour (the day's own merge takes it once the day is ready), back-off
and giving up per hour, a new table starting with a ready day, the day after UTC's in a zone
ahead of it, days of 23 and 25 hours, and the hourly backlog and red hours it reports."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from cdc_platform.config import StreamWriterSettings
from cdc_platform.control import RunRecord, RunState
from scheduler.plan import (
    Blocked,
    Due,
    HourClosing,
    hours_behind,
    latest_hour_runs,
    latest_runs,
    newest_hour,
    next_hourly_merge,
    overdue,
    red_hours,
    window,
)

TODAY = date(2026, 11, 26)
UTC_HOURS = HourClosing(ZoneInfo("UTC"), 0)
DAYS = window(TODAY, 3, None)


def day(n: int) -> date:
    return TODAY - timedelta(days=n)


def at(dt: date, hours: float) -> float:
    """Unix time ``hours`` after ``dt``'s midnight UTC."""
    midnight = datetime(dt.year, dt.month, dt.day, tzinfo=UTC).timestamp()
    return midnight + hours * 3600


def hour_run(
    dt: date, hour: int, state: RunState, attempt: int = 1, retry_at: float | None = None
) -> RunRecord:
    return RunRecord(table="t", dt=dt, hour=hour, state=state, attempt=attempt, retry_at=retry_at)


def step(
    now: float,
    hours: dict[tuple[date, int], RunRecord] | None = None,
    ready: set[date] | None = None,
    merged: set[date] | None = None,
    closing: HourClosing = UTC_HOURS,
    days: list[date] = DAYS,
) -> Due | Blocked | None:
    return next_hourly_merge(
        "t",
        days,
        ready if ready is not None else {day(3), day(2), day(1)},
        merged if merged is not None else {day(3), day(2), day(1)},
        {},
        hours or {},
        closing,
        now,
        5,
    )


def test_closed_hours_of_the_day_in_progress_are_merged_one_by_one_in_order() -> None:
    now = at(TODAY, 3.5)  # hours 00, 01 and 02 have ended
    hours: dict[tuple[date, int], RunRecord] = {}
    assert step(now, hours) == Due("merge", "t", TODAY, hour=0)
    hours[(TODAY, 0)] = hour_run(TODAY, 0, "succeeded")
    assert step(now, hours) == Due("merge", "t", TODAY, hour=1)
    hours[(TODAY, 1)] = hour_run(TODAY, 1, "mismatch")  # merged, red: the next one goes on
    hours[(TODAY, 2)] = hour_run(TODAY, 2, "succeeded")
    assert step(now, hours) == Blocked("t", TODAY, "not ready", hour=3)
    assert Due("merge", "t", TODAY, hour=3).when == "2026-11-26T03"


def test_an_hour_is_closed_after_the_writers_lateness_budget_and_delays() -> None:
    closing = HourClosing.of(StreamWriterSettings(lateness_budget_s=600, writer_delay_s=60))
    assert closing.settle_ms == (600 + 60 + 60 + 60) * 1000
    done = {(TODAY, 0): hour_run(TODAY, 0, "succeeded")}
    assert step(at(TODAY, 2.2), done, closing=closing) == Blocked(
        "t", TODAY, "not ready", hour=1
    )  # 02:12 < 02:00 + 13 min
    assert step(at(TODAY, 2.25), done, closing=closing) == Due("merge", "t", TODAY, hour=1)


def test_a_missed_hour_is_caught_up_before_the_later_ones() -> None:
    hours = {
        (TODAY, 0): hour_run(TODAY, 0, "succeeded"),
        (TODAY, 2): hour_run(TODAY, 2, "succeeded"),  # a re-run an operator asked for
    }
    assert step(at(TODAY, 5), hours) == Due("merge", "t", TODAY, hour=1)


def test_a_failed_hour_backs_off_gives_up_and_holds_the_later_hours() -> None:
    now = at(TODAY, 6)
    failed = {(TODAY, 0): hour_run(TODAY, 0, "failed", 1, retry_at=now + 60)}
    assert step(now, failed) == Blocked("t", TODAY, "retry later", now + 60, hour=0)
    assert step(now + 60, failed) == Due("merge", "t", TODAY, 2, hour=0)
    dead = {(TODAY, 0): hour_run(TODAY, 0, "failed", 5)}
    assert step(now, dead) == Blocked("t", TODAY, "gave up", hour=0)
    left = {(TODAY, 0): hour_run(TODAY, 0, "running", 2)}  # its scheduler died
    assert step(now, left) == Due("merge", "t", TODAY, 3, hour=0)


def test_the_last_hour_is_the_days_merge_once_the_day_is_ready() -> None:
    every = {(day(1), h): hour_run(day(1), h, "succeeded") for h in range(23)}
    merged = {day(3), day(2)}
    # 00:30 of today: yesterday's last hour has closed, but only its day's merge takes it.
    assert step(at(TODAY, 0.5), every, {day(3), day(2)}, merged) == Blocked(
        "t", day(1), "not ready"
    )
    # The day is ready: its merge runs, whatever hours of it are still missing.
    ready = {day(3), day(2), day(1)}
    assert step(at(TODAY, 0.5), every, ready, merged) == Due("merge", "t", day(1))
    assert step(at(TODAY, 0.5), {}, ready, merged) == Due("merge", "t", day(1))
    # A day caught up after it became ready: one merge, then the hours of the next day.
    assert step(at(TODAY, 3), {}, ready, {day(3)}) == Due("merge", "t", day(2))


def test_a_new_table_starts_with_a_ready_day_not_with_hours() -> None:
    assert step(at(TODAY, 5), ready=set(), merged=set()) is None
    assert step(at(TODAY, 5), ready={day(1)}, merged=set()) == Due("merge", "t", day(1))


def test_in_a_zone_ahead_of_utc_the_next_days_hours_close_before_utcs_day_ends() -> None:
    shanghai = HourClosing(ZoneInfo("Asia/Shanghai"), 0)
    merged = {day(3), day(2), day(1), TODAY}
    # 20:30 UTC is 04:30 of the 27th in Shanghai: its hours 00 to 03 have ended.
    tomorrow = TODAY + timedelta(days=1)
    assert step(at(TODAY, 20.5), ready=merged, merged=merged, closing=shanghai) == Due(
        "merge", "t", tomorrow, hour=0
    )


def test_days_of_23_and_25_hours_leave_their_own_last_hour_to_the_day() -> None:
    berlin = HourClosing(ZoneInfo("Europe/Berlin"), 0)
    long_day, short_day = date(2026, 10, 25), date(2026, 3, 29)
    assert (berlin.hours(long_day), berlin.hours(short_day)) == (25, 23)
    days = [long_day - timedelta(days=1), long_day]
    hours = {(long_day, h): hour_run(long_day, h, "succeeded") for h in range(23)}
    now = datetime(2026, 10, 26, 5, tzinfo=UTC).timestamp()  # every hour of the 25th ended
    assert step(now, hours, {days[0]}, {days[0]}, berlin, days) == Due(
        "merge", "t", long_day, hour=23
    )
    hours[(long_day, 23)] = hour_run(long_day, 23, "succeeded")
    assert step(now, hours, {days[0]}, {days[0]}, berlin, days) == Blocked(
        "t", long_day, "not ready"
    )


def test_the_hourly_backlog_red_hours_and_newest_hour() -> None:
    merged = {day(3), day(2), day(1)}
    hours = {
        (TODAY, 0): hour_run(TODAY, 0, "succeeded"),
        (TODAY, 1): hour_run(TODAY, 1, "mismatch"),
        (TODAY, 2): hour_run(TODAY, 2, "failed"),
    }
    now = at(TODAY, 5.5)  # hours 00 to 04 have ended; 02 to 04 are not merged
    assert hours_behind(DAYS, merged, merged, hours, UTC_HOURS, now) == 3
    assert hours_behind(DAYS, merged, set(), hours, UTC_HOURS, now) == 0  # not started
    assert hours_behind(DAYS, merged | {TODAY}, merged, hours, UTC_HOURS, now) == 0  # ready
    assert red_hours(hours) == [(TODAY, 1), (TODAY, 2)]
    assert newest_hour(hours) == (TODAY, 1)
    assert UTC_HOURS.end(TODAY, 1) == at(TODAY, 2)


def test_hour_runs_are_kept_apart_from_the_days() -> None:
    runs = [
        RunRecord(id=1, table="t", dt=TODAY, state="failed"),
        RunRecord(id=2, table="t", dt=TODAY, hour=4, state="failed"),
        RunRecord(id=3, table="t", dt=TODAY, hour=4, state="succeeded"),
        RunRecord(id=4, table="t", dt=TODAY, hour=5, state="requested"),
    ]
    assert {k: r.id for k, r in latest_runs(runs).items()} == {("merge", "t", TODAY): 1}
    assert {k: r.id for k, r in latest_hour_runs(runs).items()} == {("t", TODAY, 4): 3}


def test_a_waiting_hour_is_looked_at_again_with_the_same_attempt_and_never_gives_up() -> None:
    now = at(TODAY, 5)
    waiting = {(TODAY, 0): hour_run(TODAY, 0, "waiting", attempt=5, retry_at=now + 60)}
    assert step(now, waiting) == Blocked("t", TODAY, "waiting for readiness", now + 60, hour=0)
    assert step(now + 60, waiting) == Due("merge", "t", TODAY, 5, hour=0)  # max_attempts 5


def test_a_merge_is_overdue_max_wait_after_its_hour_or_day_closed() -> None:
    closing = HourClosing(ZoneInfo("UTC"), 19 * 60 * 1000)
    hour = Due("merge", "t", TODAY, hour=3)  # closes at 04:19
    assert not overdue(hour, closing, at(TODAY, 4 + 19 / 60 + 3) - 1, 3 * 3600)
    assert overdue(hour, closing, at(TODAY, 4 + 19 / 60 + 3), 3 * 3600)
    whole_day = Due("merge", "t", TODAY)  # its last hour closes at 00:19 the next day
    assert not overdue(whole_day, closing, at(TODAY, 24 + 19 / 60 + 3) - 1, 3 * 3600)
    assert overdue(whole_day, closing, at(TODAY, 24 + 19 / 60 + 3), 3 * 3600)
