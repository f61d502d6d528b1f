"""The JSON API under ``/api`` (OpenAPI at ``/openapi.json``, browsable at ``/docs``).

Authentication: ``Authorization: Bearer <token>`` (tokens made on the Users page or with
``POST /api/tokens``), or the browser's session cookie plus the ``X-CSRF-Token`` header for
anything that changes state. No credentials: 401. A viewer changing something: 403.

Collector configuration contract (``GET /api/collector-config/{instance}``):

- Only tokens of role ``collector`` may call it, each for the one instance it was made
  for (403 for any other name, existing or not); it is the one response that carries a
  secret (the MySQL password the collector needs), so that role may read nothing else.
  Every config handed over (200) and every refused name is written to the audit log.
- The body is ``CollectorConfig``: the instance's connection, GTID start, include/exclude
  regexes, shard rules, collector group, topic and the table mirrors of the instance.
- ``version`` grows with every saved change to the instance or its table mirrors; ``etag``
  is a hash of the whole body, also sent as the ``ETag`` header. A collector polls with
  ``If-None-Match: "<etag>"`` and gets ``304 Not Modified`` while nothing changed, so it can
  poll every few seconds; on a new etag it applies the config without a fleet restart.
- 404 when the instance does not exist (e.g. it was deleted): the collector should stop.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from cdc_platform.config import TableMirror
from cdc_platform.config_store import ConfigSnapshot, snapshot_body
from cdc_platform.live_tables import LiveTableSource, live_counts_body, live_schema_body
from simple_binlog.errors import CdcMirrorError, ServiceUnavailableError
from webui import admin
from webui.auth import (
    CSRF_HEADER,
    SESSION_COOKIE,
    Principal,
    csrf_ok,
    principal_from_bearer,
    principal_from_cookie,
)
from webui.context import WebContext, context, db_session
from webui.lineage import MirrorDetails, mirror_details
from webui.models import AuditEntry, TableMirrorRow, User
from webui.monitoring import PANELS, load_series
from webui.provisioning import (
    InitialLoad,
    create_mirror,
    instance_topic,
    leftovers,
    submit_initial_load,
)
from webui.replay import ReplayRequest, ReplayStatus
from webui.schemas import (
    AuditOut,
    CollectorConfig,
    InitialLoadIn,
    InstanceIn,
    InstanceOut,
    Me,
    MirrorResource,
    PasswordIn,
    Problem,
    TableMirrorOut,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
)

DB = Annotated[Session, Depends(db_session, scope="function")]
Ctx = Annotated[WebContext, Depends(context)]

_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": Problem, "description": "no or bad credentials"},
    403: {"model": Problem, "description": "the role may not do this (or CSRF token missing)"},
    404: {"model": Problem, "description": "no such object"},
    422: {"model": Problem, "description": "bad input; nothing was saved"},
}


def api_principal(request: Request, db: DB, ctx: Ctx) -> Principal:
    principal = principal_from_bearer(db, request.headers.get("authorization"))
    if principal is None:
        principal = principal_from_cookie(db, ctx.keys, request.cookies.get(SESSION_COOKIE))
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "log in or send 'Authorization: Bearer <token>'.",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


def reader(principal: Annotated[Principal, Depends(api_principal)]) -> Principal:
    if not principal.can_read:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "this token may only read collector configs."
        )
    return principal


def editor(request: Request, principal: Annotated[Principal, Depends(api_principal)]) -> Principal:
    if not principal.can_edit:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"role {principal.role!r} cannot change the configuration."
        )
    if not csrf_ok(principal, request.headers.get(CSRF_HEADER)):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "the request lacks the session's CSRF token (header X-CSRF-Token).",
        )
    return principal


def admin_reader(principal: Annotated[Principal, Depends(api_principal)]) -> Principal:
    """Reads meant for admins only (the token list)."""
    if not principal.can_edit:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only admins may list API tokens.")
    return principal


Reader = Annotated[Principal, Depends(reader)]
Editor = Annotated[Principal, Depends(editor)]
AdminReader = Annotated[Principal, Depends(admin_reader)]

router = APIRouter(prefix="/api", responses=_ERRORS)


@router.get("/me", response_model=Me, tags=["session"])
def me(principal: Annotated[Principal, Depends(api_principal)]) -> Me:
    return Me(name=principal.name, role=principal.role, kind=principal.kind)


# --- instances ----------------------------------------------------------------------------


@router.get("/instances", response_model=list[InstanceOut], tags=["instances"])
def list_instances(db: DB, _: Reader) -> list[InstanceOut]:
    return [admin.instance_out(row) for row in admin.list_instances(db)]


@router.post("/instances", response_model=InstanceOut, status_code=201, tags=["instances"])
def create_instance(data: InstanceIn, db: DB, ctx: Ctx, who: Editor) -> InstanceOut:
    return admin.instance_out(admin.save_instance(db, ctx.settings, ctx.keys, who.name, data))


@router.get("/instances/{name}", response_model=InstanceOut, tags=["instances"])
def get_instance(name: str, db: DB, _: Reader) -> InstanceOut:
    return admin.instance_out(admin.get_instance(db, name))


@router.put("/instances/{name}", response_model=InstanceOut, tags=["instances"])
def update_instance(name: str, data: InstanceIn, db: DB, ctx: Ctx, who: Editor) -> InstanceOut:
    row = admin.save_instance(db, ctx.settings, ctx.keys, who.name, data, existing=name)
    return admin.instance_out(row)


@router.delete("/instances/{name}", status_code=204, tags=["instances"])
def delete_instance(name: str, db: DB, who: Editor) -> Response:
    admin.delete_instance(db, who.name, name)
    return Response(status_code=204)


# --- table mirrors ------------------------------------------------------------------------


def _mirror_out(row: TableMirrorRow) -> TableMirrorOut:
    return TableMirrorOut(name=row.name, mirror=admin.table_mirror(row), updated_at=row.updated_at)


@router.get("/table-mirrors", response_model=list[TableMirrorOut], tags=["table mirrors"])
def list_table_mirrors(db: DB, _: Reader) -> list[TableMirrorOut]:
    return [_mirror_out(row) for row in admin.list_table_mirrors(db)]


@router.post(
    "/table-mirrors", response_model=TableMirrorOut, status_code=201, tags=["table mirrors"]
)
def create_table_mirror(
    data: TableMirror,
    db: DB,
    ctx: Ctx,
    who: Editor,
    initial_load: Annotated[bool, Query(description="replay the existing rows")] = True,
    initial_load_condition: Annotated[str | None, Query(max_length=2000)] = None,
    initial_load_day: Annotated[date | None, Query(description="default: yesterday")] = None,
) -> TableMirrorOut:
    """Create the mirror and set up what it needs (``webui.provisioning``): the instance's
    Kafka topic, the warehouse table, and the initial load (a replay job, unless
    ``initial_load=false``). Any step failing refuses the whole request (422) and saves
    nothing."""
    load = InitialLoad(initial_load, initial_load_condition or None, initial_load_day)
    created = create_mirror(
        db, ctx.settings, ctx.keys, ctx.schemas, ctx.replays, ctx.provisioner, who.name, data, load
    )
    out = _mirror_out(admin.get_table_mirror(db, created.row_name))
    out.resources = [MirrorResource(**r.__dict__) for r in created.resources]
    out.initial_load = created.initial_load
    return out


@router.post(
    "/table-mirrors/{name}/initial-load",
    response_model=ReplayStatus,
    status_code=201,
    tags=["table mirrors"],
)
def start_initial_load(
    name: str, data: InitialLoadIn, db: DB, ctx: Ctx, who: Editor
) -> ReplayStatus:
    """Start (again) the mirror's initial load: after a failed one, or one opted out of."""
    mirror = admin.table_mirror(admin.get_table_mirror(db, name))
    run_id = submit_initial_load(
        db, ctx.replays, who.name, mirror, InitialLoad(True, data.condition, data.execute_time)
    )
    db.commit()  # the job is read back by the replay service's own session
    return ctx.replays.status(run_id)


