"""Fixtures of the mirror tests: settings with a unique Redis key prefix and warehouse schema
per test (so tests never collide with each other or with other components' tests), cleaned
up afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from psycopg import sql

from simple_binlog.config import Settings
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
