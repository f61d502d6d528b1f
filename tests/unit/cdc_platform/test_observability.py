"""cdc_platform.observability: every component's /metrics and probes, loopback by default."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from cdc_platform.config import Settings
from cdc_platform.observability import (
    ObservabilityServer,
    Probe,
    serve_observability,
    write_textfile,
)


class Switch:
    """A readiness that a test turns on and off."""

    def __init__(self) -> None:
        self.probe = Probe(False, "warming up")

    def __call__(self) -> Probe:
        return self.probe


def get(server: ObservabilityServer, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def switch() -> Switch:
    return Switch()


@pytest.fixture
def server(switch: Switch) -> Iterator[ObservabilityServer]:
    registry = CollectorRegistry()
    Counter("cdc_test_things", "Things.", registry=registry).inc(3)
    # The default bind address of a component, as its settings give it.
    running = serve_observability(Settings().collector.metrics_host, 0, registry, "tester", switch)
    try:
        yield running
    finally:
        running.close()


def test_every_component_binds_its_endpoints_to_loopback_by_default() -> None:
    settings = Settings()
    hosts = {
        settings.collector.metrics_host,
        settings.stream_writer.metrics_host,
        settings.mirror.metrics_host,
        settings.merge.metrics_host,
    }
    assert hosts == {"127.0.0.1"}


def test_the_default_address_listens_on_127_0_0_1_only(server: ObservabilityServer) -> None:
    assert server.host == "127.0.0.1"
    assert get(server, "/health/live")[0] == 200
    # Another address of this machine (every 127/8 address is local on Linux) is refused: a
    # server on 0.0.0.0, prometheus_client's default, would answer there too.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", server.port), timeout=5).close()


def test_a_configured_address_is_the_one_bound() -> None:
    every = serve_observability("0.0.0.0", 0, CollectorRegistry(), "t", lambda: Probe(True, "ok"))
    try:
        assert every.host == "0.0.0.0"
        with socket.create_connection(("127.0.0.2", every.port), timeout=5):
            pass  # answered on another local address: every interface is bound
    finally:
        every.close()


def test_live_answers_while_ready_says_why_not_until_the_component_can_work(
    server: ObservabilityServer, switch: Switch
) -> None:
    status, body = get(server, "/health/live")
    assert (status, json.loads(body)["status"]) == (200, "ok")
    status, body = get(server, "/health/ready")
    assert status == 503
    assert json.loads(body) == {"status": "failing", "reason": "warming up"}
    switch.probe = Probe(True, "consuming 3 partitions")
    status, body = get(server, "/health/ready")
    assert (status, json.loads(body)["reason"]) == (200, "consuming 3 partitions")


def test_a_probe_that_raises_is_a_failing_probe_not_a_server_error() -> None:
    def broken() -> Probe:
        raise RuntimeError("py4j gateway closed")

    running = serve_observability("127.0.0.1", 0, CollectorRegistry(), "t", broken)
    try:
        status, body = get(running, "/health/ready")
    finally:
        running.close()
    assert status == 503
    assert json.loads(body)["reason"] == "the probe failed: py4j gateway closed"


def test_health_keeps_answering_200_with_both_probes_or_the_components_document(
    server: ObservabilityServer,
) -> None:
    status, body = get(server, "/health")
    assert status == 200
    assert json.loads(body) == {
        "live": {"status": "ok", "reason": "the process answers"},
        "ready": {"status": "failing", "reason": "warming up"},
    }
    own: dict[str, Any] = {"role": "standby", "epoch": 0}
    running = serve_observability(
        "127.0.0.1",
        0,
        CollectorRegistry(),
        "collector",
        lambda: Probe(True, "x"),
        health=lambda: own,
    )
    try:
        assert get(running, "/health") == (200, json.dumps(own))
    finally:
        running.close()


def readiness(text: str) -> dict[str, float]:
    return {
        sample.labels["component"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "cdc_component_ready"
        for sample in family.samples
    }


def test_metrics_serve_the_registry_and_the_readiness_at_scrape_time(
    server: ObservabilityServer, switch: Switch
) -> None:
    status, text = get(server, "/metrics")
    assert status == 200
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["cdc_test_things_total"] == 3
    assert readiness(text) == {"tester": 0.0}
    switch.probe = Probe(True, "ready")
    assert readiness(get(server, "/metrics")[1]) == {"tester": 1.0}
    assert get(server, "/nothing")[0] == 404


def test_the_readiness_is_served_beside_the_registry_not_added_to_it() -> None:
    registry = CollectorRegistry()
    running = serve_observability("127.0.0.1", 0, registry, "merge", lambda: Probe(True, "x"))
    running.close()
    assert list(registry.collect()) == []


def test_a_textfile_holds_the_registry_in_the_text_format(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    Counter("cdc_test_runs", "Runs.", registry=registry).inc()
    path = tmp_path / "state" / "job.prom"
    write_textfile(path, registry)
    samples = {
        s.name: s.value for f in text_string_to_metric_families(path.read_text()) for s in f.samples
    }
    assert samples["cdc_test_runs_total"] == 1.0
    assert [p.name for p in path.parent.iterdir()] == ["job.prom"]  # no temporary file left