@router.get(
    "/table-mirrors/{name}/leftovers", response_model=list[MirrorResource], tags=["table mirrors"]
)
def table_mirror_leftovers(name: str, db: DB, ctx: Ctx, _: Reader) -> list[MirrorResource]:
    """What removing the mirror leaves behind (nothing written is deleted)."""
    row = admin.get_table_mirror(db, name)
    topic = instance_topic(ctx.settings, row.instance.topic, row.instance.name)
    return [
        MirrorResource(**r.__dict__)
        for r in leftovers(ctx.settings, admin.table_mirror(row), topic)
    ]


@router.get("/table-mirrors/{name}", response_model=TableMirrorOut, tags=["table mirrors"])
def get_table_mirror(name: str, db: DB, _: Reader) -> TableMirrorOut:
    return _mirror_out(admin.get_table_mirror(db, name))


@router.get("/table-mirrors/{name}/details", response_model=MirrorDetails, tags=["table mirrors"])
def table_mirror_details(name: str, db: DB, ctx: Ctx, _: Reader) -> MirrorDetails:
    """Live MySQL schema (all shards), cached daily counts and lineage, from the mirror
    backend; a part that cannot be read is named in ``problems``."""
    return mirror_details(db, ctx.settings, ctx.keys, name)


# --- a table mirror's live MySQL shape, for components (cdc_platform.live_tables) -----------

