"""The transactional publisher against the real broker: what a reader sees after aborts and
commits, and that a committed transaction is never reported as failed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cdc_platform.config import Settings
from cdc_platform.kafka import consumer_config, read_to_end
from collector.position import CollectorPosition
from collector.publisher import (
    OPENING_KEY_SUFFIX,
    KafkaPublisher,
    ProducerLostError,
    positions_topic,
)
from simple_binlog.errors import CdcMirrorError
from simple_binlog.message import EventType, SimpleBinlog, Source, decode_message
from simple_binlog.naming import topic_name
from simple_binlog.offsets import OffsetState


def _message(key: int, note: str) -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=1_800_000_000_000_000 + key,
        execute_time=1_800_000_000_000,
        event_type=EventType.INSERT,
        schema_name="shop",
        table_name="orders",
        source=Source.BINLOG,
        content={"id": key, "note": note},
        column_types={"id": "int", "note": "varchar"},
        primary_keys=("id",),
    )


def _committed(settings, topic: str) -> list[SimpleBinlog]:
    consumer = Consumer(consumer_config(settings, group_id=f"test-{uuid.uuid4().hex[:8]}"))
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    messages, idle = [], 0
    try:
        while idle < 3:
            batch = [r for r in consumer.consume(10_000, 1.0) if r.error() is None]
            idle = 0 if batch else idle + 1
            messages += [decode_message(r.value()) for r in batch]
    finally:
        consumer.close()
    return messages


def test_a_commit_after_an_abort_with_queued_messages_succeeds(local_stack: Settings) -> None:
    kafka = local_stack.kafka.model_copy(update={"topic_prefix": f"p{uuid.uuid4().hex[:6]}."})
    instance = f"pub-{uuid.uuid4().hex[:6]}"
    publisher = KafkaPublisher(kafka, instance)
    assert publisher.start() is None
    try:
        # Aborted while many messages still wait in the client's queue: they are purged, and
        # their failure reports arrive while the next transaction runs.
        for key in range(50_000):
            publisher.add(_message(key, "aborted " + "x" * 200))
        publisher.abort()
        for key in range(100):
            publisher.add(_message(key, "kept"))
        position = CollectorPosition(instance, "0-1-7", OffsetState(1_800_000_000_000_099))
        publisher.commit(position)  # must not raise: this transaction did commit
    finally:
        publisher.close()

    received = _committed(kafka, topic_name(kafka, instance))
    assert sorted(m.content["id"] for m in received) == list(range(100))
    assert {m.content["note"] for m in received} == {"kept"}
    restarted = KafkaPublisher(kafka, instance)
    try:
        assert restarted.start() == position
    finally:
        restarted.close()


def test_each_transaction_opens_with_a_record_beside_the_position(local_stack: Settings) -> None:
    """The positions partition joins a transaction when it begins (its opening record), so the
    commit does not wait for that; readers of the position see the instance's key only, and
    an aborted transaction's records, the opening one included, are never read."""
    kafka = local_stack.kafka.model_copy(update={"topic_prefix": f"p{uuid.uuid4().hex[:6]}."})
    instance = f"pub-{uuid.uuid4().hex[:6]}"
    publisher = KafkaPublisher(kafka, instance)
    assert publisher.start() is None
    first = CollectorPosition(instance, "0-1-7", OffsetState(1_800_000_000_000_002))
    last = CollectorPosition(instance, "0-1-9", OffsetState(1_800_000_000_000_004))
    try:
        for key in range(3):
            publisher.add(_message(key, "kept"))
        publisher.commit(first)
        publisher.add(_message(3, "aborted"))
        publisher.abort()
        publisher.commit(last)  # nothing added: the position's own transaction
    finally:
        publisher.close()

    records = list(read_to_end(kafka, positions_topic(kafka, instance), idle_timeout_s=30))
    opening = f"{instance}{OPENING_KEY_SUFFIX}".encode()
    assert [r.key for r in records] == [opening, instance.encode()] * 2
    restarted = KafkaPublisher(kafka, instance)
    try:
        assert restarted.start() == last
    finally:
        restarted.close()
    assert sorted(m.content["id"] for m in _committed(kafka, topic_name(kafka, instance))) == [
        0,
        1,
        2,
    ]


class _FailsOnSecondCommit:
    """A real producer whose second ``commit_transaction`` meets a fatal error that is not a
    fencing (what the coordinator's INVALID_TXN_STATE on EndTxn gives), before anything is
    sent: that transaction never commits."""

    def __init__(self, config: dict) -> None:
        self._producer = Producer(config)
        self._commits = 0

    def commit_transaction(self, *args):
        self._commits += 1
        if self._commits == 2:
            raise KafkaException(
                KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)
            )
        return self._producer.commit_transaction(*args)

    def __getattr__(self, name: str):
        return getattr(self._producer, name)


def test_a_lost_producer_is_replaced_and_resumes_from_the_committed_position(
    local_stack: Settings,
) -> None:
    """A fatal error that is no fencing drops the producer (the publisher is not usable until
    started again) and is not reported as a takeover; a new publisher of the instance settles
    the lost transaction (never visible) and resumes from the last committed position."""
    kafka = local_stack.kafka.model_copy(update={"topic_prefix": f"p{uuid.uuid4().hex[:6]}."})
    instance = f"pub-{uuid.uuid4().hex[:6]}"
    publisher = KafkaPublisher(kafka, instance, make_producer=_FailsOnSecondCommit)
    assert publisher.start() is None
    first = CollectorPosition(instance, "0-1-7", OffsetState(1_800_000_000_000_002))
    try:
        for key in range(3):
            publisher.add(_message(key, "kept"))
        publisher.commit(first)
        for key in range(3, 5):
            publisher.add(_message(key, "lost"))
        with pytest.raises(ProducerLostError, match="became unusable while committing"):
            publisher.commit(
                CollectorPosition(instance, "0-1-9", OffsetState(1_800_000_000_000_004))
            )
        with pytest.raises(CdcMirrorError, match="not started"):
            publisher.add(_message(5, "after"))
    finally:
        publisher.close()  # nothing to abort: the lost producer was dropped

    restarted = KafkaPublisher(kafka, instance)
    try:
        assert restarted.start() == first
        restarted.add(_message(3, "again"))
        restarted.commit(CollectorPosition(instance, "0-1-8", OffsetState(1_800_000_000_000_003)))
    finally:
        restarted.close()
    received = _committed(kafka, topic_name(kafka, instance))
    assert sorted((m.content["id"], m.content["note"]) for m in received) == [
        (0, "kept"),
        (1, "kept"),
        (2, "kept"),
        (3, "again"),
    ]
