"""One metrics and health endpoint per process, the same for every component.

``serve_observability(host, port, registry, component, ready=…)`` starts a small HTTP server
on a background thread that answers:

- ``GET /metrics``: the component's registry in the Prometheus text format, plus
  ``cdc_component_ready{component}`` (1 or 0: the readiness probe at scrape time), so an alert
  can say "not ready for 5 minutes" without a probe of its own;
- ``GET /health/live``: 200 while the process runs and answers (an orchestrator restarts it
  when this fails);
- ``GET /health/ready``: 200 when the component can do its job now (the collector publishes
  or follows as a healthy standby, the writer's query runs, the mirror's consumer has joined
  its group, …), 503 with the reason otherwise (an orchestrator stops routing to it, and does
  not restart it for that);
- ``GET /health``: the endpoint the demo and the compose stack already poll: the component's
  own JSON when it has one (the collector's role, epoch and position), else both probes;
  always 200 while the process answers.

Each probe answers ``{"status": "ok" | "failing", "reason": …}``. The server binds to
``host`` — loopback (127.0.0.1) by default in every component's settings (``metrics_host``);
prometheus_client's own ``start_http_server`` binds every interface unless told otherwise,
which is why no component calls it.

``write_textfile`` is the batch jobs' half: the last run's metrics written atomically to a
file in the Prometheus text format, for node-exporter's textfile collector (or any reader
that serves such a file) to expose after the process ended.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
    write_to_textfile,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# The default bind address of every component's metrics and health endpoint.
LOOPBACK = "127.0.0.1"
READY_METRIC = "cdc_component_ready"


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe's answer: whether it passes, and a sentence saying why (or why not)."""

    ok: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"status": "ok" if self.ok else "failing", "reason": self.reason}


ProbeCheck = Callable[[], Probe]


def alive() -> Probe:
    """The liveness of a process whose endpoint answers: answering is being alive."""
    return Probe(True, "the process answers")


def _checked(check: ProbeCheck) -> Probe:
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - a probe that fails is a failing probe, not a 500
        return Probe(False, f"the probe failed: {exc}")


class _ReadyCollector(Collector):
    """``cdc_component_ready{component}``: the readiness probe, asked at every scrape."""

    def __init__(self, component: str, ready: ProbeCheck) -> None:
        self._component = component
        self._ready = ready

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            READY_METRIC,
            "1 when the component can do its job now (its /health/ready answers 200), else 0.",
            labels=["component"],
        )

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        family.add_metric([self._component], 1.0 if _checked(self._ready).ok else 0.0)
        yield family


def readiness_registry(component: str, ready: ProbeCheck) -> CollectorRegistry:
    """A registry of its own holding ``cdc_component_ready`` for ``component``: served beside
    the component's registry, never added to it (a batch job writes its registry to a
    textfile, where a readiness of a process that ended would mislead)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_ReadyCollector(component, ready))
    return registry


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        # An IPv6 literal needs an IPv6 socket; a name or an IPv4 address an IPv4 one.
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), handler)


class ObservabilityServer:
    """A running metrics and health endpoint; ``close()`` stops it."""

    def __init__(self, server: _Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler(
    registries: tuple[CollectorRegistry, ...],
    live: ProbeCheck,
    ready: ProbeCheck,
    health: Callable[[], dict[str, Any]] | None,
) -> type[BaseHTTPRequestHandler]:
    def probes() -> dict[str, Any]:
        return {"live": _checked(live).to_json(), "ready": _checked(ready).to_json()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body = b"".join(generate_latest(registry) for registry in registries)
                self._send(200, body, CONTENT_TYPE_LATEST)
            elif path in ("/health/live", "/health/ready"):
                probe = _checked(live if path == "/health/live" else ready)
                self._send_json(200 if probe.ok else 503, probe.to_json())
            elif path == "/health":
                self._send_json(200, health() if health is not None else probes())
            else:
                self.send_error(404)

        def _send_json(self, status: int, document: dict[str, Any]) -> None:
            self._send(status, json.dumps(document).encode(), "application/json")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape and probe is noise; failures show in the probes

    return Handler


def serve_observability(
    host: str,
    port: int,
    registry: CollectorRegistry,
    component: str,
    ready: ProbeCheck,
    live: ProbeCheck = alive,
    health: Callable[[], dict[str, Any]] | None = None,
) -> ObservabilityServer:
    """Serve /metrics, /health, /health/live and /health/ready on ``host:port`` (port 0: a
    free one, see ``.port``) until ``close()``; /metrics serves ``registry`` and
    ``cdc_component_ready``. ``health``: the component's own /health document (default: both
    probes)."""
    registries = (registry, readiness_registry(component, ready))
    server = _Server(host, port, _handler(registries, live, ready, health))
    thread = threading.Thread(
        target=server.serve_forever, name=f"{component}-observability", daemon=True
    )
    thread.start()
    log.info(
        "%s metrics on http://%s:%d/metrics, probes on /health/live and /health/ready",
        component,
        host,
        server.server_address[1],
    )
    return ObservabilityServer(server, thread)


def write_textfile(path: Path, registry: CollectorRegistry) -> None:
    """Write ``registry`` to ``path`` in the Prometheus text format, atomically (a temporary
    file renamed over it), as node-exporter's textfile collector expects."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry)
