"""Replays as jobs: the web admin submits, a replay worker process runs (issue 22, item 8).

The web server never runs a replay. ``JobReplayService`` (the admin's ``ReplayService``)
checks a request the way mock_replay would — the instance, its topic, the tables found by the
shard rules, the condition against their columns — so a refused request is still answered at
once with mock_replay's one sentence and nothing is queued; then it writes a ``replay_jobs``
row (state ``pending``) and returns. Status, history and the Overview read that table only:
no page reads a Kafka topic.

``ReplayJobWorker`` is the other half, run by ``cdc-mirror replay-worker``: every
``poll_s`` it writes a heartbeat and the progress of its runs to their rows, passes on cancel
requests, and claims pending jobs up to ``max_runs`` (an ``UPDATE … WHERE state = 'pending'``
that only one worker wins). A job whose worker has been silent for ``stale_s`` (killed,
host lost) is taken over by another worker, which resumes the run where its progress topic
says it stopped (mock_replay's exactly-once resume), or starts it if it was never recorded.

The job's id is the mock_replay run id, so ``cdc-mirror replay --resume`` and the progress
topic name the same run. What runs a job is a ``RunExecutor``: ``MockReplayExecutor`` (real
mock_replay) or ``SimulatedRunExecutor`` (advances with time, publishes nothing; for tests and
for trying the admin without Kafka).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from simple_binlog.errors import CdcMirrorError
from webui.models import ReplayJob
from webui.replay import (
    FINAL_STATES,
    ReplayNotFoundError,
    ReplayRequest,
    ReplayState,
    ReplayStatus,
)

if TYPE_CHECKING:
    from mock_replay.runner import ReplayRequest as MockRequest

log = logging.getLogger(__name__)

# The admin's instances as mock_replay needs them: with their passwords.
InstancesProvider = Callable[[], list[InstanceConfig]]

# A worker silent this long has lost its jobs to the next worker that polls.
DEFAULT_STALE_S = 30.0
# A pending job older than this without a worker gets a note saying so.
UNCLAIMED_NOTE_AFTER_S = 10.0
# A table mirror's initial load starts this long after it was queued: every running
# component takes a configuration change within 10 s (config_store.poll_interval_s is at most
# 5 s, plus the batch in progress), so none passes over replayed rows of a table it does not
# know yet.
INITIAL_LOAD_DELAY_S = 10.0
# History shown: the newest runs (pages stay fast however many runs there were).
HISTORY_LIMIT = 200


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes for timezone-aware columns; they are UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _seconds(value: datetime | None) -> float | None:
    aware = _aware(value)
    return None if aware is None else aware.timestamp()


def new_run_id(now: datetime) -> str:
    """A run id as mock_replay makes them (sortable by time, unique by chance)."""
    from mock_replay.runner import new_run_id as mock_run_id  # noqa: PLC0415

    return mock_run_id(now)


# --- what pages show ------------------------------------------------------------------------


def job_status(row: ReplayJob, now: float, stale_s: float = DEFAULT_STALE_S) -> ReplayStatus:
    """A job row as the admin shows it, with a note when it waits or its worker is silent.
    Pure."""
    state: ReplayState = row.state  # type: ignore[assignment]
    created = _seconds(row.created_at) or now
    heartbeat = _seconds(row.heartbeat_at)
    note: str | None = None
    delay = INITIAL_LOAD_DELAY_S if row.table_mirror else 0.0
    if state == "pending" and now - created < delay:
        note = (
            f"starts in {delay - (now - created):.0f} s, once every running component has "
            f"taken table mirror {row.table_mirror} from the configuration."
        )
    elif state == "pending" and now - created >= UNCLAIMED_NOTE_AFTER_S + delay:
        note = (
            f"waiting for a replay worker: none has taken this run in {now - created:.0f} s "
            "(start one with 'cdc-mirror replay-worker')."
        )
    elif state == "running" and heartbeat is not None and now - heartbeat >= stale_s:
        note = (
            f"its replay worker ({row.worker}) has not reported for {now - heartbeat:.0f} s; "
            "the next replay worker that polls resumes the run."
        )
    elif row.cancel_requested and state not in FINAL_STATES:
        note = "cancel requested"
    return ReplayStatus(
        run_id=row.run_id,
        request=ReplayRequest.model_validate(row.request),
        state=state,
        rows_done=row.rows_done,
        rows_total=row.rows_done if state == "succeeded" else row.rows_total,
        started_at=created,
        finished_at=_seconds(row.finished_at),
        error=row.error,
        note=note,
    )


# --- the web admin's side -------------------------------------------------------------------


RequestCheck = Callable[[ReplayRequest, str], None]


def mock_replay_check(settings: Settings, instances: InstancesProvider) -> RequestCheck:
    """Refuse a request as mock_replay would, before it is queued: the instance, its topic,
    the shard tables (each with a key) and the condition against their columns. Reads the
    schema from MySQL (as saving a table mirror does); publishes nothing."""

    def check(request: ReplayRequest, run_id: str) -> None:
        from mock_replay.runner import prepare_run  # noqa: PLC0415 - MySQL client
        from mock_replay.source import MySQLSource  # noqa: PLC0415

        configured = instances()
        check_topic(settings, configured, request.instance)
        config = ConfigSnapshot(version=0, instances=tuple(configured))
        source = MySQLSource(config.instance(request.instance).login(), None)
        try:
            prepare_run(settings, _mock_request(request), source, _now(), run_id, config)
        finally:
            source.close()

    return check


def check_topic(settings: Settings, configured: list[InstanceConfig], instance: str) -> None:
    """mock_replay publishes to ``<kafka.topic_prefix><instance>``; an instance whose topic
    was set to something else in the admin is refused rather than replayed into the wrong
    topic."""
    if not configured:
        raise CdcMirrorError("no instance is configured in the admin yet; add one first.")
    expected = f"{settings.kafka.topic_prefix}{instance}"
    topics = {i.name: i.topic or expected for i in configured}
    if instance in topics and topics[instance] != expected:
        raise CdcMirrorError(
            f"instance {instance!r} publishes to {topics[instance]!r}, but "
            f"replays go to {expected!r}; use the default topic to replay this instance."
        )


def _mock_request(request: ReplayRequest) -> MockRequest:
    from mock_replay.runner import ReplayRequest as MockRequest  # noqa: PLC0415

    return MockRequest(
        instance=request.instance,
        db_prefix=request.db_prefix,
        table_prefix=request.table_prefix,
        condition=request.condition,
        execute_day=request.execute_time.isoformat() if request.execute_time else None,
        batch_size=request.batch_size,
    )


class JobReplayService:
    """``webui.replay.ReplayService`` over the ``replay_jobs`` table."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        check: RequestCheck | None = None,
        clock: Callable[[], float] = time.time,
        stale_s: float = DEFAULT_STALE_S,
    ) -> None:
        self._sessions = sessions
        self._check = check
        self._clock = clock
        self._stale_s = stale_s

    def start(self, request: ReplayRequest, table_mirror: str | None = None) -> str:
        """Check ``request`` and queue it. CdcMirrorError: refused, nothing queued."""
        with self._sessions.begin() as db:
            return self.submit(db, request, table_mirror)

    def submit(self, db: Session, request: ReplayRequest, table_mirror: str | None) -> str:
        """Check ``request`` and queue it in the caller's transaction ``db``: the job exists
        only if that transaction commits (a table mirror's initial load, created with the
        mirror or not at all). CdcMirrorError: refused, nothing queued."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        run_id = new_run_id(now)
        if self._check is not None:
            self._check(request, run_id)
        db.add(
            ReplayJob(
                run_id=run_id,
                request=request.model_dump(mode="json"),
                state="pending",
                rows_done=0,
                created_at=now,
                recorded=False,
                cancel_requested=False,
                table_mirror=table_mirror,
            )
        )
        return run_id

    def for_table_mirror(self, name: str) -> list[ReplayStatus]:
        """The initial loads of table mirror ``name``, newest first."""
        now = self._clock()
        with self._sessions() as db:
            rows = db.scalars(
                select(ReplayJob)
                .where(ReplayJob.table_mirror == name)
                .order_by(ReplayJob.created_at.desc())
                .limit(20)
            )
            return [job_status(row, now, self._stale_s) for row in rows]

    def status(self, run_id: str) -> ReplayStatus:
        with self._sessions() as db:
            row = db.get(ReplayJob, run_id)
            if row is None:
                raise ReplayNotFoundError(f"no replay run {run_id!r}.")
            return job_status(row, self._clock(), self._stale_s)

    def cancel(self, run_id: str) -> ReplayStatus:
        """A pending job is cancelled at once; a running one is asked to stop (its worker
        passes it on within a poll, and the run stops after its current chunk)."""
        with self._sessions.begin() as db:
            row = db.get(ReplayJob, run_id)
            if row is None:
                raise ReplayNotFoundError(f"no replay run {run_id!r}.")
            if row.state == "pending":
                row.state = "cancelled"
                row.finished_at = datetime.fromtimestamp(self._clock(), UTC)
            elif row.state not in FINAL_STATES:
                row.cancel_requested = True
        return self.status(run_id)

    def runs(self) -> list[ReplayStatus]:
        now = self._clock()
        with self._sessions() as db:
            rows = db.scalars(
                select(ReplayJob).order_by(ReplayJob.created_at.desc()).limit(HISTORY_LIMIT)
            )
            return [job_status(row, now, self._stale_s) for row in rows]

    def running(self) -> list[ReplayStatus]:
        """Runs not finished yet (pending or running), newest first."""
        now = self._clock()
        with self._sessions() as db:
            rows = db.scalars(
                select(ReplayJob)
                .where(ReplayJob.state.in_(("pending", "running")))
                .order_by(ReplayJob.created_at.desc())
            )
            return [job_status(row, now, self._stale_s) for row in rows]


# --- the worker's side ----------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What a worker needs to run a job."""

    run_id: str
    request: ReplayRequest
    recorded: bool  # the run is in its progress topic: resume it, don't start it


