"""The canonical encoding gives the same hash on MySQL, on PostgreSQL (stored as the
warehouse stores it) and in Python (from the wire value Redis holds), for every type of the
type table's REPRESENTATIVE_TYPES, NULL included."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pymysql
import pytest
from psycopg import sql

from cdc_platform.config import Settings
from mirror.pgtypes import pg_text, pg_type
from simple_binlog.type_table import REPRESENTATIVE_TYPES
from simple_binlog.values import encode, parse_column_type
from tests.integration.mirror.targets import pg_connect
from validation.canonical import MYSQL, PG_JSON_FUNCTIONS, POSTGRES, python_piece

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
    "float": ["1.1", "3.4e38", "-1e-7", "0", "16777216"],
    "float(7,3)": ["1.25", "-1234.567"],
    "double": ["0.1", "1e20", "-2.5e-300", "123456789012345680", "0", "0.30000000000000004"],
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
    "varchar(32)": ["''", "'ü:%x'", "'it''s'"],
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
    pg.execute("SET TIME ZONE 'UTC'")
    pg.execute("SET extra_float_digits = 1")
    for statement in PG_JSON_FUNCTIONS:
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
    compared = 0
    for index, spec in enumerate(REPRESENTATIVE_TYPES):
        column = parse_column_type(spec)
        table = f"t{index}"
        literals = [*SAMPLES[_plain(spec)], "NULL"]
        with mysql.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {name}.{table} (id INT PRIMARY KEY, v {spec} NULL)")
            values = ", ".join(f"({i}, {lit})" for i, lit in enumerate(literals))
            cursor.execute(f"INSERT INTO {name}.{table} VALUES {values}")
            cursor.execute(
                f"SELECT id, v, {MYSQL.piece('v', column)} FROM {name}.{table} ORDER BY id"
            )
            rows = cursor.fetchall()
        target = sql.Identifier(name, table)
        pg.execute(sql.SQL("CREATE TABLE {} (id int, v {})").format(target, sql.SQL(pg_type(spec))))
        wires = {}
        with (
            pg.cursor() as cursor,
            cursor.copy(sql.SQL("COPY {} (id, v) FROM STDIN").format(target)) as copy,
        ):
            for row_id, value, _ in rows:
                wires[row_id] = encode(column, value)
                copy.write_row((row_id, pg_text(spec, wires[row_id])))
        stored = dict(
            pg.execute(
                sql.SQL("SELECT id, {} FROM {}").format(
                    sql.SQL(POSTGRES.piece("v", column)), target
                )
            ).fetchall()
        )
        for row_id, _, mysql_piece in rows:
            compared += 1
            python = python_piece(column, wires[row_id])
            if not (mysql_piece == stored[row_id] == python):
                mismatches.append((spec, literals[row_id], mysql_piece, stored[row_id], python))
    assert compared > 2 * len(REPRESENTATIVE_TYPES)
    assert mismatches == []
