"""Replays requested through the admin's API run by a replay worker process
(``cdc-mirror replay-worker``) with the real mock_replay: rows read from MariaDB, published to
Kafka, progress written back to the admin database and read from there."""

from __future__ import annotations

import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from cdc_platform.config import Settings, StackSettings, WebUISettings
from tests.integration.webui.harness import fill_rows, replay_worker, sharded_table, wait_for
from tests.unit.webui.harness import ADMIN_PASSWORD, login
from webui.app import create_app
from webui.replay_jobs import JobReplayService


def test_replay_through_the_api_publishes_and_reports_progress(
    replay_stack: Settings, tmp_path: Path
):
    settings = Settings(
        stack=StackSettings(home=tmp_path),
        webui=WebUISettings.model_validate(
            {"initial_admin_password": ADMIN_PASSWORD, "scrape_targets": []}
        ),
    )
    app = create_app(settings)
    assert isinstance(app.state.ctx.replays, JobReplayService)
    local = replay_stack.instances[0]
    instance = f"wui{uuid.uuid4().hex[:8]}"  # its own topic: cdc.binlog.<instance>
    worker_env = {
        "CDC_MIRROR_WEBUI__DATABASE_URL": f"sqlite:///{tmp_path / 'webui.sqlite'}",
        "CDC_MIRROR_WEBUI__SECRET_KEY_FILE": str(tmp_path / "webui.key"),
    }
    with (
        sharded_table(replay_stack) as table,
        TestClient(app) as client,
        replay_worker(worker_env, tmp_path / "replay-worker.log"),
    ):
        total = fill_rows(replay_stack, table, 250)
        headers = {"X-CSRF-Token": login(client)}
        body = {
            "name": instance,
            "host": "127.0.0.1",
            "port": local.port,
            "user": local.user,
            "password": local.password.get_secret_value(),
        }
        assert client.post("/api/instances", json=body, headers=headers).status_code == 201
        request = {
            "instance": instance,
            "db_prefix": table.db_prefix,
            "table_prefix": table.table_prefix,
            "batch_size": 100,
        }

        hostile = client.post(
            "/api/replays",
            headers=headers,
            json={**request, "condition": "id > 1; DROP TABLE orders_00"},
        )
        assert hostile.status_code == 422
        assert len(hostile.json()["detail"]) == 1 and hostile.json()["detail"][0].endswith(".")

        started = client.post(
            "/api/replays",
            headers=headers,
            json={**request, "condition": "id > 50", "execute_time": "2026-11-20"},
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]

        def finished():
            status = client.get(f"/api/replays/{run_id}").json()
            return status if status["state"] not in ("pending", "running") else None

        status = wait_for(finished, 120, f"replay run {run_id} to finish", interval_s=1.0)
        assert status["state"] == "succeeded", status
        assert status["rows_done"] == total - 50 * 4
        assert status["request"]["condition"] == "id > 50"
        assert status["request"]["execute_time"] == "2026-11-20"
        assert run_id in [r["run_id"] for r in client.get("/api/replays").json()]
        assert client.get("/api/replays/19700101T000000-abcdef").status_code == 404
        page = client.get(f"/replays/{run_id}")
        assert 'data-final="yes"' in page.text and "succeeded" in page.text
