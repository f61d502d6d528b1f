"""The mirror backend over HTTP against the real MariaDB and PostgreSQL: live schema of a
sharded table (and a shard that disagrees), daily counts computed across shards and cached,
lineage, and errors as one sentence with a status code."""

from __future__ import annotations

import datetime as dt
import uuid

from fastapi import FastAPI
from fastapi.testclient import TestClient

from cdc_platform.config import Settings, TableMirror
from mirror.backend import MirrorBackend, mirror_router
from tests.integration.mariadb_admin import utc_admin_connection as _admin


def test_schema_counts_and_lineage(mirror_settings: Settings) -> None:
    prefix = f"mb{uuid.uuid4().hex[:6]}"
    settings = mirror_settings.model_copy(
        update={
            "merge": mirror_settings.merge.model_copy(update={"database": f"{prefix}_snapshot"}),
            "tables": [
                TableMirror(
                    db_prefix=prefix,
                    table_prefix="orders",
                    check_column="created",
                    targets=["hive", "redis", "warehouse"],
                ),
                TableMirror(db_prefix=prefix, table_prefix="nothing"),
            ],
        }
    )
    today = dt.datetime.now(dt.UTC).date()
    conn = _admin(settings)
    try:
        with conn.cursor() as cur:
            for shard in range(2):
                db = f"{prefix}_{shard:02d}"
                cur.execute(f"CREATE DATABASE {db}")
                for table in ("orders_00", "orders_01"):
                    cur.execute(
                        f"CREATE TABLE {db}.{table} (id BIGINT UNSIGNED PRIMARY KEY, "
                        "created DATETIME(3) NOT NULL, v VARCHAR(10))"
                    )
                    # Two rows yesterday, one three days ago, one today (not counted yet).
                    for n, days_ago in enumerate((1, 1, 3, 0)):
                        cur.execute(
                            f"INSERT INTO {db}.{table} VALUES (%s, %s, 'x')",
                            (
                                n,
                                dt.datetime.combine(
                                    today - dt.timedelta(days=days_ago), dt.time(12)
                                ),
                            ),
                        )
        client = TestClient(_app(settings))
        name = f"{prefix}_orders"

        schema = client.get(f"/mirror/tables/{name}/schema").json()
        assert schema["shards"] == [
            f"{prefix}_{d:02d}.orders_{t:02d}" for d in range(2) for t in range(2)
        ]
        assert schema["columns"] == {
            "id": "bigint(20) unsigned",
            "created": "datetime(3)",
            "v": "varchar(10)",
        }
        assert schema["key"] == ["id"] and schema["shards_agree"] is True

        assert client.get(f"/mirror/tables/{name}/daily-counts").json() == []
        refreshed = client.post(f"/mirror/tables/{name}/daily-counts/refresh").json()
        assert refreshed[str(today - dt.timedelta(days=1))] == 8
        assert refreshed[str(today - dt.timedelta(days=3))] == 4
        assert sum(refreshed.values()) == 12
        cached = client.get(f"/mirror/tables/{name}/daily-counts").json()
        assert {c["day"]: c["rows"] for c in cached} == refreshed

        with conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {prefix}_01.orders_01 MODIFY v VARCHAR(20)")
        schema = client.get(f"/mirror/tables/{name}/schema").json()
        assert schema["shards_agree"] is False
        assert schema["differences"] == [
            f"{prefix}_01.orders_01.v is varchar(20), {prefix}_00.orders_00.v is varchar(10)"
        ]

        lineage = client.get(f"/mirror/tables/{name}/lineage").json()
        assert lineage["mysql"]["shards"] == schema["shards"]
        assert lineage["hive_raw"] == f"{settings.stream_writer.database}.{name}"
        assert lineage["hive_snapshot"] == f"{settings.merge.database}.{name}"
        assert lineage["redis_prefix"] == f"{settings.redis.key_prefix}:{name}:"
        assert lineage["warehouse_table"].endswith(f"{settings.mirror.warehouse_schema}.{name}")

        missing = client.get("/mirror/tables/nope_nope/schema")
        assert (
            missing.status_code == 404
            and "no table mirror named 'nope_nope'" in missing.json()["detail"]
        )
        no_shard = client.get(f"/mirror/tables/{prefix}_nothing/schema")
        assert no_shard.status_code == 404 and "no MySQL table routes" in no_shard.json()["detail"]
        no_check = client.post(f"/mirror/tables/{prefix}_nothing/daily-counts/refresh")
        assert no_check.status_code == 404 and "has no check_column" in no_check.json()["detail"]
    finally:
        with conn.cursor() as cur:
            for shard in range(2):
                cur.execute(f"DROP DATABASE IF EXISTS {prefix}_{shard:02d}")
        conn.close()


def test_unreachable_mysql_is_503_with_one_sentence(mirror_settings: Settings) -> None:
    instance = mirror_settings.instances[0].model_copy(update={"port": 1})
    settings = mirror_settings.model_copy(update={"instances": [instance]})
    client = TestClient(_app(settings))
    response = client.get(f"/mirror/tables/{settings.tables[0].name}/schema")
    assert response.status_code == 503
    assert response.json()["detail"].startswith(
        "MySQL instance 'local' at 127.0.0.1:1 cannot be reached"
    )


def _app(settings: Settings) -> FastAPI:
    app = FastAPI()
    app.include_router(mirror_router(MirrorBackend(settings)))
    return app
