"""A running mirror process (``config_store.source: webui``) picks up a table mirror added in
the web admin within 10 s and applies its rows to Redis without a restart; once the table
mirror is deleted it stops applying them (the admin is the real app, served over HTTP)."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from cdc_platform.config import Settings
from simple_binlog.message import SimpleBinlog
from tests.integration.mirror.harness import MirrorProcess, MirrorScene, free_port, scrape, wait_for
from tests.integration.mirror.targets import live_redis_rows
from tests.unit.mirror.workload import BASE_TYPES, LOGICAL, Workload
from tests.unit.webui.harness import instance_body, login, make_app
from webui.schema_source import LiveTableSchema, StaticSchemaSource

ITEMS = "shop_items"


def _schema(name: str, table: str) -> LiveTableSchema:
    return LiveTableSchema(
        logical_name=name,
        physical_tables=(f"shop_00.{table}_00",),
        columns=dict(BASE_TYPES),
        primary_key=("id",),
    )


@pytest.fixture()
def admin(tmp_path: Path) -> Iterator[httpx.Client]:
    """The web admin on a port of its own (uvicorn in a thread), logged in as admin."""
    app = make_app(
        tmp_path,
        schemas=StaticSchemaSource(
            {LOGICAL: _schema(LOGICAL, "orders"), ITEMS: _schema(ITEMS, "items")}
        ),
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the web admin to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        client.headers["X-CSRF-Token"] = login(client)  # type: ignore[arg-type]
        yield client
    server.should_exit = True
    thread.join(30)


def _mirror(db: str, table: str) -> dict[str, object]:
    return {"instance": "local", "db_prefix": db, "table_prefix": table, "targets": ["redis"]}


def _items(messages: list[SimpleBinlog]) -> list[SimpleBinlog]:
    return [
        dataclasses.replace(m, table_name=m.table_name.replace("orders", "items")) for m in messages
    ]


def _version_in_force(port: int) -> float | None:
    for line in scrape(port).splitlines():
        if line.startswith("cdc_mirror_config_version{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _snapshot_version(admin: httpx.Client, token: str) -> int:
    answer = admin.get("/api/config-snapshot", headers={"Authorization": f"Bearer {token}"})
    return int(answer.json()["version"])


def test_a_table_mirror_added_in_the_admin_starts_and_stops_in_a_running_mirror(
    mirror_settings: Settings, admin: httpx.Client, tmp_path: Path
) -> None:
    local = instance_body("local", include=[r"shop_\d+\..*"])
    assert admin.post("/api/instances", json=local).status_code == 201
    assert admin.post("/api/table-mirrors", json=_mirror("shop", "orders")).status_code == 201
    created = admin.post("/api/tokens", json={"name": "mirror", "role": "component"})
    token = created.json()["token"]

    scene = MirrorScene(mirror_settings)
    port = free_port()
    env = scene.env(
        CDC_MIRROR_CONFIG_STORE__SOURCE="webui",
        CDC_MIRROR_CONFIG_STORE__WEBUI_URL=str(admin.base_url).rstrip("/"),
        CDC_MIRROR_CONFIG_STORE__TOKEN=token,
    )
    process = MirrorProcess(env, "redis", tmp_path / "mirror.log", port).start()
    try:
        # Before: the orders are mirrored, the items (not configured) are not.
        orders, items = Workload(random.Random(1)), Workload(random.Random(2))
        scene.publish([*orders.messages(300), *_items(items.messages(200))])
        wait_for(lambda: scene.committed_lag("redis") == 0, 60, "the first messages")
        assert set(live_redis_rows(mirror_settings, LOGICAL)) == set(orders.live)
        assert live_redis_rows(mirror_settings, ITEMS) == {}

        # Added in the admin: in force within 10 s, then its rows are applied.
        added_at = time.monotonic()
        assert admin.post("/api/table-mirrors", json=_mirror("shop", "items")).status_code == 201
        version = _snapshot_version(admin, token)
        wait_for(lambda: _version_in_force(port) == version, 10, "the added table mirror")
        assert time.monotonic() - added_at < 10
        later = Workload(random.Random(3), offset=items.offset, next_id=100_000)
        scene.publish(_items(later.messages(200)))
        wait_for(
            lambda: set(live_redis_rows(mirror_settings, ITEMS)) == set(later.live),
            30,
            "the added table's rows in Redis",
        )

        # Deleted in the admin: its rows are no longer applied, the others still are.
        assert admin.delete(f"/api/table-mirrors/{ITEMS}").status_code == 204
        version = _snapshot_version(admin, token)
        wait_for(lambda: _version_in_force(port) == version, 10, "the removed table mirror")
        after = Workload(random.Random(4), offset=later.offset, next_id=200_000)
        more_orders = orders.messages(100)
        scene.publish([*_items(after.messages(100)), *more_orders])
        wait_for(lambda: scene.committed_lag("redis") == 0, 30, "the last messages")
        assert set(live_redis_rows(mirror_settings, LOGICAL)) == set(orders.live)
        assert set(live_redis_rows(mirror_settings, ITEMS)) == set(later.live)
        log = (tmp_path / "mirror.log").read_text()
        assert f"table {ITEMS} added" in log
        assert f"table {ITEMS} removed" in log
    finally:
        assert process.stop() == 0
