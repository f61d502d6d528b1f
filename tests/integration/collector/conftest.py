"""The ``scene`` fixture: a test database, a topic prefix and collector processes."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from collector.reader import server_position
from tests.integration.collector.harness import CollectorScene, admin
from tests.integration.collector.pair import FailoverPair


@pytest.fixture()
def scene(local_stack: Settings, tmp_path: Path):
    db = f"coll_{uuid.uuid4().hex[:8]}"
    prefix = f"t{uuid.uuid4().hex[:6]}."
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {db}")
        cursor.execute(f"CREATE TABLE {db}.a (id INT PRIMARY KEY, v VARCHAR(20), t DATETIME(6))")
        cursor.execute(f"CREATE TABLE {db}.b (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
        start = server_position(cursor)
    env = {
        **os.environ,
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": prefix,
        "CDC_MIRROR_COLLECTOR__START": start.gtid,
        "CDC_MIRROR_COLLECTOR__INCLUDE": json.dumps([rf"{db}\..*"]),
        "CDC_MIRROR_COLLECTOR__MAX_ROWS_PER_TRANSACTION": "500",
        "CDC_MIRROR_ZOOKEEPER__ROOT": f"/cdc-test-{uuid.uuid4().hex[:8]}",
        "CDC_MIRROR_ZOOKEEPER__SESSION_TIMEOUT_S": "4",
    }
    created = CollectorScene(local_stack, db, prefix, start, env, tmp_path)
    yield created
    for process in created.processes:
        process.stop()
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {db}")


@pytest.fixture(scope="session")
def failover_pair_services(local_stack: Settings) -> Iterator[FailoverPair]:
    """The stack's failover pair (``stack up mariadb-primary mariadb-replica``), started once
    per test session by the stack's own code."""
    from stack.manager import LocalStack

    stack = LocalStack(local_stack)
    done = stack.up(["mariadb-primary", "mariadb-replica"])
    yield FailoverPair(local_stack, stack)
    started_here = [name for name, what in done.items() if what == "started"]
    if started_here and os.environ.get("CDC_MIRROR_TESTS_STOP_STACK") == "1":
        stack.down(started_here)


@pytest.fixture()
def failover_pair(failover_pair_services: FailoverPair) -> FailoverPair:
    """A fresh primary → replica pair, whatever the previous test left (a killed primary, a
    promoted replica)."""
    failover_pair_services.reset()
    return failover_pair_services
