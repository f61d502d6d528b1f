"""One action to mirror a table (issue 22, item 2): creating a table mirror in the admin saves
it, queues its initial load for the replay worker and sets up its resources in one
transaction; a refusal at any step saves nothing; removing it lists what it leaves behind and
stops its initial load. The app is the real one over SQLite; the provisioner is the fake
(``RecordingProvisioner``) and the replay check is mock_replay's condition parser against the
static schema (the real check also reads MySQL: tests/integration/webui)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import snapshot_from_settings
from mock_replay.condition import compile_condition
from tests.unit.webui.harness import (
    ORDERS_SCHEMA,
    VIEWER_PASSWORD,
    create_viewer,
    instance_body,
    login,
    make_token,
    mirror_body,
    webui_settings,
)
from webui.app import create_app
from webui.db import database_url, make_engine, session_factory
from webui.models import AuditEntry, ReplayJob, TableMirrorRow
from webui.provisioning import RecordingProvisioner, warehouse_waits_for
from webui.replay import ReplayRequest
from webui.replay_jobs import JobReplayService
from webui.schema_source import LiveTableSchema, StaticSchemaSource
from webui.status_sources import StatusService

NAME = "ordercenter_orderinfo"


def check_condition(request: ReplayRequest, run_id: str) -> None:
    """mock_replay's own parser over the static table's columns (refuses with a sentence)."""
    del run_id
    if request.condition is not None:
        compile_condition(request.condition, ORDERS_SCHEMA.columns, dt.datetime.now(dt.UTC))


class Admin:
    def __init__(self, home: Path, schemas: dict[str, LiveTableSchema] | None = None) -> None:
        settings = webui_settings(home)
        engine = make_engine(database_url(settings))
        self.sessions = session_factory(engine)
        self.provisioner = RecordingProvisioner(settings)
        self.app = create_app(
            settings,
            engine=engine,
            schemas=StaticSchemaSource(schemas or {NAME: ORDERS_SCHEMA}),
            replays=JobReplayService(self.sessions, check=check_condition),
            provisioner=self.provisioner,
        )
        self.app.state.status = StatusService(settings, self.sessions, offsets=lambda *_: {})

    def jobs(self) -> list[ReplayJob]:
        with self.sessions() as db:
            return list(db.scalars(select(ReplayJob).order_by(ReplayJob.created_at)))

    def mirrors(self) -> list[str]:
        with self.sessions() as db:
            return list(db.scalars(select(TableMirrorRow.name)))


@pytest.fixture()
def admin(tmp_path: Path) -> Admin:
    return Admin(tmp_path)


@pytest.fixture()
def client(admin: Admin) -> Iterator[TestClient]:
    with TestClient(admin.app) as client:
        csrf = login(client)
        client.headers["X-CSRF-Token"] = csrf
        assert client.post("/api/instances", json=instance_body()).status_code == 201
        yield client


def form(client: TestClient, **fields: object) -> dict[str, object]:
    return {
        "csrf_token": client.headers["X-CSRF-Token"],
        "instance": "orders",
        "db_prefix": "ordercenter",
        "table_prefix": "orderinfo",
        "targets": ["hive", "warehouse", "redis"],
        "initial_load": "on",
        **fields,
    }


def test_creating_in_the_form_saves_sets_up_and_queues_the_initial_load(
    admin: Admin, client: TestClient
) -> None:
    new = client.get("/tables/new")
    assert 'name="initial_load" checked' in new.text  # on unless the operator opts out
    answer = client.post(
        "/tables/new",
        data=form(client, initial_load_condition="amount > 10", initial_load_day="2026-11-20"),
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/tables/{NAME}"

    [job] = admin.jobs()
    assert (job.table_mirror, job.state) == (NAME, "pending")
    assert job.request["condition"] == "amount > 10"
    assert job.request["execute_time"] == "2026-11-20"
    [setup] = admin.provisioner.setups
    assert setup.mirror.name == NAME and setup.topic == "cdc.binlog.orders"
    assert setup.live.columns == ORDERS_SCHEMA.columns
    assert setup.warehouse_later is None  # governance is off: the table is made now

    page = client.get(f"/tables/{NAME}")
    assert 'id="mirror-resources"' in page.text
    for name in ("cdc.binlog.orders", f"cdc_warehouse.cdc_mirror.{NAME}", f"ods_snapshot.{NAME}"):
        assert name in page.text
    assert "created by the stream writer with the table&#39;s first rows" in page.text
    assert job.run_id in page.text and "pending" in page.text
    with admin.sessions() as db:
        actions = [
            (e.action, e.object_type)
            for e in db.scalars(select(AuditEntry).order_by(AuditEntry.id))
        ]
    assert ("create", "table_mirror") in actions
    assert ("start", "replay") in actions
    assert ("provision", "table_mirror_resources") in actions


def test_opting_out_queues_nothing_and_the_load_starts_later_from_the_page(
    admin: Admin, client: TestClient
) -> None:
    data = form(client)
    del data["initial_load"]  # unticked
    assert client.post("/tables/new", data=data, follow_redirects=False).status_code == 303
    assert admin.jobs() == []
    assert 'id="no-initial-load"' in client.get(f"/tables/{NAME}").text

    refused = client.post(
        f"/tables/{NAME}/initial-load",
        data={"csrf_token": client.headers["X-CSRF-Token"], "initial_load_condition": "nope > 1"},
    )
    assert refused.status_code == 422
    assert "initial load: the replay condition is refused" in refused.text
    assert admin.jobs() == []
    started = client.post(
        f"/tables/{NAME}/initial-load",
        data={"csrf_token": client.headers["X-CSRF-Token"], "initial_load_condition": "id < 5"},
        follow_redirects=False,
    )
    assert started.status_code == 303
    assert [j.request["condition"] for j in admin.jobs()] == ["id < 5"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"initial_load_condition": "id > 1; DROP TABLE orders"},
            "initial load: the replay condition is refused",
        ),
        ({"initial_load_condition": "missing_column = 1"}, "missing_column"),
        ({"initial_load_day": "yesterday"}, "initial load day: &#39;yesterday&#39; is not a date"),
        ({"key": "order_no"}, "key column order_no does not exist"),
        ({"targets": ["hive", "s3"]}, "targets.1: Input should be"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_saved(
    admin: Admin, client: TestClient, fields: dict[str, object], message: str
) -> None:
    answer = client.post("/tables/new", data=form(client, **fields))
    assert answer.status_code == 422
    assert message in answer.text
    assert admin.mirrors() == [] and admin.jobs() == [] and admin.provisioner.setups == []


def test_a_failed_set_up_saves_nothing_and_the_form_is_kept_for_a_retry(
    admin: Admin, client: TestClient
) -> None:
    admin.provisioner.fail = "the Kafka topic cdc.binlog.orders could not be set up: down."
    answer = client.post("/tables/new", data=form(client, initial_load_condition="id > 3"))
    assert answer.status_code == 422
    assert "could not be set up: down. Nothing was saved; try again" in answer.text
    assert 'value="id &gt; 3"' in answer.text  # typed values kept: pressing Save again retries
    assert admin.mirrors() == [] and admin.jobs() == []
    admin.provisioner.fail = None
    retried = client.post("/tables/new", data=form(client, initial_load_condition="id > 3"))
    assert retried.status_code == 200 and retried.url.path == f"/tables/{NAME}"
    assert admin.mirrors() == [NAME] and len(admin.jobs()) == 1


def test_names_that_collide_with_another_mirror_are_refused(tmp_path: Path) -> None:
    base = LiveTableSchema("shop_orders", ("shop_00.orders_00",), {"id": "int"}, ("id",))
    tomb = LiveTableSchema(
        "shop_orders__tombstone", ("shop_00.orders__tombstone",), {"id": "int"}, ("id",)
    )
    long_db = "s" * 30
    long = LiveTableSchema(
        f"{long_db}_{'o' * 30}", (f"{long_db}.{'o' * 30}",), {"id": "int"}, ("id",)
    )
    admin = Admin(
        tmp_path,
        {"shop_orders": base, "shop_orders__tombstone": tomb, long.logical_name: long},
    )
    with TestClient(admin.app) as client:
        client.headers["X-CSRF-Token"] = login(client)
        body = instance_body("shop", include=[".*"])
        assert client.post("/api/instances", json=body).status_code == 201
        mirror = {"instance": "shop", "db_prefix": "shop", "targets": ["warehouse"]}
        made = client.post(
            "/api/table-mirrors?initial_load=false", json={**mirror, "table_prefix": "orders"}
        )
        assert made.status_code == 201, made.text

        again = client.post("/api/table-mirrors", json={**mirror, "table_prefix": "orders"})
        assert again.status_code == 422
        assert "exists already (of instance 'shop')" in again.json()["detail"][0]

        tombstone = client.post(
            "/api/table-mirrors", json={**mirror, "table_prefix": "orders__tombstone"}
        )
        assert tombstone.status_code == 422
        assert "one is the other's tombstone table" in tombstone.json()["detail"][0]
        # Without the warehouse target the names do not meet.
        lake_only = {**mirror, "table_prefix": "orders__tombstone", "targets": ["hive"]}
        assert (
            client.post("/api/table-mirrors?initial_load=false", json=lake_only).status_code == 201
        )

        too_long = client.post(
            "/api/table-mirrors",
            json={**mirror, "db_prefix": long_db, "table_prefix": "o" * 30},
        )
        assert too_long.status_code == 422
        assert "is 61 bytes; the warehouse target takes at most 52" in too_long.json()["detail"][0]
        assert admin.mirrors() == ["shop_orders", "shop_orders__tombstone"]


def test_tables_the_instance_does_not_capture_are_refused(admin: Admin) -> None:
    with TestClient(admin.app) as client:
        client.headers["X-CSRF-Token"] = login(client)
        narrow = instance_body(include=[r"ordercenter_00\.orderinfo_00"])
        assert client.post("/api/instances", json=narrow).status_code == 201
        answer = client.post("/api/table-mirrors", json=mirror_body())
        assert answer.status_code == 422
        assert answer.json()["detail"] == [
            "instance 'orders' does not capture ordercenter_00.orderinfo_01: its "
            "include/exclude patterns leave them out, so their changes would never reach the "
            "mirror; change the instance's patterns first."
        ]
        assert admin.mirrors() == []


def test_the_api_creates_sets_up_lists_leftovers_and_removes(
    admin: Admin, client: TestClient
) -> None:
    created = client.post(
        "/api/table-mirrors?initial_load_condition=id%20%3E%202", json=mirror_body()
    )
    assert created.status_code == 201, created.text
    body = created.json()
    [job] = admin.jobs()
    assert body["initial_load"] == job.run_id and job.request["condition"] == "id > 2"
    kinds = [r["kind"] for r in body["resources"]]
    assert kinds == [
        "Kafka topic",
        "warehouse table",
        "lake raw table",
        "lake snapshot table",
        "Redis key space",
    ]
    again = client.post(f"/api/table-mirrors/{NAME}/initial-load", json={"condition": "id > 7"})
    assert again.status_code == 201 and again.json()["state"] == "pending"

    leftovers = client.get(f"/api/table-mirrors/{NAME}/leftovers").json()
    by_kind = {r["kind"]: r for r in leftovers}
    assert by_kind["warehouse table"]["name"] == f"cdc_warehouse.cdc_mirror.{NAME}"
    assert "__tombstone" in by_kind["warehouse table"]["state"]
    assert by_kind["Redis keys"]["name"] == f"cdc:{NAME}:*"
    assert "expire within 86400 s" in by_kind["Redis keys"]["state"]
    confirm = client.get(f"/tables/{NAME}/delete")
    assert 'id="leftovers"' in confirm.text and f"cdc:{NAME}:*" in confirm.text
    assert 'id="stopped-loads"' in confirm.text  # both loads are still pending

    assert client.delete(f"/api/table-mirrors/{NAME}").status_code == 204
    assert admin.mirrors() == []
    assert {j.state for j in admin.jobs()} == {"cancelled"}


def test_the_warehouse_table_waits_for_the_first_change_only_when_governance_retypes() -> None:
    assert warehouse_waits_for({"id": "hash"}, governance_on=False) is None
    assert warehouse_waits_for({"id": "pass", "name": "pass"}, governance_on=True) is None
    later = warehouse_waits_for({"id": "pass", "phone": "hash", "a": "drop"}, governance_on=True)
    assert later is not None
    assert "first change: governance rewrites columns a, phone" in later


# --- disabling a mirror (issue 22, item 9: "disable it → they stop") -----------------------


def _snapshot_tables(client: TestClient, token: str) -> list[str]:
    answer = client.get("/api/config-snapshot", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return [t["db_prefix"] + "_" + t["table_prefix"] for t in answer.json()["tables"]]


def test_a_disabled_mirror_leaves_the_components_configuration_until_enabled_again(
    admin: Admin, client: TestClient
) -> None:
    csrf = client.headers["X-CSRF-Token"]
    assert client.post("/tables/new", data=form(client), follow_redirects=False).status_code == 303
    component = make_token(client, csrf, "component")
    collector = make_token(client, csrf, "collector")
    assert _snapshot_tables(client, component) == [NAME]
    assert "Disable" in client.get(f"/tables/{NAME}").text

    disabled = client.post(f"/tables/{NAME}/enabled", data={"csrf_token": csrf, "enabled": "false"})
    assert disabled.status_code == 200  # after the redirect: the mirror's page
    assert 'id="mirror-state"' in disabled.text and "Disabled" in disabled.text
    # The components' configuration leaves it out (as a removed one); the admin keeps it.
    assert _snapshot_tables(client, component) == []
    config = client.get(
        "/api/collector-config/orders", headers={"Authorization": f"Bearer {collector}"}
    )
    assert config.json()["tables"] == []
    assert config.json()["stopped_tables"] == [NAME]  # the collector stops publishing it
    assert admin.mirrors() == [NAME]
    assert client.get(f"/api/table-mirrors/{NAME}").json()["mirror"]["enabled"] is False
    assert 'class="mirror-state">disabled' in client.get("/tables").text
    # Its queued initial load stops with it; a new one is refused until it is enabled.
    assert {j.state for j in admin.jobs()} == {"cancelled"}
    refused = client.post(f"/tables/{NAME}/initial-load", data={"csrf_token": csrf})
    assert refused.status_code == 422 and "is disabled" in refused.text
    # Saving the form (which says nothing of it) keeps it disabled.
    saved = client.post(f"/tables/{NAME}", data=form(client, redis_ttl_s="60"))
    assert saved.status_code == 200 and "Disabled" in saved.text
    assert _snapshot_tables(client, component) == []

    enabled = client.post(f"/tables/{NAME}/enabled", data={"csrf_token": csrf, "enabled": "true"})
    assert enabled.status_code == 200 and "Enabled" in enabled.text
    assert _snapshot_tables(client, component) == [NAME]
    assert _stopped_at_the_collector(client, collector) == []
    with admin.sessions() as db:
        actions = list(
            db.scalars(
                select(AuditEntry.action)
                .where(AuditEntry.object_type == "table_mirror", AuditEntry.object_name == NAME)
                .order_by(AuditEntry.id)
            )
        )
    assert actions == ["create", "disable", "update", "enable"]


def _stopped_at_the_collector(client: TestClient, token: str) -> list[str]:
    answer = client.get(
        "/api/collector-config/orders", headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["stopped_tables"])


def test_a_removed_mirror_stays_stopped_at_the_collector_until_made_again(
    admin: Admin, client: TestClient
) -> None:
    csrf = client.headers["X-CSRF-Token"]
    collector = make_token(client, csrf, "collector")
    created = client.post("/api/table-mirrors?initial_load=false", json=mirror_body())
    assert created.status_code == 201, created.text
    assert _stopped_at_the_collector(client, collector) == []
    before = client.get(
        "/api/collector-config/orders", headers={"Authorization": f"Bearer {collector}"}
    ).json()

    assert client.delete(f"/api/table-mirrors/{NAME}").status_code == 204
    after = client.get(
        "/api/collector-config/orders", headers={"Authorization": f"Bearer {collector}"}
    ).json()
    # Its shards still match the instance's include patterns: the collector leaves them out
    # because the mirror was removed, and the new etag makes it switch.
    assert after["stopped_tables"] == [NAME] and after["tables"] == []
    assert after["etag"] != before["etag"] and after["version"] > before["version"]

    # Made again (with an initial load for the gap): published again from then on.
    again = client.post("/api/table-mirrors?initial_load=false", json=mirror_body())
    assert again.status_code == 201, again.text
    assert _stopped_at_the_collector(client, collector) == []
    confirm = client.get(f"/tables/{NAME}/delete").text
    assert "stops publishing the table's changes at its next transaction boundary" in confirm
    leftovers = {
        r["kind"]: r["state"] for r in client.get(f"/api/table-mirrors/{NAME}/leftovers").json()
    }
    assert "none after" in leftovers["lake raw table"]
    assert "tag (dt-YYYY-MM-DD)" in leftovers["lake snapshot table"]


def test_a_viewer_cannot_disable_a_mirror(admin: Admin, client: TestClient) -> None:
    csrf = client.headers["X-CSRF-Token"]
    assert (
        client.post("/api/table-mirrors?initial_load=false", json=mirror_body()).status_code == 201
    )
    create_viewer(client, csrf)
    with TestClient(admin.app) as viewer:
        viewer_csrf = login(viewer, "viewer", VIEWER_PASSWORD)
        assert 'id="enable-form"' not in viewer.get(f"/tables/{NAME}").text
        refused = viewer.post(
            f"/tables/{NAME}/enabled", data={"csrf_token": viewer_csrf, "enabled": "false"}
        )
        assert refused.status_code == 403
    assert client.get(f"/api/table-mirrors/{NAME}").json()["mirror"]["enabled"] is True


def test_the_table_list_shows_each_change_and_each_role_its_own_actions(
    admin: Admin, client: TestClient
) -> None:
    """The list's rows are rendered once per configuration version: a change shows at once."""
    csrf = client.headers["X-CSRF-Token"]
    assert "No table mirrors yet." in client.get("/tables").text
    assert (
        client.post("/api/table-mirrors?initial_load=false", json=mirror_body()).status_code == 201
    )
    listed = client.get("/tables").text
    assert f'href="/tables/{NAME}"' in listed and "Remove…" in listed
    create_viewer(client, csrf)
    with TestClient(admin.app) as viewer:
        login(viewer, "viewer", VIEWER_PASSWORD)
        seen = viewer.get("/tables").text
        assert f'href="/tables/{NAME}"' in seen and "Remove…" not in seen
    assert client.delete(f"/api/table-mirrors/{NAME}").status_code == 204
    assert "No table mirrors yet." in client.get("/tables").text


def test_the_file_configuration_leaves_disabled_mirrors_out_too() -> None:
    settings = Settings(
        tables=[
            TableMirror(db_prefix="a", table_prefix="t"),
            TableMirror(db_prefix="b", table_prefix="t", enabled=False),
        ]
    )
    assert [t.name for t in snapshot_from_settings(settings).tables] == ["a_t"]