_LIVE: dict[int | str, dict[str, object]] = {
    200: {"description": "read from MySQL now with the password the web admin keeps"},
    400: {"model": Problem, "description": "no MySQL table routes to the mirror"},
    503: {"model": Problem, "description": "MySQL cannot be reached"},
}


def _live_tables(
    db: Session, ctx: WebContext, principal: Principal, name: str, what: str
) -> tuple[LiveTableSource, TableMirror]:
    """The MySQL reader of mirror ``name`` for a token of role ``component``; the web admin
    uses the instance's stored password for it and hands over only what it read. The use is
    audited (object type ``what``), and so is a refused caller."""
    if principal.kind != "token" or principal.role != "component":
        admin.audit(db, principal.name, "refused", what, name, None, None)
        db.commit()  # the refusal stays on record although the request fails
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "only API tokens of role 'component' may have the web admin read MySQL for them.",
        )
    row = admin.get_table_mirror(db, name)
    snapshot = ConfigSnapshot(
        version=0,
        instances=(admin.instance_config(row.instance, ctx.keys),),
        tables=(admin.table_mirror(row),),
    )
    return ctx.live_tables(snapshot), snapshot.tables[0]


def _audit_use(db: Session, principal: Principal, what: str, mirror: TableMirror) -> None:
    """Recorded before MySQL is read, so a failed read stays on record too."""
    admin.audit(db, principal.name, "use_secret", what, mirror.name, None, None)
    db.commit()


@router.get("/table-mirrors/{name}/live-schema", tags=["table mirrors"], responses=_LIVE)
def table_mirror_live_schema(
    name: str, db: DB, ctx: Ctx, principal: Annotated[Principal, Depends(api_principal)]
) -> JSONResponse:
    """The mirror's live MySQL schema over all its shards (columns in table order with their
    COLUMN_TYPE, the key by ``cdc_platform.mysql_schema``'s rule, whether the shards agree),
    for ``cdc_platform.live_tables.AdminLiveTables`` (merge with ``config_store.source:
    webui``). Tokens of role ``component`` only; no password leaves the web admin."""
    tables, mirror = _live_tables(db, ctx, principal, name, "live_schema")
    _audit_use(db, principal, "live_schema", mirror)
    return JSONResponse(
        live_schema_body(tables.live_schema(mirror.name)), headers={"Cache-Control": "no-store"}
    )


@router.get("/table-mirrors/{name}/live-counts", tags=["table mirrors"], responses=_LIVE)
def table_mirror_live_counts(
    name: str,
    column: Annotated[str, Query(max_length=64, description="the mirror's check column")],
    today: Annotated[date, Query(description="counts of the days before this one")],
    db: DB,
    ctx: Ctx,
    principal: Annotated[Principal, Depends(api_principal)],
) -> JSONResponse:
    """Rows per day by the mirror's check column, counted in MySQL now over all its shards
    (the merge's check). Tokens of role ``component`` only."""
    tables, mirror = _live_tables(db, ctx, principal, name, "live_counts")
    if mirror.check_column is None or column != mirror.check_column:
        raise HTTPException(
            422,
            f"table mirror {mirror.name!r} is counted by its check column "
            f"({mirror.check_column or 'none is set'}), not by {column!r}.",
        )
    _audit_use(db, principal, "live_counts", mirror)
    counts = tables.count_per_day(mirror.name, column, today)
    return JSONResponse(
        live_counts_body(mirror.name, column, counts), headers={"Cache-Control": "no-store"}
    )


@router.put("/table-mirrors/{name}", response_model=TableMirrorOut, tags=["table mirrors"])
def update_table_mirror(
    name: str, data: TableMirror, db: DB, ctx: Ctx, who: Editor
) -> TableMirrorOut:
    row = admin.save_table_mirror(db, ctx.keys, ctx.schemas, who.name, data, existing=name)
    return _mirror_out(row)


