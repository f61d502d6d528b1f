"""Two scheduler processes on the real ZooKeeper and the real web admin (on PostgreSQL): one
leads and merges the ready days in order, each run recorded in the admin's database; an
operator's re-run goes to the leader; the leader is killed (SIGKILL) in the middle of a run,
the standby takes over, runs that day again and goes on, and the Components page shows who
leads. The lake and the jobs are file-backed fakes (scheduler_process.py): what is under test
is the election, the hand-over and the run history, not Spark."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from kazoo.client import KazooClient

from cdc_platform.config import Settings
from tests.integration.webui.harness import start_server, wait_for
from tests.unit.webui.harness import ADMIN_PASSWORD

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
TODAY = datetime.now(UTC).date()


def day(n: int) -> date:
    return TODAY - timedelta(days=n)


@pytest.fixture(scope="module")
def services(settings: Settings) -> Iterator[Settings]:
    from stack.manager import LocalStack

    stack = LocalStack(settings)
    done = stack.up(["zookeeper", "postgresql"])
    yield settings
    for service, how in done.items():
        if how == "started":
            stack.down([service])


@pytest.fixture()
def admin_on_postgresql(services: Settings, tmp_path: Path) -> Iterator[tuple[str, str, dict]]:
    """The web admin (a process) on a PostgreSQL schema of its own: its URL, a component
    token, and an admin client with its CSRF header."""
    pg = services.postgres
    password = pg.password.get_secret_value()
    schema = f"sched_{uuid.uuid4().hex[:8]}"
    dsn = (
        f"host={pg.host} port={pg.port} user={pg.user} password={password} dbname={pg.warehouse_db}"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = (
        f"postgresql+psycopg://{pg.user}:{password}@{pg.host}:{pg.port}/{pg.warehouse_db}"
        f"?options=-csearch_path%3D{schema}"
    )
    server = start_server(
        tmp_path,
        {
            "CDC_MIRROR_WEBUI__DATABASE_URL": url,
            "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": "[]",
            "CDC_MIRROR_WEBUI__COUNT_DETECTIONS": "false",
        },
        with_replay_worker=False,
    )
    admin = httpx.Client(base_url=server.url, timeout=10)
    try:
        page = admin.get("/login").text
        login = {"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": _csrf(page)}
        assert admin.post("/login", data=login).status_code == 303
        headers = {"X-CSRF-Token": _csrf(admin.get("/").text)}
        made = admin.post(
            "/api/tokens", json={"name": "schedulers", "role": "component"}, headers=headers
        )
        assert made.status_code == 201, made.text
        yield (
            server.url,
            str(made.json()["token"]),
            {"client": admin, "headers": headers, "dsn": f"{dsn} options=-csearch_path={schema}"},
        )
    finally:
        admin.close()
        server.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


class Scene:
    def __init__(self, tmp_path: Path, webui_url: str, token: str, settings: Settings) -> None:
        self.tmp = tmp_path
        self.ready = tmp_path / "ready.json"
        self.merged = tmp_path / "merged.txt"
        self.started = tmp_path / "started.txt"
        self.ready.write_text("[]")
        self.options = {
            "zookeeper": settings.zookeeper.hosts,
            "root": f"/cdc-mirror-test/scheduler-{uuid.uuid4().hex[:8]}",
            "session_timeout_s": 3.0,
            "webui_url": webui_url,
            "token": token,
            "ready_file": str(self.ready),
            "merged_file": str(self.merged),
            "started_file": str(self.started),
            "tables": ["orders"],
            "tick_s": 0.5,
            "job_s": 1.0,
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "scheduler_process.py"),
                json.dumps({**self.options, "name": name}),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes[name] = process
        return process

    def set_ready(self, *days: date) -> None:
        self.ready.write_text(json.dumps([d.isoformat() for d in days]))

    def started_runs(self) -> list[list[str]]:
        if not self.started.exists():
            return []
        return [line.split() for line in self.started.read_text().splitlines() if line]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(15)
        zookeeper = KazooClient(hosts=self.options["zookeeper"])
        zookeeper.start(timeout=15)
        try:
            zookeeper.delete(self.options["root"], recursive=True)
        finally:
            zookeeper.stop()
            zookeeper.close()


def _if(found, count: int):
    """``found`` when it has ``count`` items, else None (for wait_for)."""
    return found if len(found) == count else None


def _runs(webui_url: str, token: str) -> list[dict]:
    answer = httpx.get(f"{webui_url}/api/runs", headers={"Authorization": f"Bearer {token}"})
    answer.raise_for_status()
    return answer.json()


def _schedulers(admin: httpx.Client) -> dict[str, str]:
    """Identifier (the heartbeat's detail) → role, of the schedulers not stale."""
    answer = admin.get("/api/components")
    answer.raise_for_status()
    return {
        c["detail"]: c["role"]
        for c in answer.json()
        if c["kind"] == "scheduler" and not c["stale"] and c["stopped_at"] is None
    }


def test_one_scheduler_leads_and_the_standby_takes_over_when_it_is_killed(
    services: Settings, admin_on_postgresql: tuple[str, str, str], tmp_path: Path
) -> None:
    url, token, extra = admin_on_postgresql
    admin = extra["client"]
    scene = Scene(tmp_path, url, token, services)
    try:
        scene.set_ready(day(3), day(2))
        first = scene.start("first")
        wait_for(lambda: "active" in _schedulers(admin).values(), 60, "a leading scheduler")
        scene.start("second")
        roles = wait_for(lambda: _if(_schedulers(admin), 2), 60, "two schedulers")
        assert sorted(roles.values()) == ["active", "standby"]
        leader = next(i for i, role in roles.items() if role == "active")
        assert leader.startswith("first:")

        # The leader merges the ready days in order; every run is in the admin's database.
        done = wait_for(
            lambda: _if([x for x in _runs(url, token) if x["state"] == "succeeded"], 2),
            60,
            "the two ready days merged",
        )
        assert [(r["dt"], r["scheduler"]) for r in done] == [
            (str(day(3)), leader),
            (str(day(2)), leader),
        ]

        # Failover in the middle of a run: the next day's merge takes a while; kill -9 the
        # leader once it started it.
        scene.options["job_s"] = 1.0
        scene.set_ready(day(3), day(2), day(1))
        wait_for(
            lambda: any(r[3] == str(day(1)) for r in scene.started_runs()),
            60,
            "the leader starting the next day",
        )
        os.kill(first.pid, signal.SIGKILL)
        first.wait(15)
        new_leader = wait_for(
            lambda: next(
                (i for i, role in _schedulers(admin).items() if role == "active" and i != leader),
                None,
            ),
            60,
            "the standby taking over",
        )
        assert new_leader.startswith("second:")
        merged = wait_for(
            lambda: [
                r for r in _runs(url, token) if r["dt"] == str(day(1)) and r["state"] == "succeeded"
            ],
            60,
            "the day merged by the new leader",
        )
        assert [r["scheduler"] for r in merged] == [new_leader]
        # Every day merged, in order, each once; the killed leader's run of day 1 was left
        # running: the new leader marked it failed and counted it as an attempt.
        assert scene.merged.read_text().split("\n")[:-1] == [
            f"db_orders {day(3)}",
            f"db_orders {day(2)}",
            f"db_orders {day(1)}",
        ]
        assert merged[0]["attempt"] == 2

        # A re-run an operator requests from the web admin goes to the new leader.
        refused = httpx.post(
            f"{url}/api/runs/rerun",
            json={"table": "db_orders", "dt": str(day(3))},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert refused.status_code == 403  # a component token may not ask for one
        asked = admin.post(
            "/api/runs/rerun",
            json={"table": "db_orders", "dt": str(day(3))},
            headers=extra["headers"],
        )
        assert asked.status_code == 201, asked.text
        requested = asked.json()["id"]
        answered = wait_for(
            lambda: next(
                (
                    r
                    for r in _runs(url, token)
                    if r["id"] == requested and r["state"] == "succeeded"
                ),
                None,
            ),
            60,
            "the re-run answered",
        )
        assert answered["scheduler"] == new_leader and answered["attempt"] == 2
        with psycopg.connect(extra["dsn"]) as conn:
            rows = conn.execute(
                "SELECT dt, state, scheduler FROM scheduler_runs ORDER BY id"
            ).fetchall()
        assert [(dt, state) for dt, state, _ in rows] == [
            (str(day(3)), "succeeded"),
            (str(day(2)), "succeeded"),
            (str(day(1)), "failed"),
            (str(day(1)), "succeeded"),
            (str(day(3)), "succeeded"),
        ]
        assert rows[2][2] == leader  # the run the kill cut short stays on record
    finally:
        scene.stop()
