"""Kudu's freshness on the per-table status, like the other targets': a table mirrored to Kudu
shows the age of the last change its Kudu mirror applied (``FRESHNESS_SOURCES['kudu']``, read
from the mirror's own metrics), and a Kudu mirror that does not answer shows as down."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import start_http_server

from mirror.metrics import MirrorMetrics
from tests.unit.webui.harness import instance_body, login, make_app, mirror_body
from webui.status_sources import FRESHNESS_SOURCES, MirrorMetricsFreshness, StatusService


def _status_of(tmp_path: Path, targets: list[dict[str, str]]) -> dict:
    app = make_app(tmp_path, scrape_targets=targets)
    with TestClient(app) as client:
        csrf = login(client)
        headers = {"X-CSRF-Token": csrf}
        assert (
            client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
        )
        body = mirror_body(targets=["hive", "kudu"])
        assert client.post("/api/table-mirrors", json=body, headers=headers).status_code == 201
        service = app.state.status
        assert isinstance(service, StatusService)
        service.refresh_now()
        assert "kudu" in client.get("/status/ordercenter_orderinfo").text
        document: dict = client.get("/api/status/ordercenter_orderinfo").json()
        return document


def test_a_table_mirrored_to_kudu_shows_kudu_s_freshness(tmp_path: Path) -> None:
    assert isinstance(FRESHNESS_SOURCES["kudu"], MirrorMetricsFreshness)
    kudu = MirrorMetrics("kudu")
    kudu.last_applied.labels("kudu", "ordercenter_orderinfo").set(time.time() - 30)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=kudu.registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        status = _status_of(tmp_path, [{"name": "mirror-kudu", "url": url}])
    finally:
        server.shutdown()
        thread.join(5)
    (fresh,) = status["freshness"]
    assert fresh["target"] == "kudu" and fresh["down"] is False
    assert 29 <= fresh["age_s"] < 120


def test_a_kudu_mirror_that_does_not_answer_shows_as_down(tmp_path: Path) -> None:
    status = _status_of(tmp_path, [{"name": "mirror-kudu", "url": "http://127.0.0.1:1/metrics"}])
    (fresh,) = status["freshness"]
    assert (fresh["target"], fresh["down"], fresh["age_s"]) == ("kudu", True, None)
