"""The Kafka publisher on its own: where a chunk's rows land and what a full local queue does.

A chunk's rows are produced in one ``produce_batch`` call; the configured partitioner must
still place each table on the partition a plain ``produce`` with its key picks (the
collector's), and rows the local queue had no room for must be produced again, not lost.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from cdc_platform.config import Settings
from cdc_platform.kafka import consumer_config, ensure_topic, producer_config
from mock_replay.progress import TableProgress
from mock_replay.publish import KafkaChunkPublisher, KafkaProgressStore
from simple_binlog.naming import topic_name

TABLES = [f"shop_{n:02d}.orders_{n:02d}".encode() for n in range(12)]


def _partitions_of_plain_produce(settings: Settings, topic: str) -> dict[bytes, int]:
    """The partition a plain produce() with each table's key lands on."""
    producer = Producer(producer_config(settings.kafka, client_id="replay-test-reference"))
    placed: dict[bytes, int] = {}
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            placed[message.key()] = message.partition()

    for key in TABLES:
        producer.produce(topic, key=key, value=b"{}", on_delivery=delivered)
    assert producer.flush(30) == 0 and not errors
    return placed


def _committed_records(settings: Settings, topic: str, partitions: int) -> list[Any]:
    """Every committed record of the topic (read_committed), to its end."""
    consumer = Consumer(consumer_config(settings.kafka, f"rp-publish-{uuid.uuid4().hex[:6]}"))
    records: list[Any] = []
    try:
        assigned = [TopicPartition(topic, p, 0) for p in range(partitions)]
        highs = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
        consumer.assign(assigned)
        deadline = time.monotonic() + 60
        while True:
            positions = {
                tp.partition: tp.offset
                for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            }
            if all(highs[p] == 0 or positions[p] >= highs[p] for p in range(partitions)):
                return records
            assert time.monotonic() < deadline, f"reading {topic} timed out at {positions}"
            records.extend(
                record
                for record in consumer.consume(num_messages=5000, timeout=0.5)
                if record.error() is None
            )
    finally:
        consumer.close()


def test_a_chunk_lands_on_its_tables_partition_and_a_full_queue_loses_nothing(
    kafka_settings: Settings,
) -> None:
    topic = topic_name(kafka_settings.kafka, "local")
    ensure_topic(kafka_settings.kafka, topic, partitions=6)
    KafkaProgressStore(kafka_settings.kafka, "local").ensure_topics()
    reference = f"{topic}.reference"
    ensure_topic(kafka_settings.kafka, reference, partitions=6)
    expected = _partitions_of_plain_produce(kafka_settings, reference)
    assert len(set(expected.values())) > 1  # the keys spread, so the check can fail

    # A local queue of 50 messages: every 300-row chunk overflows it several times.
    publisher = KafkaChunkPublisher(
        kafka_settings.kafka,
        "local",
        "run-publish-test",
        producer_overrides={"queue.buffering.max.messages": 50},
    )
    publisher.start()
    try:
        for key in TABLES:
            values = [b'{"row":%d}' % n for n in range(300)]
            progress = TableProgress("run-publish-test", key.decode(), ("id",))
            publisher.publish(key, values, progress.advanced((300,), 300))
    finally:
        publisher.close()

    records = _committed_records(kafka_settings, topic, 6)
    assert len(records) == len(TABLES) * 300
    by_table: dict[bytes, list[tuple[int, bytes]]] = {}
    for record in records:
        by_table.setdefault(record.key(), []).append((record.partition(), record.value()))
    for key in TABLES:
        rows = by_table[key]
        assert {partition for partition, _ in rows} == {expected[key]}, key
        assert [value for _, value in rows] == [b'{"row":%d}' % n for n in range(300)], key
