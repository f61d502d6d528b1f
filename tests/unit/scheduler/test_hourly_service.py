"""The scheduler's tick for a table with hourly snapshots, with fakes (MemoryLake, FakeJobs,
MemoryRunStore, an injected clock): each closed hour merged by itself in order and recorded
under (table, day, hour), a daily table beside it unchanged, a failed hour backing off, a
mismatching hour red in the metrics, an operator's re-run of one hour, and the day's own
merge once the day is ready."""

from __future__ import annotations

import threading
from zoneinfo import ZoneInfo

from cdc_platform.config import TableMirror
from cdc_platform.control import MemoryRunStore, RunRecord
from scheduler.jobs import JobResult, MemoryLake
from scheduler.plan import MERGED_OUTSIDE, HourClosing
from tests.unit.scheduler.conftest import (
    MIDNIGHT,
    THREE_THIRTY,
    TODAY,
    Scene,
    day,
    make_scene,
    mirror,
)


def scene(tables: list[TableMirror] | None = None, **settings: object) -> Scene:
    """An hourly table and a daily one (unless ``tables``), yesterday ready and merged."""
    return make_scene(
        tables or [mirror("orders", snapshots="hourly"), mirror("users")],
        now=THREE_THIRTY,
        lake=MemoryLake(ready={day(1)}, merged={"db_orders": {day(1)}, "db_users": {day(1)}}),
        closing=HourClosing(ZoneInfo("UTC"), 0),
        max_attempts=2,
        **settings,
    )


def scheduled(store: MemoryRunStore) -> list[RunRecord]:
    """The runs the scheduler ran (not those it recorded for the scene's merged days)."""
    return [r for r in store.runs if r.requested_by != MERGED_OUTSIDE]


def test_closed_hours_are_merged_in_order_and_recorded_by_hour() -> None:
    scheduler, lake, jobs, store, clock = scene()
    stop = threading.Event()
    assert scheduler.tick(stop) == 3
    # The scene's merged day has no run: recorded once as merged outside the scheduler.
    assert [(r.table, r.dt, r.state) for r in store.runs if r.requested_by == MERGED_OUTSIDE] == [
        ("db_orders", day(1), "succeeded"),
        ("db_users", day(1), "succeeded"),
    ]
    assert [(d.table, d.dt, d.hour) for d in jobs.started] == [
        ("db_orders", TODAY, 0),
        ("db_orders", TODAY, 1),
        ("db_orders", TODAY, 2),
    ]  # the daily table waits for its day
    assert [(r.dt, r.hour, r.state) for r in scheduled(store)] == [
        (TODAY, 0, "succeeded"),
        (TODAY, 1, "succeeded"),
        (TODAY, 2, "succeeded"),
    ]
    blocked = scheduler.blocked["db_orders"]
    assert (blocked.reason, blocked.hour) == ("not ready", 3)
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_hour_runs_total", {"outcome": "succeeded"}) == 3
    assert sample("cdc_scheduler_hours_behind", {"table": "db_orders"}) == 0
    assert (
        sample("cdc_scheduler_newest_hour_end_timestamp_seconds", {"table": "db_orders"})
        == MIDNIGHT + 3 * 3600
    )
    assert sample("cdc_scheduler_hours_behind", {"table": "db_users"}) is None
    # Two more hours end while nothing ticks: both are caught up, in order.
    clock.now += 2 * 3600
    assert scheduler.tick(stop) == 2
    assert [d.hour for d in jobs.started[3:]] == [3, 4]
    # The day becomes ready: both tables merge it (the hourly one with its day's merge).
    lake.ready.add(TODAY)
    assert scheduler.tick(stop) == 2
    assert [(d.table, d.dt, d.hour) for d in jobs.started[5:]] == [
        ("db_orders", TODAY, None),
        ("db_users", TODAY, None),
    ]


