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
    collector = scene.collector(39141).start()
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
    assert insert_1[2] == {"id": "int", "v": "varchar", "t": "datetime(6)"}
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
    assert insert_3[2]["extra"] == "bigint unsigned"
    assert delete_2[1] == {"id": 2, "label": "two", "extra": "2"}  # bigint unsigned now
    assert "t" not in delete_2[2]
    assert all(m.primary_keys == ("id",) for m in received)
