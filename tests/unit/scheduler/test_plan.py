"""The scheduler's choices, pure: the window, which day next (in order, ready only, never
before a table's first snapshot), back-off and giving up, runs a dead scheduler left, the
follow-ups of the newest merged day, and the backlog and red days it reports."""

from __future__ import annotations

from datetime import date, timedelta

from cdc_platform.control import RunRecord
from scheduler.plan import (
    Blocked,
    Due,
    days_behind,
    follow_ups,
    latest_runs,
    next_merge,
    red_days,
    window,
)

TODAY = date(2026, 11, 26)


def day(n: int) -> date:
    """``n`` days before TODAY."""
    return TODAY - timedelta(days=n)


def run(
    dt: date, state: str, attempt: int = 1, retry_at: float | None = None, id: int = 1
) -> RunRecord:
    return RunRecord(id=id, table="t", dt=dt, state=state, attempt=attempt, retry_at=retry_at)  # type: ignore[arg-type]


DAYS = window(TODAY, 3, None)


def test_the_window_ends_today_and_starts_no_earlier_than_first_day() -> None:
    assert [day(3), day(2), day(1), day(0)] == DAYS
    assert window(TODAY, 3, day(1)) == [day(1), day(0)]
    assert window(TODAY, 3, day(9)) == DAYS


def test_missed_days_are_caught_up_oldest_first() -> None:
    merged = {day(3)}
    ready = {day(3), day(2), day(1)}
    assert next_merge("t", DAYS, ready, merged, {}, 0.0, 5) == Due("merge", "t", day(2))
    merged.add(day(2))
    assert next_merge("t", DAYS, ready, merged, {}, 0.0, 5) == Due("merge", "t", day(1))
    merged.add(day(1))
    # Today is not ready yet: the table waits for it.
    assert next_merge("t", DAYS, ready, merged, {}, 0.0, 5) == Blocked("t", day(0), "not ready")


def test_a_later_ready_day_waits_behind_a_day_not_ready() -> None:
    step = next_merge("t", DAYS, {day(3), day(1)}, {day(3)}, {}, 0.0, 5)
    assert step == Blocked("t", day(2), "not ready")


def test_a_new_table_starts_at_its_first_ready_day_and_never_merges_before_its_first_snapshot() -> (
    None
):
    assert next_merge("t", DAYS, {day(1)}, set(), {}, 0.0, 5) == Due("merge", "t", day(1))
    assert next_merge("t", DAYS, set(), set(), {}, 0.0, 5) is None
    # Snapshots from day 2 on: day 3, ready but older, is not merged.
    step = next_merge("t", DAYS, {day(3), day(2), day(1)}, {day(2)}, {}, 0.0, 5)
    assert step == Due("merge", "t", day(1))


def test_a_failed_day_is_retried_after_its_back_off_then_given_up() -> None:
    ready = {day(2), day(1)}
    merged = {day(2)}
    failed = {day(1): run(day(1), "failed", attempt=2, retry_at=100.0)}
    assert next_merge("t", DAYS, ready, merged, failed, 99.0, 5) == Blocked(
        "t", day(1), "retry later", 100.0
    )
    assert next_merge("t", DAYS, ready, merged, failed, 100.0, 5) == Due("merge", "t", day(1), 3)
    assert next_merge("t", DAYS, ready, merged, failed, 100.0, 2) == Blocked("t", day(1), "gave up")


def test_a_run_left_running_by_a_dead_scheduler_is_tried_again_now() -> None:
    left = {day(1): run(day(1), "running", attempt=1)}
    assert next_merge("t", DAYS, {day(1)}, set(), left, 0.0, 5) == Due("merge", "t", day(1), 2)


def test_a_day_recorded_done_counts_as_merged_even_when_the_lake_lags() -> None:
    done = {day(2): run(day(2), "mismatch")}
    assert next_merge("t", DAYS, {day(2), day(1)}, set(), done, 0.0, 5) == Due("merge", "t", day(1))


def test_latest_runs_ignore_requests_and_keep_the_highest_id() -> None:
    runs = [
        run(day(1), "failed", id=1),
        run(day(1), "succeeded", id=3),
        run(day(1), "requested", id=4),
    ]
    assert latest_runs(runs)[("merge", "t", day(1))].id == 3


def test_validation_and_maintenance_follow_the_newest_merged_day_once() -> None:
    assert follow_ups("t", set(), {}, ["validation"]) == []
    dues = follow_ups("t", {day(3), day(1)}, {}, ["validation", "maintenance"])
    assert dues == [Due("validation", "t", day(1)), Due("maintenance", "t", day(1))]
    done = {("validation", "t", day(1)): run(day(1), "succeeded")}
    assert follow_ups("t", {day(3), day(1)}, done, ["validation"]) == []


def test_backlog_and_red_days() -> None:
    assert days_behind(DAYS, {day(3), day(2), day(1)}, {day(3)}) == 2
    assert days_behind(DAYS, {day(3), day(2)}, set()) == 2
    runs = {
        day(2): run(day(2), "mismatch"),
        day(1): run(day(1), "succeeded"),
        day(3): run(day(3), "failed"),
    }
    assert red_days(runs) == [day(3), day(2)]
