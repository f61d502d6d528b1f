"""The admin database on PostgreSQL instead of SQLite: the same migrations and the same API,
in a schema of its own (dropped afterwards)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
from fastapi.testclient import TestClient

from simple_binlog.config import Settings, StackSettings, WebUISettings
from tests.unit.webui.harness import (
    ADMIN_PASSWORD,
    MYSQL_PASSWORD,
    ORDERS_SCHEMA,
    instance_body,
    login,
    mirror_body,
)
from webui.app import create_app
from webui.replay import SimulatedReplayService
from webui.schema_source import StaticSchemaSource


def test_migrations_and_api_on_postgresql(postgres: Settings, tmp_path: Path):
    pg = postgres.postgres
    password = pg.password.get_secret_value()
    schema = f"webui_{uuid.uuid4().hex[:8]}"
    dsn = (
        f"host={pg.host} port={pg.port} user={pg.user} password={password} dbname={pg.warehouse_db}"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = (
        f"postgresql+psycopg://{pg.user}:{password}@{pg.host}:{pg.port}/{pg.warehouse_db}"
        f"?options=-csearch_path%3D{schema}"
    )
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {"database_url": url, "initial_admin_password": ADMIN_PASSWORD, "scrape_targets": []}
        ),
    )
    try:
        for _ in range(2):  # a second start finds the schema current and changes nothing
            app = create_app(
                settings,
                schemas=StaticSchemaSource({"ordercenter_orderinfo": ORDERS_SCHEMA}),
                replays=SimulatedReplayService(),
            )
        with TestClient(app) as client:
            headers = {"X-CSRF-Token": login(client)}
            assert (
                client.post("/api/instances", json=instance_body(), headers=headers).status_code
                == 201
            )
            assert (
                client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code
                == 201
            )
            audit = client.get("/api/audit").json()
            assert [(e["action"], e["object_type"]) for e in audit][:2] == [
                ("create", "table_mirror"),
                ("create", "instance"),
            ]
        with psycopg.connect(dsn) as conn:
            tables = {
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (schema,),
                )
            }
            stored = conn.execute(f"SELECT password_encrypted FROM {schema}.instances").fetchone()
            revision = conn.execute(f"SELECT version_num FROM {schema}.alembic_version").fetchall()
        assert {"users", "instances", "table_mirrors", "audit_log", "metric_samples"} <= tables
        assert stored is not None and MYSQL_PASSWORD not in stored[0]
        assert revision == [("0001",)]
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