class RunHandle(Protocol):
    """What an executor reports to the worker while it runs a job."""

    def recorded(self) -> None:
        """The run is recorded in its progress topic (a takeover resumes it from there)."""
        ...

    def progress(self, rows_done: int, rows_total: int | None) -> None: ...

    def cancelled(self) -> bool:
        """The admin asked the run to stop."""
        ...


class RunExecutor(Protocol):
    def run(self, job: Job, handle: RunHandle) -> tuple[ReplayState, str | None]:
        """Run (or resume) ``job`` to its end: its final state and error sentence. May raise
        CdcMirrorError (the job fails with its sentence)."""
        ...


class MockReplayExecutor:
    """Runs jobs with mock_replay over the admin's instances (passwords decrypted in memory
    only), cancellable from the admin or from ``cdc-mirror replay cancel``."""

    def __init__(self, settings: Settings, instances: InstancesProvider) -> None:
        self._settings = settings
        self._instances = instances

    def run(self, job: Job, handle: RunHandle) -> tuple[ReplayState, str | None]:
        from mock_replay.progress import TableProgress  # noqa: PLC0415 - Kafka clients
        from mock_replay.publish import CancelWatch, KafkaProgressStore  # noqa: PLC0415
        from mock_replay.runner import (  # noqa: PLC0415
            Cancellation,
            execute_run,
            load_for_resume,
            start_run,
        )

        configured = self._instances()
        check_topic(self._settings, configured, job.request.instance)
        config = ConfigSnapshot(version=0, instances=tuple(configured))
        instance = job.request.instance
        store = KafkaProgressStore(self._settings.kafka, instance)
        try:
            if job.recorded:
                prepared, existing = load_for_resume(
                    self._settings, instance, job.run_id, store, None, config
                )
            else:
                prepared = start_run(
                    self._settings,
                    _mock_request(job.request),
                    store,
                    config=config,
                    run_id=job.run_id,
                )
                existing = {}
                handle.recorded()
            tables: dict[str, TableProgress] = dict(existing)
            estimates = {name: shape.estimated_rows for name, shape in prepared.shapes.items()}

            def report(progress: TableProgress) -> None:
                tables[progress.table] = progress
                done = sum(p.rows_done for p in tables.values())
                total = sum(max(p.estimated_rows, p.rows_done) for p in tables.values())
                total += sum(n for name, n in estimates.items() if name not in tables)
                handle.progress(done, total or None)

            cancellation = _AdminCancellation(
                Cancellation(CancelWatch(self._settings.kafka, instance, job.run_id)), handle
            )
            try:
                outcome = execute_run(
                    self._settings, prepared, existing, store, cancellation.inner, report
                )
            finally:
                cancellation.close()
        finally:
            store.close()
        state: ReplayState = {"done": "succeeded", "cancelled": "cancelled"}.get(  # type: ignore[assignment]
            outcome.state, "failed"
        )
        handle.progress(outcome.rows + sum(p.rows_done for p in existing.values()), None)
        return state, None


