"""The monitoring page charts each mirror target's freshness (MySQL commit → visible), Kudu
like Redis and the warehouse: the mean of the mirror's ``cdc_mirror_freshness_seconds``
histogram between two scrapes, one series per target, from the metrics the mirrors expose."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from mirror.metrics import MirrorMetrics
from tests.unit.webui.harness import login, make_app
from webui.monitoring import parse_samples

FRESHNESS = "Mirror freshness per target: MySQL commit → visible (mean per scrape)"
# Per target: the observations between the first scrape and the second.
OBSERVED = {"redis": [0.2, 0.4], "warehouse": [0.5], "kudu": [0.3, 0.6, 0.9]}


def test_freshness_is_charted_per_target_kudu_included(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    metrics = {target: MirrorMetrics(target) for target in OBSERVED}
    for target, mirror in metrics.items():
        mirror.freshness.observe(10.0)  # before the first scrape
        mirror.rows.labels(target, "orders").inc(5)
    now = time.time()
    scrapes = [now - 60, now - 30]
    with app.state.ctx.sessions.begin() as db:
        for at, observe in zip(scrapes, (False, True), strict=True):
            for target, mirror in metrics.items():
                for seconds in OBSERVED[target] if observe else ():
                    mirror.freshness.observe(seconds)
                exposed = generate_latest(mirror.registry).decode()
                db.add_all(parse_samples(exposed, f"mirror-{target}", at))
    with TestClient(app) as browser:
        login(browser)
        panels = {p["title"]: p for p in browser.get("/api/monitoring").json()}
        series = {s["label"]: s["points"] for s in panels[FRESHNESS]["series"]}
        assert panels[FRESHNESS]["unit"] == "s"
        page = browser.get("/monitoring").text
    label = "mirror-{0} mirror_freshness_seconds{{target={0}}}"
    assert set(series) == {label.format(t) for t in OBSERVED}
    for target, seen in OBSERVED.items():
        [(at, mean)] = series[label.format(target)]
        assert at == scrapes[1]
        assert abs(mean - sum(seen) / len(seen)) < 1e-9, target
    assert FRESHNESS in page and label.format("kudu") in page
