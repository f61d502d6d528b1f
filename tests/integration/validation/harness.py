"""The validation tests' pipeline: MariaDB → binlog → Kafka → mirror (warehouse and Redis),
pumped on demand or continuously by a thread (the collector's part, with its committed
position written as the collector writes it), a live workload, and drift induced in each
target."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import pymysql
import pytest
import redis
from confluent_kafka import Producer
from psycopg import sql

from cdc_platform.config import Settings, TableMirror
from cdc_platform.kafka import ensure_topic, producer_config
from collector.position import CollectorPosition
from collector.reader import SchemaCache, read_range, server_position
from mirror.app import build_applier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.naming import decode_redis_document, mirror_group, redis_key
from simple_binlog.offsets import OffsetGenerator, OffsetState
from simple_binlog.routing import ShardRouter
from tests.integration.mariadb_admin import admin_connection, utc_admin_connection
from tests.integration.mirror.harness import MirrorScene
from tests.integration.mirror.targets import pg_connect
from validation.watermark import KafkaWatermark, collector_positions_topic

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


@contextmanager
def scratch_database(
    settings: Settings, prefix: str
) -> Iterator[tuple[pymysql.connections.Connection, str]]:
    """A database of its own on the stack's MariaDB (``<prefix><8 hex>``), dropped after."""
    db = f"{prefix}{uuid.uuid4().hex[:8]}"
    conn = admin_connection(settings)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
        yield conn, db
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.close()


@dataclass
class Pipeline:
    """MariaDB → binlog → Kafka → mirror (warehouse and Redis), pumped on demand or by
    ``pump_continuously``; each pump then commits the position it reached to the collector's
    positions topic, as the collector does (``validation.watermark.PositionWatermark``)."""

    settings: Settings
    scene: MirrorScene
    conn: Any
    dbs: list[str]
    position: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[tuple[threading.Thread, threading.Event, Any]] = field(default_factory=list)
    # One generator for every pump, as the collector keeps one: offsets never repeat.
    offsets: OffsetGenerator = field(default_factory=OffsetGenerator)
    pumps: int = 0
    _producer: Any = None
    _pumping: threading.Event = field(default_factory=threading.Event)

    def pump(self) -> None:
        """Publish every binlog change since the last pump, then the position reached."""
        with self.lock:
            conn = pymysql.connect(**self.conn_args())
            with conn.cursor() as cur:
                stop = server_position(cur)
            conn.close()
            instance = self.settings.instances[0]
            messages = list(
                read_range(
                    instance,
                    self.position.gtid,
                    stop,
                    self.offsets,
                    self.dbs,
                    SchemaCache(instance),
                )
            )
            self.position = stop
            if messages:
                self.scene.publish(messages)
            self._commit_position(stop.gtid)
            self.pumps += 1

    def conn_args(self) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": self.settings.instances[0].port,
            "user": self.settings.stack.admin_user,
            "password": self.settings.stack.admin_password.get_secret_value(),
            "autocommit": True,
            "init_command": "SET time_zone = '+00:00'",
        }

    def _commit_position(self, gtid: str) -> None:
        topic = collector_positions_topic(self.scene.topic)
        if self._producer is None:
            ensure_topic(self.settings.kafka, topic, partitions=1, compacted=True)
            self._producer = Producer(producer_config(self.settings.kafka, client_id="vq-pump"))
        position = CollectorPosition("local", gtid, OffsetState(self.offsets.state.last_offset))
        self._producer.produce(topic, key=b"local", value=orjson.dumps(position.to_json()))
        assert self._producer.flush(30) == 0

    def pump_continuously(self, every_s: float = 0.2) -> threading.Thread:
        """A thread pumping until ``stop_pumping`` (the collector, running)."""

        def loop() -> None:
            while not self._pumping.wait(every_s):
                self.pump()

        thread = threading.Thread(target=loop, name="vq-pump")
        thread.start()
        self.threads.append((thread, self._pumping, None))
        return thread

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
            if applier is not None:
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


def make_pipeline(mirror_settings: Settings, history_age_s: int = 0) -> Iterator[Pipeline]:
    """The sharded table with its rows (written ``history_age_s`` ago as the binlog says:
    their offsets are that old), the mirror's consumers running, everything pumped."""
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
    conn = utc_admin_connection(settings)
    with conn.cursor() as cur:
        start = server_position(cur)
        if history_age_s:
            cur.execute(f"SET timestamp = UNIX_TIMESTAMP() - {int(history_age_s)}")
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
        cur.execute("SET timestamp = DEFAULT")
    flow = Pipeline(settings, scene, conn, dbs, start)
    flow.start()
    flow.pump()
    yield flow
    flow.stop()
    with conn.cursor() as cur:
        for db in dbs:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
    conn.close()
    if flow._producer is not None:
        flow._producer.flush(5)


@pytest.fixture()
def pipeline(mirror_settings: Settings) -> Iterator[Pipeline]:
    yield from make_pipeline(mirror_settings)


def drift_warehouse(settings: Settings, table: str, changed: int, deleted: int, extra: int) -> None:
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


def drift_redis(settings: Settings, table: str, changed: int, deleted: int, extra: int) -> None:
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


class Workload:
    """Live writes on the source while a test runs: updates of the keys ``BASE + 121 ..
    BASE + 160`` (the last shard's rows), inserts of new keys round robin over the shards and
    deletes of some of them, paced at about ``rate`` statements a second."""

    UPDATED = range(BASE + 121, BASE + 161)

    def __init__(self, pipeline: Pipeline, rate: float = 40.0, seed: int = 25) -> None:
        self.pipeline = pipeline
        self.rate = rate
        self.random = random.Random(seed)
        self.statements = 0
        self.inserted: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vq-workload")
        self._error: BaseException | None = None

    def __enter__(self) -> Workload:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._error is not None:
            raise self._error

    def _shards(self) -> list[str]:
        return [f"{db}.{t}" for db in self.pipeline.dbs for t in ("orders_00", "orders_01")]

    def _run(self) -> None:
        try:
            conn = pymysql.connect(**self.pipeline.conn_args())
            shards = self._shards()
            next_id = BASE + 50_000
            with conn.cursor() as cur:
                while not self._stop.wait(1 / self.rate):
                    choice = self.random.random()
                    if choice < 0.6:
                        key = self.random.choice(self.UPDATED)
                        cur.execute(
                            f"UPDATE {shards[3]} SET note = %s, amount = amount + 1 WHERE id = %s",
                            (f"w{self.statements}", key),
                        )
                    elif choice < 0.85 or not self.inserted:
                        next_id += 1
                        cur.execute(
                            f"INSERT INTO {shards[next_id % 4]} (id, amount, created) "
                            "VALUES (%s, 2.50, NOW(3))",
                            (next_id,),
                        )
                        self.inserted.append(next_id)
                    else:
                        gone = self.inserted.pop(self.random.randrange(len(self.inserted)))
                        cur.execute(f"DELETE FROM {shards[gone % 4]} WHERE id = %s", (gone,))
                    self.statements += 1
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - handed to the test by __exit__
            self._error = exc


def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.1)
