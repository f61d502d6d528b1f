"""The admin's files and responses as someone with a shell account or a shared proxy would
see them: a lost key file stops the start instead of silently orphaning every stored
secret, the database and key files are private to the service's user, and nothing that
shows a secret may be cached."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from simple_binlog.errors import ConfigError
from tests.unit.webui.harness import instance_body, login, make_app, make_token


@pytest.fixture()
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the usual default, under which files come out 0644
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_lost_key_file_with_encrypted_passwords_stops_the_start(tmp_path: Path):
    with TestClient(make_app(tmp_path)) as client:
        headers = {"X-CSRF-Token": login(client)}
        assert (
            client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
        )
    key_file = tmp_path / "webui.key"
    key_file.unlink()

    with pytest.raises(ConfigError) as refused:
        make_app(tmp_path)
    assert str(refused.value) == (
        f"the web admin's key file {key_file} is missing but its database holds passwords "
        "encrypted with it; restore that file from a backup (or set webui.secret_key to the "
        "same secret) before starting."
    )
    assert not key_file.exists(), "no new key may replace the lost one"


def test_a_fresh_install_creates_its_key_file(tmp_path: Path):
    with TestClient(make_app(tmp_path)) as client:
        login(client)
    assert (tmp_path / "webui.key").exists()
    # No encrypted data yet: a lost key file is simply made again.
    (tmp_path / "webui.key").unlink()
    with TestClient(make_app(tmp_path)) as client:
        login(client)
    assert (tmp_path / "webui.key").exists()


def test_database_and_key_files_are_private(tmp_path: Path, loose_umask: None):
    with TestClient(make_app(tmp_path)) as client:
        headers = {"X-CSRF-Token": login(client)}
        client.post("/api/instances", json=instance_body(), headers=headers)
    assert _mode(tmp_path / "webui.key") == 0o600
    assert _mode(tmp_path / "webui.sqlite") == 0o600
    for companion in ("webui.sqlite-wal", "webui.sqlite-shm"):
        if (tmp_path / companion).exists():
            assert _mode(tmp_path / companion) & 0o077 == 0, companion


def test_an_existing_world_readable_database_is_made_private(tmp_path: Path, loose_umask: None):
    database = tmp_path / "webui.sqlite"
    database.touch(mode=0o644)
    os.chmod(database, 0o644)
    with TestClient(make_app(tmp_path)) as client:
        login(client)
    assert _mode(database) == 0o600


def test_a_new_token_is_never_cached(client: TestClient, admin_csrf: str):
    headers = {"X-CSRF-Token": admin_csrf}
    client.post("/api/instances", json=instance_body(), headers=headers)
    api = client.post("/api/tokens", json={"name": "n", "role": "viewer"}, headers=headers)
    assert api.status_code == 201
    assert api.headers["cache-control"] == "no-store"
    form = client.post("/tokens", data={"csrf_token": admin_csrf, "name": "f", "role": "viewer"})
    assert form.status_code == 201 and "new-token-value" in form.text
    assert form.headers["cache-control"] == "no-store"
    collector = make_token(client, admin_csrf, "collector")
    config = TestClient(client.app).get(
        "/api/collector-config/orders", headers={"Authorization": f"Bearer {collector}"}
    )
    assert config.headers["cache-control"] == "no-store"
    assert client.get("/api/tokens").headers["cache-control"] == "no-store"
    assert client.get("/users").headers["cache-control"] == "no-store"
