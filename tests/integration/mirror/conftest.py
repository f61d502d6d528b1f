"""Fixtures of the mirror tests: settings with a unique Redis key prefix and warehouse schema
per test (so tests never collide with each other or with other components' tests), cleaned
up afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from psycopg import sql

from cdc_platform.config import Settings
from tests.integration.mirror.targets import pg_connect
from tests.unit.mirror.workload import table_mirror


@pytest.fixture()
def mirror_settings(local_stack: Settings) -> Iterator[Settings]:
    tag = uuid.uuid4().hex[:8]
    scoped = local_stack.model_copy(
        update={
            "redis": local_stack.redis.model_copy(update={"key_prefix": f"mt{tag}"}),
            "mirror": local_stack.mirror.model_copy(
                update={"warehouse_schema": f"mt_{tag}", "redis_keys_per_call": 50}
            ),
            "tables": [table_mirror()],
        }
    )
    yield scoped
    client = redis.Redis.from_url(scoped.redis.url.get_secret_value())
    for key in client.scan_iter(f"{scoped.redis.key_prefix}:*", count=1000):
        client.delete(key)
    client.close()
    with pg_connect(scoped) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(scoped.mirror.warehouse_schema)
            )
        )


@pytest.fixture(scope="session")
def kudu_cluster(local_stack: Settings) -> Iterator[Settings]:
    """The local stack's Kudu master and tablet server, started once per session (the same
    code as ``cdc-mirror stack up kudu-master kudu-tserver``)."""
    import os

    from stack.manager import LocalStack

    stack = LocalStack(local_stack)
    done = stack.up(["kudu-master", "kudu-tserver"])
    yield local_stack
    started_here = [name for name, what in done.items() if what == "started"]
    if started_here and os.environ.get("CDC_MIRROR_TESTS_STOP_STACK") == "1":
        stack.down(started_here)


@pytest.fixture()
def kudu_settings(mirror_settings: Settings, kudu_cluster: Settings) -> Iterator[Settings]:
    """``mirror_settings`` with the table mirrored to Kudu under a table prefix of its own."""
    from tests.integration.mirror.kudu_store import drop_tables

    scoped = mirror_settings.model_copy(
        update={
            "kudu": mirror_settings.kudu.model_copy(
                update={"table_prefix": f"{mirror_settings.mirror.warehouse_schema}."}
            ),
            "tables": [table_mirror(targets=["kudu"])],
        }
    )
    yield scoped
    drop_tables(scoped)
