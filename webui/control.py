"""The control plane's pages and API (issue 22): the component registry (*Components*) and
the scheduler's run history with its re-run action (*Runs*).

API (``cdc_platform.control`` is the client and the wire form):

- ``PUT /api/components/{id}``: a process's heartbeat (``ComponentBeat``), one upsert;
  ``DELETE`` marks it stopped. Tokens of role ``component`` and admins; a collector token
  only for a collector of its own instance. ``GET /api/components``: readers.
- ``GET /api/runs`` (filters ``state``, ``kind``, ``since``), ``POST /api/runs`` and
  ``PUT /api/runs/{id}``: the scheduler writes its history (role ``component`` or admin);
  ``POST /api/runs/rerun``: an admin requests a re-run of a table's day, or of one hour of a
  table with hourly snapshots (``hour``; audited); the active scheduler takes it at its next
  tick. A validation run carries each target's
  outcome (``RunRecord.validation``), which a table's status page shows
  (``validation_history``).

A component is *stale* when its last heartbeat is older than ``webui.component_stale_s``;
rows of processes unseen for ``STALE_ROWS_KEPT_S`` are dropped when a new process registers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, Field, ValidationError, model_validator
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from cdc_platform.control import ComponentBeat, RunKind, RunRecord, RunState, ValidationResult
from webui import admin
from webui.api import DB, Ctx, Editor, Reader, api_principal
from webui.auth import Principal
from webui.models import ComponentRow, SchedulerRun
from webui.pages import EditForm, PageUser, _see, _text, render

# A process not heard of for a week is forgotten (its row is dropped at the next start).
STALE_ROWS_KEPT_S = 7 * 24 * 3600.0
# Days of runs the Runs page shows, and at most this many runs in its history table (the
# grid of days holds every table's verdict; the history is for the latest events).
RUNS_PAGE_DAYS = 14
RUNS_PAGE_HISTORY = 200
# Days of hours the Runs page shows (tables with hourly snapshots): up to 24 runs a day each,
# so fewer days than of whole days, which also bounds what the page reads.
RUNS_PAGE_HOUR_DAYS = 3

api = APIRouter(prefix="/api", tags=["control plane"])
pages = APIRouter(include_in_schema=False)


def writer(principal: Annotated[Principal, Depends(api_principal)]) -> Principal:
    """Processes (tokens of role component) and admins write the registry and the runs."""
    if principal.role != "component" and not principal.can_edit:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "only tokens of role 'component' and admins may do this."
        )
    return principal


def run_reader(principal: Annotated[Principal, Depends(api_principal)]) -> Principal:
    if principal.role != "component" and not principal.can_read:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this token may not read runs.")
    return principal


Writer = Annotated[Principal, Depends(writer)]
RunReader = Annotated[Principal, Depends(run_reader)]


# --- the component registry ---------------------------------------------------------------


class ComponentOut(BaseModel):
    id: str
    kind: str
    instance: str
    host: str
    pid: int
    version: str
    role: str
    detail: str
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    stale: bool


def _may_register(principal: Principal, beat: ComponentBeat) -> bool:
    if principal.role == "collector":
        return (
            principal.kind == "token"
            and beat.kind == "collector"
            and beat.instance == principal.instance
        )
    return principal.role == "component" or principal.can_edit


@api.put("/components/{component_id}", status_code=204)
def heartbeat(
    component_id: str,
    beat: ComponentBeat,
    db: DB,
    principal: Annotated[Principal, Depends(api_principal)],
) -> Response:
    if beat.id != component_id:
        raise HTTPException(422, "the id in the body differs.")
    if not _may_register(principal, beat):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this token may not register this.")
    now = time.time()
    row = db.get(ComponentRow, component_id)
    if row is None:
        db.execute(delete(ComponentRow).where(ComponentRow.heartbeat_at < now - STALE_ROWS_KEPT_S))
        row = ComponentRow(id=component_id)
        db.add(row)
    row.kind, row.instance, row.host, row.pid = beat.kind, beat.instance, beat.host, beat.pid
    row.version, row.role, row.detail = beat.version, beat.role, beat.detail
    row.started_at, row.heartbeat_at, row.stopped_at = beat.started_at, now, None
    return Response(status_code=204)


@api.delete("/components/{component_id}", status_code=204)
def deregister(
    component_id: str, db: DB, principal: Annotated[Principal, Depends(api_principal)]
) -> Response:
    row = db.get(ComponentRow, component_id)
    if row is not None:
        beat = ComponentBeat(
            id=row.id,
            kind=row.kind,
            instance=row.instance,
            host=row.host,
            pid=row.pid,
            version=row.version,
            started_at=row.started_at,
        )
        if not _may_register(principal, beat):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "this token may not do this.")
        row.stopped_at = time.time()
    return Response(status_code=204)


def list_components(db: Session, stale_after_s: float, now: float) -> list[ComponentOut]:
    """Every process known, by kind and instance; stale: no heartbeat for ``stale_after_s``."""
    rows = db.scalars(select(ComponentRow).order_by(ComponentRow.kind, ComponentRow.instance))
    return [
        ComponentOut(
            id=r.id,
            kind=r.kind,
            instance=r.instance,
            host=r.host,
            pid=r.pid,
            version=r.version,
            role=r.role,
            detail=r.detail,
            started_at=r.started_at,
            heartbeat_at=r.heartbeat_at,
            stopped_at=r.stopped_at,
            stale=r.stopped_at is None and now - r.heartbeat_at > stale_after_s,
        )
        for r in rows
    ]


@api.get("/components", response_model=list[ComponentOut])
def components(db: DB, ctx: Ctx, _: Reader) -> list[ComponentOut]:
    return list_components(db, ctx.settings.webui.component_stale_s, time.time())


@pages.get("/components")
def components_page(request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    listed = list_components(db, ctx.settings.webui.component_stale_s, time.time())
    leaders = {
        c.instance: c
        for c in listed
        if c.kind == "collector" and c.role == "active" and not c.stale and c.stopped_at is None
    }
    return render(
        request,
        "components.html",
        who,
        components=listed,
        leaders=leaders,
        stale_after_s=ctx.settings.webui.component_stale_s,
        now=time.time(),
    )


# --- the run history ----------------------------------------------------------------------

# A table's status page shows its validation runs, newest first, at most this many.
VALIDATION_HISTORY = 20


def _validation_results(text: str | None) -> list[ValidationResult] | None:
    if text is None:
        return None
    return [ValidationResult.model_validate(item) for item in json.loads(text)]


def run_record(row: SchedulerRun) -> RunRecord:
    return RunRecord(
        id=row.id,
        kind=row.kind,
        table=row.table_name,
        dt=date.fromisoformat(row.dt),
        hour=row.hour,
        state=row.state,
        attempt=row.attempt,
        requested_by=row.requested_by,
        scheduler=row.scheduler,
        requested_at=row.requested_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        rows=row.rows,
        files=row.files,
        check_ok=row.check_ok,
        error=row.error,
        retry_at=row.retry_at,
        validation=_validation_results(row.validation),
    )


def _apply(row: SchedulerRun, run: RunRecord) -> None:
    row.kind, row.table_name, row.dt, row.state = run.kind, run.table, run.dt.isoformat(), run.state
    row.hour = run.hour
    row.attempt, row.requested_by, row.scheduler = run.attempt, run.requested_by, run.scheduler
    row.requested_at, row.started_at, row.ended_at = run.requested_at, run.started_at, run.ended_at
    row.rows, row.files, row.check_ok = run.rows, run.files, run.check_ok
    row.error, row.retry_at = run.error, run.retry_at
    row.validation = (
        None
        if run.validation is None
        else json.dumps([result.model_dump(mode="json") for result in run.validation])
    )


def find_runs(
    db: Session,
    state: RunState | None = None,
    kind: RunKind | None = None,
    since: date | None = None,
    hours: bool | None = None,
) -> list[SchedulerRun]:
    """Runs, oldest first; ``hours``: only the runs of single hours (True) or of whole days
    (False)."""
    query = select(SchedulerRun).order_by(SchedulerRun.id)
    if hours is not None:
        query = query.where(
            SchedulerRun.hour.is_not(None) if hours else SchedulerRun.hour.is_(None)
        )
    if state is not None:
        query = query.where(SchedulerRun.state == state)
    if kind is not None:
        query = query.where(SchedulerRun.kind == kind)
    if since is not None:
        query = query.where(SchedulerRun.dt >= since.isoformat())
    return list(db.scalars(query))


def validation_history(db: Session, table: str, limit: int = VALIDATION_HISTORY) -> list[RunRecord]:
    """The table mirror's validation runs, newest first (one query on kind and table)."""
    query = (
        select(SchedulerRun)
        .where(SchedulerRun.kind == "validation", SchedulerRun.table_name == table)
        .order_by(SchedulerRun.id.desc())
        .limit(limit)
    )
    return [run_record(row) for row in db.scalars(query)]