class _AdminCancellation:
    """Passes the admin's cancel request (read by the worker's poll) to mock_replay's
    cancellation, which also watches the progress topic for the CLI's requests."""

    def __init__(self, inner: object, handle: RunHandle) -> None:
        from mock_replay.runner import Cancellation  # noqa: PLC0415

        assert isinstance(inner, Cancellation)
        self.inner = inner
        self._handle = handle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="replay-cancel")
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            if self._handle.cancelled():
                self.inner.cancel()
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.inner.close()


class SimulatedRunExecutor:
    """Jobs that go from 0 to ``rows_total`` rows over ``duration_s`` and publish nothing
    (``webui.replays: simulated``, and the worker's own tests)."""

    def __init__(self, duration_s: float = 6.0, rows_total: int = 120_000) -> None:
        self._duration = duration_s
        self._rows_total = rows_total

    def run(self, job: Job, handle: RunHandle) -> tuple[ReplayState, str | None]:
        handle.recorded()
        started = time.monotonic()
        while True:
            if handle.cancelled():
                return "cancelled", None
            fraction = min(1.0, (time.monotonic() - started) / max(self._duration, 1e-9))
            handle.progress(int(self._rows_total * fraction), self._rows_total)
            if fraction >= 1.0:
                return "succeeded", None
            time.sleep(min(0.1, self._duration / 20))


