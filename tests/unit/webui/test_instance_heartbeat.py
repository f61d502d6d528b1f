"""An instance's watermark heartbeat period (issue 22, item 6) is set in the web admin:
validated, audited, served to its collector (which then runs with it instead of its file's
``collector.watermark_heartbeat_s``) and in the configuration snapshot; empty keeps the
collector's own setting."""

from __future__ import annotations

from fastapi.testclient import TestClient

from cdc_platform.config import Settings
from collector.remote_config import parse_remote_config
from tests.unit.webui.harness import csrf_of, instance_body, make_token


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_period_is_validated_audited_and_served_to_the_collector(
    client: TestClient, admin_csrf: str
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    created = client.post("/api/instances", json=instance_body(), headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["watermark_heartbeat_s"] is None
    collector = make_token(client, admin_csrf, "collector")
    component = make_token(client, admin_csrf, "component")
    document = client.get("/api/collector-config/orders", headers=_bearer(collector)).json()
    assert document["watermark_heartbeat_s"] is None
    assert parse_remote_config(document, Settings(), "orders").collector.watermark_heartbeat_s == 10

    for bad in (-1, 3601, "often"):
        refused = client.put(
            "/api/instances/orders", json=instance_body(watermark_heartbeat_s=bad), headers=headers
        )
        assert refused.status_code == 422, refused.text
        assert "watermark_heartbeat_s" in refused.text
    saved = client.put(
        "/api/instances/orders", json=instance_body(watermark_heartbeat_s=2.5), headers=headers
    )
    assert saved.status_code == 200, saved.text
    document = client.get("/api/collector-config/orders", headers=_bearer(collector)).json()
    assert document["watermark_heartbeat_s"] == 2.5
    assert (
        parse_remote_config(document, Settings(), "orders").collector.watermark_heartbeat_s == 2.5
    )
    snapshot = client.get("/api/config-snapshot", headers=_bearer(component)).json()
    assert snapshot["instances"][0]["watermark_heartbeat_s"] == 2.5
    [entry] = [
        e
        for e in client.get("/api/audit").json()
        if e["object_type"] == "instance" and e["action"] == "update"
    ]
    assert entry["before"]["watermark_heartbeat_s"] is None
    assert entry["after"]["watermark_heartbeat_s"] == 2.5


def test_the_instance_form_sets_and_clears_it(client: TestClient, admin_csrf: str) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    page = client.get("/instances/orders")
    assert 'name="watermark_heartbeat_s" value=""' in page.text
    body = instance_body()
    form = {
        "csrf_token": csrf_of(page.text),
        **{key: str(body[key]) for key in ("name", "host", "port", "user", "collector_group")},
        "include": r"ordercenter_\d+\..*",
        "watermark_heartbeat_s": "0",
    }
    assert client.post("/instances/orders", data=form).status_code == 200  # redirected
    assert client.get("/api/instances/orders").json()["watermark_heartbeat_s"] == 0
    refused = client.post("/instances/orders", data={**form, "watermark_heartbeat_s": "-5"})
    assert refused.status_code == 422 and "watermark_heartbeat_s" in refused.text
    assert 'name="watermark_heartbeat_s" value="-5"' in refused.text  # typed back
    cleared = client.post("/instances/orders", data={**form, "watermark_heartbeat_s": ""})
    assert cleared.status_code == 200
    assert client.get("/api/instances/orders").json()["watermark_heartbeat_s"] is None
