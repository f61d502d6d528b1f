"""Fixtures of the web admin's unit tests: a fresh app and database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.unit.webui.harness import login, make_app


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(make_app(tmp_path)) as test_client:
        yield test_client


@pytest.fixture()
def admin_csrf(client: TestClient) -> str:
    return login(client)