def last_validations(history: list[RunRecord]) -> list[tuple[RunRecord, ValidationResult]]:
    """Each target's newest outcome in ``history`` (newest first), by target name."""
    found: dict[str, tuple[RunRecord, ValidationResult]] = {}
    for run in history:
        for result in run.validation or []:
            found.setdefault(result.target, (run, result))
    return [found[target] for target in sorted(found)]


@api.get("/runs", response_model=list[RunRecord])
def runs(
    db: DB,
    _: RunReader,
    state: Annotated[RunState | None, Query()] = None,
    kind: Annotated[RunKind | None, Query()] = None,
    since: Annotated[date | None, Query()] = None,
) -> list[RunRecord]:
    return [run_record(row) for row in find_runs(db, state, kind, since)]


@api.post("/runs", response_model=RunRecord, status_code=201)
def create_run(run: RunRecord, db: DB, _: Writer) -> RunRecord:
    row = SchedulerRun()
    _apply(row, run)
    db.add(row)
    db.flush()
    return run_record(row)


@api.put("/runs/{run_id}", response_model=RunRecord)
def update_run(run_id: int, run: RunRecord, db: DB, _: Writer) -> RunRecord:
    row = db.get(SchedulerRun, run_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"there is no run {run_id}.")
    _apply(row, run)
    return run_record(row)


