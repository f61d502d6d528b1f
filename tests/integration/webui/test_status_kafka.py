"""The status pages' Kafka figures against the real broker: a topic's end offsets and a
consumer group's committed offsets, read without consuming a record; a topic that does not
exist and a broker that does not answer are states, not errors."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from cdc_platform.config import Settings
from cdc_platform.kafka import consumer_config, ensure_topic, producer_config
from webui.status import topic_lag
from webui.status_sources import read_offsets


def test_end_offsets_and_a_groups_lag(replay_stack: Settings) -> None:
    kafka = replay_stack.kafka
    topic = f"cdc.binlog.wuistatus{uuid.uuid4().hex[:8]}"
    group = f"cdc-mirror-status-test.{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka, topic, partitions=2)
    producer = Producer(producer_config(kafka, "status-test"))
    for n in range(10):
        producer.produce(topic, key=b"k", value=b"v", partition=n % 2)
    assert producer.flush(30) == 0
    committer = Consumer(consumer_config(kafka, group))
    committer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    committer.close()

    missing = f"{topic}-missing"
    found = read_offsets(kafka, [topic, missing], [(group, "mirror redis")], timeout_s=10)
    assert dict(found[topic].ends) == {0: 5, 1: 5}
    (offsets,) = found[topic].groups
    assert (offsets.component, dict(offsets.committed)) == ("mirror redis", {0: 3})
    assert topic_lag(found[topic].ends, offsets.committed) == 2 + 5
    assert found[missing].error == f"topic {missing} does not exist yet."

    nowhere = kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:1"})
    down = read_offsets(nowhere, [topic], [(group, "mirror redis")], timeout_s=1)
    assert down[topic].error is not None and down[topic].error.startswith("Kafka did not answer")
