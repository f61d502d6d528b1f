"""``validation`` against the real mirror: a table sharded over 2 MariaDB databases × 2
tables, read from the real binlog (``collector.reader.read_range``), published to Kafka and
applied by the mirror's consumer loop to the warehouse and to Redis. Validation finds both
equal; after drift induced in each target (a value changed, a row deleted, an extra row) it
names exactly those keys with their rows side by side; a source write made while it runs is
not reported, because the watermark lets the mirror apply it before the key is judged."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pymysql
import pytest
import redis
from psycopg import sql

from cdc_platform.config import Settings, TableMirror
from collector.reader import SchemaCache, read_range, server_position
from mirror.app import build_applier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.naming import decode_redis_document, mirror_group, redis_key
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.routing import ShardRouter
from tests.integration.mirror.harness import MirrorScene
from tests.integration.mirror.targets import pg_connect
from validation.mysql import MySqlSide
from validation.plan import Chunk, Difference
from validation.run import Options, describe, validate
from validation.watermark import KafkaWatermark

DDL = """CREATE TABLE {db}.{table} (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  amount DECIMAL(12,2) NOT NULL,
  note VARCHAR(64) NULL,
  created DATETIME(3) NOT NULL,
  tag BINARY(4) NULL,
  ratio DOUBLE NULL,
  doc JSON NULL
)"""
BASE = 18_446_744_073_709_000_000
ROWS_PER_SHARD = 40


@dataclass
class Pipeline:
    """MariaDB → binlog → Kafka → mirror (warehouse and Redis), pumped on demand."""

    settings: Settings
    scene: MirrorScene
    conn: Any
    dbs: list[str]
    position: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[tuple[threading.Thread, threading.Event, Any]] = field(default_factory=list)

    def pump(self) -> None:
        """Publish every binlog change since the last pump."""
        with self.lock:
            with self.conn.cursor() as cur:
                stop = server_position(cur)
            instance = self.settings.instances[0]
            messages = list(
                read_range(
                    instance,
                    self.position.gtid,
                    stop,
                    OffsetGenerator(),
                    self.dbs,
                    SchemaCache(instance),
                )
            )
            self.position = stop
            if messages:
                self.scene.publish(messages)

    def start(self) -> None:
        for target in ("warehouse", "redis"):
            stop_event = threading.Event()
            router = ChangeRouter(
                self.settings.tables, ShardRouter(list(self.settings.shard_rules)), target
            )
            applier = build_applier(self.settings, target)
            consumer = MirrorConsumer(
                self.settings.kafka,
                self.settings.mirror,
                target,
                ["local"],
                router,
                applier,
                MirrorMetrics(target),
                stop_event,
            )
            thread = threading.Thread(target=consumer.run)
            thread.start()
            self.threads.append((thread, stop_event, applier))

    def stop(self) -> None:
        for thread, stop_event, applier in self.threads:
            stop_event.set()
            thread.join(30)
            applier.close()


class PumpedWatermark:
    """The production watermark, after pumping the binlog into Kafka (the collector's job)."""

    def __init__(self, pipeline: Pipeline, target: str) -> None:
        self.pipeline = pipeline
        self.kafka = KafkaWatermark(
            pipeline.settings.kafka,
            pipeline.scene.topic,
            mirror_group(pipeline.settings.mirror.group_prefix, target),
            timeout_s=60,
        )
        self.marks = 0

    def mark(self) -> object:
        self.marks += 1
        self.pipeline.pump()
        return self.kafka.mark()

    def wait(self, mark: object) -> None:
        self.kafka.wait(mark)


@pytest.fixture()
def pipeline(mirror_settings: Settings) -> Iterator[Pipeline]:
    tag = uuid.uuid4().hex[:6]
    dbs = [f"vq{tag}_{i:02d}" for i in range(2)]
    tables = [f"orders_{i:02d}" for i in range(2)]
    scene = MirrorScene(mirror_settings)
    settings = mirror_settings.model_copy(
        update={
            "tables": [TableMirror(db_prefix=f"vq{tag}", table_prefix="orders")],
            "kafka": mirror_settings.kafka.model_copy(update={"topic_prefix": scene.topic_prefix}),
            "mirror": mirror_settings.mirror.model_copy(update={"group_prefix": f"mt{scene.tag}"}),
        }
    )
    scene.settings = settings
    conn = pymysql.connect(
        host="127.0.0.1",
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
        init_command="SET time_zone = '+00:00'",
    )
    with conn.cursor() as cur:
        start = server_position(cur)
        next_id = BASE
        for db in dbs:
            cur.execute(f"CREATE DATABASE {db}")
            for table in tables:
                cur.execute(DDL.format(db=db, table=table))
                rows = []
                for _ in range(ROWS_PER_SHARD):
                    next_id += 1
                    rows.append(
                        f"({next_id}, {next_id % 1000}.5, "
                        f"{'NULL' if next_id % 7 == 0 else repr('n' * (next_id % 3))}, "
                        f"'2024-01-05 10:11:12.{next_id % 1000:03d}', "
                        f"{'NULL' if next_id % 5 == 0 else 'x' + repr(f'{next_id % 256:02x}')}, "
                        f"{next_id % 9}e{next_id % 30 - 15}, "
                        f'\'{{"b": {next_id % 4}, "a": [1.5, "x"]}}\')'
                    )
                cur.execute(f"INSERT INTO {db}.{table} VALUES {', '.join(rows)}")
    flow = Pipeline(settings, scene, conn, dbs, start)
    flow.start()
    flow.pump()
    yield flow
    flow.stop()
    with conn.cursor() as cur:
        for db in dbs:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
    conn.close()


def _drift_warehouse(
    settings: Settings, table: str, changed: int, deleted: int, extra: int
) -> None:
    target = sql.Identifier(settings.mirror.warehouse_schema, table)
    with pg_connect(settings) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET note = 'drift' WHERE id = %s").format(target), (changed,)
        )
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(target), (deleted,))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, amount, created, _binlog_offset, _shard) "
                "VALUES (%s, 1.00, '2024-01-01', 1, 'x.y')"
            ).format(target),
            (extra,),
        )


