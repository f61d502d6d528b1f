"""The scheduler's tick with fakes (MemoryLake, FakeJobs, MemoryRunStore, an injected clock and
jitter): catch-up in order with every run recorded, back-off drawn from the retry policy,
giving up and the re-run that answers it, a check mismatch marking the day red, the
follow-ups, and a stop between runs."""

from __future__ import annotations

import threading
from datetime import date
from typing import Any

from prometheus_client import generate_latest

from cdc_platform.config import TableMirror
from cdc_platform.control import ValidationResult
from cdc_platform.snapshot_tags import SnapshotTags
from scheduler.jobs import FakeJobs, JobResult
from scheduler.plan import MERGED_OUTSIDE, Due
from tests.unit.scheduler.conftest import TODAY, Scene, day, make_scene, mirror


def scene(tables: list[TableMirror] | None = None, **settings: Any) -> Scene:
    return make_scene(tables or [mirror("orders")], now=1_000.0, **settings)


def started(jobs: FakeJobs) -> list[tuple[str, str, date, int]]:
    return [(d.kind, d.table, d.dt, d.attempt) for d in jobs.started]


def test_missed_days_are_merged_in_order_and_recorded() -> None:
    scheduler, lake, jobs, store, _ = scene([mirror("orders"), mirror("users")])
    lake.ready = {day(3), day(2), day(1)}
    lake.merged = {"db_orders": {day(3)}}
    assert scheduler.tick(threading.Event()) == 5
    # Round the tables, each table's days in order; users starts at its first ready day.
    assert started(jobs) == [
        ("merge", "db_orders", day(2), 1),
        ("merge", "db_users", day(3), 1),
        ("merge", "db_orders", day(1), 1),
        ("merge", "db_users", day(2), 1),
        ("merge", "db_users", day(1), 1),
    ]
    # The lake's day 3 has no run (merged by hand, or the history lost): recorded as such.
    outside, *ran = store.runs
    assert (outside.dt, outside.state, outside.requested_by) == (
        day(3),
        "succeeded",
        MERGED_OUTSIDE,
    )
    assert all(r.state == "succeeded" and r.started_at and r.ended_at for r in ran)
    assert [r.scheduler for r in store.runs] == ["test-scheduler"] * 6
    # Nothing more is due until today becomes ready.
    assert scheduler.tick(threading.Event()) == 0
    assert scheduler.blocked["db_orders"].reason == "not ready"
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_days_behind", {"table": "db_orders"}) == 0
    assert sample("cdc_scheduler_runs_total", {"kind": "merge", "outcome": "succeeded"}) == 5
    lake.ready.add(day(0))
    assert scheduler.tick(threading.Event()) == 2


def test_a_failure_backs_off_doubling_then_gives_up_until_a_rerun() -> None:
    scheduler, lake, jobs, store, clock = scene(max_attempts=3)
    lake.ready = {day(1)}
    failure = JobResult("failed", error="Spark fell over.")
    jobs.results[("merge", "db_orders", day(1))] = [failure, failure, failure]
    stop = threading.Event()
    assert scheduler.tick(stop) == 1
    [first] = store.runs
    assert (first.state, first.error, first.retry_at) == ("failed", "Spark fell over.", 1_010.0)
    assert scheduler.tick(stop) == 0  # waiting out the back-off
    assert scheduler.blocked["db_orders"].reason == "retry later"
    clock.now = 1_010.0
    assert scheduler.tick(stop) == 1
    assert store.runs[-1].attempt == 2 and store.runs[-1].retry_at == 1_030.0
    clock.now = 1_030.0
    assert scheduler.tick(stop) == 1
    clock.now = 1_000_000.0
    assert scheduler.tick(stop) == 0
    assert scheduler.blocked["db_orders"].reason == "gave up"
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_gave_up", {"table": "db_orders"}) == 1
    assert sample("cdc_scheduler_red_days", {"table": "db_orders"}) == 1
    # The operator asks for a re-run: it runs first, answers the request, and the day is done.
    request = store.request("merge", "db_orders", day(1))
    assert scheduler.tick(stop) == 1
    answered = store.runs[request.id - 1]
    assert (answered.state, answered.attempt, answered.requested_by) == ("succeeded", 4, "operator")
    assert store.requested() == []
    assert sample("cdc_scheduler_red_days", {"table": "db_orders"}) == 0
    assert sample("cdc_scheduler_gave_up", {"table": "db_orders"}) == 0


