"""Pointing an instance at another server must not carry its stored password there: a change
of host, port or user needs the password entered again, in the API and in the form alike."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.unit.webui.harness import MYSQL_PASSWORD, instance_body, make_token

REFUSAL = (
    "password: changing the host, port or user needs the MySQL password entered again; "
    "the stored one is never sent to a new server."
)


def _config(client: TestClient, csrf: str) -> dict[str, object]:
    token = make_token(client, csrf, "collector")
    bot = TestClient(client.app)
    answer = bot.get("/api/collector-config/orders", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    return dict(answer.json())


@pytest.mark.parametrize(
    "change", [{"host": "evil.example.com"}, {"port": 3307}, {"user": "attacker"}]
)
def test_api_refuses_a_connection_change_without_the_password(
    client: TestClient, admin_csrf: str, change: dict[str, object]
):
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    moved = instance_body(password=None, **change)
    refused = client.put("/api/instances/orders", json=moved, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["detail"] == [REFUSAL]
    config = _config(client, admin_csrf)
    assert (config["host"], config["port"], config["user"]) == ("127.0.0.1", 1, "cdc")

    with_password = client.put(
        "/api/instances/orders",
        json=instance_body(password="New-Server-Pw-9", **change),
        headers=headers,
    )
    assert with_password.status_code == 200, with_password.text
    config = _config(client, admin_csrf)
    assert config["password"] == "New-Server-Pw-9"


def test_api_keeps_the_password_when_the_connection_stays(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    same = instance_body(password=None, include=[r"billing_\d+\..*"], collector_group="eu-2")
    assert client.put("/api/instances/orders", json=same, headers=headers).status_code == 200
    assert _config(client, admin_csrf)["password"] == MYSQL_PASSWORD


def _form(csrf: str, **values: str) -> dict[str, str]:
    form = {
        "csrf_token": csrf,
        "name": "orders",
        "host": "127.0.0.1",
        "port": "1",
        "user": "cdc",
        "gtid_start": "current",
        "include": "ordercenter_\\d+\\..*",
        "exclude": "",
        "shard_rules": "",
        "collector_group": "eu-1",
        "topic": "",
    }
    form.update(values)
    return form


def test_form_refuses_a_host_change_without_the_password(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    refused = client.post(
        "/instances/orders", data=_form(admin_csrf, host="evil.example.com"), follow_redirects=False
    )
    assert refused.status_code == 422
    assert "changing the host, port or user needs the MySQL password entered again" in refused.text
    assert _config(client, admin_csrf)["host"] == "127.0.0.1"

    kept = client.post(
        "/instances/orders", data=_form(admin_csrf, collector_group="eu-2"), follow_redirects=False
    )
    assert kept.status_code == 303
    assert _config(client, admin_csrf)["password"] == MYSQL_PASSWORD

    moved = client.post(
        "/instances/orders",
        data=_form(admin_csrf, host="10.0.0.8", password="Other-Server-Pw-3"),
        follow_redirects=False,
    )
    assert moved.status_code == 303
    config = _config(client, admin_csrf)
    assert (config["host"], config["password"]) == ("10.0.0.8", "Other-Server-Pw-3")


def test_form_sets_and_clears_cleartext_password_permission(client: TestClient, admin_csrf: str):
    # The form is the other way an admin edits an instance: the permission must be settable
    # there too, and an unticked box (which a browser does not send) must switch it off.
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    assert _config(client, admin_csrf)["allow_cleartext_password"] is False
    page = client.get("/instances/orders")
    assert 'name="allow_cleartext_password"' in page.text and "checked" not in page.text

    ticked = _form(admin_csrf, allow_cleartext_password="on", password=MYSQL_PASSWORD)
    assert client.post("/instances/orders", data=ticked, follow_redirects=False).status_code == 303
    assert _config(client, admin_csrf)["allow_cleartext_password"] is True
    assert "checked" in client.get("/instances/orders").text

    unticked = _form(admin_csrf)
    assert (
        client.post("/instances/orders", data=unticked, follow_redirects=False).status_code == 303
    )
    assert _config(client, admin_csrf)["allow_cleartext_password"] is False


CLEARTEXT_REFUSAL = (
    "password: allowing the password in cleartext needs the MySQL password entered again; "
    "the stored one is never released by this change alone."
)


def test_api_refuses_to_allow_cleartext_without_the_password(client: TestClient, admin_csrf: str):
    # An admin who does not know the password must not release it by ticking one box.
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    allowed = instance_body(password=None, allow_cleartext_password=True)
    refused = client.put("/api/instances/orders", json=allowed, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["detail"] == [CLEARTEXT_REFUSAL]
    assert _config(client, admin_csrf)["allow_cleartext_password"] is False

    with_password = instance_body(password=MYSQL_PASSWORD, allow_cleartext_password=True)
    assert (
        client.put("/api/instances/orders", json=with_password, headers=headers).status_code == 200
    )
    assert _config(client, admin_csrf)["allow_cleartext_password"] is True
    # Once allowed, other edits keep the stored password; switching it off needs none.
    kept = instance_body(password=None, allow_cleartext_password=True, collector_group="eu-2")
    assert client.put("/api/instances/orders", json=kept, headers=headers).status_code == 200
    off = instance_body(password=None)
    assert client.put("/api/instances/orders", json=off, headers=headers).status_code == 200
    assert _config(client, admin_csrf)["allow_cleartext_password"] is False


def test_form_refuses_to_allow_cleartext_without_the_password(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    ticked = _form(admin_csrf, allow_cleartext_password="on")
    refused = client.post("/instances/orders", data=ticked, follow_redirects=False)
    assert refused.status_code == 422
    assert "allowing the password in cleartext needs the MySQL password entered again" in (
        refused.text
    )
    assert _config(client, admin_csrf)["allow_cleartext_password"] is False


MYSQL_GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42,4e11fa47-71ca-11e1-9e33-c80aa9429563:tag:1-3"


@pytest.mark.parametrize("start", ["0-1-100,1-2-9", MYSQL_GTID])
def test_gtid_start_takes_mariadb_positions_and_mysql_gtid_sets(
    client: TestClient, admin_csrf: str, start: str
):
    headers = {"X-CSRF-Token": admin_csrf}
    created = client.post("/api/instances", json=instance_body(gtid_start=start), headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["gtid_start"] == start
    assert _config(client, admin_csrf)["gtid_start"] == start


@pytest.mark.parametrize("start", ["0-1", "3e11fa47-71ca-11e1-9e33-c80aa9429562", "bin.000042:4"])
def test_gtid_start_refuses_other_values(client: TestClient, admin_csrf: str, start: str):
    headers = {"X-CSRF-Token": admin_csrf}
    refused = client.post("/api/instances", json=instance_body(gtid_start=start), headers=headers)
    assert refused.status_code == 422
    (message,) = refused.json()["detail"]
    assert "MySQL GTID set" in message
