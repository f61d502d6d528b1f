"""An admin account cannot make the collectors run code: a validator or recrypt function the
web admin's own config does not allow is refused when saved (API and form), nothing stored.

Written as an attacker holding the admin role would try it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from governance import GovernanceSettings
from tests.unit.webui.harness import instance_body, login, mirror_body, webui_settings
from webui.app import create_app
from webui.provisioning import RecordingProvisioner
from webui.replay import SimulatedReplayService
from webui.schema_source import StaticSchemaSource

TABLE = "ordercenter_orderinfo"
ATTACKER = "tests.unit.governance.attacker:run"
ALLOWED = "tests.unit.governance.plugins:is_order_code"


@pytest.fixture()
def allowing(tmp_path: Path) -> Iterator[TestClient]:
    """A web admin whose config file allows one plug-in validator."""
    settings = webui_settings(tmp_path)
    settings = settings.model_copy(
        update={"governance": GovernanceSettings(allowed_functions=[ALLOWED])}  # type: ignore[call-arg]
    )
    app = create_app(
        settings,
        schemas=StaticSchemaSource({}),
        replays=SimulatedReplayService(duration_s=60),
        provisioner=RecordingProvisioner(settings),
    )
    with TestClient(app) as client:
        yield client


def _nothing_saved(client: TestClient, audit_before: object) -> None:
    governance = client.get("/api/governance").json()
    assert governance["detectors"] == [] and governance["standardise"] == []
    assert governance["settings"]["version"] == 0
    assert client.get("/api/audit").json() == audit_before


@pytest.mark.parametrize("name", ["os:system", ATTACKER, "builtins:eval"])
def test_the_api_refuses_a_validator_naming_code(
    client: TestClient, admin_csrf: str, name: str
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    before = client.get("/api/audit").json()
    rule = {"name": "pwn", "pattern": "x", "validator": name}
    refused = client.post("/api/governance/detectors", json=rule, headers=headers)
    assert refused.status_code == 422
    [sentence] = refused.json()["detail"]
    assert sentence.startswith(f"validator: {name!r} is not allowed") and "\n" not in sentence
    _nothing_saved(client, before)
    assert ATTACKER.partition(":")[0] not in sys.modules


def test_the_api_refuses_a_recrypt_function_naming_code(
    client: TestClient, admin_csrf: str
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    assert client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code == 201
    before = client.get("/api/audit").json()
    rule = {"table": TABLE, "column": "user_id", "kind": "recrypt", "function": "os:system"}
    refused = client.put("/api/governance/standardise", json=rule, headers=headers)
    assert refused.status_code == 422
    [sentence] = refused.json()["detail"]
    assert sentence.startswith("function: 'os:system' is not allowed")
    assert client.get("/api/governance/standardise").json() == []
    assert client.get("/api/audit").json() == before


def test_the_forms_refuse_code_too(client: TestClient, admin_csrf: str) -> None:
    before = client.get("/api/audit").json()
    detector = client.post(
        "/governance/detectors",
        data={"csrf_token": admin_csrf, "name": "pwn", "pattern": "x", "validator": "os:system"},
    )
    assert detector.status_code == 422
    assert "is not allowed" in detector.text
    recrypt = client.post(
        "/governance/standardise",
        data={
            "csrf_token": admin_csrf,
            "table": TABLE,
            "column": "user_id",
            "kind": "recrypt",
            "function": "os:system",
        },
    )
    assert recrypt.status_code == 422
    assert "is not allowed" in recrypt.text
    _nothing_saved(client, before)


def test_a_function_the_web_admins_config_allows_is_saved(allowing: TestClient) -> None:
    headers = {"X-CSRF-Token": login(allowing)}
    rule = {"name": "order_code", "pattern": "ORD-[0-9]{6}", "validator": ALLOWED}
    saved = allowing.post("/api/governance/detectors", json=rule, headers=headers)
    assert saved.status_code == 201, saved.text
    refused = allowing.post(
        "/api/governance/detectors",
        json={**rule, "name": "pwn", "validator": "os:system"},
        headers=headers,
    )
    assert refused.status_code == 422
    assert [r["name"] for r in allowing.get("/api/governance/detectors").json()] == ["order_code"]
