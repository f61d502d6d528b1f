"""A randomized workload in MariaDB (inserts, updates, key changes, deletes, and an
``ALTER TABLE … ADD COLUMN`` half-way) read from the real row binlog with
``collector.reader.read_range`` and published to Kafka once per module; the mirror's consumer
loop for each target (Redis, the PostgreSQL warehouse, Kudu on the session's cluster) consumes
it and ends equal to MySQL, row for row; ``cdc-mirror verify``'s reader of each target (its
``WarehouseStore``, ``RedisStore``, ``KuduStore``: the demo's final verdict) agrees with MySQL."""

from __future__ import annotations

import datetime as dt
import random
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from cdc_mirror import verify
from cdc_platform.config import MirrorTarget, Settings, TableMirror
from collector.reader import SchemaCache, read_range, server_position
from mirror.app import build_applier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.routing import ShardRouter
from simple_binlog.values import decode, encode, parse_column_type
from tests.integration.mirror.harness import MirrorScene, wait_for
from tests.integration.mirror.targets import canonical, live_redis_rows, pg_rows

SHARDS = 2
DDL = """CREATE TABLE {db}.{table} (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  amount DECIMAL(12,2) NOT NULL,
  note VARCHAR(64) NULL,
  status ENUM('NEW','PAID','SHIPPED') NOT NULL,
  created DATETIME(3) NOT NULL,
  ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  payload BLOB NULL,
  ratio DOUBLE NULL
)"""


def _admin(settings: Settings) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=False,
        init_command="SET time_zone = '+00:00'",
    )


def _workload(
    conn: Any,
    dbs: list[str],
    tables: list[str],
    rng: random.Random,
    steps: int,
    live: dict[tuple[str, str], list[int]],
    next_id: list[int],
    evolved: bool,
) -> None:
    with conn.cursor() as cur:
        for _ in range(steps):
            db, table = rng.choice(dbs), rng.choice(tables)
            ids = live[(db, table)]
            for _ in range(rng.randrange(1, 20)):
                action = rng.random()
                extra = ", extra = %s" if evolved else ""
                extra_args = (rng.choice([None, rng.randrange(100)]),) if evolved else ()
                if action < 0.45 and ids:
                    cur.execute(
                        f"UPDATE {db}.{table} SET amount = amount + 1, status = %s, note = %s{extra} WHERE id = %s",
                        (
                            rng.choice(["NEW", "PAID", "SHIPPED"]),
                            rng.choice([None, "", "x:y"]),
                            *extra_args,
                            rng.choice(ids),
                        ),
                    )
                elif action < 0.6 and ids:
                    cur.execute(
                        f"DELETE FROM {db}.{table} WHERE id = %s",
                        (ids.pop(rng.randrange(len(ids))),),
                    )
                elif action < 0.68 and ids:
                    old = ids.pop(rng.randrange(len(ids)))
                    next_id[0] += 1
                    cur.execute(f"UPDATE {db}.{table} SET id = %s WHERE id = %s", (next_id[0], old))
                    ids.append(next_id[0])
                else:
                    next_id[0] += 1
                    cur.execute(
                        f"INSERT INTO {db}.{table} (id, amount, note, status, created, payload, ratio) "
                        "VALUES (%s, %s, %s, 'NEW', NOW(3) - INTERVAL %s MINUTE, %s, %s)",
                        (
                            next_id[0],
                            Decimal(rng.randrange(10**6)) / 100,
                            rng.choice([None, "", "n"]),
                            rng.randrange(10**4),
                            rng.choice([None, b"", rng.randbytes(5)]),
                            rng.choice([None, rng.random()]),
                        ),
                    )
                    ids.append(next_id[0])
            conn.commit()


def _mysql_rows(
    conn: Any, dbs: list[str], tables: list[str]
) -> tuple[dict[str, dict], dict[str, str]]:
    rows: dict[str, dict] = {}
    types: dict[str, str] = {}
    with conn.cursor() as cur:
        for db in dbs:
            for table in tables:
                cur.execute(
                    "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, table),
                )
                types.update({n: t for n, t in cur.fetchall()})
                cur.execute(f"SELECT * FROM {db}.{table}")
                names = [d[0] for d in cur.description]
                for values in cur.fetchall():
                    row = {
                        n: encode(parse_column_type(types[n]), v, n)
                        for n, v in zip(names, values, strict=True)
                    }
                    rows[str(row["id"])] = row
    return rows, types


@dataclass(frozen=True)
class PublishedWorkload:
    """The module's one MySQL workload, read from the binlog and published to Kafka once; each
    target's test consumes it in a consumer group of its own."""

    scene: MirrorScene
    table: TableMirror
    logical: str
    expected: dict[str, dict]  # id → MySQL's row at the end, as wire values
    types: dict[str, str]
    schema: verify.TableSchema  # MySQL's view of the table, as cdc-mirror verify reads it
    reference: verify.TableDigest  # verify's digest of MySQL's rows at the end
    newest_execute_time_ms: int  # the newest change's executeTime