def test_a_check_mismatch_marks_the_day_red_and_later_days_go_on() -> None:
    scheduler, lake, jobs, store, _ = scene()
    lake.ready = {day(2), day(1)}
    jobs.results[("merge", "db_orders", day(2))] = [
        JobResult(
            "mismatch", rows=7, files=1, check_ok=False, error="the check found a difference."
        )
    ]
    assert scheduler.tick(threading.Event()) == 2
    assert [(r.dt, r.state, r.check_ok) for r in store.runs] == [
        (day(2), "mismatch", False),
        (day(1), "succeeded", None),
    ]
    assert (
        scheduler.metrics.registry.get_sample_value(
            "cdc_scheduler_red_days", {"table": "db_orders"}
        )
        == 1
    )


def test_validation_and_maintenance_follow_the_newest_day_once() -> None:
    tables = [
        mirror("orders", ("hive", "warehouse")),
        mirror("plain"),  # only the lake, which is validated when chosen (Spark)
        mirror("quiet", ("hive", "redis"), validation="off"),
        mirror("lakes", ("hive",), validation_targets=["lake"]),
    ]
    scheduler, lake, jobs, _store, _ = scene(
        tables, validation=True, maintenance_command=["true", "{table}", "{dt}"]
    )
    lake.ready = {day(2), day(1)}
    scheduler.tick(threading.Event())
    follow = [(d.kind, d.table, d.dt) for d in jobs.started if d.kind != "merge"]
    assert sorted(follow) == sorted(
        [
            ("validation", "db_orders", day(1)),
            ("maintenance", "db_orders", day(1)),
            ("maintenance", "db_plain", day(1)),
            ("maintenance", "db_quiet", day(1)),
            ("validation", "db_lakes", day(1)),
            ("maintenance", "db_lakes", day(1)),
        ]
    )
    jobs.started.clear()
    assert scheduler.tick(threading.Event()) == 0


def test_a_stop_ends_the_tick_between_runs() -> None:
    scheduler, lake, jobs, _store, _ = scene()
    lake.ready = {day(3), day(2), day(1)}
    stop = threading.Event()
    jobs.on_start = lambda due: stop.set()
    assert scheduler.tick(stop) == 1
    assert [d.dt for d in jobs.started] == [day(3)]


def test_a_run_left_running_is_retried_by_the_next_leader() -> None:
    scheduler, lake, jobs, store, _ = scene()
    lake.ready = {day(1)}
    from cdc_platform.control import RunRecord

    store.save(RunRecord(table="db_orders", dt=day(1), state="running", scheduler="dead:1"))
    scheduler.tick(threading.Event())
    assert started(jobs) == [("merge", "db_orders", day(1), 2)]
    assert isinstance(jobs.started[0], Due)
    left, again = store.runs
    assert (left.state, left.error) == (
        "failed",
        "its scheduler (dead:1) ended before the run did.",
    )
    assert (again.state, again.attempt) == ("succeeded", 2)


def test_the_lake_is_asked_once_a_tick_per_table() -> None:
    scheduler, lake, _jobs, _store, _ = scene([mirror("orders"), mirror("users")])
    lake.ready = {day(3), day(2), day(1)}
    asked: list[list[str]] = []
    snapshot_tags = lake.snapshot_tags

    def counting(tables: list[str]) -> dict[str, SnapshotTags]:
        asked.append(tables)
        return snapshot_tags(tables)

    lake.snapshot_tags = counting  # type: ignore[method-assign]
    assert scheduler.tick(threading.Event()) == 6
    assert asked == [["db_orders", "db_users"]]


