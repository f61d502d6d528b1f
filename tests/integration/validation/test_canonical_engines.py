"""The canonical encoding gives the same piece and row hash on MySQL, on PostgreSQL (stored
as the warehouse stores it) and in Python (from the wire value Redis holds), for every type
of the type table's REPRESENTATIVE_TYPES, NULL included; and distinct values (floats one unit
in the last place apart, NULL, '' and 'NULL') give distinct pieces.

PostgreSQL's spelling is IMMUTABLE: PostgreSQL accepts it as a stored generated column (the
warehouse's row hash, ``cdc_platform.canonical_sql``), and the session writing and reading
the rows has settings unlike the defaults (DateStyle, IntervalStyle, extra_float_digits,
TimeZone), which change neither the pieces nor the stored hashes."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pymysql
import pytest
from psycopg import sql

from cdc_platform.canonical_sql import pg_functions, pg_hash_value, pg_row_hash
from cdc_platform.config import Settings
from mirror.pgtypes import pg_text, pg_type
from simple_binlog.type_table import REPRESENTATIVE_TYPES
from simple_binlog.values import encode, parse_column_type
from tests.integration.mirror.targets import pg_connect
from validation.canonical import MYSQL, PG_JSON_FUNCTIONS, POSTGRES, python_piece, python_row_hash

# MySQL literals per type, display widths left out (NULL is added to each).
SAMPLES: dict[str, list[str]] = {
    "tinyint": ["-128", "127", "0"],
    "int": ["-2147483648", "42"],
    "int unsigned": ["4294967295"],
    "int unsigned zerofill": ["42", "0"],
    "bigint": ["-9223372036854775808", "9223372036854775807"],
    "bigint unsigned": ["18446744073709551615", "0"],
    "decimal(12,2)": ["12.3", "-0.5", "0"],
    "decimal(65,30)": [
        "12345678901234567890123456789012345.123456789012345678901234567890",
        "-0.000000000000000000000000000001",
    ],
    "float": [
        "1.1",
        "3.4e38",
        "-1e-7",
        "0",
        "16777216",
        "1.0000001",  # the float32 after 1
        "1",
        "-0.000015",
        "123456.79",
        "1e-38",
    ],
    "float(7,3)": ["1.25", "-1234.567"],
    "double": [
        "0.1",
        "0.10000000000000002",  # the double after 0.1
        "1e20",
        "-2.5e-300",
        "123456789012345680",
        "0",
        "0.30000000000000004",
        "1e15",  # the servers' switch between plain and exponent forms
        "1e14",
        "99999999999999.98",  # the last double below 1e14
        "100000000000000.02",
        "999999999999999.9",
        "999999999999999.94",  # printed 1e15
        "123",
        "-7.5",
        "0.9999999999999999",
        "0.0001",
        "0.00001",
        "-0.000015",
        "14285.714285714286",
        "100000",
        "5e-324",
        "1.7976931348623157e308",
        "-1234.5",
        "0.0009765625",  # 2^-10: the exact form's range starts here
        "-0.0009765625",
        "0.0009765624999999999",  # the double below it
        "9007199254740991",  # 2^53 - 1: the range's last integer
        "9007199254740992",  # 2^53: the shortest digits again
        "-4503599627370495.5",
        "-0.5",
        "-0",
    ],
    "date": ["'2024-02-29'", "'0999-01-01'"],
    "datetime": ["'2024-01-05 10:11:12'", "'0001-01-01 00:00:00'"],
    "datetime(6)": ["'2024-01-05 10:11:12.123456'", "'2024-01-05 10:11:12'"],
    "timestamp(3)": ["'2024-01-05 10:11:12.500'", "'1970-01-01 00:00:01'"],
    "time": ["'-838:59:59'", "'01:02:03'"],
    "time(6)": ["'-00:00:00.000001'", "'838:59:59.000000'", "'12:00:00.5'"],
    "year": ["2024", "1901"],
    "bit(5)": ["b'10101'", "0"],
    "bit(64)": ["x'FFFFFFFFFFFFFFFF'", "1"],
    "enum('a','b')": ["'a'", "'b'"],
    "set('a','b')": ["'b,a'", "''"],
    "varchar(32)": ["''", "'ü:%x'", "'it''s'", "'NULL'", "'😀,é'", "'n'", "'a,b'", "'1:a'"],
    "json": [
        """'{"b": 1, "a": [1.5, "x", null, true]}'""",
        "'[]'",
        """'"s"'""",
        """'{"é": {"z": -0.001, "y": 12345678901234567890}, "B": "a\\\\nb"}'""",
    ],
    "binary(16)": ["'ab'", "x'00'"],
    "blob": ["''", "x'00ff'"],
    "geometry": ["ST_GeomFromText('POINT(1 2)')"],
    "point": ["ST_GeomFromText('POINT(3 4)')"],
    "uuid": ["'123e4567-e89b-12d3-a456-426614174000'"],
    "inet4": ["'192.168.0.1'"],
    "inet6": ["'::ffff:1.2.3.4'", "'2001:db8::1'"],
}


def _plain(spec: str) -> str:
    return re.sub(r"(int|year)\(\d+\)", r"\1", spec)


@pytest.fixture()
def databases(
    local_stack: Settings,
) -> Iterator[tuple[pymysql.Connection, psycopg.Connection, str]]:
    name = f"vc{uuid.uuid4().hex[:8]}"
    mysql = pymysql.connect(
        host="127.0.0.1",
        port=local_stack.instances[0].port,
        user=local_stack.stack.admin_user,
        password=local_stack.stack.admin_password.get_secret_value(),
        autocommit=True,
        init_command="SET time_zone = '+00:00'",
    )
    pg = pg_connect(local_stack)
    with mysql.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    pg.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    # Settings the canonical SQL must not depend on (each changes a value's ::text).
    pg.execute("SET TIME ZONE 'Asia/Kathmandu'")
    pg.execute("SET extra_float_digits = -3")
    pg.execute("SET DateStyle = 'SQL, DMY'")
    pg.execute("SET IntervalStyle = 'sql_standard'")
    for statement in [*PG_JSON_FUNCTIONS, *pg_functions(name)]:
        pg.execute(statement)
    yield mysql, pg, name
    with mysql.cursor() as cursor:
        cursor.execute(f"DROP DATABASE {name}")
    pg.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
    mysql.close()
    pg.close()


def test_every_representative_type_hashes_alike_on_mysql_postgres_and_python(databases) -> None:
    mysql, pg, name = databases
    assert {_plain(spec) for spec in REPRESENTATIVE_TYPES} <= set(SAMPLES)
    mismatches = []
    collisions: list[tuple[str, object, object]] = []
    compared = 0
    for index, spec in enumerate(REPRESENTATIVE_TYPES):
        column = parse_column_type(spec)
        table = f"t{index}"
        literals = [*SAMPLES[_plain(spec)], "NULL"]
        with mysql.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {name}.{table} (id INT PRIMARY KEY, v {spec} NULL)")
            values = ", ".join(f"({i}, {lit})" for i, lit in enumerate(literals))
            cursor.execute(f"INSERT INTO {name}.{table} VALUES {values}")
            row_hash = MYSQL.row_hash(MYSQL.shard_piece("d.t"), [MYSQL.piece("v", column)])
            cursor.execute(
                f"SELECT id, v, {MYSQL.piece('v', column)}, {row_hash} "
                f"FROM {name}.{table} ORDER BY id"
            )
            rows = cursor.fetchall()
        target = sql.Identifier(name, table)
        # The stored row hash as the warehouse mirror defines it, its functions in the schema.
        stored = pg_hash_value(pg_row_hash(name, [("v", column)], POSTGRES.shard_piece("d.t")))
        pg.execute(
            sql.SQL(
                "CREATE TABLE {} (id int, v {}, h bigint GENERATED ALWAYS AS ({}) STORED)"
            ).format(target, sql.SQL(pg_type(spec)), sql.SQL(stored))
        )
        wires = {}
        with (
            pg.cursor() as cursor,
            cursor.copy(sql.SQL("COPY {} (id, v) FROM STDIN").format(target)) as copy,
        ):
            for row_id, value, _, _ in rows:
                wires[row_id] = encode(column, value)
                copy.write_row((row_id, pg_text(spec, wires[row_id])))
        pg_hash = POSTGRES.row_hash(POSTGRES.shard_piece("d.t"), [POSTGRES.piece("v", column)])
        stored = {}
        kept = {}
        for row_id, piece, row_hash, value in pg.execute(
            sql.SQL("SELECT id, {}, {}, h FROM {}").format(
                sql.SQL(POSTGRES.piece("v", column)), sql.SQL(pg_hash), target
            )
        ).fetchall():
            stored[row_id] = (piece, row_hash)
            kept[row_id] = value
        pieces: dict[str, object] = {}
        for row_id, _, mysql_piece, mysql_hash in rows:
            compared += 1
            python = python_piece(column, wires[row_id])
            python_hash = python_row_hash("d.t", [column], [wires[row_id]])
            if not ((mysql_piece, mysql_hash) == stored[row_id] == (python, python_hash)):
                mismatches.append((spec, literals[row_id], mysql_piece, stored[row_id], python))
            # The stored hash is the md5's first 64 bits, as a signed bigint.
            if kept[row_id] & (2**64 - 1) != int(python_hash[:16], 16):
                mismatches.append((spec, literals[row_id], "stored", kept[row_id], python_hash))
            if pieces.setdefault(python, wires[row_id]) != wires[row_id]:
                collisions.append((spec, pieces[python], wires[row_id]))
    assert compared > 2 * len(REPRESENTATIVE_TYPES)
    assert mismatches == []
    assert collisions == []  # distinct values, distinct pieces