def test_a_failed_hour_backs_off_and_a_mismatch_is_red_until_a_rerun() -> None:
    scheduler, _lake, jobs, store, clock = scene()
    stop = threading.Event()
    jobs.results[("merge", "db_orders", TODAY, 0)] = [
        JobResult("mismatch", rows=5, check_ok=False, error="the check found a difference.")
    ]
    jobs.results[("merge", "db_orders", TODAY, 1)] = [JobResult("failed", error="Spark fell.")]
    assert scheduler.tick(stop) == 2  # 00 red but merged; 01 failed: 02 waits behind it
    failed = scheduled(store)[-1]
    assert (failed.hour, failed.state, failed.retry_at) == (1, "failed", clock.now + 10)
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_red_hours", {"table": "db_orders"}) == 2
    assert sample("cdc_scheduler_hours_behind", {"table": "db_orders"}) == 2
    assert sample("cdc_scheduler_hour_runs_total", {"outcome": "mismatch"}) == 1
    assert scheduler.blocked["db_orders"].reason == "retry later"
    clock.now += 10
    assert scheduler.tick(stop) == 2
    assert [(d.hour, d.attempt) for d in jobs.started[2:]] == [(1, 2), (2, 1)]
    assert sample("cdc_scheduler_red_hours", {"table": "db_orders"}) == 1
    # The operator re-runs the red hour: it runs first, as that hour, and is green again.
    request = store.request("merge", "db_orders", TODAY, hour=0)
    assert request.id is not None
    assert scheduler.tick(stop) == 1
    answered = store.runs[request.id - 1]
    assert (answered.hour, answered.state, answered.attempt) == (0, "succeeded", 2)
    assert sample("cdc_scheduler_red_hours", {"table": "db_orders"}) == 0


def waiting_scene(max_wait_h: float) -> Scene:
    return scene(
        [mirror("orders", snapshots="hourly")], not_ready_retry_s=60, max_wait_ready_h=max_wait_h
    )


def not_ready(hour: int) -> JobResult:
    return JobResult("waiting", error=f"the stream writer has not passed the end of hour {hour}.")


def test_an_hour_not_ready_yet_waits_without_going_red_or_using_up_attempts() -> None:
    """The writer lags a few minutes: merge exits NOT_READY. The hour waits (one run in the
    history, 'waiting'), is looked at again after not_ready_retry_s, keeps its attempt (three
    looks with max_attempts 2 do not give up), is not red, and the hours after it wait."""
    scheduler, _lake, jobs, store, clock = waiting_scene(max_wait_h=3)  # 00 closed 2.5 h ago
    stop = threading.Event()
    jobs.results[("merge", "db_orders", TODAY, 0)] = [not_ready(0), not_ready(0), not_ready(0)]
    sample = scheduler.metrics.registry.get_sample_value
    for look in range(3):
        assert scheduler.tick(stop) == 1  # hour 00 only: 01 and 02 wait behind it
        [run] = scheduled(store)
        assert (run.hour, run.state, run.attempt) == (0, "waiting", 1)
        assert run.retry_at == clock.now + 60
        assert run.error == "the stream writer has not passed the end of hour 0."
        assert sample("cdc_scheduler_red_hours", {"table": "db_orders"}) == 0
        assert sample("cdc_scheduler_hour_runs_total", {"outcome": "waiting"}) == look + 1
        blocked = scheduler.blocked["db_orders"]
        assert (blocked.reason, blocked.hour) == ("waiting for readiness", 0)
        assert scheduler.tick(stop) == 0  # not before its next look
        clock.now += 60
    # The writer caught up: the same run goes on to succeed, then the later hours follow.
    assert scheduler.tick(stop) == 3
    assert [(d.hour, d.attempt) for d in jobs.started] == [(0, 1)] * 4 + [(1, 1), (2, 1)]
    assert [(r.hour, r.state, r.retry_at) for r in scheduled(store)] == [
        (0, "succeeded", None),
        (1, "succeeded", None),
        (2, "succeeded", None),
    ]
    assert sample("cdc_scheduler_red_hours", {"table": "db_orders"}) == 0


def test_an_hour_still_not_ready_long_after_it_closed_goes_red() -> None:
    """max_wait_ready_h after the hour closed, not ready is a failure: red, back-off, an
    attempt used (CdcSchedulerRedDay fires); later still, the attempts run out."""
    scheduler, _lake, jobs, store, clock = waiting_scene(max_wait_h=1)
    stop = threading.Event()
    clock.now = MIDNIGHT + 2 * 3600  # 02:00: hour 00 closed an hour ago, hour 01 just now
    jobs.results[("merge", "db_orders", TODAY, 0)] = [not_ready(0), not_ready(0)]
    assert scheduler.tick(stop) == 1
    [run] = scheduled(store)
    assert (run.state, run.attempt, run.retry_at) == ("failed", 1, clock.now + 10)
    assert run.error is not None and run.error.startswith("still not ready 1 h after it closed")
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_red_hours", {"table": "db_orders"}) == 1
    clock.now += 10
    assert scheduler.tick(stop) == 1
    assert (scheduled(store)[-1].state, scheduled(store)[-1].attempt) == ("failed", 2)
    assert scheduler.blocked["db_orders"].reason == "gave up"
