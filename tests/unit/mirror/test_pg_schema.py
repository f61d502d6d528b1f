"""The decision table of warehouse schema changes (docs/warehouse-adapters.md), without a
server: each MySQL change, through the type table's PostgreSQL types, to alter, keep or stop."""

from __future__ import annotations

import pytest

from mirror.pg_schema import Alter, Keep, Stop, decide, parse_pg_type
from mirror.pgtypes import pg_type


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("decimal(5,2)", "decimal(12,6)", Alter(parse_pg_type("numeric(12,6)"))),
        ("decimal(6,2)", "decimal(6,4)", Alter(parse_pg_type("numeric(8,4)"))),
        ("decimal(10,4)", "decimal(10,2)", Alter(parse_pg_type("numeric(12,4)"))),
        ("decimal(12,6)", "decimal(5,2)", Keep(narrower=True)),
        ("int(11)", "bigint(20)", Alter(parse_pg_type("bigint"))),
        ("int(11)", "int(10) unsigned", Alter(parse_pg_type("bigint"))),
        ("bigint(20)", "bigint(20) unsigned", Alter(parse_pg_type("numeric(20,0)"))),
        ("int(11)", "decimal(12,2)", Alter(parse_pg_type("numeric(12,2)"))),
        ("int(11)", "decimal(9,0)", Keep(narrower=True)),
        ("bigint(20)", "int(11)", Keep(narrower=True)),
        ("bigint(20) unsigned", "bigint(20)", Keep(narrower=True)),
        ("tinyint(4)", "smallint(6)", Keep(narrower=False)),
        ("float", "double", Alter(parse_pg_type("double precision"))),
        ("double", "float", Keep(narrower=True)),
        ("int(11)", "double", Alter(parse_pg_type("double precision"))),
        ("varchar(4)", "varchar(40)", Keep(narrower=False)),
        ("varchar(40)", "char(4)", Keep(narrower=False)),
        ("enum('a','b')", "enum('a','b','c')", Keep(narrower=False)),
        ("set('a')", "set('a','b')", Keep(narrower=False)),
        ("int(11)", "varchar(20)", Alter(parse_pg_type("text"))),
        ("json", "longtext", Alter(parse_pg_type("text"))),
        ("varchar(20)", "int(11)", Keep(narrower=True)),
        ("varchar(20)", "json", Keep(narrower=True)),  # JSON text in the text column
        ("datetime", "datetime(6)", Alter(parse_pg_type("timestamp(6)"))),
        ("date", "datetime(3)", Alter(parse_pg_type("timestamp(3)"))),
        ("datetime(6)", "date", Keep(narrower=True)),
        ("timestamp", "timestamp(6)", Alter(parse_pg_type("timestamptz(6)"))),
        ("binary(4)", "binary(8)", Keep(narrower=False)),
    ],
)
def test_widening_and_narrowing(old: str, new: str, expected: object) -> None:
    assert decide(pg_type(old), pg_type(new)) == expected


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("decimal(10,2)", "double"),  # doubles do not fit; decimals would be rounded
        ("bigint(20)", "double"),  # 2^53 + 1 would be rounded
        ("double", "decimal(10,2)"),
        ("datetime", "timestamp"),  # a wall-clock time vs an instant
        ("int(11)", "date"),
        ("varchar(10)", "date"),
        ("blob", "text"),
        ("char(36)", "uuid"),
    ],
)
def test_a_change_no_column_holds_stops(old: str, new: str) -> None:
    decision = decide(pg_type(old), pg_type(new))
    assert isinstance(decision, Stop) and "without rounding or re-reading" in decision.reason


@pytest.mark.parametrize(
    ("catalog", "ours"),
    [
        ("numeric(20,0)", "numeric(20)"),
        ("timestamp(6) with time zone", "timestamptz(6)"),
        ("timestamp(3) without time zone", "timestamp(3)"),
        ("timestamp without time zone", "timestamp(6)"),
        ("double precision", "double precision"),
    ],
)
def test_the_catalog_spelling_parses_as_ours(catalog: str, ours: str) -> None:
    assert parse_pg_type(catalog) == parse_pg_type(ours)
