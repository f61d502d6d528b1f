"""Shared pieces of the replay tests: sharded test tables, settings with a topic prefix of
their own, reading a topic with read_committed, replaying into the memory publisher."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from cdc_platform.config import Settings
from cdc_platform.kafka import admin_config, consumer_config
from mock_replay.plan import TableShape, chunk_query
from mock_replay.publish import MemoryChunkPublisher, MemoryProgressStore
from mock_replay.runner import Cancellation, ReplayRequest, ReplayWorker, prepare_run
from mock_replay.source import MySQLSource
from simple_binlog.message import SimpleBinlog, decode_message
from simple_binlog.values import canonical, parse_column_type
from tests.integration.mariadb_admin import utc_admin_connection as admin


def with_topic_prefix(settings: Settings, prefix: str) -> Settings:
    kafka = settings.kafka.model_copy(update={"topic_prefix": prefix})
    return settings.model_copy(update={"kafka": kafka})


@dataclass
class Shards:
    """``<db>_00..`` × ``<table>_00..`` created for one test and dropped after it."""

    settings: Settings
    db: str = field(default_factory=lambda: f"rp{uuid.uuid4().hex[:8]}")
    table: str = "orders"
    databases: list[str] = field(default_factory=list)

    def create(self, dbs: int, tables: int, ddl: str, rows: int, values: str) -> list[str]:
        """Creates the shards; ``ddl`` is the column list, ``values`` a SELECT over ``seq``
        (MariaDB's sequence engine) giving ``rows`` rows. Returns "schema.table" names."""
        names = []
        with admin(self.settings) as conn, conn.cursor() as cursor:
            for d in range(dbs):
                schema = f"{self.db}_{d:02d}"
                cursor.execute(f"CREATE DATABASE {schema}")
                self.databases.append(schema)
                for t in range(tables):
                    table = f"{self.table}_{t:02d}"
                    cursor.execute(f"CREATE TABLE {schema}.{table} ({ddl})")
                    if rows:
                        cursor.execute(
                            f"INSERT INTO {schema}.{table} {values.format(shard=d * 100 + t)}"
                            f" FROM mysql.seq_1_to_{rows} AS s"
                        )
                    names.append(f"{schema}.{table}")
        return names

    def execute(self, *statements: str) -> None:
        with admin(self.settings) as conn, conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def drop(self) -> None:
        with admin(self.settings) as conn, conn.cursor() as cursor:
            for schema in self.databases:
                cursor.execute(f"DROP DATABASE IF EXISTS {schema}")


def mysql_rows(settings: Settings, shape: TableShape) -> dict[tuple, dict]:
    """The table's rows by key, as canonical Python values (what decoded_content() gives)."""
    sql, params = chunk_query(shape, None, None, 10**9)
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(sql, params)
        names = [d[0] for d in cursor.description]
        rows = {}
        for values in cursor.fetchall():
            row = {
                name: canonical(parse_column_type(shape.column_types[name]), value)
                for name, value in zip(names, values, strict=True)
            }
            rows[tuple(row[k] for k in shape.key)] = row
        return rows


def replay_to_memory(
    settings: Settings, request: ReplayRequest, now: dt.datetime | None = None
) -> tuple[list[SimpleBinlog], MemoryChunkPublisher, object]:
    """A whole run into the memory publisher (real MySQL, no Kafka)."""
    source = MySQLSource(settings.instance(request.instance), request.replica)
    try:
        prepared = prepare_run(settings, request, source, now or dt.datetime.now(dt.UTC))
        store = MemoryProgressStore()
        store.write(prepared.spec.key, prepared.spec.to_json())
        publisher = MemoryChunkPublisher(store)
        publisher.start()
        ReplayWorker(settings, prepared, 0, source, publisher, Cancellation()).run({})
    finally:
        source.close()
    return [decode_message(value) for _, value in publisher.rows], publisher, prepared


def end_offsets(settings: Settings, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """High watermarks of every partition of the topics that exist."""
    admin_client = AdminClient(admin_config(settings.kafka))
    metadata = admin_client.list_topics(timeout=30)
    consumer = Consumer(consumer_config(settings.kafka, f"rp-offsets-{uuid.uuid4().hex[:6]}"))
    try:
        offsets = {}
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue
            for partition in described.partitions:
                offsets[(topic, partition)] = _high_watermark(consumer, topic, partition)
        return offsets
    finally:
        consumer.close()


# A topic a process has just created is listed before its partitions have a leader.
_NOT_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}


def _high_watermark(consumer: Consumer, topic: str, partition: int, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            return int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET or time.monotonic() > deadline:
                raise
        time.sleep(0.1)  # polling the broker until the new partition has its leader


def read_topic(
    settings: Settings, topic: str, timeout_s: float = 90.0
) -> list[tuple[bytes, SimpleBinlog]]:
    """Every committed message of the topic (read_committed), to its end."""
    admin_client = AdminClient(admin_config(settings.kafka))
    described = admin_client.list_topics(topic, timeout=30).topics[topic]
    partitions = sorted(described.partitions)
    consumer = Consumer(consumer_config(settings.kafka, f"rp-read-{uuid.uuid4().hex[:6]}"))
    messages: list[tuple[bytes, SimpleBinlog]] = []
    try:
        highs = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while True:
            positions = {
                tp.partition: tp.offset
                for tp in consumer.position([TopicPartition(topic, p) for p in partitions])
            }
            if all(highs[p] == 0 or positions[p] >= highs[p] for p in partitions):
                return messages
            assert time.monotonic() < deadline, (
                f"reading {topic} timed out at {positions} of {highs}"
            )
            for record in consumer.consume(num_messages=5000, timeout=0.5):
                if record.error() is None:
                    messages.append((record.key(), decode_message(record.value())))
    finally:
        consumer.close()