@router.delete("/table-mirrors/{name}", status_code=204, tags=["table mirrors"])
def delete_table_mirror(name: str, db: DB, who: Editor) -> Response:
    admin.delete_table_mirror(db, who.name, name)
    return Response(status_code=204)


# --- replays ------------------------------------------------------------------------------


@router.get("/replays", response_model=list[ReplayStatus], tags=["replays"])
def list_replays(ctx: Ctx, _: Reader) -> list[ReplayStatus]:
    return ctx.replays.runs()


@router.post("/replays", response_model=ReplayStatus, status_code=201, tags=["replays"])
def start_replay(data: ReplayRequest, db: DB, ctx: Ctx, who: Editor) -> ReplayStatus:
    return start_replay_audited(db, ctx, who, data)


def start_replay_audited(
    db: Session, ctx: WebContext, who: Principal, data: ReplayRequest
) -> ReplayStatus:
    admin.get_instance(db, data.instance)  # 404 before anything starts
    try:
        run_id = ctx.replays.start(data)
    except ServiceUnavailableError:
        raise
    except CdcMirrorError as exc:  # e.g. a refused condition: nothing was published
        raise admin.Problems([str(exc)]) from exc
    admin.audit(db, who.name, "start", "replay", run_id, None, data.model_dump(mode="json"))
    return ctx.replays.status(run_id)


@router.get("/replays/{run_id}", response_model=ReplayStatus, tags=["replays"])
def replay_status(run_id: str, ctx: Ctx, _: Reader) -> ReplayStatus:
    return ctx.replays.status(run_id)


@router.post("/replays/{run_id}/cancel", response_model=ReplayStatus, tags=["replays"])
def cancel_replay(run_id: str, db: DB, ctx: Ctx, who: Editor) -> ReplayStatus:
    result = ctx.replays.cancel(run_id)
    admin.audit(db, who.name, "cancel", "replay", run_id, None, {"state": result.state})
    return result


# --- users, tokens, audit -----------------------------------------------------------------


@router.get("/users", response_model=list[UserOut], tags=["users"])
def list_users(db: DB, _: Reader) -> list[UserOut]:
    return [admin.user_out(u) for u in db.scalars(select(User).order_by(User.username))]


@router.post("/users", response_model=UserOut, status_code=201, tags=["users"])
def create_user(data: UserIn, db: DB, who: Editor) -> UserOut:
    return admin.user_out(admin.create_user(db, who.name, data))


class UserState(BaseModel):
    disabled: bool


@router.put("/users/{username}/state", response_model=UserOut, tags=["users"])
def set_user_state(username: str, data: UserState, db: DB, who: Editor) -> UserOut:
    return admin.user_out(admin.set_user_disabled(db, who.name, username, data.disabled))


@router.put("/users/{username}/password", response_model=UserOut, tags=["users"])
def set_user_password(username: str, data: PasswordIn, db: DB, who: Editor) -> UserOut:
    """Set a user's password (admins); the user's sessions end."""
    return admin.user_out(admin.set_user_password(db, who.name, username, data.password))


@router.get("/tokens", response_model=list[TokenOut], tags=["tokens"])
def list_tokens(db: DB, _: AdminReader) -> list[TokenOut]:
    """Admins only; never a token's value."""
    return [admin.token_out(t) for t in admin.list_tokens(db)]


@router.post("/tokens", response_model=TokenCreated, status_code=201, tags=["tokens"])
def create_token(data: TokenIn, db: DB, ctx: Ctx, who: Editor) -> TokenCreated:
    """The value is in this response only. A collector token needs ``instance``; the token
    expires after ``expires_in_days`` (default and maximum: ``webui.token_*_lifetime_days``)
    and is revoked when its owner's account is disabled."""
    return admin.create_token(db, ctx.settings, who.name, who.owner or who.name, data)


@router.delete("/tokens/{token_id}", response_model=TokenOut, tags=["tokens"])
def revoke_token(token_id: int, db: DB, who: Editor) -> TokenOut:
    return admin.token_out(admin.revoke_token(db, who.name, token_id))


@router.get("/audit", response_model=list[AuditOut], tags=["audit"])
def audit_log(
    db: DB, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[AuditOut]:
    rows = db.scalars(select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit))
    return [AuditOut.model_validate(row, from_attributes=True) for row in rows]


# --- monitoring ---------------------------------------------------------------------------


