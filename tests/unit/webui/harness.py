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
from sqlalchemy.orm import Session

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


def check_chart_points(sessions: Callable[[], Session]) -> None:
    """A mirror's chart points as the admin database aggregates them (``_chart_points``),
    the same on SQLite, PostgreSQL and MariaDB: series of a line added up per scrape, one
    point per step with its last scrape's time and its span's largest value, only the series
    reported now, only the window."""
    from webui.models import MetricSample
    from webui.status import Sample
    from webui.status_pages import CHART_POINTS, _chart_points, _Line

    step = 10.0
    since, until = 10.0, 10.0 + CHART_POINTS * step
    # Two scrapes per step, early in it: a step's index truncated (SQLite) or rounded
    # (PostgreSQL, MariaDB) is the same.
    scrapes = (11.0, 14.0, 21.0, 24.0, 31.0, 34.0)
    lag, rows, applied = (
        "cdc_mirror_consumer_lag",
        "cdc_mirror_rows_total",
        "cdc_mirror_last_applied_timestamp_seconds",
    )
    stored = {
        (lag, "partition=0,target=redis,topic=t"): (1, 5, 2, 0, 3, 3),
        (lag, "partition=1,target=redis,topic=t"): (10, 10, 20, 30, 1, 1),
        (lag, "partition=5,target=redis,topic=t"): (900,) * 6,  # no longer reported
        (lag, "partition=0,target=redis,topic=other"): (700,) * 6,  # another topic
        ("cdc_stream_writer_lag_messages", "partition=0,topic=t,writer=all"): (7, 3, 0, 0, 4, 9),
        # A counter whose process restarted in the third step.
        (rows, "table=orders,target=redis"): (100, 150, 200, 300, 5, 55),
        (applied, "table=orders,target=redis"): (9, 12, 12, 22, 29, 32),
    }
    with sessions() as db, db.begin():
        for (name, labels), values in stored.items():
            db.add_all(
                MetricSample(at=at, target="m", name=name, labels=labels, value=value)
                for at, value in zip(scrapes, values, strict=True)
            )
            # Outside the window: before it and after it.
            db.add(MetricSample(at=since - 1, target="m", name=name, labels=labels, value=5000))
            db.add(MetricSample(at=until + 1, target="m", name=name, labels=labels, value=5000))

    def line(chart: int, label: str, name: str, age: bool = False, **labels: str) -> _Line:
        return _Line(chart, label, Sample(name, labels, 0.0), age)

    lines = [
        line(0, "redis", rows, table="orders", target="redis"),
        line(1, "mirror redis", lag, partition="0", target="redis", topic="t"),
        line(1, "mirror redis", lag, partition="1", target="redis", topic="t"),
        line(1, "stream writer", "cdc_stream_writer_lag_messages", partition="0", topic="t", writer="all"),
        line(2, "redis", applied, age=True, table="orders", target="redis"),
        # Reported now, nothing stored yet: no line.
        line(1, "mirror redis", lag, partition="2", target="redis", topic="t"),
    ]  # fmt: skip
    with sessions() as db:
        found = _chart_points(db, lines, since, until)
    assert found == {
        (0, "redis"): [(14.0, 150.0), (24.0, 300.0), (34.0, 55.0)],
        (1, "mirror redis"): [(14.0, 15.0), (24.0, 30.0), (34.0, 4.0)],
        (1, "stream writer"): [(14.0, 7.0), (24.0, 0.0), (34.0, 9.0)],
        (2, "redis"): [(14.0, 2.0), (24.0, 9.0), (34.0, 2.0)],
    }
    with sessions() as db:
        assert _chart_points(db, [], since, until) == {}
