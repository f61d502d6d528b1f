"""Two scheduler processes on the real ZooKeeper and the real web admin (on PostgreSQL): one
leads and merges the ready days in order, each run recorded in the admin's database; an
operator's re-run goes to the leader; the leader is killed (SIGKILL) in the middle of a run,
the standby takes over, runs that day again and goes on, and the Components page shows who
leads. A table with hourly snapshots has each closed hour of its day in progress merged by
itself, in order, recorded by hour in the admin's database (a mismatching hour red on the Runs
page and re-run alone), and its day merged once ready. The lake and the jobs are file-backed
fakes (scheduler_process.py): what is under test is the election, the hand-over and the run
history, not Spark. Days merged outside the scheduler (the lake has them, its history
not) are recorded as such, not merged again."""

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


@pytest.fixture(scope="module")
def admin_on_postgresql(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, dict]]:
    """The web admin (a process) on a PostgreSQL schema of its own: its URL, a component
    token, and an admin client with its CSRF header. One for the module (a start costs
    seconds): each test schedules tables of its own and reads only their runs."""
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
        tmp_path_factory.mktemp("admin"),
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


def _runs(webui_url: str, token: str, table: str) -> list[dict]:
    """The runs of ``table`` (the module's tests share the admin), oldest first."""
    answer = httpx.get(f"{webui_url}/api/runs", headers={"Authorization": f"Bearer {token}"})
    answer.raise_for_status()
    return [run for run in answer.json() if run["table"] == table]


def _schedulers(admin: httpx.Client) -> dict[str, str]:
    """Identifier (the heartbeat's detail) → role, of the failover test's schedulers (named
    first and second; the module's other tests share the admin) not stale."""
    answer = admin.get("/api/components")
    answer.raise_for_status()
    return {
        c["detail"]: c["role"]
        for c in answer.json()
        if c["kind"] == "scheduler"
        and not c["stale"]
        and c["stopped_at"] is None
        and c["detail"].split(":")[0] in ("first", "second")
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
            lambda: _if(
                [x for x in _runs(url, token, "db_orders") if x["state"] == "succeeded"], 2
            ),
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
                r
                for r in _runs(url, token, "db_orders")
                if r["dt"] == str(day(1)) and r["state"] == "succeeded"
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
                    for r in _runs(url, token, "db_orders")
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
                "SELECT dt, state, scheduler FROM scheduler_runs "
                "WHERE table_name = 'db_orders' ORDER BY id"
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


def test_an_hourly_tables_hours_are_merged_in_order_recorded_and_rerun_by_hour(
    services: Settings, admin_on_postgresql: tuple[str, str, str], tmp_path: Path
) -> None:
    url, token, extra = admin_on_postgresql
    admin = extra["client"]
    scene = Scene(tmp_path, url, token, services)
    yesterday = day(1).isoformat()
    scene.options.update(
        tables=["events"],
        hourly_tables=["events"],
        job_s=0.05,
        mismatch_hours=[f"{yesterday}T05"],
    )
    try:
        # Two ready days start the table (day merges); yesterday is not ready: its 23 closed
        # hours before its last are merged one by one (its last hour is the day's merge).
        scene.set_ready(day(3), day(2))
        scene.start("hourly")

        def hours_done() -> list[dict] | None:
            found = [
                r
                for r in _runs(url, token, "db_events")
                if r["dt"] == yesterday and r["hour"] is not None and r["state"] != "running"
            ]
            return found if len(found) == 23 else None

        hours = wait_for(hours_done, 90, "yesterday's hours merged")
        assert [r["hour"] for r in hours] == list(range(23))  # in order, by run id
        red = [(r["hour"], r["state"], r["check_ok"]) for r in hours if r["state"] != "succeeded"]
        assert red == [(5, "mismatch", False)]
        days = [r for r in _runs(url, token, "db_events") if r["hour"] is None]
        assert [(r["dt"], r["state"]) for r in days] == [
            (str(day(3)), "succeeded"),
            (str(day(2)), "succeeded"),
        ]
        grid = admin.get("/runs").text.split('id="hour-grid"')[1].split("</table>")[0]
        assert 'class="day day-red" data-hour="05"' in grid
        assert grid.count("day day-green") == 22

        # The operator re-runs the red hour: only that hour runs again, and turns green.
        asked = admin.post(
            "/api/runs/rerun",
            json={"table": "db_events", "dt": yesterday, "hour": 5},
            headers=extra["headers"],
        )
        assert asked.status_code == 201, asked.text
        requested = asked.json()["id"]
        answered = wait_for(
            lambda: next(
                (
                    r
                    for r in _runs(url, token, "db_events")
                    if r["id"] == requested and r["state"] not in ("requested", "running")
                ),
                None,
            ),
            60,
            "the hour's re-run answered",
        )
        assert (answered["hour"], answered["state"], answered["attempt"]) == (5, "succeeded", 2)
        grid = admin.get("/runs").text.split('id="hour-grid"')[1].split("</table>")[0]
        assert "day day-red" not in grid

        # Yesterday becomes ready: its own merge runs (its last hour and the day's tag).
        scene.set_ready(day(3), day(2), day(1))
        merged = wait_for(
            lambda: [
                r
                for r in _runs(url, token, "db_events")
                if r["dt"] == yesterday and r["hour"] is None and r["state"] == "succeeded"
            ],
            60,
            "yesterday's day merged",
        )
        assert len(merged) == 1
        started = [r[3] for r in scene.started_runs() if r[3].startswith(yesterday)]
        assert started == [
            *(f"{yesterday}T{h:02d}" for h in range(23)),
            f"{yesterday}T05",
            yesterday,
        ]
        with psycopg.connect(extra["dsn"]) as conn:
            stored = conn.execute(
                "SELECT hour, state FROM scheduler_runs "
                "WHERE table_name = 'db_events' AND dt = %s AND hour = 5 ORDER BY id",
                (yesterday,),
            ).fetchall()
        assert stored == [(5, "mismatch"), (5, "succeeded")]
    finally:
        scene.stop()


def test_days_merged_outside_the_scheduler_are_not_merged_again_and_recorded_so(
    services: Settings, admin_on_postgresql: tuple[str, str, str], tmp_path: Path
) -> None:
    """Two days merged by hand before the scheduler looks (the lake has them, its history
    not): only the third is merged; the two are in the admin's database and on the Runs page
    as succeeded runs by a merge outside the scheduler."""
    from scheduler.plan import MERGED_OUTSIDE

    url, token, extra = admin_on_postgresql
    scene = Scene(tmp_path, url, token, services)
    scene.options["tables"] = ["handmade"]
    scene.merged.write_text(f"db_handmade {day(3)}\ndb_handmade {day(2)}\n")
    scene.set_ready(day(3), day(2), day(1))
    try:
        scene.start("outside")
        runs = wait_for(
            lambda: _if(
                [
                    r
                    for r in _runs(url, token, "db_handmade")
                    if r["kind"] == "merge" and r["state"] == "succeeded"
                ],
                3,
            ),
            60,
            "the two days recorded and the third merged",
        )
        assert [(r["dt"], r["requested_by"]) for r in runs] == [
            (str(day(3)), MERGED_OUTSIDE),
            (str(day(2)), MERGED_OUTSIDE),
            (str(day(1)), None),
        ]
        assert [(r[2], r[3]) for r in scene.started_runs()] == [("db_handmade", str(day(1)))]
        page = extra["client"].get("/runs").text
        assert f"succeeded (by {MERGED_OUTSIDE})" in page
    finally:
        scene.stop()