def _drift_redis(settings: Settings, table: str, changed: int, deleted: int, extra: int) -> None:
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    prefix = settings.redis.key_prefix
    name = redis_key(prefix, table, [str(changed)])
    offset, shard, row = decode_redis_document(client.get(name))
    assert row is not None
    row["amount"] = "0.01"
    client.set(
        name,
        f'{{"_offset":"{offset:020d}","_shard":"{shard}","row":'.encode()
        + orjson.dumps(row)
        + b"}",
    )
    client.delete(redis_key(prefix, table, [str(deleted)]))
    client.set(
        redis_key(prefix, table, [str(extra)]),
        b'{"_offset":"00000000000000000001","_shard":"x.y","row":{"id":"%d","amount":"1.00"}}'
        % extra,
    )
    client.close()


@pytest.mark.timeout(300)
def test_validate_finds_exactly_the_drifted_keys_and_not_a_write_in_flight(
    pipeline: Pipeline,
) -> None:
    settings = pipeline.settings
    table = settings.tables[0].name
    options = Options(chunk_rows=25, leaf_rows=8)
    watermarks = {t: PumpedWatermark(pipeline, t) for t in ("warehouse", "redis")}
    total = 4 * ROWS_PER_SHARD
    for target in ("warehouse", "redis"):
        report = validate(settings, table, target, options, watermarks[target])  # type: ignore[arg-type]
        assert report.equal, describe(report)
        assert report.rows == total
        assert report.chunks == total // 25 + 1

    changed, deleted, extra = BASE + 3, BASE + 77, BASE + 10_000
    _drift_warehouse(settings, table, changed, deleted, extra)
    _drift_redis(settings, table, changed + 100, deleted + 1, extra + 1)

    # A source write while validating: after MySQL's first chunk is read, a row changes.
    in_flight = BASE + 120
    db = pipeline.dbs[1]
    original_digest = MySqlSide.digest
    written: list[int] = []

    def digest_then_write(self: Any, chunk: Chunk) -> Any:
        result = original_digest(self, chunk)
        if not written:
            with pipeline.conn.cursor() as cur:
                for shard in ("orders_00", "orders_01"):
                    written.append(
                        cur.execute(
                            f"UPDATE {db}.{shard} SET note = 'moved on' WHERE id = %s", (in_flight,)
                        )
                    )
        return result

    with pytest.MonkeyPatch.context() as monkey:
        monkey.setattr(MySqlSide, "digest", digest_then_write)
        found = {
            target: validate(settings, table, target, options, watermarks[target])  # type: ignore[arg-type]
            for target in ("warehouse", "redis")
        }
    assert sum(written) == 1  # the in-flight row exists in exactly one shard

    warehouse = found["warehouse"]
    assert {(r.key, r.difference) for r in warehouse.differences} == {
        ((changed,), Difference.DIFFERENT),
        ((deleted,), Difference.MISSING),
        ((extra,), Difference.EXTRA),
    }, describe(warehouse)
    assert warehouse.unsettled == []
    redis_report = found["redis"]
    assert {(r.key, r.difference) for r in redis_report.differences} == {
        ((changed + 100,), Difference.DIFFERENT),
        ((deleted + 1,), Difference.MISSING),
        ((extra + 1,), Difference.EXTRA),
    }, describe(redis_report)
    # The in-flight write made its chunk differ, was re-checked and dropped.
    assert warehouse.in_flight + redis_report.in_flight >= 1
    # Side by side: the changed column, MySQL's value against the target's.
    [row] = [r for r in warehouse.differences if r.difference is Difference.DIFFERENT]
    assert row.differing_columns() == ["note"]
    assert row.target is not None and row.target["note"] == "drift"
    [row] = [r for r in redis_report.differences if r.difference is Difference.DIFFERENT]
    assert row.differing_columns() == ["amount"]
    assert row.source is not None and row.target is not None
    assert (row.source["amount"], row.target["amount"]) == (f"{(changed + 100) % 1000}.50", "0.01")
    text = "\n".join(describe(warehouse))
    assert f"key {changed}: different" in text and "drift *" in text
