"""An instance's pinned RSA public key (``server_public_key``): stored by the admin, served
to the collector and used by the admin's own connections; changing it needs the password
again (whoever holds the new key's private half could decrypt the password); validated as
PEM text or a file path on save."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi.testclient import TestClient

from cdc_platform import mysql_source
from cdc_platform.config import Settings
from collector.remote_config import parse_remote_config
from tests.unit.webui.harness import MYSQL_PASSWORD, instance_body, make_token
from webui import admin

KEY_REFUSAL = (
    "password: changing the server public key needs the MySQL password entered again; "
    "the stored one is never encrypted for a new key by this change alone."
)


def _pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


PEM = _pem()
OTHER_PEM = _pem()


def _config(client: TestClient, csrf: str) -> dict[str, object]:
    token = make_token(client, csrf, "collector")
    bot = TestClient(client.app)
    answer = bot.get("/api/collector-config/orders", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_public_key_is_stored_served_and_used(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    created = client.post("/api/instances", json=instance_body(), headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["server_public_key"] == ""
    assert _config(client, admin_csrf)["server_public_key"] == ""

    pinned = client.put(
        "/api/instances/orders", json=instance_body(server_public_key=PEM), headers=headers
    )
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["server_public_key"].strip() == PEM.strip()
    document = _config(client, admin_csrf)
    assert str(document["server_public_key"]).strip() == PEM.strip()
    remote = parse_remote_config(document, Settings(), "orders")
    assert remote.instance.server_public_key.strip() == PEM.strip()
    assert mysql_source.pinned_public_key(remote.instance) is not None

    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.sessions() as db:
        access = admin.instance_access(admin.get_instance(db, "orders"), ctx.keys)
    assert access.server_public_key.strip() == PEM.strip()
    settings = mysql_source.connect_settings(access)
    assert settings["server_public_key"] == mysql_source.pinned_public_key(access)


def test_api_refuses_a_key_change_without_the_password(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    body = instance_body(server_public_key=PEM)
    assert client.post("/api/instances", json=body, headers=headers).status_code == 201
    for key in (OTHER_PEM, "", "/etc/cdc/other.pem"):
        changed = instance_body(password=None, server_public_key=key)
        refused = client.put("/api/instances/orders", json=changed, headers=headers)
        assert refused.status_code == 422, key
        assert refused.json()["detail"] == [KEY_REFUSAL]
    assert str(_config(client, admin_csrf)["server_public_key"]).strip() == PEM.strip()

    # The same key (however its lines end) and other edits keep the stored password.
    same = instance_body(
        password=None, server_public_key=PEM.replace("\n", "\r\n"), collector_group="eu-2"
    )
    assert client.put("/api/instances/orders", json=same, headers=headers).status_code == 200
    with_password = instance_body(password=MYSQL_PASSWORD, server_public_key=OTHER_PEM)
    assert (
        client.put("/api/instances/orders", json=with_password, headers=headers).status_code
        == 200
    )
    assert str(_config(client, admin_csrf)["server_public_key"]).strip() == OTHER_PEM.strip()


@pytest.mark.parametrize(
    "bad",
    [
        "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----",
        "relative/key.pem",
        "/etc/a.pem\n/etc/b.pem",
    ],
)
def test_api_refuses_a_key_that_is_neither_pem_nor_a_path(
    client: TestClient, admin_csrf: str, bad: str
):
    headers = {"X-CSRF-Token": admin_csrf}
    refused = client.post(
        "/api/instances", json=instance_body(server_public_key=bad), headers=headers
    )
    assert refused.status_code == 422
    (message,) = refused.json()["detail"]
    assert "server public key must be a PEM public key" in message
    assert client.get("/api/instances/orders").status_code == 404


def test_api_accepts_a_key_file_path(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    body = instance_body(server_public_key="/etc/cdc/orders-rsa.pem")
    created = client.post("/api/instances", json=body, headers=headers)
    assert created.status_code == 201, created.text
    assert _config(client, admin_csrf)["server_public_key"] == "/etc/cdc/orders-rsa.pem"


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


def test_form_sets_the_key_only_with_the_password(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    assert 'name="server_public_key"' in client.get("/instances/orders").text

    refused = client.post(
        "/instances/orders", data=_form(admin_csrf, server_public_key=PEM), follow_redirects=False
    )
    assert refused.status_code == 422
    assert "changing the server public key needs the MySQL password entered again" in refused.text
    assert _config(client, admin_csrf)["server_public_key"] == ""

    pinned = _form(admin_csrf, server_public_key=PEM.replace("\n", "\r\n"), password=MYSQL_PASSWORD)
    assert client.post("/instances/orders", data=pinned, follow_redirects=False).status_code == 303
    assert str(_config(client, admin_csrf)["server_public_key"]).strip() == PEM.strip()
    page = client.get("/instances/orders").text
    assert "-----BEGIN PUBLIC KEY-----" in page

    # The form shows the key back, so saving it unchanged needs no password.
    kept = _form(admin_csrf, server_public_key=PEM, collector_group="eu-2")
    assert client.post("/instances/orders", data=kept, follow_redirects=False).status_code == 303

    bad = _form(admin_csrf, server_public_key="not a key", password=MYSQL_PASSWORD)
    refused = client.post("/instances/orders", data=bad, follow_redirects=False)
    assert refused.status_code == 422
    assert "server public key must be a PEM public key" in refused.text
