"""MariaDB restarts under the collector: it reconnects with backoff and resumes where it
committed, with every change exactly once.

It stops and starts the local stack's MariaDB server: on a stack shared with other work, set
``CDC_TEST_COLLECTOR_RESTARTS=0`` to skip it (like the chaos suite's
``CDC_TEST_CHAOS_RESTARTS``).
"""

from __future__ import annotations

import os

import pytest

from stack.manager import LocalStack
from tests.integration.collector.harness import CollectorScene, admin, reached


def _write(scene: CollectorScene, first: int, count: int) -> None:
    with admin(scene.settings) as conn, conn.cursor() as cursor:
        for key in range(first, first + count):
            cursor.execute(f"INSERT INTO {scene.db}.a VALUES (%s, 'v', NOW(6))", (key,))
        cursor.execute(f"UPDATE {scene.db}.a SET v = 'w' WHERE id < %s", (first + 10,))


RESTARTS = os.environ.get("CDC_TEST_COLLECTOR_RESTARTS", "1") != "0"


@pytest.mark.skipif(not RESTARTS, reason="restarts a shared service: CDC_TEST_COLLECTOR_RESTARTS=0")
def test_mysql_restart_is_survived(scene: CollectorScene) -> None:
    collector = scene.collector(29171).start()
    _write(scene, 1, 500)
    middle = scene.position_now()
    collector.wait_for(lambda: reached(collector.committed_gtid(), middle.gtid), "the first batch")

    mariadb = LocalStack(scene.settings).select(["mariadb"])[0]
    assert mariadb.down() == "stopped"
    assert mariadb.up() == "started"
    _write(scene, 1000, 500)
    end = scene.position_now()
    collector.wait_for(
        lambda: reached(collector.committed_gtid(), end.gtid), "the second batch", 180
    )
    assert collector.alive()
    collector.stop()
    log = collector.log.read_text()
    assert "broke" in log and "Retrying in" in log  # it noticed, said so, and reconnected
    # The restart re-provisions users (CREATE USER … IDENTIFIED BY …): no statement text, no
    # password, in the collector's log.
    assert "IDENTIFIED" not in log
    assert scene.settings.instances[0].password.get_secret_value() not in log

    expected = scene.expected(end)
    received = scene.received(len(expected))
    assert (
        len(expected) == 1510
    )  # 2 x 500 inserts, 10 + 500 updated rows (unchanged rows are not logged)
    assert sorted(m.binlog_offset for m in received) == [m.binlog_offset for m in expected]
    assert [m.content for m in sorted(received, key=lambda m: m.binlog_offset)] == [
        m.content for m in expected
    ]
