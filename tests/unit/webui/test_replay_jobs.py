"""Replay jobs: the admin queues, replay workers claim, report, cancel and take over (on a
real SQLite admin database; the runs are the shipped simulation, which publishes nothing)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import Settings
from cdc_platform.config_store import InstanceConfig
from simple_binlog.errors import CdcMirrorError
from webui.db import make_engine, migrate, session_factory
from webui.models import ReplayJob
from webui.replay import ReplayRequest, ReplayState
from webui.replay_jobs import (
    Job,
    JobReplayService,
    ReplayJobWorker,
    RunHandle,
    SimulatedRunExecutor,
    check_topic,
    job_status,
)


@pytest.fixture()
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'admin.sqlite'}")
    migrate(engine)
    yield session_factory(engine)
    engine.dispose()


REQUEST = ReplayRequest(instance="orders", db_prefix="shop", table_prefix="orders")


def wait_until(check, timeout_s: float = 10.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def test_a_queued_run_is_claimed_reported_and_finished(sessions) -> None:
    service = JobReplayService(sessions)
    run_id = service.start(REQUEST)
    assert service.status(run_id).state == "pending"
    worker = ReplayJobWorker(
        sessions, SimulatedRunExecutor(duration_s=0.6, rows_total=1000), poll_s=0.05
    )
    assert worker.poll() == [run_id]
    assert service.status(run_id).state == "running"

    def progressed():
        worker.poll()
        status = service.status(run_id)
        return status if 0 < status.rows_done < 1000 else None

    midway = wait_until(progressed, what="progress written back")
    assert midway.rows_total == 1000
    assert worker.wait_idle(10)
    done = service.status(run_id)
    assert (done.state, done.rows_done, done.error) == ("succeeded", 1000, None)
    assert done.finished_at is not None
    assert [r.run_id for r in service.runs()] == [run_id]


def test_a_pending_run_cancels_at_once_and_a_running_one_through_its_worker(sessions) -> None:
    service = JobReplayService(sessions)
    pending = service.start(REQUEST)
    assert service.cancel(pending).state == "cancelled"
    worker = ReplayJobWorker(sessions, SimulatedRunExecutor(duration_s=60), poll_s=0.05)
    assert worker.poll() == []  # nothing left to claim

    running = service.start(REQUEST)
    assert worker.poll() == [running]
    assert service.cancel(running).note == "cancel requested"
    worker.poll()  # passes the request on
    assert worker.wait_idle(10)
    assert service.status(running).state == "cancelled"


def test_only_one_worker_claims_a_job(sessions) -> None:
    service = JobReplayService(sessions)
    run_id = service.start(REQUEST)
    first = ReplayJobWorker(sessions, SimulatedRunExecutor(duration_s=60), name="a")
    second = ReplayJobWorker(sessions, SimulatedRunExecutor(duration_s=60), name="b")
    assert first.poll() == [run_id]
    assert second.poll() == []
    service.cancel(run_id)
    first.poll()
    assert first.wait_idle(10)


class _Recording:
    """Records which jobs it was asked to run, and whether as a resume."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def run(self, job: Job, handle: RunHandle) -> tuple[ReplayState, str | None]:
        self.jobs.append(job)
        handle.recorded()
        handle.progress(7, 7)
        return "succeeded", None


class _Failing:
    def run(self, job: Job, handle: RunHandle) -> tuple[ReplayState, str | None]:
        raise CdcMirrorError("MySQL at 127.0.0.1:1 refused the connection.")


def test_a_silent_workers_job_is_resumed_by_another(sessions) -> None:
    service = JobReplayService(sessions)
    run_id = service.start(REQUEST)
    lost = ReplayJobWorker(sessions, _Recording(), name="lost", stale_s=30)
    # The lost worker claimed it and recorded the run, then went silent 60 s ago.
    with sessions.begin() as db:
        db.execute(
            update(ReplayJob)
            .where(ReplayJob.run_id == run_id)
            .values(
                state="running",
                worker=lost.name,
                recorded=True,
                heartbeat_at=datetime.now(UTC) - timedelta(seconds=60),
            )
        )
    assert "has not reported for" in (service.status(run_id).note or "")
    executor = _Recording()
    taker = ReplayJobWorker(sessions, executor, name="taker", stale_s=30)
    assert taker.poll() == [run_id]
    assert taker.wait_idle(10)
    assert [(j.run_id, j.recorded) for j in executor.jobs] == [(run_id, True)]
    assert service.status(run_id).state == "succeeded"


def test_a_run_that_fails_keeps_its_sentence(sessions) -> None:
    service = JobReplayService(sessions)
    run_id = service.start(REQUEST)
    worker = ReplayJobWorker(sessions, _Failing())
    worker.poll()
    assert worker.wait_idle(10)
    status = service.status(run_id)
    assert (status.state, status.error) == (
        "failed",
        "MySQL at 127.0.0.1:1 refused the connection.",
    )


def test_a_refused_request_is_not_queued(sessions) -> None:
    def refuse(request: ReplayRequest, run_id: str) -> None:
        raise CdcMirrorError("the replay condition is refused: it is not a column.")

    service = JobReplayService(sessions, check=refuse)
    with pytest.raises(CdcMirrorError, match="refused"):
        service.start(REQUEST)
    assert service.runs() == []


def test_an_unclaimed_job_says_it_waits_for_a_worker(sessions) -> None:
    service = JobReplayService(sessions)
    run_id = service.start(REQUEST)
    with sessions() as db:
        row = db.get(ReplayJob, run_id)
        assert row is not None
        assert job_status(row, time.time()).note is None
        note = job_status(row, time.time() + 15).note or ""
    assert "cdc-mirror replay-worker" in note


def _instance(name: str, topic: str | None = None) -> InstanceConfig:
    return InstanceConfig(
        name=name, host="127.0.0.1", port=3306, user="cdc", password=SecretStr("x"), topic=topic
    )


def test_an_instance_with_a_topic_of_its_own_is_refused() -> None:
    with pytest.raises(CdcMirrorError, match="publishes to 'elsewhere'"):
        check_topic(Settings(), [_instance("billing", topic="elsewhere")], "billing")
    with pytest.raises(CdcMirrorError, match="no instance is configured"):
        check_topic(Settings(), [], "billing")
    check_topic(Settings(), [_instance("billing")], "billing")


def test_an_initial_load_waits_until_every_component_can_know_its_table(sessions) -> None:
    """A table mirror's initial load is claimed only INITIAL_LOAD_DELAY_S after it was queued
    (the components take the new mirror within that), and says so while it waits; a plain
    replay is claimed at once."""
    service = JobReplayService(sessions)
    with sessions.begin() as db:
        load = service.submit(db, REQUEST, table_mirror="shop_orders")
    plain = service.start(REQUEST)
    assert "once every running component has taken table mirror shop_orders" in (
        service.status(load).note or ""
    )
    worker = ReplayJobWorker(sessions, SimulatedRunExecutor(duration_s=60), max_runs=5)
    assert worker.poll() == [plain]
    with sessions.begin() as db:
        db.execute(
            update(ReplayJob)
            .where(ReplayJob.run_id == load)
            .values(created_at=datetime.now(UTC) - timedelta(seconds=11))
        )
    assert worker.poll() == [load]
    assert [r.run_id for r in service.for_table_mirror("shop_orders")] == [load]
    for run_id in (load, plain):
        service.cancel(run_id)
    worker.poll()  # passes the cancel requests on
    assert worker.wait_idle(10)
