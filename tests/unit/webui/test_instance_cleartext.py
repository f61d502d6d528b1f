"""An instance's permission to send its password in cleartext (default off) is kept by the
admin and reaches every connection made from the admin's instances: the collector's remote
config, the schema reader's access, the replays' instances."""

from __future__ import annotations

from fastapi.testclient import TestClient

from cdc_platform.config import Settings
from collector.remote_config import parse_remote_config
from tests.unit.webui.harness import instance_body, make_token
from webui import admin


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_cleartext_password_is_off_by_default_and_kept_when_allowed(
    client: TestClient, admin_csrf: str
):
    headers = {"X-CSRF-Token": admin_csrf}
    created = client.post("/api/instances", json=instance_body(), headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["allow_cleartext_password"] is False
    token = make_token(client, admin_csrf, "collector")
    document = client.get("/api/collector-config/orders", headers=_bearer(token)).json()
    assert document["allow_cleartext_password"] is False

    allowed = instance_body(allow_cleartext_password=True)  # turning it on needs the password
    updated = client.put("/api/instances/orders", json=allowed, headers=headers)
    assert updated.status_code == 200, updated.text
    assert updated.json()["allow_cleartext_password"] is True
    document = client.get("/api/collector-config/orders", headers=_bearer(token)).json()
    assert document["allow_cleartext_password"] is True
    remote = parse_remote_config(document, Settings(), "orders")
    assert remote.instance.allow_cleartext_password is True

    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.sessions() as db:
        access = admin.instance_access(admin.get_instance(db, "orders"), ctx.keys)
    assert access.allow_cleartext_password is True
