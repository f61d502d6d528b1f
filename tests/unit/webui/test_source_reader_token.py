"""Tokens of role ``source_reader``: a command that reads MySQL itself (``cdc-mirror validate``
and its repair, started by the scheduler with ``config_store.source: webui``) gets the login of
the one instance its token was made for, and nothing else.

Which token reads which password, that every hand-over and every refusal is audited under the
token's name, what such a token may not do, how one is made, and
``cdc_platform.config_store.load_source_snapshot`` reading the real app.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from cdc_platform.config import ConfigStoreSettings, Settings
from cdc_platform.config_store import load_source_snapshot
from simple_binlog.errors import ConfigError
from tests.unit.webui.harness import MYSQL_PASSWORD, instance_body, make_token, mirror_body

OTHER_PASSWORD = "Other-Secret-99"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _setup(client: TestClient, csrf: str) -> None:
    """Two instances, each with its own password; a table mirror of 'orders'."""
    headers = {"X-CSRF-Token": csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    other = instance_body("billing", password=OTHER_PASSWORD)
    assert client.post("/api/instances", json=other, headers=headers).status_code == 201
    made = client.post("/api/table-mirrors?initial_load=false", json=mirror_body(), headers=headers)
    assert made.status_code == 201, made.text


def _audit(client: TestClient) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = client.get("/api/audit").json()
    return entries


def _via(client: TestClient) -> httpx.MockTransport:
    """An httpx transport that hands each request to the app under test."""

    def forward(request: httpx.Request) -> httpx.Response:
        answer: httpx.Response = client.request(
            request.method, request.url.path, headers=dict(request.headers)
        )
        return answer

    return httpx.MockTransport(forward)


def _webui_settings(tokens: dict[str, str]) -> Settings:
    return Settings(
        config_store=ConfigStoreSettings(
            source="webui",
            webui_url="http://admin",
            token=SecretStr("unused-here"),
            source_tokens={name: SecretStr(value) for name, value in tokens.items()},
        )
    )


def test_a_source_reader_token_reads_its_instance_with_the_password_audited_by_name(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "source_reader", name="validate-orders")
    answer = client.get("/api/config-snapshot", headers=_bearer(token))
    assert answer.status_code == 200
    body = answer.json()
    assert [(i["name"], i["password"]) for i in body["instances"]] == [("orders", MYSQL_PASSWORD)]
    assert [t["instance"] for t in body["tables"]] == ["orders"]
    assert OTHER_PASSWORD not in answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    latest = _audit(client)[0]
    assert (latest["actor"], latest["action"], latest["object_type"], latest["object_name"]) == (
        "token:validate-orders",
        "read_secret",
        "config_snapshot",
        "orders",
    )


def test_each_token_reads_only_its_own_instances_password(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    billing = make_token(client, admin_csrf, "source_reader", instance="billing")
    component = make_token(client, admin_csrf, "component")
    for_billing = client.get("/api/config-snapshot", headers=_bearer(billing))
    assert [(i["name"], i["password"]) for i in for_billing.json()["instances"]] == [
        ("billing", OTHER_PASSWORD)
    ]
    assert MYSQL_PASSWORD not in for_billing.text
    assert for_billing.json()["tables"] == []  # the orders mirror is not billing's
    as_component = client.get("/api/config-snapshot", headers=_bearer(component))
    assert all(i["password"] is None for i in as_component.json()["instances"])
    assert MYSQL_PASSWORD not in as_component.text and OTHER_PASSWORD not in as_component.text


def test_a_source_reader_token_may_read_nothing_else_and_its_refusals_are_audited(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "source_reader", name="validate-orders")
    headers = _bearer(token)
    for path in ("/api/instances", "/api/table-mirrors", "/api/audit", "/api/tokens"):
        assert client.get(path, headers=headers).status_code == 403, path
    assert client.get("/api/collector-config/orders", headers=headers).status_code == 403
    live = client.get("/api/table-mirrors/ordercenter_orderinfo/live-schema", headers=headers)
    assert live.status_code == 403
    latest = _audit(client)[0]
    assert (latest["actor"], latest["action"], latest["object_type"]) == (
        "token:validate-orders",
        "refused",
        "live_schema",
    )
    changed = client.put("/api/instances/orders", json=instance_body(), headers=headers)
    assert changed.status_code == 403


def test_a_source_reader_token_must_name_one_existing_instance(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    headers = {"X-CSRF-Token": admin_csrf}
    unbound = client.post(
        "/api/tokens", json={"name": "reader", "role": "source_reader"}, headers=headers
    )
    assert unbound.status_code == 422
    assert "source_reader token needs the name of the one instance" in unbound.text
    unknown = client.post(
        "/api/tokens",
        json={"name": "reader", "role": "source_reader", "instance": "nowhere"},
        headers=headers,
    )
    assert unknown.status_code == 422
    assert "no instance named 'nowhere'" in unknown.text
    component = client.post(
        "/api/tokens",
        json={"name": "merge", "role": "component", "instance": "orders"},
        headers=headers,
    )
    assert component.status_code == 422
    made = client.post(
        "/api/tokens",
        json={"name": "reader", "role": "source_reader", "instance": "orders"},
        headers=headers,
    )
    assert made.status_code == 201
    assert (made.json()["role"], made.json()["instance"]) == ("source_reader", "orders")


def test_load_source_snapshot_reads_the_instances_login_with_its_token(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    token = make_token(client, admin_csrf, "source_reader")
    snapshot = load_source_snapshot(
        _webui_settings({"orders": token}), "orders", transport=_via(client)
    )
    login = snapshot.instance("orders").login()
    assert login.password.get_secret_value() == MYSQL_PASSWORD
    assert [t.name for t in snapshot.tables] == ["ordercenter_orderinfo"]


def test_load_source_snapshot_refuses_without_a_fitting_token(
    client: TestClient, admin_csrf: str
) -> None:
    _setup(client, admin_csrf)
    billing = make_token(client, admin_csrf, "source_reader", instance="billing")
    component = make_token(client, admin_csrf, "component")
    with pytest.raises(ConfigError, match=r"needs config_store\.source_tokens\['orders'\]"):
        load_source_snapshot(_webui_settings({}), "orders", transport=_via(client))
    # A token made for another instance, or a component token, carries no password for it.
    for wrong in (billing, component):
        with pytest.raises(ConfigError, match="carries no password for instance 'orders'"):
            load_source_snapshot(
                _webui_settings({"orders": wrong}), "orders", transport=_via(client)
            )
    client.cookies.clear()  # else the admin's session would stand in for a bad token
    with pytest.raises(ConfigError, match=r"refused config_store\.source_tokens"):
        load_source_snapshot(
            _webui_settings({"orders": "cdcm_nonsense"}), "orders", transport=_via(client)
        )


def test_with_the_file_store_the_files_instance_is_used() -> None:
    snapshot = load_source_snapshot(Settings(), "local")
    assert snapshot.instance("local").login().password.get_secret_value() == "cdc-local"
    with pytest.raises(ConfigError, match="no MySQL instance named 'elsewhere'"):
        load_source_snapshot(Settings(), "elsewhere")
