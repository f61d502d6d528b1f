"""The JSON API and the forms against a temporary SQLite database: CRUD with audit, live-schema
validation messages, nothing half-saved, the collector config contract, replays."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.unit.webui.harness import (
    MYSQL_PASSWORD,
    instance_body,
    make_token,
    mirror_body,
)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_instance_create_update_keeps_password_and_audits(client: TestClient, admin_csrf: str):
    token = make_token(client, admin_csrf, "admin")
    anonymous = TestClient(client.app)  # no session cookie: the token alone authenticates
    created = anonymous.post("/api/instances", json=instance_body(), headers=_bearer(token))
    assert created.status_code == 201, created.text
    assert created.json()["password_set"] is True
    assert created.json()["topic"] == "cdc.binlog.orders"
    assert created.json()["version"] == 1

    update = instance_body(password=None, topic="orders.binlog")
    updated = anonymous.put("/api/instances/orders", json=update, headers=_bearer(token))
    assert updated.status_code == 200, updated.text
    assert updated.json()["topic"] == "orders.binlog"
    assert updated.json()["version"] == 2

    config_token = make_token(client, admin_csrf, "collector")
    config = anonymous.get("/api/collector-config/orders", headers=_bearer(config_token)).json()
    assert config["password"] == MYSQL_PASSWORD, "an update without password keeps the old one"

    # Another server needs the password again (tests/unit/webui/test_instance_connection.py).
    moved = instance_body(host="10.0.0.7", password="Moved-Server-Pw-1", topic="orders.binlog")
    assert anonymous.put("/api/instances/orders", json=moved, headers=_bearer(token)).is_success

    audit = client.get("/api/audit").json()
    change = next(
        e
        for e in audit
        if e["object_type"] == "instance"
        and e["action"] == "update"
        and e["after"]["host"] != e["before"]["host"]
    )
    assert change["actor"] == "token:admin-token"
    assert change["before"]["host"] == "127.0.0.1"
    assert change["after"]["host"] == "10.0.0.7"
    assert change["after"]["password"] == "(redacted)"


def test_rename_and_duplicate_are_refused(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    again = client.post("/api/instances", json=instance_body(), headers=headers)
    assert again.status_code == 422
    assert again.json()["detail"] == ["an instance named 'orders' exists already."]
    renamed = client.put("/api/instances/orders", json=instance_body(name="other"), headers=headers)
    assert renamed.status_code == 422
    assert "cannot be renamed" in renamed.json()["detail"][0]


def test_bad_instance_input_names_the_field_and_never_echoes_the_password(
    client: TestClient, admin_csrf: str
):
    body = instance_body(
        include=["(unclosed"], gtid_start="yesterday", host="db.example.com", password="cdc-local"
    )
    response = client.post("/api/instances", json=body, headers={"X-CSRF-Token": admin_csrf})
    assert response.status_code == 422
    detail = " ".join(response.json()["detail"])
    assert "include" in detail and "not a valid regular expression" in detail
    assert "gtid_start" in detail
    assert "cdc-local" not in response.text
    assert client.get("/api/instances").json() == []


def test_instance_form_with_bad_input_rerenders_and_saves_nothing(
    client: TestClient, admin_csrf: str
):
    form = {
        "csrf_token": admin_csrf,
        "name": "Bad Name!",
        "host": "127.0.0.1",
        "port": "23306",
        "user": "cdc",
        "password": MYSQL_PASSWORD,
        "include": ".*",
        "collector_group": "eu-1",
    }
    response = client.post("/instances/new", data=form)
    assert response.status_code == 422
    assert "Nothing was saved" in response.text
    assert "the name must be lowercase letters" in response.text
    assert 'value="eu-1"' in response.text, "the values typed are kept"
    assert MYSQL_PASSWORD not in response.text, "a password is never echoed into the page"
    assert client.get("/api/instances").json() == []
    assert client.get("/api/audit").json() == [] or all(
        e["object_type"] != "instance" for e in client.get("/api/audit").json()
    )


def test_table_mirror_is_validated_against_the_live_schema(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)

    wrong = mirror_body(key=["id", "order_no"], check_column="created", redis_columns=["id", "x"])
    response = client.post("/api/table-mirrors", json=wrong, headers=headers)
    assert response.status_code == 422
    assert response.json()["detail"] == [
        "key column order_no does not exist in ordercenter_00.orderinfo_00 "
        "(columns: id, user_id, amount, created_at).",
        "check column created does not exist in ordercenter_00.orderinfo_00 "
        "(columns: id, user_id, amount, created_at).",
        "Redis projection column x not in ordercenter_00.orderinfo_00 "
        "(columns: id, user_id, amount, created_at).",
    ]
    missing = client.post(
        "/api/table-mirrors", json=mirror_body(table_prefix="nothing"), headers=headers
    )
    assert missing.status_code == 422
    assert "no table of instance 'orders' matches" in missing.json()["detail"][0]
    assert client.get("/api/table-mirrors").json() == []

    saved = client.post("/api/table-mirrors", json=mirror_body(), headers=headers)
    assert saved.status_code == 201, saved.text
    assert saved.json()["name"] == "ordercenter_orderinfo"
    assert saved.json()["mirror"]["redis_ttl_s"] == 86400
    unknown = client.post("/api/table-mirrors", json=mirror_body(instance="nope"), headers=headers)
    assert unknown.status_code == 422
    assert unknown.json()["detail"] == ["instance: there is no instance named 'nope'."]


def test_table_form_rerenders_with_messages_and_typed_values(client: TestClient, admin_csrf: str):
    client.post("/api/instances", json=instance_body(), headers={"X-CSRF-Token": admin_csrf})
    form = {
        "csrf_token": admin_csrf,
        "instance": "orders",
        "db_prefix": "ordercenter",
        "table_prefix": "orderinfo",
        "targets": ["hive", "redis"],
        "key": "id, order_no",
        "check_column": "created_at",
        "redis_ttl_s": "-5",
    }
    response = client.post("/tables/new", data=form)
    assert response.status_code == 422
    assert "redis_ttl_s: Input should be greater than or equal to 1." in response.text
    response = client.post("/tables/new", data={**form, "redis_ttl_s": "60"})
    assert response.status_code == 422
    assert "key column order_no does not exist" in response.text
    assert 'value="id, order_no"' in response.text
    assert client.get("/api/table-mirrors").json() == []
    ok = client.post(
        "/tables/new", data={**form, "key": "id", "redis_ttl_s": "60"}, follow_redirects=False
    )
    assert ok.status_code == 303
    assert [m["name"] for m in client.get("/api/table-mirrors").json()] == ["ordercenter_orderinfo"]


def test_collector_config_contract(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    collector = make_token(client, admin_csrf, "collector")
    admin_token = make_token(client, admin_csrf, "admin", name="automation")
    bot = TestClient(client.app)

    assert bot.get("/api/collector-config/orders").status_code == 401
    assert bot.get("/api/collector-config/orders", headers=_bearer(admin_token)).status_code == 403
    assert bot.get("/api/instances", headers=_bearer(collector)).status_code == 403, (
        "a collector token reads its config and nothing else"
    )

    first = bot.get("/api/collector-config/orders", headers=_bearer(collector))
    assert first.status_code == 200
    body = first.json()
    assert body["password"] == MYSQL_PASSWORD
    assert body["topic"] == "cdc.binlog.orders"
    assert body["tables"] == []
    assert first.headers["etag"] == f'"{body["etag"]}"'
    unchanged = bot.get(
        "/api/collector-config/orders",
        headers={**_bearer(collector), "If-None-Match": first.headers["etag"]},
    )
    assert unchanged.status_code == 304

    client.post("/api/table-mirrors", json=mirror_body(), headers=headers)
    changed = bot.get(
        "/api/collector-config/orders",
        headers={**_bearer(collector), "If-None-Match": first.headers["etag"]},
    )
    assert changed.status_code == 200
    assert changed.json()["version"] > body["version"]
    assert changed.json()["etag"] != body["etag"]
    assert [t["table_prefix"] for t in changed.json()["tables"]] == ["orderinfo"]
    moved = instance_body(host="10.9.9.9", password="Moved-Server-Pw-2")
    assert client.put("/api/instances/orders", json=moved, headers=headers).status_code == 200
    after_move = bot.get(
        "/api/collector-config/orders",
        headers={**_bearer(collector), "If-None-Match": changed.headers["etag"]},
    )
    assert after_move.status_code == 200, "a cached config never outlives a change"
    assert after_move.json()["host"] == "10.9.9.9"
    assert after_move.json()["password"] == "Moved-Server-Pw-2"
    assert bot.get("/api/collector-config/gone", headers=_bearer(collector)).status_code == 403, (
        "a collector token reads its own instance only"
    )
    client.delete("/api/table-mirrors/ordercenter_orderinfo", headers=headers)
    assert client.delete("/api/instances/orders", headers=headers).status_code == 204
    assert bot.get("/api/collector-config/orders", headers=_bearer(collector)).status_code == 404


def test_replay_start_progress_cancel_history(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    request = {
        "instance": "orders",
        "db_prefix": "ordercenter",
        "table_prefix": "orderinfo",
        "condition": "id > 10",
        "execute_time": "2026-11-21",
    }
    started = client.post("/api/replays", json=request, headers=headers)
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    assert started.json()["state"] == "running"
    status = client.get(f"/api/replays/{run_id}").json()
    assert status["request"]["condition"] == "id > 10"
    cancelled = client.post(f"/api/replays/{run_id}/cancel", headers=headers)
    assert cancelled.json()["state"] == "cancelled"
    assert [r["run_id"] for r in client.get("/api/replays").json()] == [run_id]
    actions = [(e["action"], e["object_type"]) for e in client.get("/api/audit").json()]
    assert ("start", "replay") in actions and ("cancel", "replay") in actions

    unknown = client.post("/api/replays", json={**request, "instance": "nope"}, headers=headers)
    assert unknown.status_code == 404
    assert client.get("/api/replays/doesnotexist").status_code == 404


def test_replay_form_redirects_to_a_progress_page(client: TestClient, admin_csrf: str):
    client.post("/api/instances", json=instance_body(), headers={"X-CSRF-Token": admin_csrf})
    response = client.post(
        "/replays",
        data={
            "csrf_token": admin_csrf,
            "instance": "orders",
            "db_prefix": "ordercenter",
            "table_prefix": "orderinfo",
            "batch_size": "500",
        },
        follow_redirects=False,
    )
    assert response.status_code == 303
    page = client.get(response.headers["location"])
    assert page.status_code == 200
    assert 'id="replay-progress"' in page.text and 'data-final="no"' in page.text
    bad = client.post(
        "/replays",
        data={
            "csrf_token": admin_csrf,
            "instance": "orders",
            "db_prefix": "x; DROP",
            "table_prefix": "t",
        },
    )
    assert bad.status_code == 422
    assert "db_prefix: String should match pattern" in bad.text


def test_token_secret_is_shown_once_and_stored_hashed(client: TestClient, admin_csrf: str):
    page = client.post("/tokens", data={"csrf_token": admin_csrf, "name": "ci", "role": "viewer"})
    assert page.status_code == 201
    secret = re.search(r'id="new-token-value">([^<]+)<', page.text).group(1)
    assert secret.startswith("cdcm_")
    assert secret not in client.get("/users").text
    assert secret not in client.get("/api/tokens").text
    database = client.app.state.ctx.sessions
    from sqlalchemy import text

    with database() as db:
        stored = db.execute(text("SELECT token_hash, display_prefix FROM api_tokens")).one()
    assert secret not in stored.token_hash and stored.display_prefix == secret[:9]
    assert TestClient(client.app).get("/api/me", headers=_bearer(secret)).json() == {
        "name": "token:ci",
        "role": "viewer",
        "kind": "token",
    }


def test_revoked_token_and_disabled_user_lose_access_at_once(client: TestClient, admin_csrf: str):
    from tests.unit.webui.harness import VIEWER_PASSWORD, create_viewer, login

    headers = {"X-CSRF-Token": admin_csrf}
    token = make_token(client, admin_csrf, "viewer")
    token_id = client.get("/api/tokens").json()[0]["id"]
    bot = TestClient(client.app)
    assert bot.get("/api/instances", headers=_bearer(token)).status_code == 200
    assert client.delete(f"/api/tokens/{token_id}", headers=headers).json()["revoked"] is True
    assert bot.get("/api/instances", headers=_bearer(token)).status_code == 401

    create_viewer(client, admin_csrf)
    viewer = TestClient(client.app)
    login(viewer, "viewer", VIEWER_PASSWORD)
    assert viewer.get("/api/me").json()["role"] == "viewer"
    client.put("/api/users/viewer/state", json={"disabled": True}, headers=headers)
    assert viewer.get("/api/me").status_code == 401
    assert viewer.get("/instances", follow_redirects=False).status_code == 303


def test_mirror_details_name_what_cannot_be_read_and_still_give_lineage(
    client: TestClient, admin_csrf: str
):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(topic="orders.custom"), headers=headers)
    client.post("/api/table-mirrors", json=mirror_body(targets=["hive", "redis"]), headers=headers)
    details = client.get("/api/table-mirrors/ordercenter_orderinfo/details")
    assert details.status_code == 200, details.text
    body = details.json()
    assert body["live_schema"] is None and body["daily_counts"] is None
    assert [p.split(":")[0] for p in body["problems"]] == ["live schema", "daily counts"]
    assert "MySQL instance 'orders' at 127.0.0.1:1 cannot be reached" in body["problems"][0]
    assert body["lineage"]["kafka_topic"] == "orders.custom"
    assert body["lineage"]["warehouse_table"] is None
    assert body["lineage"]["redis_prefix"] == "cdc:ordercenter_orderinfo:"
    assert MYSQL_PASSWORD not in details.text
    page = client.get("/tables/ordercenter_orderinfo/details")
    assert page.status_code == 200 and "orders.custom" in page.text
    assert client.get("/api/table-mirrors/nope/details").status_code == 404


def test_audit_page_shows_readable_escaped_json(client: TestClient, admin_csrf: str):
    body = instance_body(include=[r"<script>alert(1)</script>\..*"])
    assert (
        client.post("/api/instances", json=body, headers={"X-CSRF-Token": admin_csrf}).status_code
        == 201
    )
    page = client.get("/audit").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, "escaped by the template"
    assert "<script>alert" not in page
    assert "\\u003c" not in page, "readable, not JSON-escaped for <script>"
