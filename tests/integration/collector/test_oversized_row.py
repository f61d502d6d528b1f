"""A row larger than Kafka accepts goes to the dead-letter topic, counted, and collection
goes on; it is neither dropped silently nor retried forever."""

from __future__ import annotations

import uuid

import orjson
from confluent_kafka import Consumer

from cdc_platform.kafka import consumer_config
from collector.publisher import dead_letter_topic
from tests.integration.collector.harness import CollectorScene, admin, reached


def test_an_oversized_row_is_dead_lettered_and_the_rest_flows(scene: CollectorScene) -> None:
    with admin(scene.settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {scene.db}.blobs (id INT PRIMARY KEY, body LONGBLOB)")
        cursor.execute(f"INSERT INTO {scene.db}.blobs VALUES (1, REPEAT('x', 100))")
        cursor.execute(f"INSERT INTO {scene.db}.blobs VALUES (2, REPEAT('y', 2000000))")
        cursor.execute(f"INSERT INTO {scene.db}.blobs VALUES (3, REPEAT('z', 100))")
    end = scene.position_now()
    collector = scene.collector(29151).start()
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "the collector")
    metrics = collector.metrics()
    collector.stop()

    received = scene.received(2)
    assert sorted(m.content["id"] for m in received if m.table_name == "blobs") == [1, 3]
    assert 'cdc_collector_dead_letters_total{instance="local"} 1.0' in metrics

    kafka = scene.settings.kafka.model_copy(update={"topic_prefix": scene.prefix})
    consumer = Consumer(consumer_config(kafka, group_id=f"dl-{uuid.uuid4().hex[:8]}"))
    consumer.subscribe([dead_letter_topic(kafka, "local")])
    records = []
    for _ in range(30):
        records += [orjson.loads(r.value()) for r in consumer.consume(10, 1.0) if r.error() is None]
        if records:
            break
    consumer.close()
    assert len(records) == 1
    dead = records[0]
    assert dead["tableName"] == "blobs" and dead["primaryKey"] == {"id": 2}
    assert dead["size"] > 2_000_000 and "maximum message size" in dead["error"]
    assert dead["position"]["file"].startswith("mariadb-bin.")
