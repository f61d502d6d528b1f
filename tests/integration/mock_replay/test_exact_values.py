"""Issue 24, item 2: the values MySQL holds, exactly, on both paths and in the stores.

One MariaDB table per affected type family, written in a session whose sql_mode is relaxed
(as servers outside strict mode run): dates with a zero month or day, BINARY(n) with trailing
zero bytes, integers with display widths and ZEROFILL, float(M,D), geometry subtypes, TIME of
every fsp. Each table is captured by the collector's reader (native and Python decoders) and
replayed (server-built JSON and Python encoding); every value of every message is compared with
a SELECT on MySQL, byte for byte (the text MySQL prints, the bytes it stores, no normalising),
``columnTypes`` with information_schema's COLUMN_TYPE, and the paths with each other. The
collector's messages are then applied to the warehouse mirror and to Redis, and what they hold
is compared with MySQL's values too.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from psycopg import sql

from cdc_platform.config import Settings
from collector.reader import read_range, server_position
from mirror.pgtypes import mysql_date_text
from mirror.plan import ChangeRouter
from mirror.redis_applier import RedisApplier
from mirror.warehouse import WarehouseApplier
from mock_replay.runner import ReplayRequest
from simple_binlog.message import SimpleBinlog
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.routing import ShardRouter
from simple_binlog.values import Kind, parse_column_type
from tests.integration.mirror.targets import live_redis_rows, pg_connect
from tests.integration.mock_replay.helpers import Shards, admin, replay_to_memory
from tests.unit.mirror.workload import table_mirror

# family → (columns after the key, rows of values after the key)
FAMILIES: dict[str, tuple[str, list[str]]] = {
    "partial-zero dates": (
        "d DATE, dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6)",
        [
            "'2024-00-15', '2024-00-00 10:11:12', '2024-03-00 23:59:59.125', "
            "'0000-00-00 10:11:12.000001'",
            "'2024-03-00', '2024-03-00 00:00:00', '0000-00-00 00:00:00.000', "
            "'0000-01-01 00:00:00.500001'",
            "'0000-00-00', '0000-00-00 00:00:00', '2024-00-31 01:02:03.456', "
            "'9999-12-00 23:59:59.999999'",
            "'2024-01-02', '2024-01-02 03:04:05', '2024-01-02 03:04:05.678', NULL",
        ],
    ),
    "binary(n)": (
        "b1 BINARY(1), b4 BINARY(4), b16 BINARY(16), vb VARBINARY(8)",
        [
            "x'00', x'01000000', x'00000000000000000000000000000000', x'0100'",
            "x'ff', x'0102', x'ab', x'00'",
            "'', '', '', ''",
            "NULL, x'00010000', x'ffffffffffffffffffffffffffffff00', NULL",
        ],
    ),
    "display widths and zerofill": (
        "ti TINYINT(1), si SMALLINT(3) UNSIGNED ZEROFILL, i INT(5) ZEROFILL, "
        "iu INT(10) UNSIGNED, bu BIGINT(20) UNSIGNED, bz BIGINT(20) UNSIGNED ZEROFILL, "
        "de DECIMAL(8,3) UNSIGNED ZEROFILL, y YEAR(4)",
        [
            "1, 7, 42, 4294967295, 18446744073709551615, 1, 12.5, 2024",
            "-128, 0, 0, 0, 0, 0, 0, 1901",
        ],
    ),
    "float(M,D)": (
        "f FLOAT(7,3), fu FLOAT(5,2) UNSIGNED, d DOUBLE(12,4), r FLOAT",
        ["1234.567, 1.5, 12345678.1234, 0.1", "-0.001, 999.99, -0.0001, 3.4028234e38"],
    ),
    "geometry subtypes": (
        "p POINT, l LINESTRING, pg POLYGON, mp MULTIPOINT, g GEOMETRY",
        [
            "ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('LINESTRING(0 0, 1 1)'), "
            "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))'), "
            "ST_GeomFromText('MULTIPOINT(0 0, 2 3)'), ST_GeomFromText('POINT(0 0)')",
        ],
    ),
    "time of every fsp": (
        "t0 TIME, t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4), t5 TIME(5), t6 TIME(6)",
        [
            "'-838:59:59', '-838:59:59.9', '01:02:03.4', '00:00:00', '-00:00:00.0001', "
            "'838:59:59.99999', '-00:00:00.000001'",
            "'00:00:00', '00:00:00.0', '-01:00:00.99', '12:34:56.789', '100:00:00.5', "
            "'-00:00:01.00001', '838:59:59.999999'",
        ],
    ),
}


def _information_schema(settings: Settings, schema: str, table: str) -> dict[str, str]:
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        return {str(name): str(spec) for name, spec in cursor.fetchall()}


def _mysql_expression(name: str, spec: str) -> str:
    """What MySQL says the value is, in the form its wire value must equal exactly: the
    text it prints, the bytes it stores, the number it holds."""
    kind = parse_column_type(spec).kind
    if kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP, Kind.TIME):
        return f"CAST(`{name}` AS CHAR)"
    if kind in (Kind.UINT64, Kind.DECIMAL):
        return f"CAST(`{name}` + 0 AS CHAR)"  # ZEROFILL's padded text is not the number
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        # The stored value: the text protocol prints 6 digits of a FLOAT, and D decimals of a
        # FLOAT(M,D) or DOUBLE(M,D), whose stored binary value has more.
        return f"CAST(`{name}` AS DOUBLE)"
    if kind in (Kind.INT, Kind.YEAR):
        return f"`{name}` + 0"  # ZEROFILL's padded text is not the number
    return f"`{name}`"  # BINARY, GEOMETRY: the stored bytes


def _selected(settings: Settings, table: str, types: dict[str, str]) -> dict[int, dict[str, Any]]:
    columns = ", ".join(_mysql_expression(name, spec) for name, spec in types.items())
    with admin(settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {table} ORDER BY id")
        return {row[0]: dict(zip(types, row, strict=True)) for row in cursor.fetchall()}


def _as_mysql(spec: str, wire: Any) -> Any:
    """A wire value in the form of ``_mysql_expression``: base64 decoded to the bytes, else
    the wire value itself (the text, the number)."""
    kind = parse_column_type(spec).kind
    if wire is not None and kind in (Kind.BINARY, Kind.GEOMETRY):
        return base64.b64decode(wire)
    return wire


def _assert_equal_to_mysql(
    messages: list[SimpleBinlog], expected: dict[int, dict[str, Any]], types: dict[str, str]
) -> None:
    assert len(messages) == len(expected)
    for message in messages:
        assert message.column_types == types
        row = expected[message.content["id"]]
        for name, spec in types.items():
            got = _as_mysql(spec, message.content[name])
            assert got == row[name], (message.content["id"], name, got, row[name])
            if isinstance(row[name], str | bytes):
                assert type(got) is type(row[name]), (name, got, row[name])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_collector_and_replay_carry_exactly_what_mysql_holds(
    local_stack: Settings, shards: Shards, family: str
) -> None:
    columns, rows = FAMILIES[family]
    shards.create(1, 1, f"id INT NOT NULL PRIMARY KEY, {columns}", 0, "")
    schema, table = f"{shards.db}_00", f"{shards.table}_00"
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")  # as a server outside strict mode
        start = server_position(cursor)
        for key, values in enumerate(rows, start=1):
            cursor.execute(f"INSERT INTO {schema}.{table} VALUES ({key}, {values})")
        end = server_position(cursor)
    types = _information_schema(local_stack, schema, table)
    expected = _selected(local_stack, f"{schema}.{table}", types)

    collected = {
        native: list(
            read_range(
                local_stack.instances[0], start.gtid, end, OffsetGenerator(), [schema], None, native
            )
        )
        for native in (True, False)
    }
    replayed = {}
    for server_json in (True, False):
        replay = local_stack.replay.model_copy(update={"server_json": server_json})
        settings = local_stack.model_copy(update={"replay": replay})
        replayed[server_json], _, _ = replay_to_memory(
            settings, ReplayRequest("local", shards.db, shards.table, batch_size=2)
        )

    for messages in (*collected.values(), *replayed.values()):
        _assert_equal_to_mysql(messages, expected, types)
    reference = {m.content["id"]: m.content for m in collected[False]}
    for messages in (collected[True], *replayed.values()):
        assert {m.content["id"]: m.content for m in messages} == reference


@pytest.fixture()
def store_settings(local_stack: Settings, shards: Shards) -> Iterator[Settings]:
    """The stack's settings with a warehouse schema and Redis key prefix of their own, mirroring
    the test's table."""
    tag = uuid.uuid4().hex[:8]
    scoped = local_stack.model_copy(
        update={
            "redis": local_stack.redis.model_copy(update={"key_prefix": f"ev{tag}"}),
            "mirror": local_stack.mirror.model_copy(update={"warehouse_schema": f"ev_{tag}"}),
            "tables": [table_mirror(db_prefix=shards.db, table_prefix=shards.table)],
        }
    )
    yield scoped
    client = redis.Redis.from_url(scoped.redis.url.get_secret_value())
    for key in client.scan_iter(f"{scoped.redis.key_prefix}:*", count=1000):
        client.delete(key)
    client.close()
    with pg_connect(scoped) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(scoped.mirror.warehouse_schema)
            )
        )


