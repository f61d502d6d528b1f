"""The table mirror form's lake settings: hourly snapshots and the table's own retention are
set in the form (checked by the same model as the config file), kept when the form is saved
again, and reach the configuration components read."""

from __future__ import annotations

from fastapi.testclient import TestClient

from cdc_platform.config import TableMirror
from tests.unit.webui.harness import instance_body, mirror_body

NAME = "ordercenter_orderinfo"
FORM = {
    "instance": "orders",
    "db_prefix": "ordercenter",
    "table_prefix": "orderinfo",
    "targets": ["hive", "warehouse"],
    "key": "",
    "check_column": "created_at",
    "warehouse_delete": "hard",
}


def test_hourly_snapshots_and_retention_are_set_in_the_form(
    client: TestClient, admin_csrf: str
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    assert client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code == 201
    page = client.get(f"/tables/{NAME}").text
    assert '<option value="daily" selected>' in page

    form = {**FORM, "csrf_token": admin_csrf}
    refused = client.post(
        f"/tables/{NAME}", data={**form, "targets": ["warehouse"], "snapshots": "hourly"}
    )
    assert refused.status_code == 422
    assert "hourly snapshots need the table mirrored to Hive" in refused.text
    refused = client.post(f"/tables/{NAME}", data={**form, "retention_hourly_days": "2"})
    assert refused.status_code == 422
    assert "retention.hourly_days applies only to snapshots: hourly" in refused.text
    # What was typed is shown again.
    assert 'name="retention_hourly_days" value="2"' in refused.text

    saved = client.post(
        f"/tables/{NAME}",
        data={
            **form,
            "snapshots": "hourly",
            "retention_hourly_days": "2",
            "retention_snapshot_days": "40",
            "retention_raw_days": "",
        },
        follow_redirects=False,
    )
    assert saved.status_code == 303
    mirror = TableMirror.model_validate(client.get(f"/api/table-mirrors/{NAME}").json()["mirror"])
    assert mirror.snapshots == "hourly"
    assert (mirror.retention.hourly_days, mirror.retention.snapshot_days) == (2, 40)
    assert mirror.retention.raw_days is None
    page = client.get(f"/tables/{NAME}").text
    assert '<option value="hourly" selected>' in page
    assert 'name="retention_hourly_days" value="2"' in page
    assert 'name="retention_snapshot_days" value="40"' in page
    assert 'name="retention_raw_days" value=""' in page
