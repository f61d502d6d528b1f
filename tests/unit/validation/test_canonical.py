"""The canonical encoding in Python: the exact bytes per Kind, and the row and chunk hashes."""

from __future__ import annotations

import hashlib

import pytest

from simple_binlog.type_table import REPRESENTATIVE_TYPES, visit
from simple_binlog.values import parse_column_type
from validation.canonical import (
    MYSQL,
    NULL_PIECE,
    POSTGRES,
    ChunkDigest,
    MySqlCanonical,
    PostgresCanonical,
    float_text,
    json_text,
    python_canonical,
    python_piece,
    python_row_hash,
)


@pytest.mark.parametrize(
    ("spec", "wire", "expected"),
    [
        ("decimal(12,2)", "12.30", b"12.30"),  # the scale's digits stay
        ("decimal(12,2)", "-0.50", b"-0.50"),
        ("decimal(65,30)", "1." + "0" * 30, b"1." + b"0" * 30),
        ("datetime(3)", "2024-01-05 10:11:12.500", b"2024-01-05 10:11:12.500"),  # fsp digits
        ("datetime", "2024-01-05 10:11:12", b"2024-01-05 10:11:12"),
        ("timestamp(6)", "1970-01-01 00:00:01.000000", b"1970-01-01 00:00:01.000000"),
        ("time(2)", "-838:59:59.00", b"-838:59:59.00"),
        ("binary(4)", "YWI=", b"ab\x00\x00"),  # a short binlog image gets its zero bytes back
        ("binary(4)", "YWIAAA==", b"ab\x00\x00"),
        ("blob", "", b""),
        ("bigint(20) unsigned", "18446744073709551615", b"18446744073709551615"),
        ("int(5) unsigned zerofill", 42, b"42"),  # no ZEROFILL padding
        ("varchar(8)", "", b""),  # empty string, not NULL
        ("varchar(8)", None, None),
        ("float", 1.100000023841858, b"11e1"),  # float32's shortest digits
        ("double", 1e20, b"1e21"),
        ("double", 0.0, b"0"),
        ("double", -2.5e-300, b"-25e-299"),
        ("json", '{"b": 1, "a": [1.5, "x", null]}', b'{"a":[1.5E0,"x",null],"b":1.0E0}'),
        (
            "json",
            '{"é": "ü\\n", "B": 12345678901234567890}',
            '{"B":1.234567890123456789E19,"é":"ü\\n"}'.encode(),
        ),
        ("bit(64)", 18446744073709551615, b"18446744073709551615"),
        ("set('a','b')", "a,b", b"a,b"),
        ("inet6", "::ffff:1.2.3.4", b"::ffff:1.2.3.4"),
    ],
)
def test_canonical_bytes(spec: str, wire: object, expected: bytes | None) -> None:
    assert python_canonical(parse_column_type(spec), wire) == expected  # type: ignore[arg-type]


def test_null_and_empty_string_are_different_pieces() -> None:
    column = parse_column_type("varchar(8)")
    assert python_piece(column, None) == NULL_PIECE
    assert python_piece(column, "") == hashlib.md5(b"").hexdigest()


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ("1e20", "1e21"),
        ("1e+20", "1e21"),
        ("100000000000000000000", "1e21"),
        ("0.00001", "1e-4"),
        ("1e-05", "1e-4"),
        ("-1.250", "-125e1"),
        ("0", "0"),
        ("-0", "0"),
        ("1.2345678901234568e17", "12345678901234568e18"),
    ],
)
def test_float_text_reads_every_engines_spelling_alike(printed: str, expected: str) -> None:
    assert float_text(printed) == expected


def test_json_text_sorts_keys_by_bytes_and_spells_numbers_as_mariadb() -> None:
    assert json_text('{"b":[0, -0.001, 100], "a": {}, "B": true}') == (
        '{"B":true,"a":{},"b":[0.0E0,-1.0E-3,1.0E2]}'
    )


def test_row_hash_covers_shard_order_and_null() -> None:
    columns = [parse_column_type("int"), parse_column_type("varchar(4)")]
    base = python_row_hash("db_0.t_0", columns, [1, ""])
    assert base != python_row_hash("db_1.t_0", columns, [1, ""])
    assert base != python_row_hash("db_0.t_0", columns, [1, None])
    assert base != python_row_hash("db_0.t_0", columns[::-1], ["", 1])
    assert len(base) == 32


def test_chunk_digest_is_order_independent_and_duplicates_count() -> None:
    hashes = [hashlib.md5(str(i).encode()).hexdigest() for i in range(10)]
    assert ChunkDigest.of_rows(hashes) == ChunkDigest.of_rows(hashes[::-1])
    assert ChunkDigest.of_rows(hashes + hashes[:1]) != ChunkDigest.of_rows(hashes)
    assert ChunkDigest.of(3, -1, 2**64 + 5) == ChunkDigest(3, 2**64 - 1, 5)


@pytest.mark.parametrize("spec", REPRESENTATIVE_TYPES)
def test_every_representative_type_has_an_expression_in_each_engine(spec: str) -> None:
    column = parse_column_type(spec)
    assert "`v`" in visit(column, MySqlCanonical())("`v`")
    assert '"v"' in visit(column, PostgresCanonical())('"v"')
    assert MYSQL.piece(None, column) == POSTGRES.piece(None, column) == f"'{NULL_PIECE}'"
