"""DDL in the middle of the stream: every row is decoded with the schema it was written under.

The statements run first and the collector starts afterwards from the position before them,
so by the time it reads the early rows information_schema already shows the final schema:
only the binlog's own table maps can give the right names and types.
"""

from __future__ import annotations

from tests.integration.collector.harness import CollectorScene, admin, reached

STATEMENTS = [
    "INSERT INTO {db}.a (id, v, t) VALUES (1, 'one', '2026-11-21 10:00:00.5')",
    "ALTER TABLE {db}.a ADD COLUMN extra DECIMAL(10,2) NOT NULL DEFAULT 1.50",
    "INSERT INTO {db}.a (id, v, t, extra) VALUES (2, 'two', '2026-11-21 11:00:00', 2.25)",
    "ALTER TABLE {db}.a CHANGE v label VARCHAR(40)",
    "UPDATE {db}.a SET label = 'uno' WHERE id = 1",
    "ALTER TABLE {db}.a MODIFY extra BIGINT UNSIGNED NOT NULL",
    "INSERT INTO {db}.a (id, label, t, extra) VALUES (3, 'three', NULL, 18446744073709551615)",
    "ALTER TABLE {db}.a DROP COLUMN t",
    "DELETE FROM {db}.a WHERE id = 2",
]


def test_rows_keep_the_schema_they_were_written_under(scene: CollectorScene) -> None:
    with admin(scene.settings) as conn, conn.cursor() as cursor:
        for statement in STATEMENTS:
            cursor.execute(statement.format(db=scene.db))
    end = scene.position_now()
    collector = scene.collector(29141).start()
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "the collector")
    collector.stop()

    received = scene.received(5)
    changes = [
        (m.event_type.value, m.content, m.column_types, m.before_content)
        for m in sorted(received, key=lambda m: m.binlog_offset)
    ]
    assert [c[0] for c in changes] == ["INSERT", "INSERT", "UPDATE", "INSERT", "DELETE"]

    insert_1, insert_2, update_1, insert_3, delete_2 = changes
    assert insert_1[1] == {"id": 1, "v": "one", "t": "2026-11-21 10:00:00.500000"}
    # Columns the live table still has as the binlog describes them carry the server's own
    # COLUMN_TYPE; renamed, dropped or retyped ones the table map's spelling.
    assert insert_1[2] == {"id": "int(11)", "v": "varchar", "t": "datetime(6)"}
    assert insert_2[1] == {"id": 2, "v": "two", "t": "2026-11-21 11:00:00.000000", "extra": "2.25"}
    assert insert_2[2]["extra"] == "decimal(10,2)"
    assert update_1[3] == {
        "id": 1,
        "label": "one",
        "t": "2026-11-21 10:00:00.500000",
        "extra": "1.50",
    }
    assert update_1[1]["label"] == "uno"
    assert insert_3[1] == {"id": 3, "label": "three", "t": None, "extra": "18446744073709551615"}
    assert insert_3[2]["extra"] == "bigint(20) unsigned"
    assert delete_2[1] == {"id": 2, "label": "two", "extra": "2"}  # bigint unsigned now
    assert "t" not in delete_2[2]
    assert all(m.primary_keys == ("id",) for m in received)


def test_ddl_is_published_in_order_with_secrets_redacted(scene: CollectorScene) -> None:
    import uuid

    import orjson
    from confluent_kafka import Consumer

    from cdc_platform.kafka import consumer_config
    from collector.publisher import schema_changes_topic

    with admin(scene.settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"INSERT INTO {scene.db}.a (id, v) VALUES (10, 'x')")
        cursor.execute(f"ALTER TABLE {scene.db}.a ADD COLUMN note VARCHAR(10) NULL")
        cursor.execute(f"CREATE TABLE {scene.db}.n (id INT PRIMARY KEY)")
        cursor.execute(f"RENAME TABLE {scene.db}.n TO {scene.db}.m")
        cursor.execute(f"INSERT INTO {scene.db}.m VALUES (1)")
        cursor.execute(
            "CREATE USER IF NOT EXISTS 'ddl_probe'@'localhost' IDENTIFIED BY 'Secret-42'"
        )
        cursor.execute("DROP USER IF EXISTS 'ddl_probe'@'localhost'")
        cursor.execute(f"DROP TABLE {scene.db}.m")
    end = scene.position_now()
    collector = scene.collector(29143).start()
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "the collector")
    collector.stop()

    rows = sorted(scene.received(2), key=lambda m: m.binlog_offset)
    kafka = scene.settings.kafka.model_copy(update={"topic_prefix": scene.prefix})
    consumer = Consumer(consumer_config(kafka, group_id=f"test-{uuid.uuid4().hex[:8]}"))
    consumer.subscribe([schema_changes_topic(kafka, scene.settings.instances[0].name)])
    try:
        records = [
            orjson.loads(r.value()) for r in consumer.consume(100, 10.0) if r.error() is None
        ]
    finally:
        consumer.close()

    ours = [r for r in records if r["schemaName"] == scene.db]
    assert [(r["verb"], r["object"], r["tableName"]) for r in ours] == [
        ("ALTER", "TABLE", "a"),
        ("CREATE", "TABLE", "n"),
        ("RENAME", "TABLE", "n"),
        ("DROP", "TABLE", "m"),
    ]
    alter = ours[0]
    assert "ADD COLUMN note" in alter["statement"]
    assert alter["afterBinlogOffset"] == rows[0].binlog_offset  # after the first insert
    assert ours[2]["afterBinlogOffset"] == rows[0].binlog_offset
    assert ours[3]["afterBinlogOffset"] == rows[1].binlog_offset  # after the insert into m
    assert all(r["position"]["gtid"] for r in ours)
    everything = b"".join(orjson.dumps(r) for r in records)
    assert b"Secret-42" not in everything and b"ddl_probe" not in everything
