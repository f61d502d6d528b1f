"""A collector without a stored position starts where the config says: a binlog file and
position (translated to MariaDB's GTID position), or refuses one that is not a transaction
boundary with one sentence."""

from __future__ import annotations

from cdc_platform.config import Settings
from tests.integration.collector.harness import CollectorScene, admin, reached
from tests.integration.collector.test_collector_errors import _error_line, _run_collector


def test_start_from_a_file_and_position(scene: CollectorScene) -> None:
    with admin(scene.settings) as conn, conn.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {scene.db}.a (id, v) VALUES (%s, 'before')", [(1,), (2,)])
        cursor.execute("SHOW MASTER STATUS")
        file, pos = cursor.fetchone()[:2]
        boundary = scene.position_now()
        cursor.executemany(f"INSERT INTO {scene.db}.a (id, v) VALUES (%s, 'after')", [(3,), (4,)])
        cursor.execute(f"DELETE FROM {scene.db}.a WHERE id = 1")
    end = scene.position_now()
    scene.env["CDC_MIRROR_COLLECTOR__START"] = f"{file}:{pos}"

    collector = scene.collector(29147).start()
    collector.wait_for(lambda: reached(collector.committed_gtid(), end.gtid), "the collector")
    collector.stop()

    received = sorted(scene.received(3), key=lambda m: m.binlog_offset)
    assert [(m.event_type.value, m.content["id"]) for m in received] == [
        ("INSERT", 3),
        ("INSERT", 4),
        ("DELETE", 1),
    ]
    scene.start = boundary  # a clean read from the GTID position of that file and position
    expected = scene.expected(end)
    assert [m.binlog_offset for m in received] == [m.binlog_offset for m in expected]


def test_a_position_inside_an_event_is_refused(local_stack: Settings) -> None:
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute("SHOW MASTER STATUS")
        file = cursor.fetchone()[0]
    result = _run_collector({"CDC_MIRROR_COLLECTOR__START": f"{file}:5"})
    assert result.returncode == 2  # a configuration error
    line = _error_line(result)
    assert f"{file}:5 is not a transaction boundary" in line and "GTID position" in line


def test_a_malformed_start_is_a_config_error(local_stack: Settings) -> None:
    result = _run_collector({"CDC_MIRROR_COLLECTOR__START": "yesterday"})
    assert result.returncode == 2  # a configuration error
    line = _error_line(result)
    assert "config field 'collector.start' is invalid" in line and "'yesterday'" in line
