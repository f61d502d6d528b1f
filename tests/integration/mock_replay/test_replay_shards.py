"""Every shard of a logical table replayed into Kafka through the API: counts and values equal
to MySQL, keys and offsets as the contract says, status from the progress topic; a run
cancelled part-way and resumed publishes each row once; conditions select the same rows as
MySQL; the chunk query pages the key's index (no full scans)."""

from __future__ import annotations

import time

from cdc_platform.config import Settings
from mock_replay.api import ReplayService
from mock_replay.plan import chunk_query
from mock_replay.runner import ReplayRequest
from simple_binlog.message import EventType, Source
from simple_binlog.naming import topic_name
from simple_binlog.offsets import mock_offset
from tests.integration.mock_replay.helpers import (
    Shards,
    admin,
    mysql_rows,
    read_topic,
    replay_to_memory,
)

COLUMNS = (
    "shop INT NOT NULL, id BIGINT UNSIGNED NOT NULL, amount DECIMAL(12,2), created DATETIME(3),"
    " note VARCHAR(40), status ENUM('NEW','PAID'), weight FLOAT, PRIMARY KEY (shop, id)"
)
VALUES = (
    "SELECT s.seq % 7, s.seq * 1000 + {shard}, s.seq * 1.25,"
    " TIMESTAMP'2026-11-20 10:00:00.123' + INTERVAL s.seq SECOND, CONCAT('n', s.seq),"
    " IF(s.seq % 2, 'NEW', 'PAID'), s.seq / 7"
)
ROWS = 250


