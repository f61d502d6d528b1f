"""Table mirrors validated against the live schema of the real MariaDB (information_schema),
through the API with the shipped ``MariaDBSchemaSource``; and the live schema and counts the
admin reads for merge (``cdc_platform.live_tables``) against what MariaDB says directly."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from pydantic import SecretStr

from cdc_platform.config import Settings, StackSettings, TableMirror, WebUISettings
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from cdc_platform.live_tables import AdminLiveTables
from cdc_platform.mysql_schema import LiveTables
from simple_binlog.routing import ShardRule
from tests.integration.webui.harness import free_port, mariadb_admin, sharded_table
from tests.unit.webui.harness import ADMIN_PASSWORD, login, make_token
from webui.app import create_app
from webui.provisioning import RecordingProvisioner
from webui.replay import SimulatedReplayService
from webui.schema_source import InstanceAccess, MariaDBSchemaSource


def _access(settings: Settings, port: int | None = None) -> InstanceAccess:
    local = settings.instances[0]
    return InstanceAccess(
        name=local.name,
        host="127.0.0.1",
        port=port or local.port,
        user=local.user,
        password=local.password.get_secret_value(),
        shard_rules=(ShardRule(),),
    )


def test_live_schema_of_all_shards(mariadb: Settings):
    with sharded_table(mariadb) as table:
        live = MariaDBSchemaSource().live_schema(
            _access(mariadb), table.db_prefix, table.table_prefix
        )
        assert live is not None
        assert live.physical_tables == tuple(
            f"{schema}.orders_{i:02d}" for schema in table.schemas for i in range(2)
        )
        assert live.columns == {
            "id": "bigint(20) unsigned",
            "user_id": "bigint(20)",
            "amount": "decimal(12,2)",
            "created_at": "datetime(6)",
        }
        assert live.primary_key == ("id",)
        assert (
            MariaDBSchemaSource().live_schema(_access(mariadb), table.db_prefix, "absent") is None
        )


def test_api_validates_mirrors_against_mariadb(mariadb: Settings, tmp_path: Path):
    local = mariadb.instances[0]
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {"initial_admin_password": ADMIN_PASSWORD, "scrape_targets": []}
        ),
    )
    app = create_app(
        settings,
        replays=SimulatedReplayService(),
        provisioner=RecordingProvisioner(settings),  # validation only: no topic or table made
    )  # the real schema source
    with sharded_table(mariadb) as table, TestClient(app) as client:
        headers = {"X-CSRF-Token": login(client)}
        instance = {
            "name": "live",
            "host": "127.0.0.1",
            "port": local.port,
            "user": local.user,
            "password": local.password.get_secret_value(),
        }
        assert client.post("/api/instances", json=instance, headers=headers).status_code == 201
        mirror = {"instance": "live", "db_prefix": table.db_prefix, "table_prefix": "orders"}

        wrong = client.post(
            "/api/table-mirrors",
            headers=headers,
            json={**mirror, "key": ["order_no"], "check_column": "created"},
        )
        assert wrong.status_code == 422
        first = f"{table.schemas[0]}.orders_00"
        columns = "(columns: id, user_id, amount, created_at)"
        assert wrong.json()["detail"] == [
            f"key column order_no does not exist in {first} {columns}.",
            f"check column created does not exist in {first} {columns}.",
        ]
        nokey = client.post(
            "/api/table-mirrors", headers=headers, json={**mirror, "table_prefix": "nokey"}
        )
        assert nokey.json()["detail"] == [
            f"{table.schemas[0]}.nokey_00 has no primary key; name the key columns explicitly."
        ]
        saved = client.post(
            "/api/table-mirrors", headers=headers, json={**mirror, "check_column": "created_at"}
        )
        assert saved.status_code == 201, saved.text
        assert saved.json()["name"] == table.logical_name

        closed_port = free_port()
        unreachable = {**instance, "name": "gone", "port": closed_port}
        client.post("/api/instances", json=unreachable, headers=headers)
        refused = client.post(
            "/api/table-mirrors",
            headers=headers,
            json={**mirror, "instance": "gone", "table_prefix": "other"},
        )
        assert refused.status_code == 422
        message = refused.json()["detail"][0]
        assert message.startswith(
            f"MySQL instance 'gone' at 127.0.0.1:{closed_port} cannot be reached to read the "
            "live schema:"
        )
        assert local.password.get_secret_value() not in refused.text
        assert [m["name"] for m in client.get("/api/table-mirrors").json()] == [table.logical_name]


def test_mirror_details_from_the_mirror_backend(
    mariadb: Settings, postgres: Settings, tmp_path: Path
):
    local = mariadb.instances[0]
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {"initial_admin_password": ADMIN_PASSWORD, "scrape_targets": []}
        ),
    )
    app = create_app(
        settings, replays=SimulatedReplayService(), provisioner=RecordingProvisioner(settings)
    )
    with sharded_table(mariadb) as table, TestClient(app) as client:
        headers = {"X-CSRF-Token": login(client)}
        instance = {
            "name": "live",
            "host": "127.0.0.1",
            "port": local.port,
            "user": local.user,
            "password": local.password.get_secret_value(),
        }
        client.post("/api/instances", json=instance, headers=headers)
        client.post(
            "/api/table-mirrors",
            headers=headers,
            json={
                "instance": "live",
                "db_prefix": table.db_prefix,
                "table_prefix": "orders",
                "check_column": "created_at",
            },
        )
        details = client.get(f"/api/table-mirrors/{table.logical_name}/details").json()
        assert details["problems"] == []
        assert details["live_schema"]["columns"] == {
            "id": "bigint(20) unsigned",
            "user_id": "bigint(20)",
            "amount": "decimal(12,2)",
            "created_at": "datetime(6)",
        }
        assert details["live_schema"]["shards_agree"] is True
        assert len(details["lineage"]["mysql"]["shards"]) == 4
        assert details["lineage"]["kafka_topic"] == "cdc.binlog.live"
        assert isinstance(details["daily_counts"], list)
        page = client.get(f"/tables/{table.logical_name}/details")
        assert page.status_code == 200 and 'id="live-schema"' in page.text


def test_merge_s_admin_source_reads_what_mysql_itself_says(mariadb: Settings, tmp_path: Path):
    """With ``config_store.source: webui`` merge holds no MySQL password: the admin reads the
    real MariaDB for a component token (``AdminLiveTables``), and the answer equals what
    ``LiveTables`` reads with the password directly (the file store's way)."""
    local = mariadb.instances[0]
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {"initial_admin_password": ADMIN_PASSWORD, "scrape_targets": []}
        ),
    )
    app = create_app(
        settings, replays=SimulatedReplayService(), provisioner=RecordingProvisioner(settings)
    )
    today = datetime.now(UTC).date()
    with sharded_table(mariadb) as table, TestClient(app) as client:
        with mariadb_admin(mariadb) as conn, conn.cursor() as cursor:
            # One row per shard, three days back and one day back: counts sum over shards.
            for n, schema in enumerate(table.schemas):
                for days_back, row_id in ((3, 10 + n), (1, 20 + n)):
                    cursor.execute(
                        f"INSERT INTO {schema}.orders_0{n} VALUES (%s, 1, 9.50, %s)",
                        (row_id, datetime.combine(today - timedelta(days=days_back), time(12))),
                    )
        csrf = login(client)
        headers = {"X-CSRF-Token": csrf}
        instance = {
            "name": "live",
            "host": "127.0.0.1",
            "port": local.port,
            "user": local.user,
            "password": local.password.get_secret_value(),
        }
        assert client.post("/api/instances", json=instance, headers=headers).status_code == 201
        mirror = TableMirror(
            instance="live",
            db_prefix=table.db_prefix,
            table_prefix="orders",
            check_column="created_at",
            targets=["hive"],
        )
        made = client.post(
            "/api/table-mirrors?initial_load=false",
            headers=headers,
            json=mirror.model_dump(mode="json"),
        )
        assert made.status_code == 201, made.text
        token = make_token(client, csrf, "component", name="merge")

        def forward(request: httpx.Request) -> httpx.Response:
            answer = client.get(
                request.url.path,
                params=dict(request.url.params),
                headers={"Authorization": request.headers["Authorization"]},
            )
            return httpx.Response(answer.status_code, content=answer.content)

        via_admin = AdminLiveTables(
            "http://admin", SecretStr(token), transport=httpx.MockTransport(forward)
        )
        direct = LiveTables(
            ConfigSnapshot(
                version=1,
                instances=(
                    InstanceConfig(
                        name="live",
                        host="127.0.0.1",
                        port=local.port,
                        user=local.user,
                        password=local.password,
                    ),
                ),
                tables=(mirror,),
            )
        )
        name = table.logical_name
        assert via_admin.live_schema(name) == direct.live_schema(name)
        assert list(via_admin.live_schema(name).columns) == [
            "id",
            "user_id",
            "amount",
            "created_at",
        ]
        counts = via_admin.count_per_day(name, "created_at", today)
        assert counts == direct.count_per_day(name, "created_at", today)
        assert (counts[today - timedelta(days=3)], counts[today - timedelta(days=1)]) == (2, 2)
        audit = [
            (e["actor"], e["action"], e["object_type"]) for e in client.get("/api/audit").json()
        ]
        assert ("token:merge", "use_secret", "live_schema") in audit
        assert ("token:merge", "use_secret", "live_counts") in audit
