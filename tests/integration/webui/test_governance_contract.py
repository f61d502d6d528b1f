"""The governance contract between the web admin and the collectors, over real HTTP: a
collector's ``WebUIPolicySource`` (``governance.source``) polls ``cdc-mirror
webui`` served in a subprocess, receives the policy set saved through the admin's API, keeps
its own salt, gets 304 while nothing changes and the new set after a change."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from governance import GovernanceSettings, GovernanceWebUISource, PolicyAction
from governance.source import WebUIPolicySource
from tests.integration.webui.harness import Server, start_server
from tests.unit.webui.harness import instance_body

ADMIN_PASSWORD = "contract-admin-pw-1"
SALT = "collector-local-salt-0123456789"


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[Server]:
    server = start_server(
        tmp_path,
        {
            "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": "[]",
            "CDC_MIRROR_WEBUI__COUNT_DETECTIONS": "false",
        },
    )
    yield server
    server.stop()


def _admin(url: str) -> tuple[httpx.Client, dict[str, str]]:
    client = httpx.Client(base_url=url, timeout=10)
    page = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    logged_in = client.post(
        "/login",
        data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": token.group(1)},
    )
    assert logged_in.status_code == 303, logged_in.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/").text)
    assert csrf is not None
    return client, {"X-CSRF-Token": csrf.group(1)}


def test_a_collector_polls_the_policy_set_from_the_admin(served: Server, tmp_path: Path):
    client, h = _admin(served.url)
    assert client.post("/api/instances", json=instance_body(), headers=h).status_code == 201
    created = client.post(
        "/api/tokens", json={"name": "c", "role": "collector", "instance": "orders"}, headers=h
    )
    collector_token = created.json()["token"]
    policy = {"table": "ordercenter_orderinfo", "column": "phone", "action": "hash"}
    assert client.put("/api/governance/policies", json=policy, headers=h).status_code == 200
    settings = {"enabled": True, "default_action": "pass", "builtin_detectors": ["cn_mobile"]}
    assert client.put("/api/governance/settings", json=settings, headers=h).status_code == 200

    local = GovernanceSettings(
        enabled=True,
        source="webui",
        webui=GovernanceWebUISource(url=served.url, token=SecretStr(collector_token)),
        hash_salt=SecretStr(SALT),
    )
    source = WebUIPolicySource(local, "orders", tmp_path / "cache")
    try:
        first = source.initial()
        assert first.enabled and first.builtin_detectors == ["cn_mobile"]
        assert [(p.table, p.column, p.action) for p in first.policies] == [
            ("ordercenter_orderinfo", "phone", PolicyAction.HASH)
        ]
        assert first.hash_salt is not None and first.hash_salt.get_secret_value() == SALT
        assert source.poll() is None, "304 while nothing changed"

        changed = {**policy, "action": "drop"}
        assert client.put("/api/governance/policies", json=changed, headers=h).status_code == 200
        second = source.poll()
        assert second is not None
        assert second.version > first.version
        assert [p.action for p in second.policies] == [PolicyAction.DROP]
        assert source.poll() is None
    finally:
        source.close()
        client.close()
    cached = (tmp_path / "cache" / "governance-orders.json").read_text()
    assert SALT not in cached
    assert SALT not in served.log_file.read_text()