def _wait_until(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _published(settings: Settings):
    return read_topic(settings, topic_name(settings.kafka, "local"))


def _assert_equal_to_mysql(settings: Settings, messages, shapes) -> None:
    assert {f"{m.schema_name}.{m.table_name}" for _, m in messages} == set(shapes)
    seen: set[tuple] = set()
    for name, shape in shapes.items():
        expected = mysql_rows(settings, shape)
        got = {}
        for key, message in messages:
            if f"{message.schema_name}.{message.table_name}" != name:
                continue
            assert key == name.encode()  # the collector's partition key
            content = message.decoded_content()
            row_key = tuple(content[k] for k in shape.key)
            assert (name, row_key) not in seen, f"{name} {row_key} published twice"
            seen.add((name, row_key))
            got[row_key] = content
        assert got == expected, name


def test_all_shards_replayed_with_values_equal_to_mysql(
    kafka_settings: Settings, shards: Shards
) -> None:
    names = shards.create(3, 4, COLUMNS, ROWS, VALUES)
    # Not part of the logical table: another table prefix, another database prefix.
    shards.execute(
        f"CREATE TABLE {shards.db}_00.orders_ext_00 (id INT PRIMARY KEY)",
        f"INSERT INTO {shards.db}_00.orders_ext_00 VALUES (1)",
    )
    shards.databases.append(f"{shards.db}x_00")
    shards.execute(
        f"CREATE DATABASE {shards.db}x_00",
        f"CREATE TABLE {shards.db}x_00.orders_00 (id INT PRIMARY KEY)",
        f"INSERT INTO {shards.db}x_00.orders_00 VALUES (1)",
    )
    service = ReplayService(kafka_settings)

    run_id = service.start(
        ReplayRequest("local", shards.db, "orders", batch_size=100, execute_day="2026-11-21")
    )
    outcome = service.wait(run_id, timeout_s=240)

    assert outcome is not None and outcome.state == "done"
    assert outcome.rows == 12 * ROWS
    status = service.status(run_id)
    assert status.state_name == "done"
    assert sorted(status.spec.tables) == sorted(names)
    assert status.rows_done == 12 * ROWS
    assert all(t.state == "done" and t.rows_done == ROWS for t in status.tables.values())
    assert any(r.spec.run_id == run_id for r in service.runs("local"))
    messages = _published(kafka_settings)
    assert len(messages) == 12 * ROWS
    offset = mock_offset(status.spec.query_start)
    assert {(m.source, m.event_type, m.binlog_offset) for _, m in messages} == {
        (Source.MOCK, EventType.INSERT, offset)
    }
    from mock_replay.source import MySQLSource

    source = MySQLSource(kafka_settings.instance("local"))
    try:
        shapes = {name: source.shape(*name.split(".")) for name in names}
    finally:
        source.close()
    _assert_equal_to_mysql(kafka_settings, messages, shapes)


def test_cancelled_run_resumes_and_publishes_each_row_once(
    kafka_settings: Settings, shards: Shards
) -> None:
    names = shards.create(2, 2, COLUMNS, ROWS, VALUES)
    service = ReplayService(kafka_settings)
    run_id = service.start(
        ReplayRequest("local", shards.db, "orders", batch_size=50, rate_limit=150)
    )
    _wait_until(lambda: service.status(run_id).rows_done >= 100, "the first chunks")

    service.cancel(run_id)
    outcome = service.wait(run_id, timeout_s=60)

    assert outcome is not None and outcome.state == "cancelled"
    cancelled = service.status(run_id)
    assert cancelled.state_name == "cancelled"
    assert 0 < cancelled.rows_done < 4 * ROWS
    assert len(_published(kafka_settings)) == cancelled.rows_done

    service.resume("local", run_id, rate_limit=0)
    resumed = service.wait(run_id, timeout_s=240)

    assert resumed is not None and resumed.state == "done"
    assert service.status(run_id).rows_done == 4 * ROWS
    messages = _published(kafka_settings)
    assert len(messages) == 4 * ROWS
    from mock_replay.source import MySQLSource

    source = MySQLSource(kafka_settings.instance("local"))
    try:
        shapes = {name: source.shape(*name.split(".")) for name in names}
    finally:
        source.close()
    _assert_equal_to_mysql(kafka_settings, messages, shapes)


def test_condition_selects_the_rows_mysql_selects(local_stack: Settings, shards: Shards) -> None:
    shards.create(2, 2, COLUMNS, ROWS, VALUES)
    condition = "status = 'PAID' AND (amount > 100 OR note LIKE 'n1%') AND shop NOT IN (0, 3)"

    messages, _, prepared = replay_to_memory(
        local_stack, ReplayRequest("local", shards.db, "orders", condition=condition, batch_size=30)
    )

    with admin(local_stack) as conn, conn.cursor() as cursor:
        expected = 0
        for name in prepared.spec.tables:
            cursor.execute(f"SELECT COUNT(*) FROM {name} WHERE {condition}")
            expected += cursor.fetchone()[0]
    assert 0 < len(messages) == expected
    assert all(m.content["status"] == "PAID" for m in messages)
    keys = [(m.table_name, m.schema_name, m.content["shop"], m.content["id"]) for m in messages]
    assert len(set(keys)) == len(keys)


def test_chunk_query_is_a_range_scan_of_the_primary_key(
    local_stack: Settings, shards: Shards
) -> None:
    shards.create(1, 1, COLUMNS, 2000, VALUES)
    _, _, prepared = replay_to_memory(local_stack, ReplayRequest("local", shards.db, "orders"))
    shape = next(iter(prepared.shapes.values()))
    sql, params = chunk_query(shape, None, (3, 1500000), 100)
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {shape.schema}.{shape.table}")
        cursor.execute("EXPLAIN " + sql, params)
        names = [d[0] for d in cursor.description]
        plan = dict(zip(names, cursor.fetchone(), strict=True))
    assert plan["key"] == "PRIMARY"
    assert plan["type"] == "range"
    assert "filesort" not in str(plan["Extra"])


def test_enum_keys_page_in_their_definition_order(local_stack: Settings, shards: Shards) -> None:
    """ORDER BY sorts an ENUM by definition order, not by label: the keyset must too."""
    shards.create(
        1,
        1,
        "kind ENUM('z','a','m') NOT NULL, id INT NOT NULL, PRIMARY KEY (kind, id)",
        30,
        "SELECT ELT(1 + s.seq % 3, 'z', 'a', 'm'), s.seq",
    )
    messages, _, _ = replay_to_memory(
        local_stack, ReplayRequest("local", shards.db, "orders", batch_size=4)
    )
    keys = [(m.content["kind"], m.content["id"]) for m in messages]
    assert len(keys) == len(set(keys)) == 30
    assert [k for k, _ in keys] == ["z"] * 10 + ["a"] * 10 + ["m"] * 10


def test_negative_time_keys_page_correctly(local_stack: Settings, shards: Shards) -> None:
    shards.create(
        1, 1, "t TIME(6) NOT NULL PRIMARY KEY", 20,
        "SELECT SEC_TO_TIME(CAST(s.seq AS SIGNED) * 7 - 70)",
    )  # fmt: skip
    messages, _, _ = replay_to_memory(
        local_stack, ReplayRequest("local", shards.db, "orders", batch_size=3)
    )
    times = [m.decoded_content()["t"] for m in messages]
    assert len(times) == len(set(times)) == 20
    assert times == sorted(times) and times[0].total_seconds() == -63
