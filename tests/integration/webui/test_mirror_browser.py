"""Issue 22, item 9: a table mirror added in the web admin, in a real browser (Playwright
driving Debian's chromium), reaches Redis and the warehouse without restarting anything, stops
reaching them while disabled (another table keeps flowing) and again once removed; while it is
disabled or removed its instance's collector publishes none of its changes to Kafka (so the
lake's raw layer, written from Kafka, receives none either), and everything before is there.

Everything runs as the real processes, started once for the module: ``cdc-mirror webui`` and
its replay worker, a collector configured by the admin (``collector.config_source: webui``)
and two mirrors (Redis, warehouse) reading the configuration store from the admin
(``config_store.source: webui``), over the real MariaDB, Kafka, Redis and PostgreSQL. None is
restarted. The existing rows arrive through the mirror's initial load (the replay worker), the
later ones through the collector. The lake is left out here: the stream writer takes the
same configuration change the same way (tests/integration/stream_writer/test_live_config.py)
and Spark would add minutes to the run. Screenshots: ``var/test-artifacts/webui/``.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from playwright.sync_api import Page, expect, sync_playwright
from psycopg import sql

from cdc_platform.config import Settings
from cdc_platform.kafka import read_to_end
from simple_binlog.control import is_control
from simple_binlog.message import decode_message
from tests.integration.webui.harness import (
    ARTIFACTS,
    ROOT,
    Server,
    ShardedTable,
    chromium_executable,
    free_port,
    mariadb_admin,
    sharded_table,
    start_server,
    wait_for,
)

ADMIN_PASSWORD = "mirror-browser-pw-1"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Pipeline:
    settings: Settings  # scoped: this module's topic prefix, Redis prefix, warehouse schema
    server: Server
    admin: httpx.Client
    instance: str
    table: ShardedTable
    keeper: ShardedTable  # another mirror of the instance, on both targets throughout
    component_token: str
    mirror_ports: dict[str, int]
    collector_port: int

    @property
    def topic(self) -> str:
        return f"{self.settings.kafka.topic_prefix}{self.instance}"


def _process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cdc_mirror", *args],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def _ready(port: int, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        pytest.fail(f"a component exited ({process.returncode}): {log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def pipeline(local_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    tag = uuid.uuid4().hex[:8]
    home = tmp_path_factory.mktemp("mirror-browser")
    scoped = local_stack.model_copy(
        update={
            "kafka": local_stack.kafka.model_copy(update={"topic_prefix": f"ob{tag}."}),
            "redis": local_stack.redis.model_copy(update={"key_prefix": f"ob{tag}"}),
            "mirror": local_stack.mirror.model_copy(update={"warehouse_schema": f"ob_{tag}"}),
        }
    )
    # Every process of the module: one topic prefix, Redis prefix and warehouse schema.
    shared = {
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": scoped.kafka.topic_prefix,
        "CDC_MIRROR_REDIS__KEY_PREFIX": scoped.redis.key_prefix,
        "CDC_MIRROR_MIRROR__WAREHOUSE_SCHEMA": scoped.mirror.warehouse_schema,
        "CDC_MIRROR_MIRROR__GROUP_PREFIX": f"ob{tag}",
    }
    server = start_server(
        home,
        {
            **shared,
            "CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "CDC_MIRROR_WEBUI__SCRAPE_TARGETS": "[]",
            "CDC_MIRROR_WEBUI__COUNT_DETECTIONS": "false",
        },
    )
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with (
            sharded_table(scoped) as table,
            sharded_table(scoped) as keeper,
            httpx.Client(base_url=server.url, timeout=30) as admin,
        ):
            login = CSRF.search(admin.get("/login").text)
            assert login is not None
            form = {"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": login[1]}
            assert admin.post("/login", data=form).status_code == 303
            session = CSRF.search(admin.get("/").text)
            assert session is not None
            admin.headers["X-CSRF-Token"] = session[1]
            instance = f"ob{tag}"
            local = scoped.instances[0]
            made = admin.post(
                "/api/instances",
                json={
                    "name": instance,
                    "host": "127.0.0.1",
                    "port": local.port,
                    "user": local.user,
                    "password": local.password.get_secret_value(),
                    "include": [rf"{t.db_prefix}_\d+\..*" for t in (table, keeper)],
                },
            )
            assert made.status_code == 201, made.text
            # Another mirror on both targets, made through the API without an initial load:
            # the mirrors keep reading the topic after the test's mirror is removed (with no
            # table left they would stop reading it altogether).
            kept = admin.post(
                "/api/table-mirrors?initial_load=false",
                json={
                    "instance": instance,
                    "db_prefix": keeper.db_prefix,
                    "table_prefix": keeper.table_prefix,
                    "targets": ["redis", "warehouse"],
                },
            )
            assert kept.status_code == 201, kept.text
            assert kept.json()["initial_load"] is None

            def token(body: dict[str, str]) -> str:
                answer = admin.post("/api/tokens", json=body)
                assert answer.status_code == 201, answer.text
                return str(answer.json()["token"])

            component = token({"name": "components", "role": "component"})
            collector = token({"name": "collector", "role": "collector", "instance": instance})
            base = {k: v for k, v in os.environ.items() if k != "CDC_MIRROR_CONFIG"}
            collector_port = free_port()
            collector_log = home / "collector.log"
            processes.append(
                _process(
                    [
                        *("collector", "run", "--instance", instance, "--no-ha"),
                        *("--metrics-port", str(collector_port)),
                    ],
                    {
                        **base,
                        **shared,
                        "CDC_MIRROR_INSTANCES": json.dumps(
                            [
                                {
                                    "name": instance,
                                    "host": "127.0.0.1",
                                    "replica_server_id": random.randrange(4_000_000, 5_000_000),
                                }
                            ]
                        ),
                        "CDC_MIRROR_COLLECTOR__CONFIG_SOURCE": "webui",
                        "CDC_MIRROR_GOVERNANCE__WEBUI__URL": server.url,
                        "CDC_MIRROR_GOVERNANCE__WEBUI__TOKEN": collector,
                        "CDC_MIRROR_GOVERNANCE__WEBUI__POLL_INTERVAL_S": "1",
                        "CDC_MIRROR_GOVERNANCE__WEBUI__CACHE_DIR": str(home / "collector-cache"),
                    },
                    collector_log,
                )
            )
            ports = {"redis": free_port(), "warehouse": free_port()}
            for target, port in ports.items():
                processes.append(
                    _process(
                        ["mirror", "run", "--target", target, "--metrics-port", str(port)],
                        {
                            **base,
                            **shared,
                            "CDC_MIRROR_CONFIG_STORE__SOURCE": "webui",
                            "CDC_MIRROR_CONFIG_STORE__WEBUI_URL": server.url,
                            "CDC_MIRROR_CONFIG_STORE__TOKEN": component,
                            "CDC_MIRROR_CONFIG_STORE__POLL_INTERVAL_S": "1",
                            "CDC_MIRROR_TABLES": "[]",
                        },
                        home / f"mirror-{target}.log",
                    )
                )
            logs = [collector_log, home / "mirror-redis.log", home / "mirror-warehouse.log"]
            for process, port, log in zip(
                processes, (collector_port, *ports.values()), logs, strict=True
            ):
                wait_for(lambda p=process, n=port, f=log: _ready(n, p, f), 90, f"{log.name} ready")
            yield Pipeline(
                scoped, server, admin, instance, table, keeper, component, ports, collector_port
            )
    finally:
        for process in processes:
            _stop(process)
        server.stop()
        client = redis.Redis.from_url(scoped.redis.url.get_secret_value())
        for key in client.scan_iter(f"{scoped.redis.key_prefix}:*", count=1000):
            client.delete(key)
        client.close()
        with _pg(scoped) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(scoped.mirror.warehouse_schema)
                )
            )


@pytest.fixture()
def page() -> Iterator[Page]:
    executable = chromium_executable()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: problems.append(message.text) if message.type == "error" else None,
        )
        yield page
        assert problems == []
        context.close()
        browser.close()


def _pg(settings: Settings) -> psycopg.Connection:
    pg = settings.postgres
    return psycopg.connect(
        host=pg.host,
        port=pg.port,
        user=pg.user,
        password=pg.password.get_secret_value(),
        dbname=pg.warehouse_db,
        autocommit=True,
    )


def insert_rows(settings: Settings, table: ShardedTable, ids: range) -> set[int]:
    """Rows with ids unique across the shards (the logical table's key is ``id``); the ids
    written."""
    written: set[int] = set()
    with mariadb_admin(settings) as conn, conn.cursor() as cursor:
        for shard, (schema, name) in enumerate(
            (s, t) for s in table.schemas for t in ("orders_00", "orders_01")
        ):
            rows = [(shard * 1_000_000 + i, i % 97, f"{i}.25") for i in ids]
            cursor.executemany(
                f"INSERT INTO {schema}.{name} (id, user_id, amount, created_at) "
                "VALUES (%s, %s, %s, NOW(6))",
                rows,
            )
            written |= {row[0] for row in rows}
    return written


def redis_ids(pipeline: Pipeline, table: ShardedTable | None = None) -> set[int]:
    client = redis.Redis.from_url(pipeline.settings.redis.url.get_secret_value())
    name = (table or pipeline.table).logical_name
    try:
        prefix = f"{pipeline.settings.redis.key_prefix}:{name}:"
        return {int(key.decode()[len(prefix) :]) for key in client.scan_iter(f"{prefix}*")}
    finally:
        client.close()


def warehouse_ids(pipeline: Pipeline, table: ShardedTable | None = None) -> set[int] | None:
    """The ids in the warehouse table; None while it does not exist."""
    with _pg(pipeline.settings) as conn:
        target = sql.Identifier(
            pipeline.settings.mirror.warehouse_schema, (table or pipeline.table).logical_name
        )
        exists = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (target.as_string(conn),)
        ).fetchone()
        if not exists or not exists[0]:
            return None
        return {int(row[0]) for row in conn.execute(sql.SQL("SELECT id FROM {}").format(target))}


def config_version_in_force(port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("cdc_mirror_config_version"):
                return float(line.rsplit(" ", 1)[1])
    return None


def snapshot_version(pipeline: Pipeline) -> int:
    answer = httpx.get(
        f"{pipeline.server.url}/api/config-snapshot",
        headers={"Authorization": f"Bearer {pipeline.component_token}"},
        timeout=10,
    )
    return int(answer.json()["version"])


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"mirror-{name}.png"), full_page=True)


def mirrors_in_force(pipeline: Pipeline, what: str) -> None:
    """Wait until both mirrors run with the admin's newest configuration."""
    version = snapshot_version(pipeline)
    for target, port in pipeline.mirror_ports.items():
        wait_for(lambda p=port: config_version_in_force(p) == version, 10, f"{target} to {what}")


def collector_in_force(pipeline: Pipeline, what: str) -> None:
    """Wait until the collector runs with the admin's newest config of the instance (a
    change of what it publishes is put in force at a transaction boundary)."""
    version = pipeline.admin.get(f"/api/instances/{pipeline.instance}").json()["version"]

    def in_force() -> bool:
        url = f"http://127.0.0.1:{pipeline.collector_port}/health"
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(json.loads(response.read())["config"]["version"] == version)

    wait_for(in_force, 30, f"the collector to {what}")


def published_ids(pipeline: Pipeline, table: ShardedTable) -> set[int]:
    """The ids of ``table``'s rows in the instance's topic (committed transactions)."""
    ids: set[int] = set()
    for record in read_to_end(
        pipeline.settings.kafka,
        pipeline.topic,
        group_id=f"test-ob-{uuid.uuid4().hex[:8]}",
        idle_timeout_s=30,
    ):
        if record.value is None or is_control(record.key):
            continue
        message = decode_message(record.value)
        if message.schema_name in table.schemas and message.table_name.startswith("orders"):
            ids.add(int(str(message.content["id"])))
    return ids


def test_a_mirror_added_in_the_admin_reaches_redis_and_the_warehouse_and_stops_when_removed(
    pipeline: Pipeline, page: Page
) -> None:
    name = pipeline.table.logical_name
    existing = insert_rows(pipeline.settings, pipeline.table, range(1, 51))

    page.goto(pipeline.server.url + "/login")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    page.click("header nav >> text=Table mirrors")
    page.click("text=New table mirror")
    page.select_option("select[name=instance]", pipeline.instance)
    page.fill("input[name=db_prefix]", pipeline.table.db_prefix)
    page.fill("input[name=table_prefix]", pipeline.table.table_prefix)
    page.uncheck("input[name=targets][value=hive]")
    expect(page.locator("input[name=initial_load]")).to_be_checked()
    shot(page, "01-new")
    page.click("#table-form button[type=submit]")

    # Created and set up: the warehouse table exists before any row reached it.
    expect(page).to_have_url(f"{pipeline.server.url}/tables/{name}")
    resources = page.locator("#mirror-resources")
    table_name = f"{pipeline.settings.mirror.warehouse_schema}.{name}"
    expect(resources.locator("tr", has_text=table_name)).to_contain_text("created now")
    expect(resources).to_contain_text(f"{pipeline.settings.redis.key_prefix}:{name}:*")
    assert warehouse_ids(pipeline) == set()
    shot(page, "02-set-up")

    # The initial load: queued, then run by the replay worker; progress on the mirror's page.
    def load_state() -> str:
        page.reload()
        return page.locator("#initial-loads tbody tr").first.locator("td").nth(1).inner_text()

    wait_for(lambda: load_state() == "succeeded", 120, "the initial load to succeed", 1.0)
    expect(page.locator("#initial-loads")).to_contain_text(f"{len(existing)} / ")
    shot(page, "03-initial-load")
    wait_for(lambda: redis_ids(pipeline) == existing, 60, "the existing rows in Redis")
    wait_for(lambda: warehouse_ids(pipeline) == existing, 60, "the existing rows in the warehouse")

    # Changes made now flow through the collector, which was never restarted either.
    live = insert_rows(pipeline.settings, pipeline.table, range(51, 61))
    wait_for(lambda: redis_ids(pipeline) == existing | live, 60, "the new rows in Redis")
    wait_for(
        lambda: warehouse_ids(pipeline) == existing | live, 60, "the new rows in the warehouse"
    )

    # Disabled: the collector stops publishing it at a transaction boundary, so no store
    # sees its new rows, while the instance's other mirror flows on.
    page.click("#enable-form button[type=submit]")
    expect(page.locator("#mirror-state")).to_contain_text("Disabled")
    shot(page, "04-disabled")
    mirrors_in_force(pipeline, f"stop {name}")
    collector_in_force(pipeline, f"stop publishing {name}")
    paused = insert_rows(pipeline.settings, pipeline.table, range(61, 71))
    kept = insert_rows(pipeline.settings, pipeline.keeper, range(1, 11))
    # Published in binlog order: once the other table's later rows are in Kafka, any of
    # the disabled table's would be too.
    wait_for(
        lambda: kept <= published_ids(pipeline, pipeline.keeper), 60, "the other table in Kafka"
    )
    in_kafka = published_ids(pipeline, pipeline.table)
    assert live <= in_kafka  # everything before the disable point was published
    assert not paused & in_kafka  # nothing after it
    wait_for(lambda: redis_ids(pipeline, pipeline.keeper) == kept, 60, "the other table in Redis")
    wait_for(
        lambda: warehouse_ids(pipeline, pipeline.keeper) == kept,
        60,
        "the other table in the warehouse",
    )
    assert redis_ids(pipeline) == existing | live
    assert warehouse_ids(pipeline) == existing | live
    page.click("header nav >> text=Table mirrors")
    expect(page.locator("tr", has_text=name).locator(".mirror-state")).to_have_text("disabled")

    # Enabled again: changes from then on are applied (those made meanwhile need a load).
    page.click(f'a[href="/tables/{name}"]')
    page.click("#enable-form button[type=submit]")
    expect(page.locator("#mirror-state")).to_contain_text("Enabled")
    mirrors_in_force(pipeline, f"take {name} up again")
    collector_in_force(pipeline, f"publish {name} again")
    resumed = insert_rows(pipeline.settings, pipeline.table, range(71, 81))
    wait_for(lambda: redis_ids(pipeline) == existing | live | resumed, 60, "resumed in Redis")
    wait_for(
        lambda: warehouse_ids(pipeline) == existing | live | resumed,
        60,
        "resumed in the warehouse",
    )
    assert not paused & redis_ids(pipeline)
    assert resumed <= published_ids(pipeline, pipeline.table)
    assert not paused & published_ids(pipeline, pipeline.table)  # not captured while disabled
    flowing = existing | live | resumed

    # Removed: the confirmation page says what stays; the mirrors drop the table.
    page.click("#remove-link")
    leftovers = page.locator("#leftovers")
    expect(leftovers).to_contain_text(f"{pipeline.settings.postgres.warehouse_db}.{table_name}")
    expect(leftovers).to_contain_text(f"{pipeline.settings.redis.key_prefix}:{name}:*")
    expect(leftovers).to_contain_text(pipeline.topic)
    shot(page, "05-remove")
    page.click("#remove-form button[type=submit]")
    expect(page).to_have_url(f"{pipeline.server.url}/tables")
    expect(page.locator("table")).not_to_contain_text(name)
    mirrors_in_force(pipeline, f"drop {name}")
    collector_in_force(pipeline, f"stop publishing the removed {name}")

    # Rows written after the removal are not published although the instance's patterns
    # still take the tables; the other table's are.
    removed = insert_rows(pipeline.settings, pipeline.table, range(81, 91))
    later = insert_rows(pipeline.settings, pipeline.keeper, range(11, 21))
    wait_for(
        lambda: later <= published_ids(pipeline, pipeline.keeper),
        60,
        "the other table's rows after the removal in Kafka",
    )
    assert not removed & published_ids(pipeline, pipeline.table)
    wait_for(lambda: redis_ids(pipeline, pipeline.keeper) == kept | later, 60, "the other in Redis")
    assert redis_ids(pipeline) == flowing
    assert warehouse_ids(pipeline) == flowing
