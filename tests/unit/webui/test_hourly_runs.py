"""The run history of single hours (tables with hourly snapshots) in the web admin: the
scheduler writes a run of one hour through ``AdminControl`` and reads it back with its hour,
the Runs page shows it in its Hours grid (red for a mismatch) and in the history as
``<day>T<hh>``, and its Re-run button requests that hour, not the day."""

from __future__ import annotations

from datetime import date, timedelta

from fastapi.testclient import TestClient

from cdc_platform.control import RunRecord
from tests.unit.webui.harness import make_token
from tests.unit.webui.test_control_plane import _control
from webui.control import day_grid, hour_grid

DAY = date.today() - timedelta(days=1)


def test_an_hours_run_is_kept_shown_and_rerun_as_that_hour(
    client: TestClient, admin_csrf: str
) -> None:
    store = _control(client, make_token(client, admin_csrf, "component"))
    run = store.save(RunRecord(table="orders", dt=DAY, hour=13, state="running"))
    store.save(run.model_copy(update={"state": "mismatch", "check_ok": False, "rows": 4}))
    store.save(RunRecord(table="orders", dt=DAY, hour=12, state="succeeded"))
    store.save(RunRecord(table="orders", dt=DAY, state="succeeded"))  # the day's own merge
    assert [(r.hour, r.state) for r in store.history("merge", DAY)] == [
        (13, "mismatch"),
        (12, "succeeded"),
        (None, "succeeded"),
    ]
    page = client.get("/runs").text
    hours = page.split('id="hour-grid"')[1].split("</table>")[0]
    assert 'class="day day-red" data-hour="13"' in hours
    assert 'class="day day-green" data-hour="12"' in hours
    assert f'class="day day-green" data-day="{DAY.isoformat()}"' in page  # the day stays green
    assert f"{DAY.isoformat()}T13</td>" in page
    answer = client.post(
        "/runs/rerun",
        data={
            "csrf_token": admin_csrf,
            "kind": "merge",
            "table": "orders",
            "dt": DAY.isoformat(),
            "hour": "13",
        },
        follow_redirects=False,
    )
    assert answer.status_code == 303
    [wanted] = store.requested()
    assert (wanted.table, wanted.dt, wanted.hour) == ("orders", DAY, 13)
    # A request for the day is another request, not the hour's.
    day_request = client.post(
        "/api/runs/rerun",
        json={"table": "orders", "dt": DAY.isoformat()},
        headers={"X-CSRF-Token": admin_csrf},
    )
    assert day_request.status_code == 201 and day_request.json()["hour"] is None
    assert len(store.requested()) == 2
    audit = client.get("/api/audit").json()
    assert any(e["object_name"] == f"orders {DAY.isoformat()}T13" for e in audit)
    # Only a merge runs for one hour.
    refused = client.post(
        "/api/runs/rerun",
        json={"kind": "validation", "table": "orders", "dt": DAY.isoformat(), "hour": 3},
        headers={"X-CSRF-Token": admin_csrf},
    )
    assert refused.status_code == 422


def test_hour_grid_takes_the_latest_merge_of_each_hour_and_leaves_days_alone() -> None:
    runs = [
        RunRecord(id=1, table="t", dt=DAY, hour=3, state="failed"),
        RunRecord(id=2, table="t", dt=DAY, hour=3, state="succeeded"),
        RunRecord(id=3, table="t", dt=DAY, hour=4, state="mismatch"),
        RunRecord(id=4, table="t", dt=DAY, hour=5, state="requested"),
        RunRecord(id=5, table="t", dt=DAY, state="failed"),
    ]
    hours = hour_grid(runs, [DAY])
    assert {h: c.colour for h, c in hours[("t", DAY)].items()} == {3: "green", 4: "red"}
    assert day_grid(runs, [DAY])["t"][DAY].run.id == 5


def test_the_runs_page_reads_hours_of_its_last_few_days_only(
    client: TestClient, admin_csrf: str
) -> None:
    from webui.control import RUNS_PAGE_HOUR_DAYS

    store = _control(client, make_token(client, admin_csrf, "component"))
    old = date.today() - timedelta(days=RUNS_PAGE_HOUR_DAYS + 1)
    store.save(RunRecord(table="orders", dt=old, hour=7, state="failed"))
    store.save(RunRecord(table="orders", dt=old, state="succeeded"))
    page = client.get("/runs").text
    assert 'id="hour-grid"' not in page and f"{old.isoformat()}T07" not in page
    assert f'class="day day-green" data-day="{old.isoformat()}"' in page
    store.save(RunRecord(table="orders", dt=DAY, hour=7, state="failed"))
    page = client.get("/runs").text
    assert 'class="day day-red" data-hour="07"' in page
    assert f"{old.isoformat()}T07" not in page
    assert f"listed for the last {RUNS_PAGE_HOUR_DAYS} days" in page


def test_an_hour_waiting_for_readiness_is_shown_as_such_and_not_red(
    client: TestClient, admin_csrf: str
) -> None:
    store = _control(client, make_token(client, admin_csrf, "component"))
    store.save(
        RunRecord(
            table="orders",
            dt=DAY,
            hour=9,
            state="waiting",
            error="the stream writer has not passed the end of hour 09.",
            retry_at=1_800_000_000.0,
        )
    )
    page = client.get("/runs").text
    hours = page.split('id="hour-grid"')[1].split("</table>")[0]
    assert 'class="day day-grey" data-hour="09"' in hours
    assert "waiting for readiness; next look at" in page
    assert hour_grid(store.history("merge", DAY), [DAY])[("orders", DAY)][9].colour == "grey"
