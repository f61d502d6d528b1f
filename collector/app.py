"""``cdc-mirror collector run``: wiring the collector's parts for one MySQL instance."""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from collector.ha import LeaderElection
from collector.metrics import CollectorMetrics
from collector.publisher import FencedError, KafkaPublisher
from collector.service import Collector
from simple_binlog.config import Settings
from simple_binlog.governance.source import start_governance

log = logging.getLogger(__name__)


class _Status:
    """What /health reports: 'standby', 'starting' (elected, fencing earlier owners) or
    'active' (publishing)."""

    def __init__(self) -> None:
        self.leading = False
        self.epoch = 0
        self.collector: Collector | None = None

    @property
    def role(self) -> str:
        if not self.leading:
            return "standby"
        started = self.collector is not None and self.collector.started.is_set()
        return "active" if started else "starting"

    def to_json(self) -> dict[str, Any]:
        committed = self.collector.committed if self.collector else None
        return {
            "role": self.role,
            "epoch": self.epoch,
            "committed": committed.to_json() if committed else None,
        }


def _serve(port: int, metrics: CollectorMetrics, status: _Status) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, kind = generate_latest(metrics.registry), CONTENT_TYPE_LATEST
            elif self.path == "/health":
                body, kind = json.dumps(status.to_json()).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_collector(
    settings: Settings,
    instance_name: str,
    metrics_port: int,
    ha: bool,
    config_file: Path | None = None,
) -> None:
    # python-mysql-replication logs its whole configuration at INFO on every connect.
    logging.getLogger("pymysqlreplication").setLevel(logging.WARNING)
    instance = settings.instance(instance_name)
    # `kill -USR1 <pid>` prints every thread's stack: what a stuck collector is waiting for.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    metrics = CollectorMetrics()
    status = _Status()
    shutdown = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: shutdown.set())
    # The policy set first: without the configured policies nothing may be published, so a
    # missing one stops here, before any election (one sentence, from start_governance).
    governance = start_governance(settings, instance.name, config_file)
    if governance is not None:
        metrics.governance_version.labels(instance.name).set(governance.version)
    server = _serve(metrics_port, metrics, status) if metrics_port else None
    metrics.role.labels(instance.name).set(0)

    def lead(stop: threading.Event, epoch: int) -> None:
        status.leading, status.epoch = True, epoch
        metrics.epoch.labels(instance.name).set(epoch)
        publisher = KafkaPublisher(settings.kafka, instance.name)
        status.collector = Collector(
            instance,
            settings.collector,
            publisher,
            metrics,
            stop=stop,
            epoch=epoch,
            governance=governance,
        )
        try:
            status.collector.run()
        except FencedError as exc:
            log.warning("%s", exc)
            metrics.errors.labels(instance.name, "fenced").inc()
        finally:
            status.leading = False
            metrics.role.labels(instance.name).set(0)

    try:
        if ha:
            LeaderElection(settings.zookeeper, instance.name).run(lead, shutdown)
        else:
            lead(shutdown, 0)
    finally:
        if server is not None:
            server.shutdown()
        if governance is not None:
            governance.close()
