"""The control plane in the web admin: processes register and renew through
``cdc_platform.control.AdminControl`` with a component token, the Components page lists them
and marks stale ones and the active collector; the scheduler's runs are written and read back,
and an admin's re-run request (API or the Runs page's button) is what the scheduler picks up."""

from __future__ import annotations

import re
from datetime import date

import httpx
from fastapi.testclient import TestClient

from cdc_platform.control import AdminControl, ComponentBeat, Heartbeat, RunRecord
from simple_binlog.errors import ConfigError
from tests.unit.webui.harness import create_viewer, instance_body, login, make_token
from webui.control import day_grid
from webui.models import ComponentRow


def _via(client: TestClient) -> httpx.MockTransport:
    """An httpx transport that hands each request to the app under test."""

    def forward(request: httpx.Request) -> httpx.Response:
        answer = client.request(
            request.method,
            request.url.raw_path.decode(),
            headers=dict(request.headers),
            content=request.content,
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    return httpx.MockTransport(forward)


def _control(client: TestClient, token: str) -> AdminControl:
    from pydantic import SecretStr

    return AdminControl("http://admin", SecretStr(token), transport=_via(client))


def test_processes_register_renew_and_leave(client: TestClient, admin_csrf: str) -> None:
    token = make_token(client, admin_csrf, "component")
    control = _control(client, token)
    leading = {"now": "standby"}
    collector = Heartbeat(control, "collector", "orders", role=lambda: leading["now"])
    writer = Heartbeat(control, "stream_writer", "orders")
    assert collector.beat_once() and writer.beat_once()
    page = client.get("/components").text
    assert "No collector reports active." in page
    leading["now"] = "active"
    assert collector.beat_once()
    listed = client.get("/api/components").json()
    assert {(c["kind"], c["instance"], c["role"], c["stale"]) for c in listed} == {
        ("collector", "orders", "active", False),
        ("stream_writer", "orders", "", False),
    }
    page = client.get("/components").text
    leaders = page.split('id="collector-leaders"')[1].split("</table>")[0]
    assert "orders" in leaders and f"pid {collector.current().pid}" in leaders
    control.leave(writer.id)
    states = {c["kind"]: c["stopped_at"] for c in client.get("/api/components").json()}
    assert states["stream_writer"] is not None and states["collector"] is None


def test_a_silent_process_is_marked_stale(client: TestClient, admin_csrf: str) -> None:
    token = make_token(client, admin_csrf, "component")
    beat = Heartbeat(_control(client, token), "mirror", "redis")
    assert beat.beat_once()
    sessions = client.app.state.ctx.sessions  # type: ignore[attr-defined]
    with sessions.begin() as db:
        db.get(ComponentRow, beat.id).heartbeat_at -= 3600
    [listed] = client.get("/api/components").json()
    assert listed["stale"] is True
    assert re.search(r'class="state-failed">stale<', client.get("/components").text)


def test_who_may_register(client: TestClient, admin_csrf: str) -> None:
    create_viewer(client, admin_csrf)
    viewer = make_token(client, admin_csrf, "viewer")
    headers = {"X-CSRF-Token": admin_csrf}
    assert client.post("/api/instances", json=instance_body(), headers=headers).status_code == 201
    refused = _control(client, viewer)
    beat = Heartbeat(refused, "merge")
    try:
        refused.beat(beat.current())
    except ConfigError as exc:
        assert "403" in str(exc)
    else:
        raise AssertionError("a viewer token registered a process")
    collector = make_token(client, admin_csrf, "collector", instance="orders")
    as_collector = _control(client, collector)
    as_collector.beat(Heartbeat(as_collector, "collector", "orders").current())
    other = Heartbeat(as_collector, "collector", "billing").current()
    body = other.model_dump(mode="json")
    answer = client.put(
        f"/api/components/{other.id}", json=body, headers={"Authorization": f"Bearer {collector}"}
    )
    assert answer.status_code == 403
    wrong = ComponentBeat.model_validate({**body, "id": "collector-0123456789"})
    answer = client.put(
        "/api/components/collector-other1",
        json=wrong.model_dump(mode="json"),
        headers={"Authorization": f"Bearer {collector}"},
    )
    assert answer.status_code == 422


def test_runs_are_recorded_and_a_rerun_is_requested_from_the_page(
    client: TestClient, admin_csrf: str
) -> None:
    token = make_token(client, admin_csrf, "component")
    store = _control(client, token)
    day = date(2026, 11, 24)
    run = store.save(RunRecord(table="orders", dt=day, state="running", started_at=1.0))
    assert run.id is not None
    store.save(
        run.model_copy(
            update={"state": "mismatch", "ended_at": 5.0, "rows": 3, "files": 1, "check_ok": False}
        )
    )
    assert [r.state for r in store.history("merge", day)] == ["mismatch"]
    page = client.get("/runs").text
    assert 'class="day day-red" data-day="2026-11-24"' in page
    assert store.requested() == []
    answer = client.post(
        "/runs/rerun",
        data={"csrf_token": admin_csrf, "kind": "merge", "table": "orders", "dt": "2026-11-24"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    [wanted] = store.requested()
    assert (wanted.table, wanted.dt, wanted.requested_by) == ("orders", day, "admin")
    # Asking again while it waits changes nothing.
    again = client.post(
        "/api/runs/rerun",
        json={"table": "orders", "dt": "2026-11-24"},
        headers={"X-CSRF-Token": admin_csrf},
    )
    assert again.status_code == 201 and again.json()["id"] == wanted.id
    audit = client.get("/api/audit").json()
    assert any(e["action"] == "rerun" and e["object_name"] == "orders 2026-11-24" for e in audit)
    # A viewer sees the runs but gets no button and may not request one.
    create_viewer(client, admin_csrf)
    viewer = TestClient(client.app)
    login(viewer, "viewer", "viewer-password-1")
    assert "Re-run" not in viewer.get("/runs").text
    assert (
        viewer.post("/api/runs/rerun", json={"table": "orders", "dt": "2026-11-24"}).status_code
        == 403
    )


def test_day_grid_takes_the_latest_merge_of_each_day() -> None:
    day = date(2026, 11, 24)
    runs = [
        RunRecord(id=1, table="t", dt=day, state="mismatch"),
        RunRecord(id=2, table="t", dt=day, state="succeeded"),
        RunRecord(id=3, table="t", dt=day, state="requested"),
        RunRecord(id=4, kind="validation", table="t", dt=day, state="failed"),
    ]
    grid = day_grid(runs, [day])
    assert grid["t"][day].run.id == 2 and grid["t"][day].colour == "green"


def test_the_runs_page_lists_the_newest_runs_only(client: TestClient, admin_csrf: str) -> None:
    from webui.control import RUNS_PAGE_HISTORY, _apply
    from webui.models import SchedulerRun

    sessions = client.app.state.ctx.sessions  # type: ignore[attr-defined]
    today = date.today()
    with sessions.begin() as db:
        for n in range(RUNS_PAGE_HISTORY + 3):
            row = SchedulerRun()
            _apply(row, RunRecord(table=f"t{n}", dt=today, state="succeeded"))
            db.add(row)
    page = client.get("/runs").text
    assert page.count('class="run run-succeeded"') == RUNS_PAGE_HISTORY
    assert f"t{RUNS_PAGE_HISTORY + 2}<" in page and ">t0<" not in page.split('id="runs"')[1]
    assert "3 older runs of the last two weeks are not listed" in page
