"""Helpers for web admin tests: an app on a temporary SQLite database, logins, CSRF tokens.

The app is the real one (``webui.app.create_app``); only the replay service (the shipped
simulation), the provisioner (``RecordingProvisioner``) and, for tests of pure validation, the
schema source (a static one) stand in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from cdc_platform.config import PostgresSettings, Settings, StackSettings, WebUISettings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.live_tables import LiveTableSource
from webui.app import create_app
from webui.provisioning import Provisioner, RecordingProvisioner
from webui.replay import ReplayService, SimulatedReplayService
from webui.schema_source import LiveTableSchema, SchemaSource, StaticSchemaSource
from webui.status_sources import StatusService

ADMIN_PASSWORD = "admin-password-1"
VIEWER_PASSWORD = "viewer-password-1"
MYSQL_PASSWORD = "Mysql-Secret-7f3a9c"

ORDERS_SCHEMA = LiveTableSchema(
    logical_name="ordercenter_orderinfo",
    physical_tables=("ordercenter_00.orderinfo_00", "ordercenter_00.orderinfo_01"),
    columns={
        "id": "bigint(20) unsigned",
        "user_id": "bigint(20)",
        "amount": "decimal(12,2)",
        "created_at": "datetime(6)",
    },
    primary_key=("id",),
)


# Port 1 on loopback: nothing listens there, so a test that reaches for MySQL or PostgreSQL
# by accident is refused at once instead of touching the local stack.
NOWHERE_PORT = 1


def webui_settings(home: Path, **webui: object) -> Settings:
    options: dict[str, object] = {
        "initial_admin_password": SecretStr(ADMIN_PASSWORD),
        "scrape_targets": [],
        # Unit tests never reach for Kafka; the consumer has its own integration test.
        "count_detections": False,
        **webui,
    }
    return Settings(
        stack=StackSettings(home=home),
        postgres=PostgresSettings(port=NOWHERE_PORT),
        webui=WebUISettings.model_validate(options),
    )


def make_app(
    home: Path,
    schemas: SchemaSource | None = None,
    replays: ReplayService | None = None,
    provisioner: Provisioner | None = None,
    live_tables: Callable[[ConfigSnapshot], LiveTableSource] | None = None,
    **webui: object,
) -> FastAPI:
    settings = webui_settings(home, **webui)
    app = create_app(
        settings,
        schemas=schemas or StaticSchemaSource({"ordercenter_orderinfo": ORDERS_SCHEMA}),
        replays=replays or SimulatedReplayService(duration_s=3600),
        # Unit tests never reach for Kafka or PostgreSQL: the fake records each set-up.
        provisioner=provisioner or RecordingProvisioner(settings),
        live_tables=live_tables,
    )
    # The status pages ask Kafka for offsets; unit tests never reach for Kafka.
    app.state.status = StatusService(settings, app.state.ctx.sessions, offsets=lambda *_: {})
    return app


_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "the page has no CSRF token"
    return match.group(1)


def login(client: TestClient, username: str = "admin", password: str = ADMIN_PASSWORD) -> str:
    """Log in through the form; returns the session's CSRF token."""
    page = client.get("/login")
    response = client.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    return csrf_of(client.get("/").text)


def create_viewer(client: TestClient, csrf: str, username: str = "viewer") -> None:
    response = client.post(
        "/api/users",
        json={"username": username, "password": VIEWER_PASSWORD, "role": "viewer"},
        headers={"X-CSRF-Token": csrf},
    )
    assert response.status_code == 201, response.text


def make_token(
    client: TestClient,
    csrf: str,
    role: str,
    name: str | None = None,
    instance: str = "orders",
    **extra: object,
) -> str:
    """A new API token; a collector or source_reader token is scoped to ``instance`` (which
    must exist)."""
    body: dict[str, object] = {"name": name or f"{role}-token", "role": role, **extra}
    if role in ("collector", "source_reader"):
        body["instance"] = instance
    response = client.post("/api/tokens", json=body, headers={"X-CSRF-Token": csrf})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def instance_body(name: str = "orders", **overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": name,
        "host": "127.0.0.1",
        "port": NOWHERE_PORT,
        "user": "cdc",
        "password": MYSQL_PASSWORD,
        "gtid_start": "current",
        "include": [r"ordercenter_\d+\..*"],
        "exclude": [],
        "collector_group": "eu-1",
    }
    body.update(overrides)
    return body


def mirror_body(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "instance": "orders",
        "db_prefix": "ordercenter",
        "table_prefix": "orderinfo",
        "targets": ["hive", "warehouse", "redis"],
        "check_column": "created_at",
        "redis_ttl_s": 86400,
        "redis_columns": ["id", "amount"],
    }
    body.update(overrides)
    return body
