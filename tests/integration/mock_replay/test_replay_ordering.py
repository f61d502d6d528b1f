"""MOCK rows lose to binlog changes made after the replay read them, whatever the order in
which a mirror receives them: the replay's offsets are its query start − 5 minutes with
sequence 0, the collector's are the change's own second with a sequence ≥ 1."""

from __future__ import annotations

import datetime as dt

from cdc_platform.config import Settings
from collector.reader import read_range, server_position
from mirror.memory import InMemoryMirror
from mock_replay.runner import ReplayRequest
from simple_binlog.offsets import OffsetGenerator, split
from simple_binlog.routing import ShardRouter
from tests.integration.mock_replay.helpers import Shards, admin

COLUMNS = "id INT NOT NULL PRIMARY KEY, v VARCHAR(20)"
VALUES = "SELECT s.seq, CONCAT('v', s.seq)"


def _mysql_content(settings: Settings, table: str) -> dict[tuple, dict]:
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT id, v FROM {table} ORDER BY id")
        return {(row[0],): {"id": row[0], "v": row[1]} for row in cursor.fetchall()}


def test_mock_rows_lose_to_later_binlog_changes_in_either_order(
    local_stack: Settings, shards: Shards
) -> None:
    from tests.integration.mock_replay.helpers import replay_to_memory

    (table,) = shards.create(1, 1, COLUMNS, 5, VALUES)
    with admin(local_stack) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
    replayed, _, _ = replay_to_memory(
        local_stack, ReplayRequest("local", shards.db, "orders"), now=dt.datetime.now(dt.UTC)
    )
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET v = 'changed' WHERE id = 1")
        cursor.execute(f"DELETE FROM {table} WHERE id = 2")
        cursor.execute(f"INSERT INTO {table} VALUES (6, 'new')")
        cursor.execute(f"UPDATE {table} SET id = 7 WHERE id = 3")  # a key change
        end = server_position(cursor)
    collected = list(
        read_range(
            local_stack.instances[0], start.gtid, end, OffsetGenerator(), [table.split(".")[0]]
        )
    )
    assert len(replayed) == 5 and len(collected) == 4
    assert max(m.binlog_offset for m in replayed) < min(m.binlog_offset for m in collected)
    assert {split(m.binlog_offset)[1] for m in replayed} == {0}
    expected = _mysql_content(local_stack, table)
    logical = ShardRouter(local_stack.shard_rules).route(*table.split(".")).name

    for order in (replayed + collected, collected + replayed):
        mirror = InMemoryMirror(ShardRouter(local_stack.shard_rules))
        for message in order:
            mirror.apply(message)
        assert mirror.rows(logical) == expected
    # In the second order the replayed rows of keys 1, 2 and 3 arrived late and were stale.
    assert mirror.stale == 3
