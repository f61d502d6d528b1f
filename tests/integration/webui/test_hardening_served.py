"""The security hardening over real HTTP, against ``cdc-mirror webui`` served by uvicorn in a
subprocess: a streamed (chunked) oversized body is cut at the route's limit, a collector
token reads only its own instance, and a start without the key file that encrypted the
stored passwords is refused with one sentence."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.webui.harness import ROOT, Server, start_server
from tests.unit.webui.harness import instance_body

ADMIN_PASSWORD = "hardening-admin-pw-1"
ENV = {
    "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
    "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": "[]",
    "CDC_MIRROR_WEBUI__COUNT_DETECTIONS": "false",
    "CDC_MIRROR_WEBUI__REPLAYS": "simulated",
}


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path, ENV)
    yield server
    server.stop()


def _admin(url: str) -> tuple[httpx.Client, dict[str, str]]:
    client = httpx.Client(base_url=url, timeout=30)
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


def test_a_streamed_oversized_body_is_cut_over_real_http(served: Server):
    sent = []

    def forty_mib() -> Iterator[bytes]:
        for i in range(40):
            sent.append(i)
            yield b" " * (1024 * 1024)

    with httpx.Client(base_url=served.url, timeout=30) as anonymous:
        try:
            answer = anonymous.post(
                "/api/instances", content=forty_mib(), headers={"Content-Type": "application/json"}
            )
        except httpx.TransportError:
            # The server may close the connection while the client still sends; what counts
            # is that it stopped reading long before the end.
            answer = None
        if answer is not None:
            assert answer.status_code == 413
        assert len(sent) < 40, "the server read the whole 40 MiB"
        declared = anonymous.post(
            "/login", content=b"x" * (64 * 1024), headers={"Content-Type": "text/plain"}
        )
        assert declared.status_code == 413


def test_collector_tokens_are_scoped_and_secrets_not_cached(served: Server):
    client, h = _admin(served.url)
    try:
        for name in ("orders", "billing"):
            body = instance_body(name)
            assert client.post("/api/instances", json=body, headers=h).status_code == 201
        made = client.post(
            "/api/tokens", json={"name": "c", "role": "collector", "instance": "orders"}, headers=h
        )
        assert made.status_code == 201 and made.headers["cache-control"] == "no-store"
        bearer = {"Authorization": f"Bearer {made.json()['token']}"}
        with httpx.Client(base_url=served.url, timeout=10) as bot:
            assert bot.get("/api/collector-config/orders", headers=bearer).status_code == 200
            assert bot.get("/api/collector-config/billing", headers=bearer).status_code == 403
    finally:
        client.close()


def test_the_served_admin_refuses_to_start_without_its_lost_key(tmp_path: Path):
    server = start_server(tmp_path, ENV)
    try:
        client, h = _admin(server.url)
        created = client.post("/api/instances", json=instance_body(), headers=h)
        client.close()
        assert created.status_code == 201
    finally:
        server.stop()
    for name in ("admin.sqlite", "admin.key"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    (tmp_path / "admin.key").unlink()
    env = {
        **os.environ,
        "CDC_MIRROR_WEBUI__DATABASE_URL": f"sqlite:///{tmp_path / 'admin.sqlite'}",
        "CDC_MIRROR_WEBUI__SECRET_KEY_FILE": str(tmp_path / "admin.key"),
        **ENV,
    }
    done = subprocess.run(
        [sys.executable, "-m", "cdc_mirror", "webui", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2  # a configuration error
    assert done.stderr.strip().endswith(
        "database holds passwords encrypted with it; restore that file from a backup (or set "
        "webui.secret_key to the same secret) before starting."
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "admin.key").exists()