def test_a_table_with_a_cadence_is_validated_on_it_and_its_outcome_exported() -> None:
    tables = [
        mirror("orders", ("hive", "redis"), every_h=1.0),  # the cadence replaces the follow-up
        mirror("cache", ("redis",), every_h=2.0),  # not in the lake: validated all the same
        mirror("lake", ("hive",), every_h=1.0),  # no target chosen (the lake is opt-in)
        mirror("off", ("redis",), every_h=1.0, validation="off"),
    ]
    scheduler, lake, jobs, store, clock = scene(tables, validation=True)
    differs = ValidationResult(target="redis", verdict="differs", rows=10, missing=1, extra=2)
    equal = ValidationResult(target="redis", verdict="equal", rows=10)
    jobs.results[("validation", "db_cache", TODAY)] = [
        JobResult("mismatch", rows=10, check_ok=False, validation=[differs]),
        JobResult("succeeded", rows=10, check_ok=True, validation=[equal]),
    ]
    lake.ready = {day(1)}
    scheduler.tick(threading.Event())
    validations = [(d.table, d.dt) for d in jobs.started if d.kind == "validation"]
    assert validations == [("db_cache", TODAY), ("db_orders", TODAY)]
    [recorded] = [r for r in store.runs if r.table == "db_cache"]
    assert (recorded.state, recorded.validation) == ("mismatch", [differs])
    metrics = scheduler.metrics
    assert metrics.validation_mismatched.labels("db_cache", "redis")._value.get() == 3
    jobs.started.clear()
    clock.now += 3599  # within both cadences: nothing due
    assert scheduler.tick(threading.Event()) == 0
    clock.now += 1  # an hour after: db_orders again, db_cache (every 2 h) not yet
    scheduler.tick(threading.Event())
    assert [(d.table, d.attempt) for d in jobs.started] == [("db_orders", 2)]
    jobs.started.clear()
    clock.now += 3600
    scheduler.tick(threading.Event())
    assert [d.table for d in jobs.started] == ["db_cache", "db_orders"]
    assert metrics.validation_mismatched.labels("db_cache", "redis")._value.get() == 0
    assert metrics.validation_last_equal.labels("db_cache", "redis")._value.get() == clock.now
    # Leadership lost: a standby exports no validation figures (they would go stale).
    stop = threading.Event()
    stop.set()
    scheduler.lead(stop)
    assert "cdc_validation_mismatched_rows{" not in generate_latest(metrics.registry).decode()


def test_a_repaired_target_counts_as_it_is_after_the_repair() -> None:
    tables = [mirror("orders", ("redis", "warehouse"), every_h=1.0, validation="repair")]
    scheduler, _lake, jobs, store, clock = scene(tables, validation=True)
    repaired = [
        ValidationResult(
            target="redis", verdict="differs", rows=10, missing=2, repaired=3, still_differing=0
        ),
        ValidationResult(
            target="warehouse", verdict="differs", rows=10, extra=1, repaired=3, still_differing=1
        ),
    ]
    skipped = ValidationResult(
        target="redis", verdict="differs", rows=10, different=5, repair_skipped="not repaired: …"
    )
    jobs.results[("validation", "db_orders", TODAY)] = [
        JobResult("mismatch", rows=20, check_ok=False, validation=repaired),
        JobResult("mismatch", rows=10, check_ok=False, validation=[skipped]),
    ]
    scheduler.tick(threading.Event())
    metrics = scheduler.metrics

    def sample(name: str, target: str) -> float | None:
        labels = {"table": "db_orders", "target": target}
        return metrics.registry.get_sample_value(name, labels)

    # Redis converged: equal now, its success time set; the warehouse still differs by one.
    assert sample("cdc_validation_mismatched_rows", "redis") == 0
    assert sample("cdc_validation_last_success_timestamp_seconds", "redis") == clock.now
    assert sample("cdc_validation_mismatched_rows", "warehouse") == 1
    assert sample("cdc_validation_last_success_timestamp_seconds", "warehouse") is None
    assert sample("cdc_validation_repaired_keys_total", "redis") == 3
    assert sample("cdc_validation_repair_skipped", "redis") == 0
    clock.now += 3600
    scheduler.tick(threading.Event())
    # Above the cap: nothing repaired, the keys reported (the mismatch alert fires).
    assert sample("cdc_validation_mismatched_rows", "redis") == 5
    assert sample("cdc_validation_repair_skipped", "redis") == 1
    assert sample("cdc_validation_repaired_keys_total", "redis") == 3
    assert [r.validation for r in store.runs if r.state == "mismatch"][-1] == [skipped]
