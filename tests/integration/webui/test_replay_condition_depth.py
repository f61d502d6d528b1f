"""An attacker's deeply nested replay condition sent to the admin's API: refused with one
sentence (422) by mock_replay's parser before any replay starts, never a RecursionError (500).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cdc_platform.config import Settings, StackSettings, WebUISettings
from tests.integration.webui.harness import sharded_table
from tests.unit.webui.harness import ADMIN_PASSWORD, login
from webui.app import create_app


def _parentheses_then_intervals(limit: int) -> str:
    """As deep as the parentheses may go, then INTERVAL chains up to the admin's length."""
    levels = (limit - len("(" * 63 + "id" + ")" * 63 + ">0")) // len("+INTERVAL id DAY")
    return "(" * 63 + "id" + "+INTERVAL id" * levels + " DAY" * levels + ")" * 63 + ">0"


@pytest.mark.parametrize(
    "condition",
    [
        pytest.param(_parentheses_then_intervals(2_000), id="parentheses-then-intervals"),
        pytest.param("id" + "+INTERVAL id" * 120 + " DAY" * 120 + " > 0", id="intervals"),
        pytest.param("ABS(" * 300 + "id" + ")" * 300 + " > 0", id="functions"),
    ],
)
def test_deep_conditions_are_refused_with_one_sentence(
    replay_stack: Settings, tmp_path: Path, condition: str
):
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {"initial_admin_password": ADMIN_PASSWORD, "scrape_targets": []}
        ),
    )
    local = replay_stack.instances[0]
    instance = f"wui{uuid.uuid4().hex[:8]}"
    with sharded_table(replay_stack) as table, TestClient(create_app(settings)) as client:
        headers = {"X-CSRF-Token": login(client)}
        body = {
            "name": instance,
            "host": "127.0.0.1",
            "port": local.port,
            "user": local.user,
            "password": local.password.get_secret_value(),
        }
        assert client.post("/api/instances", json=body, headers=headers).status_code == 201
        refused = client.post(
            "/api/replays",
            headers=headers,
            json={
                "instance": instance,
                "db_prefix": table.db_prefix,
                "table_prefix": table.table_prefix,
                "condition": condition,
            },
        )
        assert refused.status_code == 422, refused.text
        (sentence,) = refused.json()["detail"]
        assert sentence.startswith("the replay condition is refused: it nests deeper than 64")
        assert sentence.endswith(".") and "\n" not in sentence
        assert client.get("/api/replays").json() == []
