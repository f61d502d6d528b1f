"""A 1,000,000-row MySQL transaction streams through the collector in bounded memory.

The transaction is published as many Kafka transactions of ``max_rows_per_transaction``
rows, each committed with a position inside the MySQL transaction, so the collector never
holds more than one rows event's rows plus one Kafka transaction in the producer's queue.
The stated bound: the collector process's peak resident memory (VmHWM) stays under 300 MiB
while it publishes the million rows (it idles at about 100 MiB). Size: CDC_TEST_BIG_ROWS
(default 1,000,000).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Consumer, TopicPartition

from cdc_platform.kafka import consumer_config
from simple_binlog.control import is_control
from simple_binlog.naming import topic_name
from tests.integration.collector.harness import CollectorScene, admin, reached

ROWS = int(os.environ.get("CDC_TEST_BIG_ROWS", "1000000"))
MEMORY_BOUND_MIB = 300


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def _count_committed(scene: CollectorScene) -> tuple[int, int, int]:
    """(messages, smallest id, largest id) a read_committed consumer sees in the topic."""
    kafka = scene.settings.kafka.model_copy(update={"topic_prefix": scene.prefix})
    topic = topic_name(kafka, scene.settings.instances[0].name)
    consumer = Consumer(consumer_config(kafka, group_id=f"test-{uuid.uuid4().hex[:8]}"))
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
    consumer.assign(partitions)
    count, low, high, idle = 0, None, None, 0
    ids = set()
    try:
        while idle < 3:
            batch = consumer.consume(10_000, 2.0)
            idle = 0 if batch else idle + 1
            for record in batch:
                if record.error() is None and not is_control(record.key()):
                    count += 1
                    ids.add(orjson.loads(record.value())["content"]["id"])
    finally:
        consumer.close()
    if ids:
        low, high = min(ids), max(ids)
    assert len(ids) == count, f"{count - len(ids)} duplicate rows"
    return count, low, high


def test_million_row_transaction_in_bounded_memory(scene: CollectorScene) -> None:
    scene.env["CDC_MIRROR_COLLECTOR__MAX_ROWS_PER_TRANSACTION"] = "10000"
    with admin(scene.settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {scene.db}.big (id INT PRIMARY KEY, note VARCHAR(40))")
        scene.start = scene.position_now()
        scene.env["CDC_MIRROR_COLLECTOR__START"] = scene.start.gtid
        conn.begin()
        cursor.execute(
            f"INSERT INTO {scene.db}.big SELECT seq, CONCAT('row ', seq) FROM {scene.db}.seq_1_to_{ROWS}"
        )
        conn.commit()
    end = scene.position_now()

    collector = scene.collector(29145).start()
    collector.wait_for(
        lambda: reached(collector.committed_gtid(), end.gtid), "the million rows", timeout_s=900
    )
    peak = _peak_rss_mib(collector.process.pid)
    collector.stop()

    assert peak < MEMORY_BOUND_MIB, f"peak RSS {peak:.0f} MiB"
    assert _count_committed(scene) == (ROWS, 1, ROWS)
