"""``GET /api/config-snapshot``: what each kind of token reads (a component token: no
password; a collector token: its own instance only, with its password, audited), ETags and
304, the version growing with every audited change, and ``AdminConfigStore`` reading it from
the real app."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient
from pydantic import SecretStr

from cdc_platform.config_store import AdminConfigStore, ConfigWatch
from tests.unit.webui.harness import (
    MYSQL_PASSWORD,
    create_viewer,
    instance_body,
    login,
    make_token,
    mirror_body,
)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _setup(client: TestClient, csrf: str) -> None:
    headers = {"X-CSRF-Token": csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    other = instance_body("billing", password="Other-Secret-99")
    assert client.post("/api/instances", json=other, headers=headers).status_code == 201
    assert client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code == 201


def _via(client: TestClient) -> httpx.MockTransport:
    """An httpx transport that hands each request to the app under test."""

    def forward(request: httpx.Request) -> httpx.Response:
        return client.request(request.method, request.url.path, headers=dict(request.headers))

    return httpx.MockTransport(forward)


def test_a_component_token_reads_tables_and_instances_but_no_password(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "component")
    answer = client.get("/api/config-snapshot", headers=_bearer(token))
    assert answer.status_code == 200
    body = answer.json()
    assert [i["name"] for i in body["instances"]] == ["billing", "orders"]
    assert all(i["password"] is None for i in body["instances"])
    assert MYSQL_PASSWORD not in answer.text and "Other-Secret-99" not in answer.text
    assert [(t["db_prefix"], t["instance"]) for t in body["tables"]] == [("ordercenter", "orders")]
    assert answer.headers["ETag"] == f'"{body["etag"]}"'
    # Nothing else: not the instance list, not a collector config.
    assert client.get("/api/instances", headers=_bearer(token)).status_code == 403
    assert client.get("/api/collector-config/orders", headers=_bearer(token)).status_code == 403
    assert client.get("/api/audit", headers=_bearer(token)).status_code == 403


def test_the_etag_answers_304_until_an_audited_change_bumps_the_version(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "component")
    first = client.get("/api/config-snapshot", headers=_bearer(token))
    etag = first.headers["ETag"]
    unchanged = client.get(
        "/api/config-snapshot", headers={**_bearer(token), "If-None-Match": etag}
    )
    assert unchanged.status_code == 304
    assert unchanged.headers["ETag"] == etag
    removed = client.delete(
        "/api/table-mirrors/ordercenter_orderinfo", headers={"X-CSRF-Token": admin_csrf}
    )
    assert removed.status_code == 204
    after = client.get("/api/config-snapshot", headers={**_bearer(token), "If-None-Match": etag})
    assert after.status_code == 200
    assert after.json()["version"] > first.json()["version"]
    assert after.json()["tables"] == []
    audit = client.get("/api/audit").json()
    assert (audit[0]["action"], audit[0]["object_type"]) == ("delete", "table_mirror")


def test_a_collector_token_reads_only_its_instance_with_its_password_audited(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "collector", instance="orders")
    answer = client.get("/api/config-snapshot", headers=_bearer(token))
    assert answer.status_code == 200
    body = answer.json()
    assert [(i["name"], i["password"]) for i in body["instances"]] == [("orders", MYSQL_PASSWORD)]
    assert "Other-Secret-99" not in answer.text
    audit = client.get("/api/audit").json()
    assert (audit[0]["action"], audit[0]["object_type"], audit[0]["object_name"]) == (
        "read_secret",
        "config_snapshot",
        "orders",
    )
    assert answer.headers["Cache-Control"] == "no-store"


def test_people_read_it_without_passwords_and_strangers_not_at_all(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    create_viewer(client, admin_csrf)
    client.cookies.clear()
    assert client.get("/api/config-snapshot", headers=_bearer("cdcm_nonsense")).status_code == 401
    login(client, "viewer", "viewer-password-1")
    answer = client.get("/api/config-snapshot")
    assert answer.status_code == 200
    assert all(i["password"] is None for i in answer.json()["instances"])


def test_the_admin_store_reads_the_app_and_sees_a_new_table_mirror(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "component")
    store = AdminConfigStore("http://admin", SecretStr(token), transport=_via(client))
    watch = ConfigWatch(store, interval_s=60)
    first = watch.start(poll=False)
    assert [t.name for t in first.tables] == ["ordercenter_orderinfo"]
    assert watch.poll_once() is False  # 304
    second = mirror_body(table_prefix="orderinfo", db_prefix="ordercenter", key=["id"])
    changed = client.put(
        "/api/table-mirrors/ordercenter_orderinfo",
        json=second,
        headers={"X-CSRF-Token": admin_csrf},
    )
    assert changed.status_code == 200, changed.text
    assert watch.poll_once() is True
    change = watch.take()
    assert change is not None
    assert change.new.version > first.version
    assert change.new.tables[0].key == ["id"]
    watch.close()


def test_a_collector_token_without_an_instance_is_refused_and_audited(
    client: TestClient, admin_csrf: str
) -> None:
    from sqlalchemy import update

    from webui.models import ApiToken

    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "collector", name="unbound", instance="orders")
    # As a token made before collector tokens had an instance would be.
    with client.app.state.ctx.sessions.begin() as db:  # type: ignore[attr-defined]
        db.execute(update(ApiToken).where(ApiToken.name == "unbound").values(instance=None))
    answer = client.get("/api/config-snapshot", headers=_bearer(token))
    assert answer.status_code == 403
    assert "password" not in answer.text
    audit = client.get("/api/audit").json()
    assert (audit[0]["actor"], audit[0]["action"], audit[0]["object_type"]) == (
        "token:unbound",
        "refused",
        "config_snapshot",
    )
