"""Server-rendered pages (Jinja2, autoescaped). Forms post back to the same URL; bad input
re-renders the form with the messages and the values typed (never a password), and nothing
is saved. Every form carries the session's CSRF token.
"""

from __future__ import annotations

import json
import time
from datetime import date
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from pydantic import SecretStr, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from cdc_platform.config import (
    ALL_TARGETS,
    DEFAULT_VALIDATION_TARGETS,
    VALIDATION_TARGETS,
    TableMirror,
)
from simple_binlog.errors import CdcMirrorError
from webui import admin, governance, provisioning
from webui.auth import (
    CSRF_FIELD,
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    LoginBusy,
    Principal,
    authenticate_password,
    close_session,
    csrf_ok,
    open_session_for,
    principal_from_cookie,
)
from webui.context import WebContext, context, db_session
from webui.models import AuditEntry, DetectionCount, Instance, TableMirrorRow, User
from webui.monitoring import PANELS, load_series, render_svg
from webui.replay import FINAL_STATES, ReplayRequest, ReplayStatus
from webui.schemas import InstanceIn, TokenIn, UserIn
from webui.security import new_csrf_token

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
TEMPLATES.env.filters["utc"] = lambda seconds: time.strftime(
    "%Y-%m-%d %H:%M:%S", time.gmtime(float(seconds))
)
# Readable JSON for <pre> blocks (autoescaping still applies); Jinja's tojson escapes <, >
# and & as \u003c… because it is meant for <script>.
TEMPLATES.env.filters["pretty_json"] = lambda value: json.dumps(
    value, indent=1, sort_keys=True, ensure_ascii=False
)

DB = Annotated[Session, Depends(db_session, scope="function")]
Ctx = Annotated[WebContext, Depends(context)]

NAVIGATION = (
    ("/", "Overview"),
    ("/instances", "Instances"),
    ("/tables", "Table mirrors"),
    ("/replays", "Replays"),
    ("/runs", "Runs"),
    ("/components", "Components"),
    ("/monitoring", "Monitoring"),
    ("/governance", "Governance"),
    ("/detections", "Detections"),
    ("/lineage", "Lineage"),
    ("/users", "Users & tokens"),
    ("/audit", "Audit log"),
)

router = APIRouter(include_in_schema=False)


class LoginRequired(Exception):
    """Raised by page dependencies; the app turns it into a redirect to /login."""

    def __init__(self, next_url: str) -> None:
        self.next_url = next_url


