"""Replayed rows carry exactly what the collector publishes for the same rows.

The same rows are read twice: from the row binlog by the collector's reader, and by a replay
(SELECTs in key order). Their ``content`` must be identical in the wire form — DECIMAL,
unsigned, DATETIME fractions, TIMESTAMP in UTC, BIT, SET, ENUM, JSON, binary/BLOB, FLOAT,
MariaDB's UUID/INET — and equal to MySQL's values in the contract's canonical form.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from cdc_platform.config import Settings
from collector.reader import read_range, server_position
from mock_replay.runner import ReplayRequest
from mock_replay.source import MySQLSource
from simple_binlog.message import EventType, Source
from simple_binlog.offsets import OffsetGenerator, mock_offset
from tests.integration.mock_replay.helpers import Shards, admin, mysql_rows, replay_to_memory

COLUMNS = """
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  ti TINYINT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, bo BOOLEAN,
  de DECIMAL(20,6), de0 DECIMAL(65,0), deu DECIMAL(10,2) UNSIGNED,
  fl FLOAT, db DOUBLE,
  d DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6),
  ts0 TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL,
  tm0 TIME, tm2 TIME(2), tm6 TIME(6),
  y YEAR, b1 BIT(1), b10 BIT(10), b64 BIT(64),
  e ENUM('a','b','it''s'), s SET('x','y','z'),
  c CHAR(5), vc VARCHAR(50), tx TEXT, js JSON,
  bn BINARY(6), vb VARBINARY(20), bl BLOB,
  g GEOMETRY NULL, u UUID NULL, i4 INET4 NULL, i6 INET6 NULL
"""

ROWS = [
    "(18446744073709551615, -128, 4294967295, -9223372036854775808, 18446744073709551615, TRUE,"
    " '-99999999999999.999999', '99999999999999999999999999999999999999999999999999999999999999999',"
    " '12345678.90', 3.4028234e38, -1.7976931348623157e308,"
    " '1000-01-01', '9999-12-31 23:59:59', '2026-11-21 23:59:59.999', '2026-11-21 23:59:59.123456',"
    " '1970-01-01 00:00:01', '2038-01-19 03:14:07.999999',"
    " '-838:59:59', '-838:59:59.99', '838:59:59.000001',"
    " 2155, b'1', b'1010101010', b'1111111111111111111111111111111111111111111111111111111111111111',"
    " 'it''s', 'z,x', 'ab', 'héllo 😀', REPEAT('l', 60000), '{\"a\": [1, 2.5, \"x\"], \"b\": null}',"
    " x'0102', x'00ff10', REPEAT(x'ab', 7000),"
    " ST_GeomFromText('POINT(1 2)'), '6ccd780c-baba-1026-9564-5b8c656024db', '1.2.3.4', '::ffff:1.2.3.4')",
    "(2, 1, 8, 9, 10, FALSE, '0.000001', '0', '0.00', 1.2345678, 0.1,"
    " '2026-11-21', '2026-11-21 12:00:00', '2026-11-21 12:00:00.5', '2026-11-21 12:00:00.000001',"
    " '2026-11-21 12:34:56', '2026-11-21 12:34:56.654321',"
    " '12:34:56', '-00:00:00.01', '-00:00:00.000001',"
    " 1901, b'0', b'0', b'0', 'a', '', 'x', '', '', '[]',"
    " x'000000000000', x'', x'',"
    " ST_GeomFromText('LINESTRING(0 0, 1 1)'), '01234567-89ab-6def-8123-456789abcdef', '0.0.0.0', '2001:db8::1')",
    "(3" + ", NULL" * 36 + ")",
]


@pytest.fixture()
def chunk_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every chunk the replay reads, to tell which path was taken."""
    queries: list[str] = []
    read_chunk = MySQLSource.read_chunk

    def recording(self: MySQLSource, sql: str, params: Sequence[object], table: str) -> Any:
        queries.append(sql)
        return read_chunk(self, sql, params, table)

    monkeypatch.setattr(MySQLSource, "read_chunk", recording)
    return queries