@dataclass
class _LocalRun:
    job: Job
    thread: threading.Thread | None = None
    rows_done: int = 0
    rows_total: int | None = None
    recorded: bool = False
    cancel_requested: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handle:
    def __init__(self, run: _LocalRun, on_recorded: Callable[[], None]) -> None:
        self._run = run
        self._on_recorded = on_recorded

    def recorded(self) -> None:
        with self._run.lock:
            self._run.recorded = True
        self._on_recorded()

    def progress(self, rows_done: int, rows_total: int | None) -> None:
        with self._run.lock:
            self._run.rows_done = rows_done
            if rows_total is not None:
                self._run.rows_total = rows_total

    def cancelled(self) -> bool:
        with self._run.lock:
            return self._run.cancel_requested


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ReplayJobWorker:
    """Claims and runs replay jobs of the admin database; see the module docstring."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: RunExecutor,
        *,
        name: str | None = None,
        max_runs: int = 2,
        poll_s: float = 1.0,
        stale_s: float = DEFAULT_STALE_S,
        initial_load_delay_s: float = INITIAL_LOAD_DELAY_S,
    ) -> None:
        self._sessions = sessions
        self._executor = executor
        self.name = name or default_worker_name()
        self._max_runs = max_runs
        self._poll_s = poll_s
        self._stale_s = stale_s
        self._initial_load_delay = timedelta(seconds=initial_load_delay_s)
        self._runs: dict[str, _LocalRun] = {}
        self._lock = threading.Lock()

    # -- the loop ---------------------------------------------------------------------------
    def run_forever(self, stop: threading.Event) -> None:
        log.info("replay worker %s polls the admin database every %g s", self.name, self._poll_s)
        while not stop.is_set():
            try:
                self.poll()
            except CdcMirrorError as exc:
                log.warning("replay worker: %s", exc)
            except Exception as exc:  # noqa: BLE001 - a database hiccup must not end the worker
                log.warning("replay worker: the admin database did not answer (%s)", exc)
            stop.wait(self._poll_s)

    def poll(self) -> list[str]:
        """Report the local runs, then claim what there is room for; the ids claimed."""
        self._report()
        claimed: list[str] = []
        while self.active() < self._max_runs:
            job = self._claim()
            if job is None:
                break
            claimed.append(job.run_id)
            self._launch(job)
        return claimed

    def active(self) -> int:
        with self._lock:
            return sum(1 for r in self._runs.values() if r.thread and r.thread.is_alive())

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait for every local run to end (tests, and a graceful stop)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = [r.thread for r in self._runs.values() if r.thread is not None]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.active() == 0

    # -- claiming ---------------------------------------------------------------------------
    def _claim(self) -> Job | None:
        now = _now()
        with self._sessions.begin() as db:
            candidates = db.execute(
                select(ReplayJob.run_id, ReplayJob.state, ReplayJob.heartbeat_at)
                .where(
                    (
                        (ReplayJob.state == "pending")
                        & (
                            ReplayJob.table_mirror.is_(None)
                            | (ReplayJob.created_at <= now - self._initial_load_delay)
                        )
                    )
                    | (
                        (ReplayJob.state == "running")
                        & (ReplayJob.heartbeat_at < now - timedelta(seconds=self._stale_s))
                    )
                )
                .order_by(ReplayJob.created_at)
                .limit(10)
            ).all()
        for run_id, state, heartbeat in candidates:
            with self._lock:
                if run_id in self._runs and self._runs[run_id].thread is not None:
                    continue
            with self._sessions.begin() as db:
                result = db.execute(
                    update(ReplayJob)
                    .where(ReplayJob.run_id == run_id, ReplayJob.state == state)
                    .where(
                        ReplayJob.heartbeat_at.is_(None)
                        if heartbeat is None
                        else ReplayJob.heartbeat_at == heartbeat
                    )
                    .values(
                        state="running",
                        worker=self.name,
                        heartbeat_at=now,
                        started_at=now if state == "pending" else ReplayJob.started_at,
                    )
                    .execution_options(synchronize_session=False)
                )
                if cast("CursorResult[Any]", result).rowcount != 1:
                    continue  # another worker was quicker
                row = db.get(ReplayJob, run_id)
                assert row is not None
                if row.cancel_requested:
                    # Its worker was lost after the admin asked it to stop: stop it here.
                    row.state, row.finished_at = "cancelled", now
                    continue
                job = Job(run_id, ReplayRequest.model_validate(row.request), row.recorded)
            if state == "running":
                log.info(
                    "replay worker %s takes over run %s (its worker went silent)", self.name, run_id
                )
            else:
                log.info("replay worker %s starts run %s", self.name, run_id)
            return job
        return None

    def _launch(self, job: Job) -> None:
        local = _LocalRun(job, recorded=job.recorded)

        def mark_recorded() -> None:
            with self._sessions.begin() as db:
                db.execute(
                    update(ReplayJob)
                    .where(ReplayJob.run_id == job.run_id, ReplayJob.worker == self.name)
                    .values(recorded=True)
                    .execution_options(synchronize_session=False)
                )

        handle = _Handle(local, mark_recorded)

        def work() -> None:
            error: str | None
            try:
                state, error = self._executor.run(job, handle)
            except CdcMirrorError as exc:
                state, error = "failed", str(exc)
                log.error("replay run %s failed: %s", job.run_id, exc)
            except Exception as exc:  # the job fails, the worker goes on
                state, error = "failed", f"the replay stopped unexpectedly: {exc}"
                log.exception("replay run %s stopped unexpectedly", job.run_id)
            self._finish(local, state, error)

        local.thread = threading.Thread(target=work, name=f"replay-job-{job.run_id}", daemon=True)
        with self._lock:
            self._runs[job.run_id] = local
        local.thread.start()

    # -- reporting --------------------------------------------------------------------------
    def _report(self) -> None:
        """Heartbeat and progress of every local run; the admin's cancel requests back."""
        with self._lock:
            self._runs = {k: r for k, r in self._runs.items() if r.thread and r.thread.is_alive()}
            runs = list(self._runs.values())
        if not runs:
            return
        now = _now()
        with self._sessions.begin() as db:
            for local in runs:
                with local.lock:
                    rows_done, rows_total = local.rows_done, local.rows_total
                row = db.get(ReplayJob, local.job.run_id)
                if row is None or row.worker != self.name or row.state != "running":
                    continue  # taken over, or finished meanwhile
                row.heartbeat_at = now
                row.rows_done = rows_done
                row.rows_total = rows_total
                if row.cancel_requested:
                    with local.lock:
                        local.cancel_requested = True

    def _finish(self, local: _LocalRun, state: ReplayState, error: str | None) -> None:
        with local.lock:
            rows_done, rows_total = local.rows_done, local.rows_total
        try:
            with self._sessions.begin() as db:
                row = db.get(ReplayJob, local.job.run_id)
                if row is None or row.worker != self.name:
                    return
                row.state = state
                row.error = error
                row.rows_done = rows_done
                row.rows_total = rows_total
                row.finished_at = _now()
                row.heartbeat_at = row.finished_at
        except Exception:  # a takeover resumes the run; nothing is lost
            log.exception(
                "replay run %s ended %s, but its job could not be updated", local.job.run_id, state
            )
