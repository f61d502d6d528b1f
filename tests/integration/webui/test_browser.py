"""The admin in a real browser: Playwright driving Debian's chromium against
``cdc-mirror webui`` served in a subprocess, validating against the real MariaDB and charting
metrics scraped from a real Prometheus endpoint. Screenshots go to
``var/test-artifacts/webui/``.

Governance: a column policy refused against the live schema and then saved, lineage searched
back from a snapshot column to every shard, the OpenLineage download, and a detection record
published to the instance's detection topic drawn on the Detections chart.

The replay is the real one (mock_replay reading MariaDB and publishing to Kafka), slowed by
its rate limit so the page's live progress can be seen moving.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Page, expect, sync_playwright
from prometheus_client import start_http_server

from cdc_platform.config import Settings
from cdc_platform.kafka import ensure_topic, producer_config
from collector.metrics import CollectorMetrics
from governance import DetectionRecord, PolicyAction, detections_topic
from simple_binlog.naming import topic_name
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


def publish_detection(settings: Settings, instance: str) -> None:
    """One committed detection record on the instance's detection topic, as a collector
    publishes it."""
    topic = detections_topic(topic_name(settings.kafka, instance))
    ensure_topic(settings.kafka, topic, partitions=1)
    record = DetectionRecord(
        instance=instance,
        logical_table="browser_table",
        schema_name="browser_00",
        table_name="table_00",
        column="phone",
        detector="cn_mobile",
        count=3,
        first_offset=1,
        last_offset=3,
        detected_at_ms=int(time.time() * 1000),
        action=PolicyAction.MASK,
    )
    producer = Producer(
        producer_config(settings.kafka, "browser-test", transactional_id=f"browser-{uuid.uuid4()}")
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"browser_00.table_00", value=record.encode())
    producer.commit_transaction(30)


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
            ("Governance", "Governance"),
            ("Detections", "Detections"),
            ("Lineage", "Lineage"),
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
        # A collector of this instance reports a detection (counts only, never a value).
        publish_detection(replay_stack, instance)

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
        page.uncheck("input[name=initial_load]")  # the replay below is started by hand
        page.click("#table-form button[type=submit]")
        expect(page).to_have_url(served.url + f"/tables/{table.logical_name}")
        expect(page.locator("#mirror-resources")).to_contain_text(f"cdc.binlog.{instance}")
        page.click("header nav >> text=Table mirrors")
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

        # Per-table status: the mirror's row on the Overview, then its status page, from the
        # scraped collector's figures (the other components are not running: shown as down).
        metrics.role.labels(instance).set(1)
        metrics.committed_offset.labels(instance).set(4242)
        row = page.locator(f'#table-status tr[data-table="{table.logical_name}"]')

        def status_shown() -> bool:
            page.goto(served.url + "/")
            return row.count() == 1 and "collector" not in row.inner_text()

        wait_for(status_shown, 30, "the mirror's status row with its collector", interval_s=1.0)
        expect(row).to_contain_text("no stream writer reports topic")
        shot(page, "07a-overview-status")
        row.locator("a").first.click()
        expect(page.locator("h1")).to_have_text(f"Status of {table.logical_name}")
        expect(page.locator("#status-detail")).to_contain_text("collector active")
        expect(page.locator("#status-detail")).to_contain_text("binlogOffset 4242")
        # Every replayed row is a message (Kafka's transaction markers take offsets too).
        end = re.search(r"end offset (\d+)", page.locator("#status-detail").inner_text())
        assert end is not None and int(end.group(1)) >= (1500 - 100) * 4
        shot(page, "07b-table-status")

        # Governance: a policy for a column MySQL lacks is refused, then one is saved.
        page.click("header nav >> text=Governance")
        page.fill("#policy-form input[name=table]", table.logical_name)
        page.fill("#policy-form input[name=column]", "phone")
        page.select_option("#policy-form select[name=action]", "mask")
        page.click("#policy-form button[type=submit]")
        expect(page.locator(".errors")).to_contain_text(
            f"column phone does not exist in {table.schemas[0]}.orders_00"
        )
        expect(page.locator("#policy-form input[name=column]")).to_have_value("phone")
        page.fill("#policy-form input[name=column]", "user_id")
        page.select_option("#policy-form select[name=action]", "hash")
        page.click("#policy-form button[type=submit]")
        expect(page.locator("#column-policies")).to_contain_text("user_id")
        shot(page, "08-governance")

        # Lineage, back from the snapshot column to every shard; the OpenLineage download.
        page.click("header nav >> text=Lineage")
        page.fill("#lineage-search input[name=q]", f"ods_snapshot.{table.logical_name}.user_id")
        page.click("#lineage-search button[type=submit]")
        hit = page.locator(".lineage-hit").first
        for schema in table.schemas:
            for shard_table in ("orders_00", "orders_01"):
                expect(hit.locator(".sources")).to_contain_text(
                    f"{instance}/{schema}.{shard_table}.user_id"
                )
        expect(hit).to_contain_text("salted hash")
        shot(page, "09-lineage")
        with page.expect_download() as download_info:
            page.click("#openlineage-download")
        events = json.loads(Path(download_info.value.path()).read_text())
        assert f"{instance}.{table.logical_name}" in [e["job"]["name"] for e in events]

        # Detections: the reported detection becomes a line on the chart.
        def detections_charted() -> bool:
            page.goto(served.url + "/detections")
            return page.locator("#detections-chart polyline").count() > 0

        wait_for(detections_charted, 60, "the published detection on the chart", interval_s=1.0)
        expect(page.locator("#detection-totals")).to_contain_text("browser_table")
        shot(page, "10-detections")

        # A token for automation, shown once; the audit log has every change.
        page.click("header nav >> text=Users & tokens")
        page.fill("#token-form input[name=name]", "collector-eu")
        page.select_option("#token-form select[name=role]", "collector")
        page.select_option("#token-form select[name=instance]", instance)
        page.click("#token-form button[type=submit]")
        expect(page.locator("#new-token-value")).to_contain_text("cdcm_")
        shot(page, "11-token-created")
        page.click("header nav >> text=Audit log")
        audit = page.locator("table.audit")
        for expected in (
            f"instance {instance}",
            f"table_mirror {table.logical_name}",
            "replay",
            "api_token collector-eu",
            f"column_policy {table.logical_name}.user_id",
        ):
            expect(audit).to_contain_text(expected)
        assert local.password.get_secret_value() not in page.content()
        shot(page, "12-audit")