class RerunIn(BaseModel):
    kind: RunKind = "merge"
    table: str = Field(min_length=1, max_length=200)
    dt: date
    # One hour of the day (a merge of a table with hourly snapshots); None: the day.
    hour: int | None = Field(None, ge=0, le=24)

    @model_validator(mode="after")
    def _hours_are_merges(self) -> RerunIn:
        if self.hour is not None and self.kind != "merge":
            raise ValueError("only a merge runs for one hour; leave the hour out")
        return self


def request_rerun(db: Session, who: Principal, wanted: RerunIn) -> RunRecord:
    """A re-run of a table's day (or hour) for the scheduler's next tick (one pending per day
    and hour: asking twice returns the first request); audited."""
    for row in find_runs(db, "requested", wanted.kind, wanted.dt):
        if (
            row.table_name == wanted.table
            and row.dt == wanted.dt.isoformat()
            and row.hour == wanted.hour
        ):
            return run_record(row)
    row = SchedulerRun()
    _apply(
        row,
        RunRecord(
            kind=wanted.kind,
            table=wanted.table,
            dt=wanted.dt,
            hour=wanted.hour,
            state="requested",
            requested_by=who.name,
            requested_at=time.time(),
        ),
    )
    db.add(row)
    db.flush()
    admin.audit(
        db,
        who.name,
        "rerun",
        wanted.kind,
        f"{wanted.table} {when(wanted.dt, wanted.hour)}",
        None,
        {"run": row.id},
    )
    return run_record(row)


