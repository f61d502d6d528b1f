"""The scheduler's tests' scene: the real ``Scheduler`` on fakes (MemoryLake, FakeJobs,
MemoryRunStore), an injected clock and today, and jitter drawn at the top of its range (the
back-off waits are 10, 20, 40 s). The tests import ``make_scene``, ``mirror``, ``day`` and the
fixed dates from here."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

from cdc_platform.config import SchedulerSettings, TableMirror
from cdc_platform.control import MemoryRunStore
from cdc_platform.retry import RetryPolicy
from scheduler.jobs import FakeJobs, MemoryLake
from scheduler.plan import HourClosing
from scheduler.service import Scheduler

TODAY = date(2026, 11, 26)
MIDNIGHT = datetime(2026, 11, 26, tzinfo=UTC).timestamp()
THREE_THIRTY = MIDNIGHT + 3.5 * 3600  # 03:30 UTC today: hours 00 to 02 have ended


def day(n: int) -> date:
    return TODAY - timedelta(days=n)


def mirror(
    name: str,
    targets: tuple[str, ...] = ("hive",),
    *,
    snapshots: str = "daily",
    every_h: float | None = None,
    **more: object,
) -> TableMirror:
    return TableMirror.model_validate(
        {
            "instance": "local",
            "db_prefix": "db",
            "table_prefix": name,
            "targets": list(targets),
            "snapshots": snapshots,
            "validation_every_h": every_h,
            **more,
        }
    )


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Scene(NamedTuple):
    scheduler: Scheduler
    lake: MemoryLake
    jobs: FakeJobs
    store: MemoryRunStore
    clock: Clock


def make_scene(
    tables: list[TableMirror],
    *,
    now: float,
    lake: MemoryLake | None = None,
    closing: HourClosing | None = None,
    **settings: object,
) -> Scene:
    """A scheduler of ``tables`` (catch-up 3 days, no validation unless ``settings`` say)
    whose clock starts at ``now``."""
    lake = lake or MemoryLake()
    jobs = FakeJobs(lake)
    store = MemoryRunStore()
    clock = Clock(now)
    scheduler = Scheduler(
        SchedulerSettings.model_validate({"catch_up_days": 3, "validation": False, **settings}),
        lambda: tables,
        lake,
        jobs,
        store,
        "test-scheduler",
        clock=clock,
        today=lambda: TODAY,
        policy=RetryPolicy(first_delay_s=10, max_delay_s=40, uniform=lambda _low, high: high),
        closing=closing,
    )
    return Scene(scheduler, lake, jobs, store, clock)
