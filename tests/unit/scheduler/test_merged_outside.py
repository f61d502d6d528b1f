"""Days and hours merged outside the scheduler (``cdc-mirror merge`` by hand, or before its run
history was lost): the lake's tags count as merged, are recorded once as succeeded runs "by a
merge outside the scheduler", and clear a red day or hour merged again by hand; a tag the
scheduler's own failed attempt may have set does not count (the retry redoes it)."""

from __future__ import annotations

import threading
from datetime import date
from zoneinfo import ZoneInfo

import pytest

from cdc_platform.control import MemoryRunStore, RunRecord
from cdc_platform.snapshot_tags import SnapshotTags
from scheduler import plan
from scheduler.jobs import JobResult
from scheduler.plan import MERGED_OUTSIDE, HourClosing
from tests.unit.scheduler.conftest import THREE_THIRTY, TODAY, Scene, day, make_scene, mirror


def run(state: str, ended_at: float | None = 100.0) -> RunRecord:
    return RunRecord(table="t", dt=TODAY, state=state, ended_at=ended_at)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("latest", "committed_ms", "outside"),
    [
        (None, 0, True),  # no run: merged by hand, or the history was lost
        (run("waiting"), 0, True),  # it found the day not ready; someone merged it since
        (run("failed"), 100_001, True),  # merged by hand after the failed attempt
        (run("failed"), 99_000, False),  # the attempt's own tag (its check failed to run)
        (run("mismatch"), 100_001, True),  # a red day merged again by hand
        (run("mismatch"), 50_000, False),  # its own tag: red stays red
        (run("succeeded"), 200_000, False),  # done already
        (run("running", ended_at=None), 200_000, False),  # left by a dead scheduler: retried
    ],
)
def test_which_tags_a_merge_outside_the_scheduler_set(
    latest: RunRecord | None, committed_ms: int, outside: bool
) -> None:
    assert plan.merged_outside(latest, committed_ms) is outside


def test_a_tagged_day_counts_unless_its_latest_run_failed_or_is_running() -> None:
    runs = {day(1): run("failed"), day(2): run("running", None), day(3): run("mismatch")}
    tagged = [day(0), day(1), day(2), day(3)]
    assert plan.tagged_done(tagged, runs) == {day(0), day(3)}


def test_snapshot_tags_name_days_and_hours_and_ignore_other_refs() -> None:
    tags = SnapshotTags.of(
        [
            ("dt-2026-11-25", 1),
            ("hr-2026-11-26-03", 2),
            ("main", 3),
            ("merge-branch", 4),
            ("dt-2026-02-30", 5),  # not a day
            ("hr-2026-11-26-25", 6),  # not an hour
        ]
    )
    assert tags.days == {date(2026, 11, 25): 1}
    assert tags.hours == {(date(2026, 11, 26), 3): 2}


def scene(snapshots: str = "daily", max_attempts: int = 2) -> Scene:
    return make_scene(
        [mirror("orders", snapshots=snapshots)],
        now=THREE_THIRTY,
        closing=HourClosing(ZoneInfo("UTC"), 0),
        max_attempts=max_attempts,
    )


def outside(store: MemoryRunStore) -> list[tuple[date, int | None, str]]:
    return [(r.dt, r.hour, r.state) for r in store.runs if r.requested_by == MERGED_OUTSIDE]


def test_days_merged_by_hand_are_not_merged_again_and_are_recorded_once() -> None:
    scheduler, lake, jobs, store, clock = scene()
    lake.ready = {day(3), day(2), day(1)}
    lake.tag("db_orders", day(3), None, int(clock.now * 1000) - 5_000)
    lake.tag("db_orders", day(2), None, int(clock.now * 1000) - 4_000)
    stop = threading.Event()
    assert scheduler.tick(stop) == 1
    assert [(d.dt, d.hour) for d in jobs.started] == [(day(1), None)]  # only the day left
    assert outside(store) == [(day(3), None, "succeeded"), (day(2), None, "succeeded")]
    recorded = store.runs[0]
    assert (recorded.started_at, recorded.ended_at) == (None, clock.now - 5)  # the tag's time
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_days_behind", {"table": "db_orders"}) == 0
    # Asked again next tick: nothing more is recorded, nothing runs.
    assert scheduler.tick(stop) == 0
    assert len(store.runs) == 3


