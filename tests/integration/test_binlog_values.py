"""Every MySQL column type, through the real binlog and back.

Rows are written to MariaDB, read from its row binlog with python-mysql-replication, turned
into SimpleBinlog messages, serialised, parsed and decoded; the decoded values must equal what
a SELECT returns (normalised to the contract's canonical Python values).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pymysql
import pytest

from cdc_platform.config import Settings
from collector.reader import ServerPosition, read_range, server_position
from collector.schema import load_table_schema
from simple_binlog.message import EventType, decode_message
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.values import canonical, parse_column_type

DB = f"cdc_types_{uuid.uuid4().hex[:8]}"

DDL = f"""
CREATE TABLE {DB}.every_type (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  bo BOOLEAN,
  de DECIMAL(20,6), de0 DECIMAL(65,0), deu DECIMAL(10,2) UNSIGNED,
  fl FLOAT, db DOUBLE,
  d DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6),
  ts0 TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL,
  tm0 TIME, tm2 TIME(2), tm4 TIME(4), tm6 TIME(6),
  y YEAR, b1 BIT(1), b10 BIT(10), b64 BIT(64),
  e ENUM('a','b','it''s'), s SET('x','y','z'),
  c CHAR(5), vc VARCHAR(50), tt TINYTEXT, tx TEXT, mt MEDIUMTEXT, lt LONGTEXT,
  js JSON,
  bn BINARY(6), vb VARBINARY(20), tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lb LONGBLOB,
  g GEOMETRY NULL, u UUID NULL, i4 INET4 NULL, i6 INET6 NULL
)
"""

ROWS = [
    # extremes
    (
        "(18446744073709551615, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648,"
        " 4294967295, -9223372036854775808, 18446744073709551615, TRUE,"
        " '-99999999999999.999999', '99999999999999999999999999999999999999999999999999999999999999999',"
        " '12345678.90', 3.4028234e38, -1.7976931348623157e308,"
        " '1000-01-01', '9999-12-31 23:59:59', '2026-11-21 23:59:59.999', '2026-11-21 23:59:59.123456',"
        " '1970-01-01 00:00:01', '2038-01-19 03:14:07.999999',"
        " '-838:59:59', '-838:59:59.99', '-00:00:00.0001', '838:59:59.000001',"
        " 2155, b'1', b'1010101010', b'1111111111111111111111111111111111111111111111111111111111111111',"
        " 'it''s', 'z,x', 'ab', '', 'é', 'héllo 😀 \\n\\t', REPEAT('m', 70000), REPEAT('l', 100000),"
        ' \'{"a": [1, 2.5, "x"], "b": null}\','
        " x'0102', x'', x'00', x'00ff10', REPEAT(x'ab', 70000), x'ff00ff',"
        " ST_GeomFromText('POINT(1 2)'), '6ccd780c-baba-1026-9564-5b8c656024db', '1.2.3.4', '::ffff:1.2.3.4')"
    ),
    # ordinary values
    (
        "(2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, FALSE, '0.000001', '0', '0.00', 0.1, 0.1,"
        " '2026-11-21', '2026-11-21 12:00:00', '2026-11-21 12:00:00.5', '2026-11-21 12:00:00.000001',"
        " '2026-11-21 12:34:56', '2026-11-21 12:34:56.654321',"
        " '12:34:56', '00:00:00.5', '-01:02:03.4567', '-00:00:00.000001',"
        " 1901, b'0', b'0', b'0', 'a', '', 'x', 'short', 't', 'text', 'm', 'l', '[]',"
        " x'000000000000', x'00', x'ff', x'', x'', x'',"
        " ST_GeomFromText('LINESTRING(0 0, 1 1)'), '01234567-89ab-6def-8123-456789abcdef', '0.0.0.0', '2001:db8::1')"
    ),
    # NULL everywhere but the key
    "(3" + ", NULL" * 49 + ")",
    # empty strings and zero-ish values, distinct from NULL
    (
        "(4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '0', '0', '0', 0, 0, '2000-01-01', '2000-01-01 00:00:00',"
        " '2000-01-01 00:00:00', '2000-01-01 00:00:00', '2000-01-01 00:00:00', '2000-01-01 00:00:00',"
        " '00:00:00', '00:00:00', '00:00:00', '00:00:00', 2000, b'0', b'0', b'0', 'b', '',"
        " '', '', '', '', '', '', '\"\"', '', '', '', '', '', '', NULL, '00000000-0000-0000-0000-000000000000', '0.0.0.0', '::')"
    ),
]


@pytest.fixture(scope="module")
def admin(local_stack: Settings) -> Iterator[pymysql.connections.Connection]:
    connection = pymysql.connect(
        host="127.0.0.1",
        port=local_stack.instances[0].port,
        user=local_stack.stack.admin_user,
        password=local_stack.stack.admin_password.get_secret_value(),
        autocommit=True,
        init_command="SET time_zone = '+00:00'",
    )
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {DB}")
    yield connection
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DB}")
    connection.close()


def _read_binlog(settings: Settings, start: ServerPosition, end: ServerPosition, schema):
    """The table's SimpleBinlog messages between two positions, serialised and parsed back."""
    messages = read_range(settings.instances[0], start.gtid, end, OffsetGenerator(), [DB])
    return [
        decode_message(message.encode())
        for message in messages
        if message.table_name == schema.table
    ]


