"""Web admin benchmark: the collector-config poll, the request a whole collector fleet makes
every few seconds.

Measures, over real HTTP (uvicorn on loopback, keep-alive httpx clients, N threads):

- ``config 200``: ``GET /api/collector-config/{instance}`` with a collector token (token lookup,
  the instance row from SQLite, the built config from the admin's cache keyed by the
  instance's version, JSON);
- ``config 304``: the same with ``If-None-Match`` (what a poll costs while nothing changed);
- baseline: a bare FastAPI endpoint on the same uvicorn returning the same JSON body from
  memory, with no authentication or database, measured in the same run.

Run: ``.venv/bin/python -m bench.webui_bench [--requests 2000] [--concurrency 4] [--tables 20]``
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
from cdc_platform.config import Settings, StackSettings, WebUISettings
from webui.app import create_app
from webui.replay import SimulatedReplayService
from webui.schema_source import LiveTableSchema, StaticSchemaSource


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
        settings, schemas=StaticSchemaSource(schemas), replays=SimulatedReplayService()
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
                "port": 33306,
                "user": "cdc",
                "password": "bench-mysql-password",
            },
        )
        for i in range(tables):
            response = client.post(
                "/api/table-mirrors",
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
            "/api/tokens", headers=headers, json={"name": "bench", "role": "collector"}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tables", type=int, default=20, help="table mirrors of the instance")
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
    write_figures(
        args.json,
        "webui",
        [
            Figure("webui.config_200", f"collector-config poll, {args.tables} table mirrors",
                   full, "req/s", base, bare),
            Figure("webui.config_304", "collector-config poll, unchanged (If-None-Match → 304)",
                   unchanged, "req/s", base, bare),
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