class SeriesOut(BaseModel):
    label: str
    points: list[tuple[float, float]]


class PanelOut(BaseModel):
    title: str
    unit: str
    series: list[SeriesOut]


@router.get("/monitoring", response_model=list[PanelOut], tags=["monitoring"])
def monitoring(
    db: DB, _: Reader, hours: Annotated[float, Query(gt=0, le=24 * 14)] = 1.0
) -> list[PanelOut]:
    import time  # noqa: PLC0415 - only here

    since = time.time() - hours * 3600
    return [
        PanelOut(
            title=panel.title,
            unit=panel.unit,
            series=[
                SeriesOut(label=s.label, points=s.points) for s in load_series(db, panel, since)
            ],
        )
        for panel in PANELS
    ]


# --- collector config ---------------------------------------------------------------------


@router.get(
    "/collector-config/{instance}",
    response_model=CollectorConfig,
    tags=["collector config"],
    responses={304: {"description": "unchanged since the etag in If-None-Match"}},
)
def collector_config(
    instance: str,
    response: Response,
    db: DB,
    ctx: Ctx,
    principal: Annotated[Principal, Depends(api_principal)],
    if_none_match: Annotated[str | None, Header()] = None,
) -> CollectorConfig | Response:
    if principal.kind != "token" or principal.role != "collector":
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "only API tokens of role 'collector' may read collector configs.",
        )
    if principal.instance != instance:
        admin.audit_secret_read(db, principal.name, instance, "refused")
        db.commit()  # the refusal stays on record although the request fails
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this collector token may read only the config of instance {principal.instance!r}.",
        )
    config = admin.collector_config(db, ctx.keys, instance, ctx.collector_configs)
    etag = f'"{config.etag}"'
    if if_none_match is not None and etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=304, headers={"ETag": etag})
    admin.audit_secret_read(db, principal.name, instance, "read_secret")
    response.headers["ETag"] = etag
    response.headers["Cache-Control"] = "no-store"
    return config


# --- the configuration snapshot (cdc_platform.config_store) -------------------------------


def _etag_matches(etag: str, if_none_match: str | None) -> bool:
    return if_none_match is not None and etag in {t.strip() for t in if_none_match.split(",")}


@router.get(
    "/config-snapshot",
    tags=["configuration"],
    responses={
        200: {"description": "the snapshot (cdc_platform.config_store.ConfigSnapshot)"},
        304: {"description": "unchanged since the etag in If-None-Match"},
    },
)
def config_snapshot(
    db: DB,
    ctx: Ctx,
    principal: Annotated[Principal, Depends(api_principal)],
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """Instances, their shard rules and the table mirrors, for the components
    (``cdc_platform.config_store.AdminConfigStore``). Tokens of role ``component``, viewers
    and admins read it without any password; a ``collector`` or ``source_reader`` token reads
    only its own instance, with the password (each hand-over audited as ``read_secret`` under
    the token's name, like the collector config). ``version`` grows with every audited change
    to an instance or a table mirror; poll with ``If-None-Match``."""
    scope: str | None = None
    if principal.role in admin.INSTANCE_ROLES:
        if principal.kind != "token" or principal.instance is None:
            # Audited like a refused collector config: the refusal stays on record.
            admin.audit_secret_read(
                db, principal.name, "(no instance)", "refused", "config_snapshot"
            )
            db.commit()
            raise HTTPException(status.HTTP_403_FORBIDDEN, "this token may not read this.")
        scope = principal.instance
    elif principal.role != "component" and not principal.can_read:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this token may not read this.")
    version, last = admin.snapshot_version(db)
    key = (version, last, scope)
    known = ctx.config_snapshots.get(key)
    if known is not None and _etag_matches(f'"{known}"', if_none_match):
        return Response(status_code=304, headers={"ETag": f'"{known}"'})
    snapshot = admin.config_snapshot(db, ctx.keys, version, secret_for=scope)
    ctx.config_snapshots.put(key, snapshot.etag)
    etag = f'"{snapshot.etag}"'
    if _etag_matches(etag, if_none_match):
        return Response(status_code=304, headers={"ETag": etag})
    if scope is not None:
        admin.audit_secret_read(db, principal.name, scope, "read_secret", "config_snapshot")
    return JSONResponse(
        {**snapshot_body(snapshot), "etag": snapshot.etag},
        headers={"ETag": etag, "Cache-Control": "no-store"},
    )


Outcome = Literal["ok"]

__all__ = ["ValidationError", "router"]
