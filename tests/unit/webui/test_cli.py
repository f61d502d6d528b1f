"""``cdc-mirror webui create-user``: a fresh install gets a user who can log in; bad input is
one sentence and nothing is saved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from tests.unit.webui.harness import login, make_app

ROOT = Path(__file__).resolve().parents[3]


def _create_user(home: Path, *args: str, password: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CDC_MIRROR_STACK__HOME": str(home),
        "CDC_MIRROR_WEBUI_NEW_PASSWORD": password,
    }
    return subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "webui", "create-user", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_create_user_then_log_in(tmp_path: Path):
    done = _create_user(tmp_path, "ops", "--role", "viewer", password="Ops-password-42")
    assert done.returncode == 0, done.stderr
    assert "user 'ops' (viewer) created" in done.stdout
    assert "Ops-password-42" not in done.stdout + done.stderr

    again = _create_user(tmp_path, "ops", password="Ops-password-42")
    assert again.returncode == 2  # a usage or configuration error
    assert again.stderr.strip() == "error: a user named 'ops' exists already."

    weak = _create_user(tmp_path, "dev", password="short")
    assert weak.returncode == 2
    assert "password: the password must be at least 10 characters." in weak.stderr
    assert "Traceback" not in weak.stderr

    with TestClient(make_app(tmp_path)) as client:
        login(client, "ops", "Ops-password-42")
        assert client.get("/api/me").json() == {"name": "ops", "role": "viewer", "kind": "user"}
        # A user exists already, so the configured initial admin is not added.
        assert [u["username"] for u in client.get("/api/users").json()] == ["ops"]
