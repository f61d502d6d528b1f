"""Issue 22, item 9 (in part): "a failed check shows red and re-runs from the page", in a real
browser (Playwright driving Debian's chromium) against ``cdc-mirror webui`` in a subprocess.

The scheduler is the real one (``scheduler.service.Scheduler``) recording its runs in that
admin through ``AdminControl`` with a component token; only the lake and the merge are fakes
(``MemoryLake``, ``FakeJobs``): the merge of yesterday answers "check mismatch" once, as
``cdc-mirror merge`` exiting 4 does. The Runs page shows the day red; the operator presses
Re-run; the scheduler's next tick runs the request and the day turns green. Screenshots go to
``var/test-artifacts/webui/``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright
from pydantic import SecretStr

from cdc_platform.config import SchedulerSettings, TableMirror
from cdc_platform.control import AdminControl
from scheduler.jobs import FakeJobs, JobResult, MemoryLake
from scheduler.service import Scheduler
from tests.integration.webui.harness import ARTIFACTS, Server, chromium_executable, start_server

ADMIN_PASSWORD = "runs-admin-pw-1"
YESTERDAY = datetime.now(UTC).date() - timedelta(days=1)


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[Server]:
    server = start_server(
        tmp_path,
        {
            "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": "[]",
            "CDC_MIRROR_WEBUI__COUNT_DETECTIONS": "false",
        },
        with_replay_worker=False,
    )
    yield server
    server.stop()


def component_token(url: str) -> str:
    with httpx.Client(base_url=url, timeout=10) as admin:
        csrf = re.compile(r'name="csrf_token" value="([^"]+)"')
        login = csrf.search(admin.get("/login").text)
        assert login is not None
        form = {"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": login.group(1)}
        assert admin.post("/login", data=form).status_code == 303
        session = csrf.search(admin.get("/").text)
        assert session is not None
        made = admin.post(
            "/api/tokens",
            json={"name": "scheduler", "role": "component"},
            headers={"X-CSRF-Token": session.group(1)},
        )
        assert made.status_code == 201, made.text
        return str(made.json()["token"])


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"runs-{name}.png"), full_page=True)


def test_a_failed_check_shows_red_and_re_runs_from_the_page(served: Server) -> None:
    lake = MemoryLake(ready={YESTERDAY})
    jobs = FakeJobs(lake)
    jobs.results[("merge", "shop_orders", YESTERDAY)] = [
        JobResult("mismatch", rows=41, files=2, check_ok=False, error="the check found a gap.")
    ]
    table = TableMirror.model_validate(
        {"instance": "local", "db_prefix": "shop", "table_prefix": "orders", "targets": ["hive"]}
    )
    store = AdminControl(served.url, SecretStr(component_token(served.url)))
    scheduler = Scheduler(
        SchedulerSettings(validation=False),
        lambda: [table],
        lake,
        jobs,
        store,
        "browser-scheduler",
    )
    assert scheduler.tick(threading.Event()) == 1
    cell = f'td.day[data-day="{YESTERDAY}"]'
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(),
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(15_000)
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        try:
            page.goto(served.url + "/runs")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", ADMIN_PASSWORD)
            page.click("button[type=submit]")
            expect(page).to_have_url(served.url + "/runs")
            # The day is red, with the check's verdict in the history.
            expect(page.locator(cell)).to_have_class(re.compile(r"\bday-red\b"))
            row = page.locator("tr.run-mismatch")
            expect(row).to_contain_text("MISMATCH")
            expect(row).to_contain_text("the check found a gap.")
            shot(page, "01-red")

            row.get_by_role("button", name="Re-run").click()
            expect(page).to_have_url(served.url + "/runs")
            expect(page.locator("tr.run-requested")).to_contain_text("requested (by admin)")
            shot(page, "02-requested")

            # The scheduler's next tick takes the request first; the day turns green.
            assert scheduler.tick(threading.Event()) == 1
            page.reload()
            expect(page.locator(cell)).to_have_class(re.compile(r"\bday-green\b"))
            expect(page.locator("tr.run-requested")).to_have_count(0)
            expect(page.locator("tr.run-succeeded")).to_contain_text("by admin")
            shot(page, "03-green")
        finally:
            browser.close()
    assert problems == []
    assert [(d.kind, d.dt, d.attempt) for d in jobs.started] == [
        ("merge", YESTERDAY, 1),
        ("merge", YESTERDAY, 2),
    ]