@pytest.fixture(scope="module")
def published_workload(local_stack: Settings) -> Iterator[PublishedWorkload]:
    """Inserts, updates, key changes and deletes over 2 × 2 shards, ``ADD COLUMN`` half-way."""
    tag = uuid.uuid4().hex[:6]
    dbs = [f"mq{tag}_{i:02d}" for i in range(SHARDS)]
    tables = [f"orders_{i:02d}" for i in range(SHARDS)]
    table = TableMirror(db_prefix=f"mq{tag}", table_prefix="orders")
    settings = local_stack.model_copy(update={"tables": [table]})
    scene = MirrorScene(settings)
    rng = random.Random(13)
    live: dict[tuple[str, str], list[int]] = {(d, t): [] for d in dbs for t in tables}
    next_id = [18_446_744_073_709_000_000]
    conn = _admin(settings)
    try:
        with conn.cursor() as cur:
            for db in dbs:
                cur.execute(f"CREATE DATABASE {db}")
                for name in tables:
                    cur.execute(DDL.format(db=db, table=name))
            start = server_position(cur)
        _workload(conn, dbs, tables, rng, 150, live, next_id, evolved=False)
        with conn.cursor() as cur:
            for db in dbs:
                for name in tables:
                    cur.execute(f"ALTER TABLE {db}.{name} ADD COLUMN extra INT NULL")
        _workload(conn, dbs, tables, rng, 150, live, next_id, evolved=True)
        with conn.cursor() as cur:
            stop = server_position(cur)
        instance = settings.instances[0]
        messages = list(
            read_range(instance, start.gtid, stop, OffsetGenerator(), dbs, SchemaCache(instance))
        )
        assert any("extra" in m.content for m in messages)
        scene.publish(messages)
        expected, types = _mysql_rows(conn, dbs, tables)
        schema = verify.mysql_schema(settings, table)
        reference = verify.mysql_digest(settings, table, schema)
    finally:
        with conn.cursor() as cur:
            for db in dbs:
                cur.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.close()
    assert len(expected) > 100
    newest = max(m.execute_time for m in messages)
    yield PublishedWorkload(
        scene, table, f"mq{tag}_orders", expected, types, schema, reference, newest
    )


def _consume_all(settings: Settings, published: PublishedWorkload, target: MirrorTarget) -> None:
    """The mirror's consumer loop for ``target`` until its group committed the whole topic."""
    scene = published.scene
    kafka = settings.kafka.model_copy(update={"topic_prefix": scene.topic_prefix})
    mirror = settings.mirror.model_copy(update={"group_prefix": f"mt{scene.tag}"})
    stop_event = threading.Event()
    router = ChangeRouter(settings.tables, ShardRouter(list(settings.shard_rules)), target)
    applier = build_applier(settings, target)
    metrics = MirrorMetrics(target)
    consumer = MirrorConsumer(
        kafka, mirror, target, ["local"], router, applier, metrics, stop_event
    )
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        wait_for(lambda: scene.committed_lag(target) == 0, 120, f"{target} to commit everything")
    finally:
        stop_event.set()
        thread.join(30)
        applier.close()
    assert not thread.is_alive()
    assert metrics.freshness._sum.get() > 0  # type: ignore[attr-defined]
    # The table's freshness on the admin's status page: its newest change applied.
    assert metrics.registry.get_sample_value(
        "cdc_mirror_last_applied_timestamp_seconds",
        {"target": target, "table": published.logical},
    ) == pytest.approx(published.newest_execute_time_ms / 1000)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", ["redis", "warehouse", "kudu"])
def test_the_mirror_equals_mysql_row_for_row_after_a_random_workload(
    mirror_settings: Settings,
    target: MirrorTarget,
    published_workload: PublishedWorkload,
    request: pytest.FixtureRequest,
) -> None:
    """Redis, the PostgreSQL warehouse and Kudu each end equal to MySQL, row for row."""
    if target == "kudu":  # the session's Kudu cluster, a table prefix of the test's own
        mirror_settings = request.getfixturevalue("kudu_settings")
    table = published_workload.table.model_copy(update={"targets": [target]})
    settings = mirror_settings.model_copy(update={"tables": [table]})
    _consume_all(settings, published_workload, target)
    expected, types, logical = (
        published_workload.expected,
        published_workload.types,
        published_workload.logical,
    )
    if target == "redis":
        # A row untouched since the ADD COLUMN has no image with the new column (ADD COLUMN
        # writes no row events): it lacks it, which readers take as NULL.
        live = live_redis_rows(settings, logical)
        assert {k: {**dict.fromkeys(types), **row} for k, row in live.items()} == expected
        assert sum("extra" in row for row in live.values()) > 10
    elif target == "kudu":
        from tests.integration.mirror.kudu_store import kudu_rows

        stored_kudu = kudu_rows(settings, logical)
        live_kudu = {k: r for k, r in stored_kudu.items() if not r["_deleted"]}
        assert set(live_kudu) == set(expected)
        assert len(stored_kudu) > len(live_kudu)  # the deletes are tombstone rows
        for key, row in expected.items():
            want = {n: decode(parse_column_type(types[n]), v, n) for n, v in row.items()}
            assert {name: live_kudu[key][name] for name in row} == want, key
    else:
        stored = pg_rows(settings, logical)
        assert set(stored) == set(expected)
        for key, row in expected.items():
            for name, value in row.items():
                want = canonical(types[name], value)
                if (
                    isinstance(want, dt.datetime)
                    and want.tzinfo is None
                    and types[name].startswith("timestamp")
                ):
                    want = want.replace(tzinfo=dt.UTC)
                assert stored[key][name] == want, (key, name)
    # cdc-mirror verify's reader of the target (the demo's verdict) agrees with MySQL too.
    (store,) = verify.mirror_stores(settings, table)
    comparison = verify.compare_digest(
        published_workload.reference, store.digest(published_workload.schema)
    )
    assert (comparison.store, comparison.agrees) == (target, True), comparison