def test_a_day_given_up_then_merged_by_hand_turns_green_and_the_next_days_go_on() -> None:
    scheduler, lake, jobs, store, clock = scene(max_attempts=1)
    lake.ready = {day(2), day(1)}
    lake.tag("db_orders", day(3), None)  # merged before: the days start at day 2
    jobs.results[("merge", "db_orders", day(2))] = [JobResult("failed", error="Spark fell.")]
    stop = threading.Event()
    assert scheduler.tick(stop) == 1
    sample = scheduler.metrics.registry.get_sample_value
    assert scheduler.blocked["db_orders"].reason == "gave up"
    assert sample("cdc_scheduler_red_days", {"table": "db_orders"}) == 1
    # The operator merges day 2 by hand: its tag is newer than the failed run.
    clock.now += 60
    lake.tag("db_orders", day(2), None, int(clock.now * 1000))
    assert scheduler.tick(stop) == 1
    assert [(d.dt, d.attempt) for d in jobs.started] == [(day(2), 1), (day(1), 1)]
    assert outside(store) == [(day(3), None, "succeeded"), (day(2), None, "succeeded")]
    assert sample("cdc_scheduler_red_days", {"table": "db_orders"}) == 0
    assert sample("cdc_scheduler_gave_up", {"table": "db_orders"}) == 0


def test_a_failed_attempts_own_tag_does_not_count_and_the_retry_redoes_the_day() -> None:
    scheduler, lake, jobs, store, clock = scene()
    lake.ready = {day(1)}
    lake.tag("db_orders", day(2), None)

    def tag_then_fail(due: object) -> None:  # the merge set the tag, then its check failed
        lake.tag("db_orders", day(1), None, int(clock.now * 1000))

    jobs.on_start = tag_then_fail  # type: ignore[assignment]
    jobs.results[("merge", "db_orders", day(1))] = [JobResult("failed", error="check died.")]
    stop = threading.Event()
    assert scheduler.tick(stop) == 1
    clock.now += 10
    assert scheduler.tick(stop) == 1
    assert [(d.dt, d.attempt) for d in jobs.started] == [(day(1), 1), (day(1), 2)]
    assert outside(store) == [(day(2), None, "succeeded")]


def test_an_hour_merged_by_hand_is_skipped_and_a_waiting_hour_ends_in_its_own_record() -> None:
    scheduler, lake, jobs, store, clock = scene("hourly")
    lake.ready = {day(1)}
    lake.tag("db_orders", day(1), None)
    lake.tag("db_orders", day(1), 5)  # an hour of a merged day without a run: not recorded
    jobs.results[("merge", "db_orders", TODAY, 0)] = [JobResult("waiting", error="not ready.")]
    stop = threading.Event()
    assert scheduler.tick(stop) == 1
    [waiting] = [r for r in store.runs if r.hour == 0]
    assert waiting.state == "waiting"
    # Hours 00 and 01 are merged by hand meanwhile.
    clock.now += 60
    lake.tag("db_orders", TODAY, 0, int(clock.now * 1000))
    lake.tag("db_orders", TODAY, 1, int(clock.now * 1000))
    assert scheduler.tick(stop) == 1
    assert [(d.dt, d.hour) for d in jobs.started] == [(TODAY, 0), (TODAY, 2)]
    assert outside(store) == [
        (day(1), None, "succeeded"),
        (TODAY, 0, "succeeded"),
        (TODAY, 1, "succeeded"),
    ]
    ended = next(r for r in store.runs if r.id == waiting.id)
    assert (ended.state, ended.requested_by) == ("succeeded", MERGED_OUTSIDE)
    sample = scheduler.metrics.registry.get_sample_value
    assert sample("cdc_scheduler_hours_behind", {"table": "db_orders"}) == 0