class Forbidden(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def page_user(request: Request, db: DB, ctx: Ctx) -> Principal:
    principal = principal_from_cookie(db, ctx.keys, request.cookies.get(SESSION_COOKIE))
    if principal is None:
        raise LoginRequired(request.url.path)
    return principal


PageUser = Annotated[Principal, Depends(page_user)]


async def edit_form(request: Request, who: PageUser) -> FormData:
    """The posted form of an admin, CSRF-checked."""
    form = await request.form()
    token = form.get(CSRF_FIELD)
    if not csrf_ok(who, token if isinstance(token, str) else None):
        raise Forbidden(
            "The form was refused: its security token is missing or stale. "
            "Reload the page and try again."
        )
    if not who.can_edit:
        raise Forbidden(f"Your role ({who.role}) can read but not change the configuration.")
    return form


EditForm = Annotated[FormData, Depends(edit_form)]


def render(
    request: Request, name: str, who: Principal | None, status_code: int = 200, **values: Any
) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(
        request,
        name,
        {
            "who": who,
            "nav": NAVIGATION,
            "path": request.url.path,
            "csrf": who.csrf_token if who else None,
            **values,
        },
        status_code=status_code,
    )


def render_error(
    request: Request, status_code: int, heading: str, messages: list[str]
) -> HTMLResponse:
    """An error page; shows the navigation only to a logged-in user."""
    ctx = context(request)
    with ctx.sessions() as db:
        who = principal_from_cookie(db, ctx.keys, request.cookies.get(SESSION_COOKIE))
        db.commit()
    return render(request, "error.html", who, status_code, heading=heading, messages=messages)


def _see(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _text(form: FormData, name: str, default: str = "") -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else default


def _lines(form: FormData, name: str) -> list[str]:
    return [line.strip() for line in _text(form, name).splitlines() if line.strip()]


def _csv(form: FormData, name: str) -> list[str] | None:
    items = [item.strip() for item in _text(form, name).split(",") if item.strip()]
    return items or None


def _optional(form: FormData, name: str) -> str | None:
    return _text(form, name) or None


# --- login --------------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, ctx: Ctx, next: str = "/") -> Response:
    token = new_csrf_token()
    response = render(request, "login.html", None, next=_safe_next(next), login_csrf=token)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        ctx.keys.sign(token),
        httponly=True,
        samesite="lax",
        secure=ctx.settings.webui.secure_cookies,
        max_age=3600,
    )
    return response


@router.post("/login")
async def login(request: Request, ctx: Ctx) -> Response:
    # No request-scoped database session here: the user lookup runs in the hashing worker
    # thread (auth.authenticate_password), so nothing blocks the event loop and no pooled
    # connection is held while the password hash is checked.
    form = await request.form()
    next_url = _safe_next(_text(form, "next", "/"))
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE)
    expected = ctx.keys.unsign(cookie) if cookie else None
    if expected is None or expected != _text(form, CSRF_FIELD):
        return _login_again(
            request, ctx, next_url, "Your login form expired; please try again.", 403
        )
    username = _text(form, "username")
    address = request.client.host if request.client else "unknown"
    # Counted before the password is checked, so parallel attempts cannot all pass.
    wait = ctx.login_throttle.reserve(address, username)
    if wait > 0:
        who_failed = (
            "from your address" if ctx.login_throttle.refused_for(address) else "for this user"
        )
        message = f"Too many failed logins {who_failed}; try again in {wait:.0f} s."
        response = _login_again(request, ctx, next_url, message, 429)
        response.headers["Retry-After"] = str(max(1, round(wait)))
        return response
    try:
        user = await authenticate_password(
            ctx.sessions, ctx.hashing, username, _text(form, "password")
        )
    except LoginBusy:
        ctx.login_throttle.release(address, username)
        response = _login_again(
            request, ctx, next_url, "Too many logins at once; try again in a moment.", 503
        )
        response.headers["Retry-After"] = "1"
        return response
    if user is None:
        return _login_again(request, ctx, next_url, "Unknown user or wrong password.", 401)
    lifetime = ctx.settings.webui.session_lifetime_s
    try:
        session_cookie = await run_in_threadpool(
            open_session_for, ctx.sessions, ctx.keys, user, lifetime
        )
    except LookupError:  # disabled or deleted since the check
        return _login_again(request, ctx, next_url, "Unknown user or wrong password.", 401)
    ctx.login_throttle.succeeded(address, username)
    response = _see(next_url)
    response.set_cookie(
        SESSION_COOKIE,
        session_cookie,
        httponly=True,
        samesite="lax",
        secure=ctx.settings.webui.secure_cookies,
        max_age=lifetime,
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE)
    return response


def _login_again(request: Request, ctx: Ctx, next_url: str, message: str, code: int) -> Response:
    token = new_csrf_token()
    response = render(
        request, "login.html", None, code, next=next_url, login_csrf=token, error=message
    )
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        ctx.keys.sign(token),
        httponly=True,
        samesite="lax",
        secure=ctx.settings.webui.secure_cookies,
        max_age=3600,
    )
    return response


def _safe_next(url: str) -> str:
    # Only local paths: an absolute URL here would make the login an open redirect.
    return url if url.startswith("/") and not url.startswith("//") else "/"


