"""A day merged outside the scheduler (its tag found in the lake, ``scheduler.plan``) is
recorded as a succeeded run "by a merge outside the scheduler": the Runs page shows it green
in the grid, with who merged it in the cell's title and in the history."""

from __future__ import annotations

from datetime import date, timedelta

from fastapi.testclient import TestClient

from cdc_platform.control import RunRecord
from scheduler.plan import MERGED_OUTSIDE
from tests.unit.webui.harness import make_token
from tests.unit.webui.test_control_plane import _control

DAY = date.today() - timedelta(days=1)


def test_a_day_merged_outside_the_scheduler_is_green_and_says_so(
    client: TestClient, admin_csrf: str
) -> None:
    store = _control(client, make_token(client, admin_csrf, "component"))
    failed = store.save(RunRecord(table="orders", dt=DAY, state="failed", error="Spark fell."))
    store.save(RunRecord(table="orders", dt=DAY, state="succeeded", requested_by=MERGED_OUTSIDE))
    page = client.get("/runs").text
    grid = page.split('id="day-grid"')[1].split("</table>")[0]
    assert (
        f'class="day day-green" data-day="{DAY.isoformat()}" '
        f'title="succeeded (by {MERGED_OUTSIDE})"' in grid
    )
    history = page.split('id="runs"')[1]
    assert f"succeeded (by {MERGED_OUTSIDE})" in history
    assert f'data-run="{failed.id}"' in history  # the failed attempt stays in the history
