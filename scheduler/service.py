"""The active scheduler's loop: every ``scheduler.tick_s`` it takes the newest configuration,
runs the re-runs operators requested, then each table's next merge (``scheduler.plan``: a
day, or an hour of a table with hourly snapshots whose day is not ready yet), one job at a
time, round the tables until nothing is due, then the validations and maintenance of the
newest merged days, and the validations due by a table's own cadence
(``validation_every_h``). Every run is recorded in the run store before it starts and when it
ends (``cdc_platform.control.RunStore``: the web admin's database); a validation's outcome per
target is kept with its run and exported as metrics (``SchedulerMetrics.validated``).

Everything it touches is injected (the tables, the lake, the jobs, the run store, the clock):
the unit tests drive ``tick`` with fakes, the failover test runs it under a real election.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from cdc_platform.config import SchedulerSettings, StreamWriterSettings, TableMirror
from cdc_platform.control import RunKind, RunRecord, RunStore
from cdc_platform.retry import RetryPolicy
from cdc_platform.snapshot_tags import SnapshotTags
from scheduler import plan
from scheduler.jobs import JobResult, Jobs, Lake
from scheduler.metrics import SchedulerMetrics
from scheduler.plan import Blocked, Due, HourClosing
from simple_binlog.errors import CdcMirrorError

log = logging.getLogger(__name__)


def utc_today() -> date:
    return datetime.now(UTC).date()


class Scheduler:
    def __init__(
        self,
        settings: SchedulerSettings,
        tables: Callable[[], list[TableMirror]],
        lake: Lake,
        jobs: Jobs,
        runs: RunStore,
        identifier: str,
        metrics: SchedulerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        today: Callable[[], date] = utc_today,
        policy: RetryPolicy | None = None,
        closing: HourClosing | None = None,
    ) -> None:
        self._settings = settings
        self._tables = tables
        self._lake = lake
        self._jobs = jobs
        self._runs = runs
        self.identifier = identifier
        self.metrics = metrics or SchedulerMetrics()
        self._clock = clock
        self._today = today
        # The retry policy's back-off (doubling, jittered); the wait is drawn when a run fails.
        self._policy = policy or RetryPolicy(
            first_delay_s=settings.first_retry_s, max_delay_s=settings.max_retry_s
        )
        # When an hour of a table with hourly snapshots may be merged (the stream writer's
        # zone and delays: ``HourClosing.of(settings.stream_writer)``).
        self._closing = closing or HourClosing.of(StreamWriterSettings())
        self._latest: dict[tuple[RunKind, str, date], RunRecord] = {}
        # The latest merge run of each table's hours (hourly snapshots).
        self._hours: dict[tuple[str, date, int], RunRecord] = {}
        self._loaded_since: date | None = None
        self.doing = "idle"
        self.blocked: dict[str, Blocked] = {}

    # -- the history ------------------------------------------------------------------------
    def _days(self) -> list[date]:
        return plan.window(self._today(), self._settings.catch_up_days, self._settings.first_day)

    def _load_history(self, since: date) -> None:
        """The runs of the window, once per leadership (then kept up to date here)."""
        if self._loaded_since is not None and self._loaded_since <= since:
            return
        found: list[RunRecord] = []
        kinds: tuple[RunKind, ...] = ("merge", "validation", "maintenance")
        for kind in kinds:
            found.extend(self._runs.history(kind, since))
        self._latest = plan.latest_runs(found)
        self._hours = plan.latest_hour_runs(found)
        self._loaded_since = since

    def _merge_runs(self, table: str) -> dict[date, RunRecord]:
        return {
            dt: run
            for (kind, name, dt), run in self._latest.items()
            if kind == "merge" and name == table
        }

    def _hour_runs(self, table: str) -> dict[tuple[date, int], RunRecord]:
        return {(dt, hour): run for (name, dt, hour), run in self._hours.items() if name == table}

    def _latest_of(self, kind: RunKind, table: str, dt: date, hour: int | None) -> RunRecord | None:
        if hour is None:
            return self._latest.get((kind, table, dt))
        return self._hours.get((table, dt, hour))

    def _remember(self, run: RunRecord) -> None:
        if run.hour is None:
            self._latest[(run.kind, run.table, run.dt)] = run
        else:
            self._hours[(run.table, run.dt, run.hour)] = run

    # -- one tick ----------------------------------------------------------------------------
    def tick(self, stop: threading.Event) -> int:
        """Run everything due now; returns how many runs ended. Store failures end the tick
        early (logged); the next tick tries again."""
        ended = 0
        try:
            days = self._days()
            self._load_history(days[0])
            for request in self._runs.requested():
                if stop.is_set():
                    return ended
                latest = self._latest_of(request.kind, request.table, request.dt, request.hour)
                attempt = latest.attempt + 1 if latest is not None else 1
                self._run(
                    Due(request.kind, request.table, request.dt, attempt, request, request.hour),
                    stop,
                )
                ended += 1
            # Asked once a tick (a lake with hundreds of tables is not re-read for every run):
            # what this tick merges is known from its own runs.
            tables = self._hive_tables()
            tags = self._lake.snapshot_tags(tables)
            self._record_merged_outside(days, tags)
            merged = {
                table: plan.tagged_done(
                    tags.get(table, SnapshotTags()).days, self._merge_runs(table)
                )
                for table in tables
            }
            ended += self._merges(days, merged, stop)
            ended += self._follow_ups(merged, stop)
        except CdcMirrorError as exc:
            log.warning("scheduler tick ended early: %s", exc)
        finally:
            self.doing = "idle"
            self.metrics.last_tick.set(self._clock())
        return ended

    def _record_merged_outside(self, days: list[date], tags: Mapping[str, SnapshotTags]) -> None:
        """A succeeded run for each day of the window, and each hour of a day not merged whole
        yet (or with a run of its own), whose tag a merge outside the scheduler set."""
        first, last = days[0], days[-1] + timedelta(days=1)
        for table, tagged in tags.items():
            runs = self._merge_runs(table)
            for day, committed_ms in sorted(tagged.days.items()):
                if first <= day <= days[-1] and plan.merged_outside(runs.get(day), committed_ms):
                    self._record_outside(table, day, None, runs.get(day), committed_ms)
            hour_runs = self._hour_runs(table)
            for (day, hour), committed_ms in sorted(tagged.hours.items()):
                run = hour_runs.get((day, hour))
                if not first <= day <= last or (run is None and day in tagged.days):
                    continue  # outside the window, or merged with its day: nothing to mend
                if plan.merged_outside(run, committed_ms):
                    self._record_outside(table, day, hour, run, committed_ms)

    def _record_outside(
        self, table: str, day: date, hour: int | None, latest: RunRecord | None, committed_ms: int
    ) -> None:
        """Record a day or hour merged outside the scheduler as a succeeded run; a run that
        waited for its readiness ends so, in its own record."""
        waited = latest is not None and latest.state == "waiting"
        base = latest if waited and latest is not None else None
        run = self._runs.save(
            (
                base or RunRecord(kind="merge", table=table, dt=day, hour=hour, state="succeeded")
            ).model_copy(
                update={
                    "state": "succeeded",
                    "attempt": latest.attempt if latest is not None else 1,
                    "requested_by": plan.MERGED_OUTSIDE,
                    "scheduler": self.identifier,
                    "started_at": None,
                    # when its tag's snapshot was committed (unknown: now)
                    "ended_at": committed_ms / 1000 if committed_ms else self._clock(),
                    "retry_at": None,
                    "error": None,
                }
            )
        )
        self._remember(run)
        log.info("merge %s %s: merged outside the scheduler", table, plan.when(day, hour))

    def _hive_tables(self) -> list[str]:
        return sorted(t.name for t in self._tables() if "hive" in t.targets)

    def _hourly_tables(self) -> set[str]:
        return {t.name for t in self._tables() if "hive" in t.targets and t.snapshots == "hourly"}

    def _done(self, table: str, merged: dict[str, set[date]]) -> set[date]:
        """The table's merged days: the lake's at the tick's start and this scheduler's runs."""
        runs = self._merge_runs(table)
        return merged.get(table, set()) | {
            d for d, r in runs.items() if r.state in plan.DONE_STATES
        }

    def _merges(self, days: list[date], merged: dict[str, set[date]], stop: threading.Event) -> int:
        ended = 0
        progressing = True
        while progressing and not stop.is_set():
            progressing = False
            ready = self._lake.ready_days()
            hourly = self._hourly_tables()
            for table in self._hive_tables():
                if stop.is_set():
                    break
                done = self._done(table, merged)
                runs = self._merge_runs(table)
                now, attempts = self._clock(), self._settings.max_attempts
                step = (
                    plan.next_hourly_merge(
                        table,
                        days,
                        ready,
                        done,
                        runs,
                        self._hour_runs(table),
                        self._closing,
                        now,
                        attempts,
                    )
                    if table in hourly
                    else plan.next_merge(table, days, ready, done, runs, now, attempts)
                )
                self._observe(table, days, ready, done, runs, step)
                if table in hourly:
                    self._observe_hours(table, days, ready, done)
                if isinstance(step, Due):
                    self._run(step, stop)
                    ended += 1
                    progressing = True
        return ended

    def _validated(self) -> set[str]:
        """Tables the scheduler validates: with a target to validate (their ``validation``
        is not off, ``TableMirror.scheduled_validation_targets``)."""
        return {t.name for t in self._tables() if t.scheduled_validation_targets}

    def _cadences(self) -> dict[str, float]:
        """Tables validated on their own cadence (hours)."""
        return {
            t.name: t.validation_every_h
            for t in self._tables()
            if t.validation_every_h is not None and t.scheduled_validation_targets
        }

    def _follow_ups(self, merged: dict[str, set[date]], stop: threading.Event) -> int:
        cadences = self._cadences() if self._settings.validation else {}
        validated = self._validated() if self._settings.validation else set()
        ended = 0
        for table in self._hive_tables():
            kinds: list[RunKind] = []
            if table in validated and table not in cadences:
                kinds.append("validation")
            if self._settings.maintenance_command:
                kinds.append("maintenance")
            for due in plan.follow_ups(table, self._done(table, merged), self._latest, kinds):
                if stop.is_set():
                    return ended
                self._run(due, stop)
                ended += 1
        for table, every_h in sorted(cadences.items()):
            if stop.is_set():
                return ended
            if plan.validation_due(every_h, self._latest_validation(table), self._clock()):
                today = self._today()
                latest = self._latest.get(("validation", table, today))
                attempt = latest.attempt + 1 if latest is not None else 1
                self._run(Due("validation", table, today, attempt), stop)
                ended += 1
        return ended

    def _latest_validation(self, table: str) -> RunRecord | None:
        runs = [
            run
            for (kind, name, _), run in self._latest.items()
            if kind == "validation" and name == table
        ]
        return max(runs, key=lambda r: r.id or 0, default=None)

    def _observe(
        self,
        table: str,
        days: list[date],
        ready: set[date],
        merged: set[date],
        runs: dict[date, RunRecord],
        step: Due | Blocked | None,
    ) -> None:
        done = merged | {d for d, r in runs.items() if r.state in plan.DONE_STATES}
        self.metrics.days_behind.labels(table).set(plan.days_behind(days, ready, done))
        self.metrics.red_days.labels(table).set(len(plan.red_days(runs)))
        self.metrics.gave_up.labels(table).set(
            1 if isinstance(step, Blocked) and step.reason == "gave up" else 0
        )
        if isinstance(step, Blocked):
            if self.blocked.get(table) != step:
                log.info("%s %s waits: %s", table, plan.when(step.dt, step.hour), step.reason)
            self.blocked[table] = step
        else:
            self.blocked.pop(table, None)

    def _observe_hours(
        self, table: str, days: list[date], ready: set[date], merged: set[date]
    ) -> None:
        """The hourly figures of a table with hourly snapshots (``merged``: its done days)."""
        runs = self._hour_runs(table)
        now = self._clock()
        self.metrics.hours_behind.labels(table).set(
            plan.hours_behind(days, ready, merged, runs, self._closing, now)
        )
        since = days[0]
        self.metrics.red_hours.labels(table).set(
            sum(1 for day, _ in plan.red_hours(runs) if day >= since)
        )
        newest = plan.newest_hour(runs)
        if newest is not None:
            self.metrics.newest_hour.labels(table).set(self._closing.end(*newest))

    # -- one run -----------------------------------------------------------------------------
    def _run(self, due: Due, stop: threading.Event) -> None:
        started = self._clock()
        left = self._latest_of(due.kind, due.table, due.dt, due.hour)
        if left is not None and left.state == "running":
            # A scheduler that died (or lost its session) in the middle of this run: say so.
            self._runs.save(
                left.model_copy(
                    update={
                        "state": "failed",
                        "ended_at": started,
                        "error": f"its scheduler ({left.scheduler}) ended before the run did.",
                    }
                )
            )
        # A merge that waited for readiness goes on in its own record: one row per day or
        # hour in the history however often it looked, not one per look.
        waited = left if left is not None and left.state == "waiting" else None
        base = (
            due.request
            or waited
            or RunRecord(kind=due.kind, table=due.table, dt=due.dt, hour=due.hour, state="running")
        )
        run = self._runs.save(
            base.model_copy(
                update={
                    "state": "running",
                    "attempt": due.attempt,
                    "scheduler": self.identifier,
                    "started_at": started,
                    "retry_at": None,
                }
            )
        )
        self._remember(run)
        self.doing = f"{due.kind} {due.table} {due.when} (attempt {due.attempt})"
        log.info("%s %s %s: attempt %d", due.kind, due.table, due.when, due.attempt)
        try:
            result = self._jobs.run(due, stop)
        except Exception as exc:  # noqa: BLE001 - a job that cannot start is a failed run
            result = JobResult("failed", error=f"{type(exc).__name__}: {exc}")
        ended = self._clock()
        retry_at = None
        if result.state == "waiting":
            max_wait_h = self._settings.max_wait_ready_h
            if plan.overdue(due, self._closing, ended, max_wait_h * 3600):
                # Not a writer lagging a little: one that is stuck. Red, like any failure.
                why = f"still not ready {max_wait_h:g} h after it closed: {result.error}"
                result = replace(result, state="failed", error=why[:2000])
            else:
                retry_at = ended + self._settings.not_ready_retry_s
        if result.state == "failed" and due.kind == "merge":
            retry_at = ended + self._policy.delay(due.attempt)
        run = self._runs.save(
            run.model_copy(
                update={
                    "state": result.state,
                    "ended_at": ended,
                    "rows": result.rows,
                    "files": result.files,
                    "check_ok": result.check_ok,
                    "error": result.error,
                    "retry_at": retry_at,
                    "validation": result.validation,
                }
            )
        )
        self._remember(run)
        self.metrics.runs.labels(due.kind, result.state).inc()
        if due.hour is not None:
            self.metrics.hour_runs.labels(result.state).inc()
        if result.validation:
            self.metrics.validated(due.table, result.validation, ended)
        if result.state == "succeeded":
            log.info("%s %s %s: done", due.kind, due.table, due.when)
        elif result.state == "waiting":
            log.info(
                "%s %s %s: not ready yet, looking again at %s UTC (%s)",
                due.kind,
                due.table,
                due.when,
                f"{datetime.fromtimestamp(retry_at or ended, UTC):%H:%M:%S}",
                result.error,
            )
        else:
            log.warning(
                "%s %s %s: %s%s%s",
                due.kind,
                due.table,
                due.when,
                result.state,
                f" ({result.error})" if result.error else "",
                f"; retrying at {datetime.fromtimestamp(retry_at, UTC):%H:%M:%S} UTC"
                if retry_at
                else "",
            )

    # -- leading -------------------------------------------------------------------------------
    def lead(self, stop: threading.Event) -> None:
        """Tick every ``tick_s`` until ``stop`` (leadership lost or shutdown)."""
        self.metrics.leader.set(1)
        self._loaded_since = None  # another scheduler may have run meanwhile
        try:
            while not stop.is_set():
                self.tick(stop)
                stop.wait(self._settings.tick_s)
        finally:
            self.metrics.leader.set(0)
            # A standby's per-table figures would be stale: only the active one reports them
            # (a stale mismatch would keep an alert firing after the new leader found it equal).
            for gauge in (
                self.metrics.days_behind,
                self.metrics.red_days,
                self.metrics.gave_up,
                self.metrics.hours_behind,
                self.metrics.red_hours,
                self.metrics.newest_hour,
                *self.metrics.validation_gauges(),
            ):
                gauge.clear()
            self.blocked.clear()
