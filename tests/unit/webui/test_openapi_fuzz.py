"""Property-based test of the whole JSON API against its own OpenAPI spec (schemathesis):
generated requests, authenticated as an admin token, never get a server error (5xx).

The example count per operation is bounded (``CDC_TEST_WEBUI_FUZZ_EXAMPLES``, default 15:
governance doubled the operations) so the test stays near a minute on a loaded 2-core
machine; raise it for a deeper run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from tests.unit.webui.harness import instance_body, login, make_app, make_token, mirror_body

_EXAMPLES = int(os.environ.get("CDC_TEST_WEBUI_FUZZ_EXAMPLES", "15"))


def _app_with_data():
    # Built at collection, before the fixtures exist: schemathesis needs the app to
    # generate the test cases. The directory is removed at the end of the module.
    home = Path(tempfile.mkdtemp(prefix="webui-fuzz-"))
    app = make_app(home)
    with TestClient(app) as client:
        csrf = login(client)
        headers = {"X-CSRF-Token": csrf}
        assert (
            client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
        )
        assert (
            client.post("/api/table-mirrors", json=mirror_body(), headers=headers).status_code
            == 201
        )
        admin = make_token(client, csrf, "admin", name="fuzz-admin")
        collector = make_token(client, csrf, "collector", name="fuzz-collector")
    return app, admin, collector, home


APP, ADMIN_TOKEN, COLLECTOR_TOKEN, HOME = _app_with_data()
STATUSES: list[int] = []
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_error(case):
    token = COLLECTOR_TOKEN if case.path.startswith("/api/collector-config") else ADMIN_TOKEN
    response = case.call(headers={"Authorization": f"Bearer {token}"})
    STATUSES.append(response.status_code)
    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text)
    if response.status_code in (400, 404, 422):
        detail = response.json()["detail"]
        assert isinstance(detail, list) and all(isinstance(d, str) for d in detail), detail


@pytest.fixture(autouse=True, scope="module")
def _spec_is_documented():
    paths = APP.openapi()["paths"]
    assert "/api/collector-config/{instance}" in paths
    assert all(p.startswith("/api/") for p in paths), "pages stay out of the API spec"
    yield
    shutil.rmtree(HOME, ignore_errors=True)
    # The generated requests really reached the handlers, not only the authentication.
    assert sum(200 <= s < 300 for s in STATUSES) >= 10, STATUSES
    assert sum(s == 422 for s in STATUSES) >= 5, STATUSES
