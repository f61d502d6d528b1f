"""cdc_platform.kafka.read_to_end against the real broker: committed records of every
partition up to the end the topic has when the read starts, aborted and open transactions
left out (read_committed), and a missing topic said in the product's terms."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from cdc_platform.config import Settings
from cdc_platform.kafka import (
    UnknownTopicError,
    admin_config,
    ensure_topic,
    producer_config,
    read_to_end,
)

PARTITIONS = 3


@pytest.fixture()
def topic(local_stack: Settings) -> Iterator[str]:
    name = f"it-read-to-end-{uuid.uuid4().hex[:8]}"
    assert ensure_topic(local_stack.kafka, name, partitions=PARTITIONS) is True
    yield name
    admin = AdminClient(admin_config(local_stack.kafka))
    admin.delete_topics([name])[name].result(30)


def _transaction(producer: Producer, topic: str, keys: list[str], commit: bool | None) -> None:
    """Produce ``keys`` (value = key) in one transaction: committed, aborted, or left open."""
    producer.begin_transaction()
    for index, key in enumerate(keys):
        producer.produce(topic, key=key.encode(), value=key.encode(), partition=index % PARTITIONS)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def test_reads_every_committed_record_and_stops_at_the_end(
    local_stack: Settings, topic: str
) -> None:
    producer = Producer(
        producer_config(local_stack.kafka, "it-read-to-end", f"it-read-to-end.{topic}")
    )
    producer.init_transactions(30)
    committed = [f"c{i:02d}" for i in range(30)]
    _transaction(producer, topic, committed[:15], commit=True)
    _transaction(producer, topic, [f"aborted{i}" for i in range(6)], commit=False)
    _transaction(producer, topic, committed[15:], commit=True)
    _transaction(producer, topic, [f"open{i}" for i in range(3)], commit=None)
    try:
        records = list(read_to_end(local_stack.kafka, topic, idle_timeout_s=30))
        uncommitted = list(
            read_to_end(local_stack.kafka, topic, committed=False, idle_timeout_s=30)
        )
        only_one = list(read_to_end(local_stack.kafka, topic, partitions=[1], idle_timeout_s=30))
    finally:
        producer.abort_transaction(30)

    # Committed only, each once, the open transaction not waited for.
    assert sorted(r.key for r in records) == sorted(k.encode() for k in committed)
    assert all(r.key == r.value and r.topic == topic for r in records)
    assert {r.partition for r in records} == set(range(PARTITIONS))
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == sorted(offsets)  # in offset order within the partition
    # Uncommitted, the aborted and open records are read too.
    keys = {r.key for r in uncommitted}
    assert {b"aborted0", b"open0"} <= keys
    assert len(uncommitted) == 30 + 6 + 3
    assert only_one == [r for r in records if r.partition == 1]


def test_an_empty_topic_is_read_at_once(local_stack: Settings, topic: str) -> None:
    assert list(read_to_end(local_stack.kafka, topic, idle_timeout_s=30)) == []


@pytest.mark.parametrize("partitions", [None, [0]])
def test_a_missing_topic_is_an_unknown_topic_error(
    local_stack: Settings, partitions: list[int] | None
) -> None:
    missing = f"it-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(UnknownTopicError, match=missing):
        list(read_to_end(local_stack.kafka, missing, partitions=partitions, idle_timeout_s=10))
