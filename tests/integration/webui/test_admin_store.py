"""The admin database on PostgreSQL or MariaDB instead of SQLite: the same migrations, the
same API and the same chart aggregation, in a schema/database of its own (dropped
afterwards)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import sqlalchemy as sa
from fastapi.testclient import TestClient

from cdc_platform.config import Settings, StackSettings, WebUISettings
from tests.integration.webui.harness import mariadb_admin
from tests.unit.webui.harness import (
    ADMIN_PASSWORD,
    MYSQL_PASSWORD,
    ORDERS_SCHEMA,
    check_chart_points,
    instance_body,
    login,
    mirror_body,
)
from webui.app import create_app
from webui.provisioning import RecordingProvisioner
from webui.replay import SimulatedReplayService
from webui.schema_source import StaticSchemaSource


def _exercise(url: str, home: Path) -> None:
    settings = Settings(
        stack=StackSettings(home=home),
        webui=WebUISettings.model_validate(
            {
                "database_url": url,
                "initial_admin_password": ADMIN_PASSWORD,
                "scrape_targets": [],
                "count_detections": False,
            }
        ),
    )
    for _ in range(2):  # a second start finds the schema current and changes nothing
        app = create_app(
            settings,
            schemas=StaticSchemaSource({"ordercenter_orderinfo": ORDERS_SCHEMA}),
            replays=SimulatedReplayService(),
            provisioner=RecordingProvisioner(settings),
        )
    with TestClient(app) as client:
        headers = {"X-CSRF-Token": login(client)}
        assert (
            client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
        )
        assert (
            client.post(
                "/api/table-mirrors?initial_load=false", json=mirror_body(), headers=headers
            ).status_code
            == 201
        )
        refused = client.post("/api/table-mirrors", json=mirror_body(key=["nope"]), headers=headers)
        assert refused.status_code == 422
        audit = client.get("/api/audit").json()
        assert [(e["action"], e["object_type"]) for e in audit][:3] == [
            ("provision", "table_mirror_resources"),
            ("create", "table_mirror"),
            ("create", "instance"),
        ]
        assert audit[1]["after"]["redis_columns"] == ["id", "amount"]
    check_chart_points(app.state.ctx.sessions)  # the status page's charts, in this database
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            stored = conn.execute(sa.text("SELECT password_encrypted FROM instances")).scalar_one()
            revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).all()
    finally:
        engine.dispose()
    assert {
        "users",
        "instances",
        "table_mirrors",
        "audit_log",
        "metric_samples",
        "governance_policies",
        "detection_counts",
        "detection_offsets",
    } <= tables
    assert MYSQL_PASSWORD not in stored
    assert [tuple(r) for r in revision] == [(_newest_revision(),)]


def _newest_revision() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from webui.db import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    (head,) = ScriptDirectory.from_config(config).get_heads()  # exactly one head
    return str(head)


def test_admin_store_on_postgresql(postgres: Settings, tmp_path: Path):
    pg = postgres.postgres
    password = pg.password.get_secret_value()
    schema = f"webui_{uuid.uuid4().hex[:8]}"
    dsn = (
        f"host={pg.host} port={pg.port} user={pg.user} password={password} dbname={pg.warehouse_db}"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        _exercise(
            f"postgresql+psycopg://{pg.user}:{password}@{pg.host}:{pg.port}/{pg.warehouse_db}"
            f"?options=-csearch_path%3D{schema}",
            tmp_path,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_admin_store_on_mariadb(mariadb: Settings, tmp_path: Path):
    database = f"webui_{uuid.uuid4().hex[:8]}"
    with mariadb_admin(mariadb) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {database} CHARACTER SET utf8mb4")
    try:
        stack = mariadb.stack
        _exercise(
            f"mysql+pymysql://{stack.admin_user}:{stack.admin_password.get_secret_value()}"
            f"@127.0.0.1:{mariadb.instances[0].port}/{database}?charset=utf8mb4",
            tmp_path,
        )
    finally:
        with mariadb_admin(mariadb) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database}")
