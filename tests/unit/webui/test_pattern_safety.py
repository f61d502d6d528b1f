"""The web admin refuses a regex that could cost without bound (``(a+)+$`` against
``aaaa…!``) wherever an admin can type one: detector rules, include/exclude filters and shard
rules, through the API; one sentence, nothing stored."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.unit.webui.harness import instance_body

CATASTROPHIC = r"(a+)+$"


def test_a_catastrophic_detector_pattern_is_refused(client: TestClient, admin_csrf: str) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    rule = {"name": "pwn", "pattern": CATASTROPHIC}
    refused = client.post("/api/governance/detectors", json=rule, headers=headers)
    assert refused.status_code == 422
    [sentence] = refused.json()["detail"]
    assert sentence.startswith("pattern: the regular expression '(a+)+$' repeats without bound")
    assert client.get("/api/governance/detectors").json() == []


@pytest.mark.parametrize(
    "overrides",
    [
        {"include": [CATASTROPHIC]},
        {"exclude": [r"mysql\..*", CATASTROPHIC]},
        {"shard_rules": [{"schema_pattern": r"^(?P<db>(a|aa)+)$"}]},
        {"shard_rules": [{"table_pattern": r"^(?P<table>\w+)(_\d+)?(.*\d.*){2}$"}]},
    ],
)
def test_a_catastrophic_filter_or_shard_rule_is_refused(
    client: TestClient, admin_csrf: str, overrides: dict[str, object]
) -> None:
    headers = {"X-CSRF-Token": admin_csrf}
    refused = client.post("/api/instances", json=instance_body(**overrides), headers=headers)
    assert refused.status_code == 422
    [sentence] = refused.json()["detail"]
    assert "regular expression" in sentence and "\n" not in sentence
    assert client.get("/api/instances").json() == []