@router.post("/logout")
async def logout(request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    form = await request.form()
    token = form.get(CSRF_FIELD)
    if not csrf_ok(who, token if isinstance(token, str) else None):
        raise Forbidden("The form was refused: its security token is missing or stale.")
    close_session(db, ctx.keys, request.cookies.get(SESSION_COOKIE))
    response = _see("/login")
    response.delete_cookie(SESSION_COOKIE)
    return response


# --- overview -----------------------------------------------------------------------------


@router.get("/")
def overview(request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    from webui.status_pages import overview_values  # noqa: PLC0415 - it builds on this module

    try:
        running: list[ReplayStatus] | None = [
            r for r in ctx.replays.runs() if r.state not in FINAL_STATES
        ]
        replay_problem = None
    except CdcMirrorError as exc:  # the overview still shows the rest
        running, replay_problem = None, str(exc)
    return render(
        request,
        "overview.html",
        who,
        instances=db.scalar(select(func.count()).select_from(Instance)),
        mirrors=db.scalar(select(func.count()).select_from(TableMirrorRow)),
        running=running,
        replay_problem=replay_problem,
        audit=list(db.scalars(select(AuditEntry).order_by(AuditEntry.id.desc()).limit(5))),
        governance=governance.state(db),
        detections_24h=db.scalar(
            select(func.coalesce(func.sum(DetectionCount.count), 0)).where(
                DetectionCount.hour >= int(time.time()) - 24 * 3600
            )
        )
        or 0,
        **overview_values(request, db),
    )


# --- instances ----------------------------------------------------------------------------


@router.get("/instances")
def instances_page(request: Request, db: DB, who: PageUser) -> Response:
    return render(request, "instances.html", who, instances=admin.list_instances(db))


def _instance_values(form: FormData) -> dict[str, Any]:
    rules = []
    for line in _lines(form, "shard_rules"):
        schema_pattern, _, table_pattern = line.partition(" | ")
        rules.append(
            {"schema_pattern": schema_pattern.strip(), "table_pattern": table_pattern.strip()}
        )
    values: dict[str, Any] = {
        "name": _text(form, "name"),
        "host": _text(form, "host"),
        "port": _text(form, "port") or "3306",
        "user": _text(form, "user"),
        "gtid_start": _text(form, "gtid_start") or "current",
        "include": _lines(form, "include"),
        "exclude": _lines(form, "exclude"),
        "shard_rules": rules,
        "collector_group": _text(form, "collector_group") or "default",
        "topic": _optional(form, "topic"),
        # An unticked checkbox sends nothing: absent means off, the safe default.
        "allow_cleartext_password": form.get("allow_cleartext_password") == "on",
        "server_public_key": _text(form, "server_public_key"),
        "watermark_heartbeat_s": _optional(form, "watermark_heartbeat_s"),
    }
    password = form.get("password")
    if isinstance(password, str) and password:
        values["password"] = password
    return values


def _instance_form_values(row: Instance | None) -> dict[str, Any]:
    if row is None:
        default = InstanceIn(name="x", host="x")
        return {
            "name": "",
            "host": "",
            "port": 3306,
            "user": "cdc",
            "gtid_start": "current",
            "include": "\n".join(default.include),
            "exclude": "\n".join(default.exclude),
            "shard_rules": "\n".join(
                f"{r.schema_pattern} | {r.table_pattern}" for r in default.shard_rules
            ),
            "collector_group": "default",
            "topic": "",
            "allow_cleartext_password": False,
            "server_public_key": "",
            "watermark_heartbeat_s": "",
        }
    out = admin.instance_out(row)
    return {
        "name": out.name,
        "host": out.host,
        "port": out.port,
        "user": out.user,
        "gtid_start": out.gtid_start,
        "include": "\n".join(out.include),
        "exclude": "\n".join(out.exclude),
        "shard_rules": "\n".join(
            f"{r.schema_pattern} | {r.table_pattern}" for r in out.shard_rules
        ),
        "collector_group": out.collector_group,
        "topic": out.topic,
        "allow_cleartext_password": out.allow_cleartext_password,
        "server_public_key": out.server_public_key,
        "watermark_heartbeat_s": ""
        if out.watermark_heartbeat_s is None
        else out.watermark_heartbeat_s,
    }


def _typed_back(values: dict[str, Any]) -> dict[str, Any]:
    shown = dict(values)
    shown.pop("password", None)  # never echo a password into a page
    for key in ("include", "exclude"):
        shown[key] = "\n".join(values.get(key, []))
    shown["shard_rules"] = "\n".join(
        f"{r['schema_pattern']} | {r['table_pattern']}" for r in values.get("shard_rules", [])
    )
    shown["topic"] = values.get("topic") or ""
    shown["watermark_heartbeat_s"] = values.get("watermark_heartbeat_s") or ""
    return shown


@router.get("/instances/new")
def new_instance_page(request: Request, who: PageUser) -> Response:
    return render(
        request, "instance_form.html", who, values=_instance_form_values(None), existing=None
    )


@router.get("/instances/{name}")
def edit_instance_page(name: str, request: Request, db: DB, who: PageUser) -> Response:
    row = admin.get_instance(db, name)
    return render(
        request,
        "instance_form.html",
        who,
        values=_instance_form_values(row),
        existing=row.name,
        version=row.version,
    )


@router.post("/instances/new")
def create_instance_form(
    request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    return _save_instance(request, db, ctx, who, form, None)


@router.post("/instances/{name}")
def update_instance_form(
    name: str, request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    return _save_instance(request, db, ctx, who, form, name)


def _save_instance(
    request: Request,
    db: Session,
    ctx: WebContext,
    who: Principal,
    form: FormData,
    existing: str | None,
) -> Response:
    values = _instance_values(form)
    try:
        data = InstanceIn.model_validate(values)
        admin.save_instance(db, ctx.settings, ctx.keys, who.name, data, existing=existing)
    except ValidationError as exc:
        errors = admin.validation_messages(exc)
    except admin.Problems as exc:
        errors = exc.messages
    else:
        return _see("/instances")
    return _form_again(
        request,
        db,
        who,
        "instance_form.html",
        errors,
        values=_typed_back(values),
        existing=existing,
    )


def _form_again(
    request: Request, db: Session, who: Principal, template: str, errors: list[str], **values: Any
) -> Response:
    db.rollback()  # nothing of a refused form stays
    return render(request, template, who, 422, errors=errors, **values)


@router.post("/instances/{name}/delete")
def delete_instance_form(
    name: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    try:
        admin.delete_instance(db, who.name, name)
    except admin.Problems as exc:
        db.rollback()
        return render(
            request,
            "instances.html",
            who,
            422,
            instances=admin.list_instances(db),
            errors=exc.messages,
        )
    return _see("/instances")


# --- table mirrors ------------------------------------------------------------------------


@router.get("/tables")
def tables_page(request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    # The rows change only with an audited change of an instance or a table mirror: they
    # are rendered once per configuration version (and per role: admins see the actions).
    key = ("tables", *admin.snapshot_version(db), who.can_edit)
    rows = ctx.rendered.get(key)
    if rows is None:
        mirrors = [(r, admin.table_mirror(r)) for r in admin.list_table_mirrors(db)]
        template = TEMPLATES.get_template("_table_mirror_rows.html")
        rows = template.render(mirrors=mirrors, who=who)
        ctx.rendered.put(key, rows)
    # The rows come from the autoescaping template above: markup already.
    return render(request, "tables.html", who, rows=Markup(rows))  # noqa: S704


# A table mirror's own retention for `cdc-mirror maintain` (empty: the maintenance defaults).
_RETENTION = ("snapshot_days", "raw_days", "hourly_days")


def _validation_targets(form: FormData, targets: list[str]) -> list[str] | None:
    """The targets checked under *Validation*; None when they are the defaults (so a target
    the mirror gains later is validated as the defaults say) or the form had no such boxes
    (``validation_targets_shown``: an unchecked box sends nothing). None checked is kept, and
    refused by the model with its reason (choose validation off instead).

    A default box (checked when the form opens) left checked for a store the mirror does not
    write, its target unticked in the same form, is dropped rather than refused: unticking a
    target should not also need unticking its validation. An opt-in box (kudu, lake) checked
    for a store the mirror lacks is kept, so the model refuses it with the reason."""
    if not _text(form, "validation_targets_shown"):
        return None
    checked = [t for t in form.getlist("validation_targets") if isinstance(t, str)]
    kept = [t for t in checked if t in targets or t not in DEFAULT_VALIDATION_TARGETS]
    if checked and not kept:
        return None
    if kept and set(kept) == set(DEFAULT_VALIDATION_TARGETS) & set(targets):
        return None
    return kept


def _mirror_values(form: FormData) -> dict[str, Any]:
    archive: dict[str, Any] = {}
    for field in ("min_deletes", "increment_factor", "older_than_days"):
        if _text(form, f"archive_{field}"):
            archive[field] = _text(form, f"archive_{field}")
    archive["time_column"] = _optional(form, "archive_time_column")
    targets = [t for t in form.getlist("targets") if isinstance(t, str)]
    return {
        "instance": _text(form, "instance"),
        "db_prefix": _text(form, "db_prefix"),
        "table_prefix": _text(form, "table_prefix"),
        "targets": targets,
        "key": _csv(form, "key"),
        "check_column": _optional(form, "check_column"),
        "archive_delete": archive,
        "redis_ttl_s": _optional(form, "redis_ttl_s"),
        "redis_columns": _csv(form, "redis_columns"),
        "warehouse_delete": _text(form, "warehouse_delete") or "hard",
        "validation_every_h": _optional(form, "validation_every_h"),
        "validation": _text(form, "validation") or "report",
        "validation_repair_max_keys": _text(form, "validation_repair_max_keys")
        or TableMirror.model_fields["validation_repair_max_keys"].default,
        "validation_targets": _validation_targets(form, targets),
        "snapshots": _text(form, "snapshots") or "daily",
        "retention": {name: _optional(form, f"retention_{name}") for name in _RETENTION},
    }


def _mirror_form_values(mirror: TableMirror | None) -> dict[str, Any]:
    mirror = mirror or TableMirror(db_prefix="", table_prefix="")
    return {
        "initial_load": True,
        "initial_load_condition": "",
        "initial_load_day": "",
        "instance": mirror.instance,
        "db_prefix": mirror.db_prefix,
        "table_prefix": mirror.table_prefix,
        "targets": list(mirror.targets),
        "key": ", ".join(mirror.key or []),
        "check_column": mirror.check_column or "",
        "archive_min_deletes": mirror.archive_delete.min_deletes,
        "archive_increment_factor": mirror.archive_delete.increment_factor,
        "archive_older_than_days": mirror.archive_delete.older_than_days,
        "archive_time_column": mirror.archive_delete.time_column or "",
        "redis_ttl_s": mirror.redis_ttl_s or "",
        "redis_columns": ", ".join(mirror.redis_columns or []),
        "warehouse_delete": mirror.warehouse_delete,
        "validation_every_h": mirror.validation_every_h or "",
        "validation": mirror.validation,
        "validation_repair_max_keys": mirror.validation_repair_max_keys,
        # The defaults shown checked when the mirror names none.
        "validation_targets": list(
            mirror.validation_targets
            if mirror.validation_targets is not None
            else [t for t in DEFAULT_VALIDATION_TARGETS if t in mirror.targets]
        ),
        "snapshots": mirror.snapshots,
        **{f"retention_{n}": getattr(mirror.retention, n) or "" for n in _RETENTION},
    }


def _mirror_typed_back(values: dict[str, Any]) -> dict[str, Any]:
    archive = values["archive_delete"]
    return {
        **{k: v for k, v in values.items() if k not in ("archive_delete", "retention")},
        **{f"retention_{n}": values["retention"].get(n) or "" for n in _RETENTION},
        "key": ", ".join(values["key"] or []),
        "redis_columns": ", ".join(values["redis_columns"] or []),
        "check_column": values["check_column"] or "",
        "redis_ttl_s": values["redis_ttl_s"] or "",
        "validation_every_h": values["validation_every_h"] or "",
        "validation_targets": values["validation_targets"]
        if values["validation_targets"] is not None
        else [t for t in DEFAULT_VALIDATION_TARGETS if t in values["targets"]],
        "archive_min_deletes": archive.get("min_deletes", ""),
        "archive_increment_factor": archive.get("increment_factor", ""),
        "archive_older_than_days": archive.get("older_than_days", ""),
        "archive_time_column": archive.get("time_column") or "",
    }


def _mirror_form(
    request: Request, db: Session, who: Principal, status_code: int = 200, **values: Any
) -> Response:
    return render(
        request,
        "table_form.html",
        who,
        status_code,
        instances=[i.name for i in admin.list_instances(db)],
        all_targets=ALL_TARGETS,
        validation_targets=VALIDATION_TARGETS,
        **values,
    )


@router.get("/tables/new")
def new_table_page(request: Request, db: DB, who: PageUser) -> Response:
    values = _mirror_form_values(None)
    names = [i.name for i in admin.list_instances(db)]
    if names and values["instance"] not in names:
        values["instance"] = names[0]
    return _mirror_form(request, db, who, values=values, existing=None)


@router.get("/tables/{name}")
def edit_table_page(name: str, request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    row = admin.get_table_mirror(db, name)
    return _mirror_form(
        request,
        db,
        who,
        values=_mirror_form_values(admin.table_mirror(row)),
        existing=name,
        **_mirror_setup_values(db, ctx, name),
    )


def _mirror_setup_values(db: Session, ctx: WebContext, name: str) -> dict[str, Any]:
    """What the mirror's page shows of its set-up: the resources as recorded when it was
    created, and its initial loads with their progress."""
    recorded = db.scalar(
        select(AuditEntry)
        .where(AuditEntry.object_type == "table_mirror_resources", AuditEntry.object_name == name)
        .order_by(AuditEntry.id.desc())
        .limit(1)
    )
    resources = (recorded.after or {}).get("resources", []) if recorded is not None else []
    return {
        "resources": resources,
        "initial_loads": provisioning.initial_loads(ctx.replays, name),
        "enabled": admin.table_mirror(admin.get_table_mirror(db, name)).enabled,
    }


@router.get("/tables/{name}/details")
def table_details_page(name: str, request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    from webui.lineage import mirror_details  # noqa: PLC0415 - asks MySQL and PostgreSQL

    details = mirror_details(db, ctx.settings, ctx.keys, name)
    return render(request, "table_details.html", who, details=details)


@router.post("/tables/new")
def create_table_form(
    request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    return _save_mirror(request, db, ctx, who, form, None)


@router.post("/tables/{name}")
def update_table_form(
    name: str, request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    return _save_mirror(request, db, ctx, who, form, name)


def _save_mirror(
    request: Request,
    db: Session,
    ctx: WebContext,
    who: Principal,
    form: FormData,
    existing: str | None,
) -> Response:
    values = _mirror_values(form)
    load_values = _initial_load_values(form, existing is None)
    try:
        mirror = TableMirror.model_validate(values)
        if existing is None:
            load = provisioning.InitialLoad(
                enabled=load_values["initial_load"],
                condition=load_values["initial_load_condition"] or None,
                execute_time=_day(load_values["initial_load_day"]),
            )
            provisioning.create_mirror(
                db,
                ctx.settings,
                ctx.keys,
                ctx.schemas,
                ctx.replays,
                ctx.provisioner,
                who.name,
                mirror,
                load,
            )
        else:
            admin.save_table_mirror(db, ctx.keys, ctx.schemas, who.name, mirror, existing=existing)
    except ValidationError as exc:
        errors = admin.validation_messages(exc)
    except admin.Problems as exc:
        errors = exc.messages
    else:
        return _see(f"/tables/{quote(mirror.name)}")
    db.rollback()
    return _mirror_form(
        request,
        db,
        who,
        422,
        values={**_mirror_typed_back(values), **load_values},
        existing=existing,
        errors=errors,
    )


def _initial_load_values(form: FormData, new: bool) -> dict[str, Any]:
    return {
        # An unticked checkbox sends nothing; the new-mirror form has it ticked.
        "initial_load": new and form.get("initial_load") == "on",
        "initial_load_condition": _text(form, "initial_load_condition"),
        "initial_load_day": _text(form, "initial_load_day"),
    }


def _day(text: str) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise admin.Problems(
            [
                f"initial load day: {text!r} is not a date (YYYY-MM-DD); leave it empty "
                "for yesterday."
            ]
        ) from None


@router.post("/tables/{name}/initial-load")
def start_initial_load_form(
    name: str, request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    """Start (again) the mirror's initial load: after a refused or failed one, or after
    opting out when the mirror was created."""
    row = admin.get_table_mirror(db, name)
    mirror = admin.table_mirror(row)
    condition = _text(form, "initial_load_condition")
    day = _text(form, "initial_load_day")
    try:
        load = provisioning.InitialLoad(True, condition or None, _day(day))
        provisioning.submit_initial_load(db, ctx.replays, who.name, mirror, load)
    except admin.Problems as exc:
        db.rollback()
        return _mirror_form(
            request,
            db,
            who,
            422,
            values={
                **_mirror_form_values(mirror),
                "initial_load_condition": condition,
                "initial_load_day": day,
            },
            existing=name,
            errors=exc.messages,
            **_mirror_setup_values(db, ctx, name),
        )
    return _see(f"/tables/{quote(name)}")


@router.post("/tables/{name}/enabled")
def enable_table_form(name: str, db: DB, who: PageUser, form: EditForm) -> Response:
    """Disable the mirror (its components stop it, its settings stay) or enable it again."""
    admin.set_table_mirror_enabled(db, who.name, name, _text(form, "enabled") == "true")
    return _see(f"/tables/{quote(name)}")


@router.get("/tables/{name}/delete")
def remove_table_page(name: str, request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    """The confirmation page: what removing the mirror stops, and what data it leaves."""
    row = admin.get_table_mirror(db, name)
    mirror = admin.table_mirror(row)
    topic = provisioning.instance_topic(ctx.settings, row.instance.topic, row.instance.name)
    return render(
        request,
        "table_remove.html",
        who,
        mirror_name=name,
        mirror=mirror,
        leftovers=provisioning.leftovers(ctx.settings, mirror, topic),
        loads=[
            r for r in provisioning.initial_loads(ctx.replays, name) if r.state not in FINAL_STATES
        ],
    )


@router.post("/tables/{name}/delete")
def delete_table_form(name: str, db: DB, who: PageUser, form: EditForm) -> Response:
    admin.delete_table_mirror(db, who.name, name)
    return _see("/tables")


# --- replays ------------------------------------------------------------------------------


@router.get("/replays")
def replays_page(request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    return _replays(request, db, ctx, who)


def _replays(
    request: Request,
    db: Session,
    ctx: WebContext,
    who: Principal,
    status_code: int = 200,
    **values: Any,
) -> Response:
    # The form's suggestions: each prefix once (500 mirrors need not be validated for it).
    specs = db.scalars(select(TableMirrorRow.spec))
    prefixes = {(spec.get("db_prefix", ""), spec.get("table_prefix", "")) for spec in specs}
    return render(
        request,
        "replays.html",
        who,
        status_code,
        runs=ctx.replays.runs(),
        db_prefixes=sorted({db_prefix for db_prefix, _ in prefixes}),
        table_prefixes=sorted({table_prefix for _, table_prefix in prefixes}),
        instances=[i.name for i in admin.list_instances(db)],
        **values,
    )


@router.post("/replays")
def start_replay_form(
    request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    from webui.api import start_replay_audited  # noqa: PLC0415 - shared with the API

    values = {
        "instance": _text(form, "instance"),
        "db_prefix": _text(form, "db_prefix"),
        "table_prefix": _text(form, "table_prefix"),
        "condition": _optional(form, "condition"),
        "execute_time": _optional(form, "execute_time"),
        "batch_size": _text(form, "batch_size") or "10000",
    }
    try:
        status = start_replay_audited(db, ctx, who, ReplayRequest.model_validate(values))
    except ValidationError as exc:
        errors = admin.validation_messages(exc)
    except admin.Problems as exc:
        errors = exc.messages
    except CdcMirrorError as exc:  # no such instance, Kafka or MySQL unreachable, …
        errors = [str(exc)]
    else:
        return _see(f"/replays/{quote(status.run_id)}")
    db.rollback()
    return _replays(request, db, ctx, who, 422, errors=errors, values=values)


@router.get("/replays/{run_id}")
def replay_page(run_id: str, request: Request, ctx: Ctx, who: PageUser) -> Response:
    status = ctx.replays.status(run_id)
    return render(request, "replay.html", who, run=status, final=status.state in FINAL_STATES)


@router.post("/replays/{run_id}/cancel")
def cancel_replay_form(run_id: str, db: DB, ctx: Ctx, who: PageUser, form: EditForm) -> Response:
    result = ctx.replays.cancel(run_id)
    admin.audit(db, who.name, "cancel", "replay", run_id, None, {"state": result.state})
    return _see(f"/replays/{quote(run_id)}")


# --- monitoring ---------------------------------------------------------------------------


@router.get("/monitoring")
def monitoring_page(
    request: Request, db: DB, ctx: Ctx, who: PageUser, hours: float = 1.0
) -> Response:
    hours = min(max(hours, 0.05), 24 * 14)
    since = time.time() - hours * 3600
    charts = []
    for panel in PANELS:
        series = load_series(db, panel, since)
        charts.append(
            {
                "title": panel.title,
                "svg": render_svg(series, unit=panel.unit),
                "labels": [s.label for s in series],
            }
        )
    return render(
        request,
        "monitoring.html",
        who,
        charts=charts,
        hours=hours,
        targets=ctx.settings.webui.scrape_targets,
        interval=ctx.settings.webui.scrape_interval_s,
    )


# --- users and tokens ---------------------------------------------------------------------


@router.get("/users")
def users_page(request: Request, db: DB, who: PageUser) -> Response:
    return _users(request, db, who)


def _users(
    request: Request, db: Session, who: Principal, status_code: int = 200, **values: Any
) -> Response:
    # Tokens (never their values) are listed to admins only.
    tokens = [admin.token_out(t) for t in admin.list_tokens(db)] if who.can_edit else []
    settings = context(request).settings.webui
    return render(
        request,
        "users.html",
        who,
        status_code,
        users=list(db.scalars(select(User).order_by(User.username))),
        tokens=tokens,
        instances=[i.name for i in admin.list_instances(db)] if who.can_edit else [],
        token_days=(settings.token_default_lifetime_days, settings.token_max_lifetime_days),
        **values,
    )


@router.post("/users")
def create_user_form(request: Request, db: DB, who: PageUser, form: EditForm) -> Response:
    try:
        admin.create_user(
            db,
            who.name,
            UserIn.model_validate(
                {
                    "username": _text(form, "username"),
                    "password": _text(form, "password"),
                    "role": _text(form, "role") or "viewer",
                }
            ),
        )
    except ValidationError as exc:
        errors = admin.validation_messages(exc)
    except admin.Problems as exc:
        errors = exc.messages
    else:
        return _see("/users")
    db.rollback()
    return _users(request, db, who, 422, errors=errors)


@router.post("/users/{username}/disable")
def disable_user_form(
    username: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    try:
        admin.set_user_disabled(db, who.name, username, _text(form, "disabled") != "false")
    except admin.Problems as exc:
        db.rollback()
        return _users(request, db, who, 422, errors=exc.messages)
    return _see("/users")


@router.post("/users/{username}/password")
def set_password_form(
    username: str, request: Request, db: DB, who: PageUser, form: EditForm
) -> Response:
    try:
        admin.set_user_password(db, who.name, username, SecretStr(_text(form, "password")))
    except admin.Problems as exc:
        db.rollback()
        return _users(request, db, who, 422, errors=exc.messages)
    return _see("/users" if username != who.name else "/login")


@router.post("/account/password")
async def change_own_password(request: Request, db: DB, ctx: Ctx, who: PageUser) -> Response:
    """Any user, viewer too, changes their own password (the current one is asked)."""
    form = await request.form()
    token = form.get(CSRF_FIELD)
    if not csrf_ok(who, token if isinstance(token, str) else None):
        raise Forbidden("The form was refused: its security token is missing or stale.")
    if who.kind != "user":
        raise Forbidden("API tokens have no password.")
    try:
        # Two scrypt runs: in a worker thread, not on the event loop.
        await ctx.hashing.run(
            admin.set_user_password,
            db,
            who.name,
            who.name,
            SecretStr(_text(form, "new_password")),
            current=_text(form, "current_password"),
        )
    except admin.Problems as exc:
        db.rollback()
        return _users(request, db, who, 422, errors=exc.messages)
    return _see("/login")


@router.post("/tokens")
def create_token_form(
    request: Request, db: DB, ctx: Ctx, who: PageUser, form: EditForm
) -> Response:
    role = _text(form, "role") or "viewer"
    values = {
        "name": _text(form, "name"),
        "role": role,
        # The instance select is sent whatever the role; only the roles bound to an instance
        # (collector, source_reader) keep it.
        "instance": _optional(form, "instance") if role in admin.INSTANCE_ROLES else None,
        "expires_in_days": _optional(form, "expires_in_days"),
    }
    try:
        created = admin.create_token(
            db, ctx.settings, who.name, who.owner or who.name, TokenIn.model_validate(values)
        )
    except ValidationError as exc:
        errors = admin.validation_messages(exc)
    except admin.Problems as exc:
        errors = exc.messages
    else:
        # The secret is shown on this response only (sent with Cache-Control: no-store);
        # reloading the page does not show it again.
        return _users(request, db, who, 201, new_token=created)
    db.rollback()
    return _users(request, db, who, 422, errors=errors)


@router.post("/tokens/{token_id}/revoke")
def revoke_token_form(token_id: int, db: DB, who: PageUser, form: EditForm) -> Response:
    admin.revoke_token(db, who.name, token_id)
    return _see("/users")


# --- API reference ------------------------------------------------------------------------


@router.get("/api-reference")
def api_reference(request: Request, who: PageUser) -> Response:
    spec = request.app.openapi()
    groups: dict[str, list[dict[str, Any]]] = {}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            responses = [
                (code, _schema_name(answer.get("content", {}).get("application/json", {})))
                for code, answer in operation.get("responses", {}).items()
            ]
            groups.setdefault((operation.get("tags") or ["other"])[0], []).append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": operation.get("summary", ""),
                    "parameters": [p["name"] for p in operation.get("parameters", [])],
                    "body": _schema_name(body),
                    "responses": responses,
                }
            )
    schemas = sorted(spec.get("components", {}).get("schemas", {}).items())
    return render(
        request, "api_reference.html", who, spec=spec, groups=list(groups.items()), schemas=schemas
    )


def _schema_name(media: dict[str, Any]) -> str | None:
    schema = media.get("schema", {})
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array" and "$ref" in schema.get("items", {}):
        return "list of " + str(schema["items"]["$ref"]).rsplit("/", 1)[-1]
    return None


# --- audit --------------------------------------------------------------------------------


@router.get("/audit")
def audit_page(request: Request, db: DB, who: PageUser) -> Response:
    rows = list(db.scalars(select(AuditEntry).order_by(AuditEntry.id.desc()).limit(500)))
    return render(request, "audit.html", who, entries=rows)