@api.post("/runs/rerun", response_model=RunRecord, status_code=201)
def rerun(wanted: RerunIn, db: DB, who: Editor) -> RunRecord:
    return request_rerun(db, who, wanted)


def when(dt: date, hour: int | None) -> str:
    """``2026-11-25``, or ``2026-11-25T13`` for an hour (as ``cdc-mirror merge --hour``)."""
    return dt.isoformat() if hour is None else f"{dt.isoformat()}T{hour:02d}"


@dataclass(frozen=True)
class DayCell:
    """The Runs page's verdict of one table's day (the latest merge run of that day), or of
    one hour of it (tables with hourly snapshots)."""

    run: RunRecord

    @property
    def colour(self) -> str:
        state = self.run.state
        return {"succeeded": "green", "mismatch": "red", "failed": "red"}.get(state, "grey")


def day_grid(history: list[RunRecord], days: list[date]) -> dict[str, dict[date, DayCell]]:
    """Table → day → the latest merge run of that day (requests count once taken; runs of
    single hours are ``hour_grid``'s). Pure."""
    grid: dict[str, dict[date, DayCell]] = {}
    for run in sorted(history, key=lambda r: r.id or 0):
        if run.kind == "merge" and run.dt in days and run.state != "requested" and run.hour is None:
            grid.setdefault(run.table, {})[run.dt] = DayCell(run)
    return dict(sorted(grid.items()))


def hour_grid(
    history: list[RunRecord], days: list[date]
) -> dict[tuple[str, date], dict[int, DayCell]]:
    """(table, day) → hour → the latest merge run of that hour, newest day first: the hours
    merged by themselves (tables with hourly snapshots). Pure."""
    grid: dict[tuple[str, date], dict[int, DayCell]] = {}
    for run in sorted(history, key=lambda r: r.id or 0):
        if (
            run.kind == "merge"
            and run.hour is not None
            and run.dt in days
            and run.state != "requested"
        ):
            grid.setdefault((run.table, run.dt), {})[run.hour] = DayCell(run)
    return dict(sorted(grid.items(), key=lambda item: (item[0][0], -item[0][1].toordinal())))


@pages.get("/runs")
def runs_page(request: Request, db: DB, who: PageUser) -> Response:
    today = date.today()
    since = today - timedelta(days=RUNS_PAGE_DAYS)
    hours_since = today - timedelta(days=RUNS_PAGE_HOUR_DAYS)
    history = [run_record(row) for row in find_runs(db, since=since, hours=False)]
    history += [run_record(row) for row in find_runs(db, since=hours_since, hours=True)]
    days = [since + timedelta(days=n) for n in range(RUNS_PAGE_DAYS + 1)]
    grid = day_grid(history, days)
    hours = hour_grid(history, days)
    newest = sorted(history, key=lambda r: r.id or 0, reverse=True)[:RUNS_PAGE_HISTORY]
    return render(
        request,
        "runs.html",
        who,
        runs=newest,
        more=len(history) - len(newest),
        grid=grid,
        days=[d for d in days if any(d in cells for cells in grid.values())],
        hours=hours,
        hour_days=RUNS_PAGE_HOUR_DAYS,
        # 24 hours a day; 25 on the day a daylight-saving zone moves its clocks back.
        hour_columns=range(max(24, 1 + max((max(c) for c in hours.values()), default=0))),
        now=time.time(),
    )


@pages.post("/runs/rerun")
def rerun_form(request: Request, db: DB, who: PageUser, form: EditForm) -> Response:
    values: dict[str, Any] = {
        "kind": _text(form, "kind") or "merge",
        "table": _text(form, "table"),
        "dt": _text(form, "dt"),
        "hour": _text(form, "hour") or None,
    }
    try:
        wanted = RerunIn.model_validate(values)
    except ValidationError as exc:
        raise admin.Problems(admin.validation_messages(exc)) from None
    request_rerun(db, who, wanted)
    return _see("/runs")