def _selected(cursor, schema) -> dict[int, dict]:
    # The text protocol prints FLOAT with 6 significant digits; the column holds the exact
    # float32, which the binlog carries. Read it as DOUBLE to compare against the real value.
    columns = ", ".join(
        f"CAST(`{name}` AS DOUBLE) AS `{name}`" if spec.startswith("float") else f"`{name}`"
        for name, spec in schema.column_types.items()
    )
    cursor.execute(f"SELECT {columns} FROM {DB}.every_type ORDER BY id")
    names = [d[0] for d in cursor.description]
    rows = {}
    for values in cursor.fetchall():
        row = dict(zip(names, values, strict=True))
        rows[row["id"]] = {
            name: canonical(parse_column_type(schema.column_types[name]), value)
            for name, value in row.items()
        }
    return rows


def test_every_type_survives_binlog_and_json(local_stack: Settings, admin) -> None:
    with admin.cursor() as cursor:
        cursor.execute(DDL)
        schema = load_table_schema(cursor, DB, "every_type")
        start = server_position(cursor)
        for values in ROWS:
            cursor.execute(f"INSERT INTO {DB}.every_type VALUES {values}")
        end = server_position(cursor)
        expected = _selected(cursor, schema)

    messages = _read_binlog(local_stack, start, end, schema)

    assert [m.event_type for m in messages] == [EventType.INSERT] * len(ROWS)
    decoded = {m.decoded_content()["id"]: m.decoded_content() for m in messages}
    assert decoded.keys() == expected.keys()
    for key, row in expected.items():
        for column, value in row.items():
            assert decoded[key][column] == value, f"row {key} column {column}"
    # Spot checks that the canonical values are the natural ones, not merely equal garbage.
    first = decoded[18446744073709551615]
    assert first["biu"] == 2**64 - 1
    assert first["de"] == Decimal("-99999999999999.999999")
    assert first["tm2"] == -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=990000)
    assert first["tm4"] == -dt.timedelta(microseconds=100)
    assert first["dt6"] == dt.datetime(2026, 11, 21, 23, 59, 59, 123456)
    assert first["b64"] == 2**64 - 1
    assert first["s"] == "x,z"
    assert first["bn"] == b"\x01\x02\x00\x00\x00\x00"
    assert first["u"] == "6ccd780c-baba-1026-9564-5b8c656024db"
    assert first["i6"] == "::ffff:1.2.3.4"
    nulls, empties = decoded[3], decoded[4]
    assert all(v is None for k, v in nulls.items() if k != "id")
    assert empties["vc"] == "" and empties["s"] == "" and empties["vb"] == b""


def test_update_and_delete_carry_before_and_after_images(local_stack: Settings, admin) -> None:
    with admin.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {DB}.small (id INT PRIMARY KEY, v VARCHAR(10), s SET('p','q'))"
        )
        schema = load_table_schema(cursor, DB, "small")
        start = server_position(cursor)
        cursor.execute(f"INSERT INTO {DB}.small VALUES (1, 'one', 'p'), (2, NULL, '')")
        cursor.execute(f"UPDATE {DB}.small SET v = 'uno', s = '' WHERE id = 1")
        cursor.execute(f"UPDATE {DB}.small SET id = 20 WHERE id = 2")
        cursor.execute(f"DELETE FROM {DB}.small WHERE id = 20")
        end = server_position(cursor)

    messages = _read_binlog(local_stack, start, end, schema)

    assert [(m.event_type.value, m.content["id"]) for m in messages] == [
        ("INSERT", 1),
        ("INSERT", 2),
        ("UPDATE", 1),
        ("UPDATE", 20),
        ("DELETE", 20),
    ]
    update = messages[2]
    assert update.before_content == {"id": 1, "v": "one", "s": "p"}
    assert update.content == {"id": 1, "v": "uno", "s": ""}
    assert messages[3].before_content == {"id": 2, "v": None, "s": ""}
    assert messages[1].content == {"id": 2, "v": None, "s": ""}
    assert messages[4].content == {"id": 20, "v": None, "s": ""}
    assert schema.primary_keys == ("id",)
    offsets = [m.binlog_offset for m in messages]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [m.position.row_index for m in messages[:2]] == [0, 1]
