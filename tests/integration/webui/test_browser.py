"""The admin in a real browser: Playwright driving Debian's chromium against
``cdc-mirror webui`` served in a subprocess, validating against the real MariaDB and charting
metrics scraped from a real Prometheus endpoint. Screenshots go to
``var/test-artifacts/webui/``.

The replay is the real one (mock_replay reading MariaDB and publishing to Kafka), slowed by
its rate limit so the page's live progress can be seen moving.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from prometheus_client import start_http_server

from collector.metrics import CollectorMetrics
from simple_binlog.config import Settings
from tests.integration.webui.harness import (
    ARTIFACTS,
    Server,
    chromium_executable,
    fill_rows,
    sharded_table,
    start_server,
    wait_for,
)

ADMIN_PASSWORD = "browser-admin-pw-1"


@pytest.fixture()
def metrics_endpoint() -> Iterator[tuple[str, CollectorMetrics]]:
    metrics = CollectorMetrics()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    yield f"http://127.0.0.1:{server.server_port}/metrics", metrics
    server.shutdown()
    thread.join(timeout=5)


@pytest.fixture()
def served(tmp_path: Path, metrics_endpoint) -> Iterator[Server]:
    url, _ = metrics_endpoint
    server = start_server(
        tmp_path,
        {
            "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": json.dumps([{"name": "collector", "url": url}]),
            "CDC_MIRROR_WEBUI__SCRAPE_INTERVAL_S": "0.5",
            # ~6,000 rows at 1,500 rows/s: a few seconds of visible progress.
            "CDC_MIRROR_REPLAY__RATE_LIMIT": "1500",
        },
    )
    yield server
    server.stop()


@pytest.fixture()
def page() -> Iterator[Page]:
    executable = chromium_executable()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable,
            # Running as root (CI containers) needs chromium's sandbox off.
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        # Script errors and refused resources (e.g. a CSP violation) fail the test.
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: problems.append(message.text) if message.type == "error" else None,
        )
        yield page
        # The wrong password answers 401 and the refused table form 422, by design.
        allowed = ("status of 401", "status of 422")
        assert [p for p in problems if not any(a in p for a in allowed)] == []
        context.close()
        browser.close()


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_configure_replay_and_watch_in_chromium(
    replay_stack: Settings, served: Server, page: Page, metrics_endpoint
):
    _, metrics = metrics_endpoint
    metrics.delay.labels("local").set(0.8)
    metrics.role.labels("local").set(1)
    local = replay_stack.instances[0]
    instance = f"br{uuid.uuid4().hex[:8]}"  # its own Kafka topic
    with sharded_table(replay_stack) as table:
        fill_rows(replay_stack, table, 1500)
        # Log in (the first page redirects there).
        page.goto(served.url + "/instances")
        expect(page).to_have_url(re.compile(r"/login\?next="))
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", "not-the-password")
        page.click("button[type=submit]")
        expect(page.locator(".errors")).to_contain_text("Unknown user or wrong password.")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", ADMIN_PASSWORD)
        shot(page, "01-login")
        page.click("button[type=submit]")
        expect(page).to_have_url(served.url + "/instances")

        # Every page is reachable from the navigation.
        for label, heading in [
            ("Overview", "Overview"),
            ("Instances", "MySQL instances"),
            ("Table mirrors", "Table mirrors"),
            ("Replays", "Replays"),
            ("Monitoring", "Monitoring"),
            ("Users & tokens", "Users"),
            ("Audit log", "Audit log"),
            ("API", "JSON API"),
        ]:
            page.click(f"header nav >> text={label}")
            expect(page.locator("h1").first).to_have_text(heading)

        # An instance.
        page.click("header nav >> text=Instances")
        page.click("text=New instance")
        page.fill("input[name=name]", instance)
        page.fill("input[name=host]", "127.0.0.1")
        page.fill("input[name=port]", str(local.port))
        page.fill("input[name=user]", local.user)
        page.fill("input[name=password]", local.password.get_secret_value())
        page.fill("input[name=collector_group]", "eu-1")
        shot(page, "02-new-instance")
        page.click("#instance-form button[type=submit]")
        expect(page).to_have_url(served.url + "/instances")
        expect(page.locator("table")).to_contain_text(f"cdc.binlog.{instance}")
        assert local.password.get_secret_value() not in page.content()

        # A table mirror: a wrong key column is refused with a clear message, then fixed.
        page.click("header nav >> text=Table mirrors")
        page.click("text=New table mirror")
        page.select_option("select[name=instance]", instance)
        page.fill("input[name=db_prefix]", table.db_prefix)
        page.fill("input[name=table_prefix]", table.table_prefix)
        page.uncheck("input[name=targets][value=warehouse]")
        page.fill("input[name=key]", "order_no")
        page.fill("input[name=check_column]", "created_at")
        page.fill("input[name=redis_ttl_s]", "3600")
        page.click("#table-form button[type=submit]")
        errors = page.locator(".errors")
        expect(errors).to_contain_text("Nothing was saved")
        expect(errors).to_contain_text(
            f"key column order_no does not exist in {table.schemas[0]}.orders_00"
        )
        expect(page.locator("input[name=redis_ttl_s]")).to_have_value("3600")
        shot(page, "03-table-mirror-refused")
        page.fill("input[name=key]", "id")
        page.click("#table-form button[type=submit]")
        expect(page).to_have_url(served.url + "/tables")
        row = page.locator("tr", has_text=table.logical_name)
        expect(row).to_contain_text("hive, redis")
        shot(page, "04-table-mirrors")

        # A replay, watched live until it finishes.
        page.click("header nav >> text=Replays")
        page.select_option("select[name=instance]", instance)
        page.fill("input[name=db_prefix]", table.db_prefix)
        page.fill("input[name=table_prefix]", table.table_prefix)
        page.fill("input[name=condition]", "id > 100")
        page.fill("input[name=batch_size]", "250")
        page.click("#replay-form button[type=submit]")
        expect(page).to_have_url(re.compile(r"/replays/[0-9A-Za-z-]+$"))
        bar = page.locator("#replay-bar")
        seen = {float(bar.get_attribute("value") or 0)}

        def progressed_midway() -> bool:
            seen.add(float(bar.get_attribute("value") or 0))
            return any(0 < value < 100 for value in seen)

        wait_for(progressed_midway, 20, "the progress bar to move without a reload")
        shot(page, "05-replay-running")
        expect(page.locator("#replay-state")).to_have_text("succeeded", timeout=90_000)
        assert float(bar.get_attribute("value") or 0) == 100
        expect(page.locator("#replay-rows")).to_have_text(str((1500 - 100) * 4))
        expect(page.locator("#cancel-form")).to_have_count(0)
        shot(page, "06-replay-done")
        page.click("text=All replays")
        expect(page.locator("#replay-history")).to_contain_text("succeeded")

        # Monitoring: samples scraped from the metrics endpoint become a chart.
        metrics.delay.labels("local").set(2.5)

        def charted() -> bool:
            page.goto(served.url + "/monitoring")
            panel = page.locator("section.panel", has_text="Collection delay per instance")
            return panel.locator("polyline").count() > 0

        wait_for(charted, 30, "a chart of the scraped collection delay", interval_s=1.0)
        expect(page.locator("section.panel", has_text="Active collectors")).to_contain_text(
            "collector collector_active{instance=local}"
        )
        shot(page, "07-monitoring")

        # A token for automation, shown once; the audit log has every change.
        page.click("header nav >> text=Users & tokens")
        page.fill("#token-form input[name=name]", "collector-eu")
        page.select_option("#token-form select[name=role]", "collector")
        page.click("#token-form button[type=submit]")
        expect(page.locator("#new-token-value")).to_contain_text("cdcm_")
        shot(page, "08-token-created")
        page.click("header nav >> text=Audit log")
        audit = page.locator("table.audit")
        for expected in (
            f"instance {instance}",
            f"table_mirror {table.logical_name}",
            "replay",
            "api_token collector-eu",
        ):
            expect(audit).to_contain_text(expected)
        assert local.password.get_secret_value() not in page.content()
        shot(page, "09-audit")
