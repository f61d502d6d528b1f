"""Web admin benchmark: the collector-config poll, the request a whole collector fleet makes
every few seconds.

Measures, over real HTTP (uvicorn on loopback, keep-alive httpx clients, N threads):

- ``config 200``: ``GET /api/collector-config/{instance}`` with a collector token (token lookup,
  the instance row from SQLite, the built config from the admin's cache keyed by the
  instance's version, JSON);
- ``config 304``: the same with ``If-None-Match`` (what a poll costs while nothing changed);
- baseline: a bare FastAPI endpoint on the same uvicorn returning the same JSON body from
  memory, with no authentication or database, measured in the same run.

and the pages an operator opens (issue 22, item 8: p95 under 200 ms with 500 table mirrors and
20 components), logged in, over real HTTP, ``--page-clients`` browsers at once:

- the Overview (a status row per mirror, headline, charts), a mirror's status page (its charts
  read from one hour of scraped samples), *Table mirrors*, *Replays* and ``GET /api/status``;
- set-up: ``--mirrors`` table mirrors over 20 instances; 20 metrics endpoints (real
  prometheus_client servers: 16 collectors, a stream writer and the Redis and warehouse
  mirrors, with a series per table and topic partition; one more collector endpoint does
  not answer) scraped by the admin's own scraper every 15 s, which feeds the status snapshot
  as in production; one hour of samples of those series at 15 s already in
  ``metric_samples`` and one hour of the Overview's trends in memory (since 2026-11-26
  session 11: before, the Overview drew only the rounds of the run); 200 finished replays
  (Kafka's offsets are given, not asked: they are gathered off the request path either way);
- baseline: ``/static/style.css`` of the same server in the same run (a page that does nothing).

Run: ``.venv/bin/python -m bench.webui_bench [--requests 2000] [--concurrency 4] [--tables 20]
[--mirrors 500] [--page-requests 200] [--page-clients 2]``
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import ScrapeTarget, Settings, StackSettings, WebUISettings
from webui.app import create_app
from webui.provisioning import RecordingProvisioner
from webui.replay import SimulatedReplayService
from webui.schema_source import LiveTableSchema, StaticSchemaSource
from webui.status import GroupOffsets, TopicOffsets
from webui.status_sources import StatusService


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Served:
    def __init__(self, app: FastAPI) -> None:
        self.port = _free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _setup(home: Path, tables: int) -> tuple[FastAPI, str, dict]:
    schemas = {
        f"db{i}_t{i}": LiveTableSchema(
            f"db{i}_t{i}",
            (f"db{i}_00.t{i}_00",),
            {"id": "bigint", "created_at": "datetime"},
            ("id",),
        )
        for i in range(tables)
    }
    settings = Settings(
        stack=StackSettings(home=home),
        webui=WebUISettings(
            initial_admin_password=SecretStr("bench-admin-pw-1"),
            scrape_targets=[],
            # No Kafka reader competing for the two cores with the measured requests.
            count_detections=False,
        ),
    )
    app = create_app(
        settings,
        schemas=StaticSchemaSource(schemas),
        replays=SimulatedReplayService(),
        # The bench measures the pages: no topic or warehouse table is made per mirror.
        provisioner=RecordingProvisioner(settings),
    )
    with TestClient(app) as client:
        page = client.get("/login")
        csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        client.post(
            "/login", data={"username": "admin", "password": "bench-admin-pw-1", "csrf_token": csrf}
        )
        csrf = client.get("/").text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        headers = {"X-CSRF-Token": csrf}
        client.post(
            "/api/instances",
            headers=headers,
            json={
                "name": "orders",
                "host": "127.0.0.1",
                "port": 23306,
                "user": "cdc",
                "password": "bench-mysql-password",
            },
        )
        for i in range(tables):
            response = client.post(
                "/api/table-mirrors?initial_load=false",
                headers=headers,
                json={
                    "instance": "orders",
                    "db_prefix": f"db{i}",
                    "table_prefix": f"t{i}",
                    "check_column": "created_at",
                },
            )
            assert response.status_code == 201, response.text
        token = client.post(
            "/api/tokens",
            headers=headers,
            json={"name": "bench", "role": "collector", "instance": "orders"},
        ).json()["token"]
        body = client.get(
            "/api/collector-config/orders", headers={"Authorization": f"Bearer {token}"}
        ).json()
    return app, token, body


def _measure(
    url: str, headers: dict[str, str], requests: int, concurrency: int, expect: int
) -> float:
    per_worker = requests // concurrency

    def worker() -> None:
        with httpx.Client(headers=headers, timeout=30) as client:
            for _ in range(per_worker):
                response = client.get(url)
                if response.status_code != expect:
                    raise RuntimeError(f"{url}: HTTP {response.status_code}")

    with httpx.Client(headers=headers) as warm:  # first request: connections, caches
        warm.get(url)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    return per_worker * concurrency / (time.perf_counter() - started)


# --- pages with many table mirrors and components ------------------------------------------

INSTANCES = 20
SERVED_COLLECTORS = 16  # + 1 that does not answer + writer + 2 mirrors = 20 components
PARTITIONS = 3
SCRAPE_STEP_S = 15.0


class _Endpoints:
    """20 metrics endpoints as the components export them (real prometheus_client servers)."""

    def __init__(self, mirrors: list[tuple[str, str]], now: float) -> None:
        from prometheus_client import start_http_server

        from collector.metrics import CollectorMetrics
        from mirror.metrics import MirrorMetrics
        from stream_writer.metrics import WriterMetrics

        registries = []
        for i in range(SERVED_COLLECTORS):
            collector = CollectorMetrics()
            instance = f"inst{i:02d}"
            collector.role.labels(instance).set(1)
            collector.committed_offset.labels(instance).set(1_000_000 + i)
            collector.last_event_time.labels(instance).set(now - 1)
            collector.delay.labels(instance).set(0.8)
            registries.append(("collector-" + instance, collector.registry))
        writer = WriterMetrics("all")
        redis, warehouse = MirrorMetrics("redis"), MirrorMetrics("warehouse")
        for i in range(INSTANCES):
            topic = f"cdc.binlog.inst{i:02d}"
            for p in range(PARTITIONS):
                writer.lag.labels("all", topic, str(p)).set(3)
                writer.watermark.labels("all", topic, str(p)).set(now - 20)
                for m in (redis, warehouse):
                    m.lag.labels(m.target, topic, str(p)).set(2)
        for name, _instance in mirrors:
            writer.rows.labels("all", name).inc(1000)
            for m in (redis, warehouse):
                m.rows.labels(m.target, name).inc(1000)
                m.last_applied.labels(m.target, name).set(now - 2)
        for m in (redis, warehouse):
            m.config_version.set(1)
        registries += [("stream_writer", writer.registry), ("mirror-redis", redis.registry)]
        registries.append(("mirror-warehouse", warehouse.registry))
        self.servers = [start_http_server(0, addr="127.0.0.1", registry=r) for _, r in registries]
        self.targets = [
            ScrapeTarget(name=name, url=f"http://127.0.0.1:{server.server_port}/metrics")
            for (name, _), (server, _) in zip(registries, self.servers, strict=True)
        ]
        # One collector's endpoint does not answer; three instances have none listed.
        self.targets.append(ScrapeTarget(
            name=f"collector-inst{SERVED_COLLECTORS:02d}",
            url=f"http://127.0.0.1:{_free_port()}/metrics",
        ))  # fmt: skip
        self.text = {name: r for name, r in registries}

    def close(self) -> None:
        for server, thread in self.servers:
            server.shutdown()
            thread.join(5)


def _seed_samples(app: FastAPI, endpoints: _Endpoints, now: float, hours: float = 1.0) -> int:
    """An hour of scrapes of every endpoint in ``metric_samples`` (what the scraper stores)."""
    from prometheus_client import generate_latest
    from sqlalchemy import insert

    from webui.models import MetricSample
    from webui.monitoring import parse_samples

    sessions = app.state.ctx.sessions
    stored = 0
    scrapes = int(hours * 3600 / SCRAPE_STEP_S)
    snapshots = {
        name: parse_samples(generate_latest(registry).decode(), name, 0.0)
        for name, registry in endpoints.text.items()
    }
    for n in range(scrapes):
        at = now - (scrapes - n) * SCRAPE_STEP_S
        rows = [
            {
                "at": at,
                "target": sample.target,
                "name": sample.name,
                "labels": sample.labels,
                # Counters grow, gauges wobble: enough to draw rates and lags.
                "value": sample.value + (n * 10 if sample.name.endswith("_total") else n % 5),
            }
            for samples in snapshots.values()
            for sample in samples
        ]
        with sessions.begin() as db:
            db.execute(insert(MetricSample), rows)
        stored += len(rows)
    return stored


def _setup_pages(home: Path, mirrors: int) -> tuple[FastAPI, _Endpoints, list[str], int]:
    from datetime import UTC, datetime

    from webui.models import Instance, ReplayJob, TableMirrorRow

    now = time.time()
    names = [(f"db{i:03d}_orders", f"inst{i % INSTANCES:02d}") for i in range(mirrors)]
    endpoints = _Endpoints(names, now)
    settings = Settings(
        stack=StackSettings(home=home),
        webui=WebUISettings(
            initial_admin_password=SecretStr("bench-admin-pw-1"),
            scrape_targets=endpoints.targets,
            count_detections=False,
        ),
    )
    # The admin's own scraper runs (every 15 s, as by default) and feeds the status.
    app = create_app(settings, replays=SimulatedReplayService())
    sessions = app.state.ctx.sessions
    stamp = datetime.now(UTC)
    with sessions.begin() as db:
        instances = {}
        for i in range(INSTANCES):
            row = Instance(
                name=f"inst{i:02d}", host="127.0.0.1", port=3306, user="cdc",
                password_encrypted=app.state.ctx.keys.encrypt("x"), gtid_start="current",
                include=[], exclude=[], shard_rules=[], collector_group="g",
                topic=f"cdc.binlog.inst{i:02d}", version=1, updated_at=stamp,
            )  # fmt: skip
            db.add(row)
            instances[row.name] = row
        db.flush()
        for name, instance in names:
            spec = {"db_prefix": name.split("_")[0], "table_prefix": "orders",
                    "targets": ["hive", "warehouse", "redis"], "check_column": "created_at"}  # fmt: skip
            db.add(TableMirrorRow(name=name, instance_id=instances[instance].id, spec=spec, updated_at=stamp))
        for n in range(200):
            db.add(ReplayJob(
                run_id=f"20261125T0000{n:02d}-bench{n:03d}", state="succeeded", rows_done=1000,
                request={"instance": "inst00", "db_prefix": "db000", "table_prefix": "orders"},
                created_at=stamp, recorded=True, cancel_requested=False,
            ))  # fmt: skip
    samples = _seed_samples(app, endpoints, now)

    def offsets(topics: list[str], groups: list[tuple[str, str]]) -> dict[str, TopicOffsets]:
        return {
            t: TopicOffsets(
                t,
                dict.fromkeys(range(PARTITIONS), 10_000),
                tuple(GroupOffsets(g, c, dict.fromkeys(range(PARTITIONS), 9_998)) for g, c in groups),
            )
            for t in topics
        }

    status = StatusService(settings, sessions, offsets=offsets)
    _seed_trends(status, now)
    app.state.status = status
    return app, endpoints, [n for n, _ in names], samples


def _seed_trends(status: StatusService, now: float, hours: float = 1.0) -> None:
    """An hour of the Overview's charts, as an admin that has run for an hour keeps them in
    memory (a point per scrape round: per instance, per consumer, per target): a fresh admin
    would draw a few points and understate the page."""
    from webui.status import Trends

    snapshot = status.refresh_now()  # scrapes the endpoints once, as a round does
    assert snapshot.metrics is not None
    status.trends = Trends()  # that round's point is the hour's last
    scrapes = int(hours * 3600 / SCRAPE_STEP_S)
    for n in range(scrapes):
        status.trends.record(
            snapshot.at - (scrapes - n) * SCRAPE_STEP_S, snapshot.metrics, snapshot.tables.values()
        )


def _latencies(base: str, paths: list[str], requests: int, clients: int) -> list[float]:
    """Milliseconds per request of ``paths`` taken in turn by ``clients`` logged-in clients."""
    jar = _login(base)
    per_client = max(1, requests // clients)

    def client_run(_: int) -> list[float]:
        taken: list[float] = []
        with httpx.Client(base_url=base, cookies=jar, timeout=30) as client:
            for n in range(per_client):
                path = paths[n % len(paths)]
                started = time.perf_counter()
                response = client.get(path)
                taken.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: HTTP {response.status_code}")
        return taken

    with httpx.Client(base_url=base, cookies=jar, timeout=30) as warm:
        for path in paths[:3]:
            warm.get(path)
    with ThreadPoolExecutor(clients) as pool:
        return [ms for part in pool.map(client_run, range(clients)) for ms in part]


def _login(base: str) -> httpx.Cookies:
    with httpx.Client(base_url=base, timeout=30) as client:
        page = client.get("/login")
        csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        client.post("/login", data={"username": "admin", "password": "bench-admin-pw-1", "csrf_token": csrf})
        return client.cookies


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def pages(mirrors: int, requests: int, clients: int) -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="webui-pages-bench-") as home:
        app, endpoints, names, samples = _setup_pages(Path(home), mirrors)
        try:
            with _Served(app) as url:
                deadline = time.monotonic() + 60
                while True:  # the first snapshot, gathered in the background as in production
                    snapshot = app.state.status.snapshot()
                    if len(snapshot.tables) == mirrors:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError("the status snapshot was not gathered in 60 s")
                    time.sleep(0.2)
                down = sum(1 for s in snapshot.scrapes if not s.ok)
                print(f"pages: {mirrors} table mirrors, {len(endpoints.targets)} metrics endpoints "
                      f"({down} down), {samples:,} samples (1 h), {clients} clients, "
                      f"{requests} requests per page")  # fmt: skip
                static = _latencies(url, ["/static/style.css"], requests, clients)
                base_p95 = _percentile(static, 0.95)
                print(f"  baseline /static/style.css  p50 {_percentile(static, 0.5):7.1f} ms  p95 {base_p95:7.1f} ms")
                step = max(1, len(names) // 50)
                measured = (
                    ("overview", "Overview", ["/"]),
                    ("status", "a mirror's status page", [f"/status/{n}" for n in names[::step]]),
                    ("tables", "Table mirrors", ["/tables"]),
                    ("replays", "Replays (200 runs)", ["/replays"]),
                    ("api_status", "GET /api/status", ["/api/status"]),
                )
                for key, label, paths in measured:
                    taken = _latencies(url, paths, requests, clients)
                    p50, p95 = _percentile(taken, 0.5), _percentile(taken, 0.95)
                    print(f"  {label:<27} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
                    figures.append(Figure(
                        f"webui.page_{key}", f"{label}, {mirrors} table mirrors, 20 components",
                        p95, "ms", base_p95, "/static/style.css, same server", higher_is_better=False,
                        extra={"p50": p50, "p95": p95},
                    ))  # fmt: skip
        finally:
            endpoints.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tables", type=int, default=20, help="table mirrors of the instance")
    parser.add_argument("--mirrors", type=int, default=500, help="table mirrors for the pages")
    parser.add_argument("--page-requests", type=int, default=200, help="requests per page")
    parser.add_argument("--page-clients", type=int, default=2, help="browsers at once")
    parser.add_argument("--skip-pages", action="store_true", help="only the collector-config poll")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="webui-bench-") as home:
        app, token, body = _setup(Path(home), args.tables)
        baseline = FastAPI()

        @baseline.get("/config")
        def config() -> dict:
            return body

        auth = {"Authorization": f"Bearer {token}"}
        with _Served(app) as admin_url, _Served(baseline) as baseline_url:
            full_url = f"{admin_url}/api/collector-config/orders"
            etag = httpx.get(full_url, headers=auth).headers["etag"]
            base = _measure(f"{baseline_url}/config", {}, args.requests, args.concurrency, 200)
            full = _measure(full_url, auth, args.requests, args.concurrency, 200)
            unchanged = _measure(
                full_url, {**auth, "If-None-Match": etag}, args.requests, args.concurrency, 304
            )

    print(f"machine: {describe_machine()}")
    print(
        f"collector-config poll, {args.tables} table mirrors, {len(str(body))} B body, "
        f"{args.requests} requests, {args.concurrency} clients, uvicorn on loopback"
    )
    print(f"  baseline (bare FastAPI, same body) {base:10.0f} req/s")
    print(f"  config 200                         {full:10.0f} req/s   {full / base:5.2f}× baseline")
    print(
        f"  config 304 (If-None-Match)         {unchanged:10.0f} req/s   "
        f"{unchanged / base:5.2f}× baseline"
    )
    print(
        f"  a fleet polling every 5 s: ~{unchanged * 5:,.0f} collectors per admin process "
        "(304 path, this machine)"
    )
    bare = "bare FastAPI endpoint, same body"
    figures = [
        Figure("webui.config_200", f"collector-config poll, {args.tables} table mirrors",
               full, "req/s", base, bare),
        Figure("webui.config_304", "collector-config poll, unchanged (If-None-Match → 304)",
               unchanged, "req/s", base, bare),
    ]  # fmt: skip
    if not args.skip_pages:
        figures += pages(args.mirrors, args.page_requests, args.page_clients)
    write_figures(args.json, "webui", figures)


if __name__ == "__main__":
    main()