@pytest.mark.parametrize("server_json", [True, False], ids=["server-json", "python-encoding"])
def test_replayed_values_equal_the_collectors_and_mysqls(
    local_stack: Settings, shards: Shards, server_json: bool, chunk_queries: list[str]
) -> None:
    replay = local_stack.replay.model_copy(update={"server_json": server_json})
    settings = local_stack.model_copy(update={"replay": replay})
    shards.create(1, 1, COLUMNS, 0, "")
    table = f"{shards.db}_00.{shards.table}_00"
    with admin(local_stack) as conn, conn.cursor() as cursor:
        start = server_position(cursor)
        for values in ROWS:
            cursor.execute(f"INSERT INTO {table} VALUES {values}")
        end = server_position(cursor)
    binlog = {
        m.content["id"]: m
        for m in read_range(
            local_stack.instances[0], start.gtid, end, OffsetGenerator(), [f"{shards.db}_00"]
        )
    }
    query_start = dt.datetime.now(dt.UTC)

    replayed, _, prepared = replay_to_memory(
        settings,
        ReplayRequest("local", shards.db, shards.table, batch_size=2, execute_day="2026-11-21"),
        now=query_start,
    )

    assert len(replayed) == len(ROWS) == len(binlog)
    # The path under test was taken: one batch row per chunk built by the server, or columns.
    assert chunk_queries
    assert all(("GROUP_CONCAT(" in sql) == server_json for sql in chunk_queries)
    for message in replayed:
        collected = binlog[message.content["id"]]
        assert collected.event_type is EventType.INSERT
        assert message.content == collected.content, message.content["id"]
        assert message.column_types == collected.column_types
        assert message.primary_keys == collected.primary_keys == ("id",)
        assert message.source is Source.MOCK and collected.source is Source.BINLOG
        assert message.binlog_offset == mock_offset(int(query_start.timestamp()))
        assert message.binlog_offset < collected.binlog_offset
        assert (
            message.execute_time == int(dt.datetime(2026, 11, 21, tzinfo=dt.UTC).timestamp()) * 1000
        )
    shape = prepared.shapes[table]
    expected = mysql_rows(local_stack, shape)
    assert {(m.decoded_content()["id"],): m.decoded_content() for m in replayed} == expected
    # Spot checks that equal means right, not equally wrong.
    first = next(m.content for m in replayed if m.content["id"] == "18446744073709551615")
    assert first["de"] == "-99999999999999.999999"
    assert first["dt3"] == "2026-11-21 23:59:59.999"
    assert first["ts6"] == "2038-01-19 03:14:07.999999"
    assert first["tm2"] == "-838:59:59.99"  # exactly its fsp digits, as MySQL prints it
    # BINARY(6): all six bytes, the trailing zeros the binlog strips too.
    assert first["b64"] == 2**64 - 1 and first["s"] == "x,z" and first["bn"] == "AQIAAAAA"
    second = next(m.content for m in replayed if m.content["id"] == "2")
    assert second["fl"] == 1.2345677614212036  # the float32 value, not the text protocol's 1.23457
    nulls = next(m.content for m in replayed if m.content["id"] == "3")
    assert all(value is None for name, value in nulls.items() if name != "id")


MIXED_CHARSETS = """
  id INT NOT NULL PRIMARY KEY,
  l1 VARCHAR(20) CHARACTER SET latin1, bn VARCHAR(20) COLLATE utf8mb4_bin,
  uc VARCHAR(20) COLLATE utf8mb4_unicode_ci, asc_ VARCHAR(20) CHARACTER SET ascii,
  u3 VARCHAR(20) CHARACTER SET utf8mb3, u16 TEXT CHARACTER SET utf16,
  e ENUM('say "hi"', 'back\\\\slash', 'é') CHARACTER SET latin1,
  s SET('a', 'b') COLLATE utf8mb4_bin
"""


@pytest.mark.parametrize("server_json", [True, False], ids=["server-json", "python-encoding"])
def test_text_columns_of_different_charsets_and_collations_in_one_table(
    local_stack: Settings, shards: Shards, server_json: bool, chunk_queries: list[str]
) -> None:
    """One row's text comes from columns of several character sets and collations (MariaDB's
    JSON_OBJECT refuses to mix them); quotes, backslashes and control characters arrive as
    the text MySQL holds."""
    replay = local_stack.replay.model_copy(update={"server_json": server_json})
    settings = local_stack.model_copy(update={"replay": replay})
    shards.create(1, 1, MIXED_CHARSETS, 0, "")
    table = f"{shards.db}_00.{shards.table}_00"
    rows = [
        (1, 'é"\\', "x\ny\t", "ü", "plain", "€", "😀 \x00 \x1f end", 'say "hi"', "a,b"),
        (2, "", "", "", "", "", "", "back\\slash", ""),
        (3, *[None] * 8),
    ]
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * 9)})", rows)

    replayed, _, prepared = replay_to_memory(
        settings, ReplayRequest("local", shards.db, shards.table, batch_size=2)
    )

    assert all(("GROUP_CONCAT(" in sql) == server_json for sql in chunk_queries)
    expected = mysql_rows(local_stack, prepared.shapes[table])
    assert {(m.decoded_content()["id"],): m.decoded_content() for m in replayed} == expected
    first = next(m.content for m in replayed if m.content["id"] == 1)
    assert first["l1"] == 'é"\\' and first["bn"] == "x\ny\t" and first["u16"] == "😀 \x00 \x1f end"
    assert first["e"] == 'say "hi"' and first["s"] == "a,b"


def test_a_batch_too_long_for_the_server_is_read_row_by_row(
    local_stack: Settings, shards: Shards, caplog
) -> None:
    """GROUP_CONCAT cuts a batch longer than group_concat_max_len (= max_allowed_packet) with a
    warning only; the replay notices by the count and reads the chunk again row by row."""
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        packet = int(cursor.fetchone()[0])
    size = 1_000_000
    rows = packet // size + 4
    shards.create(
        1,
        1,
        "id INT PRIMARY KEY, body LONGTEXT",
        rows,
        f"SELECT s.seq, REPEAT(CHAR(96 + s.seq % 26), {size})",
    )

    with caplog.at_level(logging.INFO, logger="mock_replay"):
        replayed, _, _ = replay_to_memory(
            local_stack, ReplayRequest("local", shards.db, shards.table, batch_size=1000)
        )

    assert [m.content["id"] for m in replayed] == list(range(1, rows + 1))
    assert all(m.content["body"] == chr(96 + m.content["id"] % 26) * size for m in replayed)
    assert any(
        "a batch was cut by the server; reading it row by row" in r.getMessage()
        for r in caplog.records
    )