def _warehouse_rows(settings: Settings, logical: str, types: dict[str, str]) -> dict[int, dict]:
    """What the warehouse holds, each value as PostgreSQL prints it (dates as text)."""
    columns = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(name))
        if parse_column_type(spec).kind in (Kind.DATE, Kind.DATETIME)
        else sql.Identifier(name)
        for name, spec in types.items()
    )
    query = sql.SQL("SELECT {} FROM {}").format(
        columns, sql.Identifier(settings.mirror.warehouse_schema, logical)
    )
    with pg_connect(settings) as conn, conn.cursor() as cursor:
        cursor.execute(query)
        return {row[0]: dict(zip(types, row, strict=True)) for row in cursor.fetchall()}


@pytest.mark.parametrize("family", ["partial-zero dates", "binary(n)"])
def test_the_warehouse_and_redis_hold_exactly_what_mysql_holds(
    store_settings: Settings, shards: Shards, family: str
) -> None:
    """Partial-zero dates: Redis holds MySQL's text; the warehouse (whose date types cannot
    hold them) holds the documented encoding, read back to exactly MySQL's text. BINARY(n):
    both hold its n bytes."""
    columns, rows = FAMILIES[family]
    shards.create(1, 1, f"id INT NOT NULL PRIMARY KEY, {columns}", 0, "")
    schema, table = f"{shards.db}_00", f"{shards.table}_00"
    with admin(store_settings) as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")
        start = server_position(cursor)
        for key, values in enumerate(rows, start=1):
            cursor.execute(f"INSERT INTO {schema}.{table} VALUES ({key}, {values})")
        end = server_position(cursor)
    types = _information_schema(store_settings, schema, table)
    expected = _selected(store_settings, f"{schema}.{table}", types)
    messages = list(
        read_range(store_settings.instances[0], start.gtid, end, OffsetGenerator(), [schema])
    )
    logical = f"{shards.db}_{shards.table}"
    for target, applier in (
        ("redis", RedisApplier(store_settings.redis, store_settings.mirror, store_settings.tables)),
        (
            "warehouse",
            WarehouseApplier(store_settings.postgres, store_settings.mirror, store_settings.tables),
        ),
    ):
        router = ChangeRouter(
            store_settings.tables,
            ShardRouter(list(store_settings.shard_rules)),
            target,  # type: ignore[arg-type]
        )
        try:
            applier.apply_batch([c for m in messages for c in router.route("local", m).changes])
        finally:
            applier.close()

    in_redis = live_redis_rows(store_settings, logical)
    assert {int(key) for key in in_redis} == set(expected)
    for key, row in in_redis.items():
        for name, spec in types.items():
            assert _as_mysql(spec, row[name]) == expected[int(key)][name], (key, name)
    in_warehouse = _warehouse_rows(store_settings, logical, types)
    assert set(in_warehouse) == set(expected)
    for key, row in in_warehouse.items():
        for name, spec in types.items():
            kind = parse_column_type(spec).kind
            stored = row[name]
            if stored is not None and kind in (Kind.DATE, Kind.DATETIME):
                stored = mysql_date_text(stored, spec)  # exact, with the column's fsp
            want = expected[key][name]
            if isinstance(stored, memoryview):
                stored = bytes(stored)
            assert stored == want, (key, name, stored, want)
