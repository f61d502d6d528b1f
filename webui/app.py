"""The web admin application: ``create_app(settings)`` builds everything (nothing happens at
import time), ``serve(settings)`` runs it with uvicorn.

At start: the admin database is migrated to the newest Alembic revision, an initial admin is
created when configured and no user exists, the metrics scraper starts (if it has targets),
and so does the detections consumer (``webui.count_detections``). Replays are queued as jobs
for a replay worker process (``webui.replay_jobs``, ``cdc-mirror replay-worker``), or go to the
in-process simulation when ``webui.replays: simulated`` (``webui.replay.SimulatedReplayService``,
which publishes nothing); the web server never runs one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.types import Scope

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from cdc_platform.live_tables import LiveTableSource
from cdc_platform.mysql_schema import LiveTables
from simple_binlog.errors import CdcMirrorError, ServiceUnavailableError
from webui import admin, control, governance_api, governance_pages, pages, status_pages
from webui.api import router as api_router
from webui.auth import SESSION_COOKIE
from webui.body_limit import BodyLimit
from webui.context import WebContext
from webui.db import database_url, make_engine, migrate, session_factory
from webui.detections import DetectionConsumer
from webui.governance_pages import MAX_LOOKUP_UPLOAD_BYTES
from webui.models import ApiToken
from webui.monitoring import Scraper
from webui.provisioning import Provisioner, StackProvisioner
from webui.replay import ReplayNotFoundError, ReplayService, SimulatedReplayService
from webui.replay_jobs import JobReplayService, mock_replay_check
from webui.schema_source import MariaDBSchemaSource, SchemaSource
from webui.security import Keys, hash_token, load_keys
from webui.status import Scrape
from webui.status_sources import StatusService

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"


def default_replay_service(
    settings: Settings, sessions: sessionmaker[Session], keys: Keys
) -> ReplayService:
    """mock_replay's service over the admin's instances, or the simulation when configured."""
    if settings.webui.replays == "simulated":
        log.warning("replays requested in the admin are simulated and publish nothing")
        return SimulatedReplayService()

    def instances() -> list[InstanceConfig]:
        with sessions() as db:
            return [admin.instance_config(row, keys) for row in admin.list_instances(db)]

    return JobReplayService(sessions, check=mock_replay_check(settings, instances))


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    replays: ReplayService | None = None,
    schemas: SchemaSource | None = None,
    provisioner: Provisioner | None = None,
    live_tables: Callable[[ConfigSnapshot], LiveTableSource] | None = None,
    scrape: bool = True,
) -> FastAPI:
    engine = engine or make_engine(database_url(settings))
    migrate(engine)
    sessions = session_factory(engine)
    with sessions.begin() as db:
        admin.ensure_initial_admin(db, settings)
        secrets_stored = admin.has_encrypted_secrets(db)
    keys = load_keys(settings, secrets_stored=secrets_stored)
    ctx = WebContext(
        settings=settings,
        keys=keys,
        sessions=sessions,
        replays=replays or default_replay_service(settings, sessions, keys),
        schemas=schemas or MariaDBSchemaSource(),
        provisioner=provisioner or StackProvisioner(settings),
        live_tables=live_tables or LiveTables,
    )

    def status_round(answers: list[Scrape]) -> None:
        # Looked up at each round: a test may put its own status service on the app.
        app.state.status.on_scrape(answers)

    scraper = Scraper(
        sessions,
        settings.webui.scrape_targets if scrape else [],
        settings.webui.scrape_interval_s,
        settings.webui.sample_retention_days,
        on_round=status_round,  # the per-table status builds on each round
    )
    detections = (
        DetectionConsumer(sessions, settings.kafka) if settings.webui.count_detections else None
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        scraper.start()
        if detections is not None:
            detections.start()
        try:
            yield
        finally:
            scraper.stop()
            if detections is not None:
                detections.stop()

    app = FastAPI(
        title="cdc-mirror web admin",
        version="1",
        description=(
            "Configure MySQL instances and table mirrors, request replays, watch the "
            "pipeline. Authenticate with 'Authorization: Bearer <token>'."
        ),
        lifespan=lifespan,
        # FastAPI's /docs and /redoc load Swagger UI and ReDoc from a CDN; the admin ships
        # every asset itself, so its API reference is a page of its own (/api-reference).
        docs_url=None,
        redoc_url=None,
    )
    app.middleware("http")(_security_headers)
    # Added last, so outermost: a body is cut before any other layer sees it.
    app.add_middleware(
        BodyLimit,
        limit_for=body_limit_for,
        headers=_SECURITY_HEADERS,
        credentialed=_credentials_check(ctx),
    )
    app.state.ctx = ctx
    app.state.scraper = scraper
    app.state.status = StatusService(settings, sessions)
    app.state.detections = detections
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.include_router(api_router)
    app.include_router(governance_api.router)
    app.include_router(pages.router)
    app.include_router(governance_pages.router)
    app.include_router(control.api)
    app.include_router(control.pages)
    app.include_router(status_pages.api)
    app.include_router(status_pages.pages)
    _install_error_handlers(app)
    return app


# Only the admin's own script and stylesheet; no framing (clickjacking), no sniffing.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


async def _security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    response = await call_next(request)
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.url.path.startswith("/static/"):
        # Pages and API answers may show a secret (a new token, a collector config) or a
        # CSRF token: no browser or proxy cache keeps them.
        response.headers.setdefault("Cache-Control", "no-store")
    return response


# Request body limits in bytes, by path prefix: small for the anonymous login, roomy for the
# lookup-table uploads (governance_pages.MAX_LOOKUP_UPLOAD_BYTES plus the multipart framing;
# as JSON the same table takes about twice the bytes), the default for everything else.
# The roomy limits apply only to requests with credentials (``_credentialed``); anonymous
# ones get the default there, so they cannot make the server hold 40 MiB before the 401.
_SMALL_BODY = 16 * 1024
_DEFAULT_BODY = 256 * 1024
_BODY_LIMITS = (
    ("/login", _SMALL_BODY, _SMALL_BODY),
    ("/logout", _SMALL_BODY, _SMALL_BODY),
    ("/governance/lookup-tables", _DEFAULT_BODY, MAX_LOOKUP_UPLOAD_BYTES + 2**20),
    ("/api/governance/lookup-tables", _DEFAULT_BODY, 2 * MAX_LOOKUP_UPLOAD_BYTES),
)


def body_limit_for(method: str, path: str, credentialed: bool = False) -> int:
    """The most bytes a request body to ``path`` may have (413 above); ``credentialed``:
    the request carries a valid session cookie or bearer token."""
    del method  # the same for every method of a path
    for prefix, anonymous, with_credentials in _BODY_LIMITS:
        if path == prefix or path.startswith(prefix + "/"):
            return with_credentials if credentialed else anonymous
    return _DEFAULT_BODY


def _credentials_check(ctx: WebContext) -> Callable[[Scope], Awaitable[bool]]:
    """Whether a request carries a session cookie with a valid signature (no database) or a
    bearer token that is known, not revoked and not expired (one lookup by hash, in a worker
    thread). Only the body limit asks; the routes still authenticate fully."""

    def token_known(token: str) -> bool:
        with ctx.sessions() as db:
            found = db.scalar(
                select(ApiToken.id).where(
                    ApiToken.token_hash == hash_token(token),
                    ApiToken.revoked.is_(False),
                    ApiToken.expires_at > datetime.now(UTC),
                )
            )
        return found is not None

    async def credentialed(scope: Scope) -> bool:
        connection = HTTPConnection(scope)
        cookie = connection.cookies.get(SESSION_COOKIE)
        if cookie and ctx.keys.unsign(cookie):
            return True
        scheme, _, token = connection.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        return await run_in_threadpool(token_known, token.strip())

    return credentialed


def _install_error_handlers(app: FastAPI) -> None:
    def problem(request: Request, status_code: int, messages: list[str]) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": messages}, status_code=status_code)
        heading = _HEADINGS.get(status_code, "Something went wrong")
        return pages.render_error(request, status_code, heading, messages)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's default echoes the rejected input, which may hold a password.
        messages = []
        for item in exc.errors():
            field = ".".join(str(p) for p in item.get("loc", ()) if p != "body") or "body"
            message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
            messages.append(f"{field}: {message}.")
        return problem(request, 422, messages)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        response = problem(request, exc.status_code, [str(exc.detail)])
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    @app.exception_handler(pages.LoginRequired)
    async def _login(_: Request, exc: pages.LoginRequired) -> Response:
        return RedirectResponse(f"/login?next={quote(exc.next_url)}", status_code=303)

    @app.exception_handler(pages.Forbidden)
    async def _forbidden(request: Request, exc: pages.Forbidden) -> Response:
        return problem(request, 403, [exc.message])

    @app.exception_handler(admin.Problems)
    async def _problems(request: Request, exc: admin.Problems) -> Response:
        return problem(request, 422, exc.messages)

    @app.exception_handler(admin.NotFound)
    async def _not_found(request: Request, exc: admin.NotFound) -> Response:
        return problem(request, 404, [str(exc)])

    @app.exception_handler(ReplayNotFoundError)
    async def _no_run(request: Request, exc: ReplayNotFoundError) -> Response:
        return problem(request, 404, [str(exc)])

    @app.exception_handler(ServiceUnavailableError)
    async def _unavailable(request: Request, exc: ServiceUnavailableError) -> Response:
        return problem(request, 503, [str(exc)])

    @app.exception_handler(CdcMirrorError)
    async def _ours(request: Request, exc: CdcMirrorError) -> Response:
        return problem(request, 400, [str(exc)])


_HEADINGS = {
    400: "That did not work",
    401: "Please log in",
    403: "Not allowed",
    404: "Not found",
    422: "Nothing was saved",
    503: "A service is unavailable",
}


def quiet_library_loggers() -> None:
    """For entry points: the scraper's every request and Alembic's plugin set-up would
    otherwise each be an INFO line."""
    for name in ("httpx", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    import uvicorn  # noqa: PLC0415

    quiet_library_loggers()
    app = create_app(settings)
    bind_host = host or settings.webui.host
    bind_port = settings.webui.port if port is None else port
    log.info("web admin on http://%s:%d/", bind_host, bind_port)
    uvicorn.run(app, host=bind_host, port=bind_port, log_config=None, access_log=False)
