"""The metrics scraper against a real Prometheus HTTP endpoint (prometheus_client's server
with the collector's own metrics), and against one that does not answer."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import start_http_server
from sqlalchemy import select

from cdc_platform.config import ScrapeTarget
from collector.metrics import CollectorMetrics
from tests.integration.webui.harness import free_port
from tests.unit.webui.harness import login, make_app
from webui.models import MetricSample
from webui.monitoring import Scraper


@pytest.fixture()
def endpoint() -> Iterator[tuple[str, CollectorMetrics]]:
    metrics = CollectorMetrics()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    yield f"http://127.0.0.1:{server.server_port}/metrics", metrics
    server.shutdown()
    thread.join(timeout=5)


def test_scraped_samples_are_stored_and_charted(
    tmp_path: Path, endpoint, caplog: pytest.LogCaptureFixture
):
    url, metrics = endpoint
    metrics.delay.labels("orders").set(3.0)
    metrics.role.labels("orders").set(1)
    metrics.dead_letters.labels("orders").inc(2)
    app = make_app(tmp_path)
    sessions = app.state.ctx.sessions
    down = f"http://127.0.0.1:{free_port()}/metrics"
    scraper = Scraper(
        sessions,
        [ScrapeTarget(name="collector", url=url), ScrapeTarget(name="gone", url=down)],
        interval_s=60,
        retention_days=1,
    )
    caplog.set_level(logging.INFO, logger="webui.monitoring")
    with httpx.Client(timeout=5) as client:
        first = scraper.scrape_once(client)
        metrics.delay.labels("orders").set(5.0)
        second = scraper.scrape_once(client)
    assert first == second > 0
    warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "gone" in warnings[0].getMessage(), "logged once per streak"
    with sessions() as db:
        delays = db.scalars(
            select(MetricSample.value)
            .where(MetricSample.name == "cdc_collector_delay_seconds")
            .order_by(MetricSample.at)
        ).all()
        targets = set(db.scalars(select(MetricSample.target)))
    assert delays == [3.0, 5.0]
    assert targets == {"collector"}, "an unreachable target stores nothing, not zeros"

    with TestClient(app) as browser:
        login(browser)
        panels = {p["title"]: p for p in browser.get("/api/monitoring").json()}
        delay = panels["Collection delay per instance"]["series"]
        assert [s["label"] for s in delay] == ["collector collector_delay_seconds{instance=orders}"]
        assert [v for _, v in delay[0]["points"]] == [3.0, 5.0]
        assert panels["Dead letters"]["series"][0]["points"][-1][1] == 2.0
        page = browser.get("/monitoring").text
        assert page.count("<polyline") >= 3


def test_samples_past_the_retention_are_pruned_every_few_minutes(tmp_path: Path, endpoint):
    import time

    from webui.monitoring import PRUNE_EVERY_S

    url, _ = endpoint
    app = make_app(tmp_path)
    sessions = app.state.ctx.sessions
    old = time.time() - 2 * 86400

    def add_old(name: str) -> None:
        with sessions.begin() as db:
            db.add(MetricSample(at=old, target="collector", name=name, labels="", value=1.0))

    def old_names() -> set[str]:
        with sessions() as db:
            return set(db.scalars(select(MetricSample.name).where(MetricSample.at < old + 1)))

    scraper = Scraper(sessions, [ScrapeTarget(name="collector", url=url)], 60, retention_days=1)
    add_old("cdc_first")
    with httpx.Client(timeout=5) as client:
        scraper.scrape_once(client)  # the first round prunes
        assert old_names() == set()
        add_old("cdc_second")
        scraper.scrape_once(client)  # within PRUNE_EVERY_S of the last prune: kept for now
        assert old_names() == {"cdc_second"}
        scraper._pruned_at -= PRUNE_EVERY_S  # as if the minutes had passed
        scraper.scrape_once(client)
        assert old_names() == set()
