"""100,000 SimpleBinlog messages for 50 tables through the real Kafka broker and back."""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from cdc_platform.config import Settings
from cdc_platform.kafka import admin_config, consumer_config, ensure_topic, producer_config
from simple_binlog.message import EventType, SimpleBinlog, Source, decode_message
from simple_binlog.naming import topic_name
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.routing import partition_key

MESSAGES = 100_000
TABLES = [(f"ordercenter_{i % 10:02d}", f"orderinfo_{i:02d}") for i in range(50)]


@pytest.fixture()
def topic(local_stack: Settings):
    instance = f"it{uuid.uuid4().hex[:8]}"
    name = topic_name(local_stack.kafka, instance)
    assert ensure_topic(local_stack.kafka, name) is True
    assert ensure_topic(local_stack.kafka, name) is False  # a second call finds it
    yield name
    admin = AdminClient(admin_config(local_stack.kafka))
    admin.delete_topics([name])[name].result(30)


def _binlog_like_messages() -> list[SimpleBinlog]:
    """Rows in 'binlog order': event times that jump back and forth, bursts in one second."""
    rng = random.Random(20261122)
    offsets = OffsetGenerator()
    second = 1_795_000_000
    messages = []
    for index in range(MESSAGES):
        second += rng.choice((0, 0, 0, 1, -2))  # not monotonic, like binlog timestamps
        schema, table = TABLES[rng.randrange(len(TABLES))]
        messages.append(
            SimpleBinlog(
                binlog_offset=offsets.next(second),
                execute_time=second * 1000,
                event_type=EventType.INSERT,
                schema_name=schema,
                table_name=table,
                source=Source.BINLOG,
                content={"id": index, "note": f"row {index}"},
                column_types={"id": "bigint(20)", "note": "varchar(32)"},
                primary_keys=("id",),
            )
        )
    return messages


def test_100k_messages_for_50_tables_round_trip(local_stack: Settings, topic: str) -> None:
    sent = _binlog_like_messages()
    producer = Producer(producer_config(local_stack.kafka, client_id="it-producer"))
    failures: list[str] = []

    def on_delivery(error, _message) -> None:
        if error is not None:
            failures.append(error.str())

    for message in sent:
        while True:
            try:
                producer.produce(
                    topic,
                    key=partition_key(message.schema_name, message.table_name),
                    value=message.encode(),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.5)  # local queue full: let deliveries drain
    assert producer.flush(60) == 0
    assert failures == []

    consumer = Consumer(consumer_config(local_stack.kafka, group_id=f"it-{uuid.uuid4().hex[:8]}"))
    consumer.subscribe([topic])
    received: list[SimpleBinlog] = []
    deadline = time.monotonic() + 120
    try:
        while len(received) < MESSAGES and time.monotonic() < deadline:
            for record in consumer.consume(num_messages=10_000, timeout=1.0):
                assert record.error() is None, record.error()
                received.append(decode_message(record.value()))
        # Nothing beyond what was sent: one more poll finds the topic drained.
        extra = consumer.consume(num_messages=10, timeout=2.0)
    finally:
        consumer.close()

    assert len(received) == MESSAGES, f"{MESSAGES - len(received)} messages missing"
    assert extra == []

    sent_offsets = [m.binlog_offset for m in sent]
    assert all(a < b for a, b in itertools.pairwise(sent_offsets)), "offsets per instance"
    assert sorted(m.binlog_offset for m in received) == sent_offsets, "missing or duplicated"

    by_table_sent: dict[tuple[str, str], list[int]] = defaultdict(list)
    by_table_received: dict[tuple[str, str], list[int]] = defaultdict(list)
    for message in sent:
        by_table_sent[(message.schema_name, message.table_name)].append(message.binlog_offset)
    for message in received:
        by_table_received[(message.schema_name, message.table_name)].append(message.binlog_offset)
    assert len(by_table_sent) == 50
    for table, offsets in by_table_sent.items():
        assert by_table_received[table] == offsets, f"order of {table}"
    assert received[0].content["note"].startswith("row ")
