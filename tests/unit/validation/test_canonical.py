"""The canonical encoding in Python: the exact bytes per Kind, and the row and chunk hashes."""

from __future__ import annotations

import hashlib
import math
import random
import re
import struct
from fractions import Fraction
from typing import Any

import pytest

from simple_binlog.errors import ContractError
from simple_binlog.type_table import REPRESENTATIVE_TYPES, visit
from simple_binlog.values import parse_column_type
from validation.canonical import (
    MYSQL,
    NULL_PIECE,
    POSTGRES,
    ChunkDigest,
    MySqlCanonical,
    PostgresCanonical,
    RowHasher,
    double_piece,
    double_text,
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


def test_null_empty_string_and_the_text_null_are_different_pieces() -> None:
    column = parse_column_type("varchar(8)")
    assert python_piece(column, None) == NULL_PIECE
    assert python_piece(column, "") == "0:"
    assert python_piece(column, "NULL") == "4:NULL"
    assert python_piece(column, "n") == "1:n"
    assert python_piece(column, "ü") == "1:ü"  # the length in characters


PIECES = [
    ("int", 42, "42"),
    ("bigint(20) unsigned", "18446744073709551615", "18446744073709551615"),
    ("decimal(12,2)", "12.30", "12.30"),
    ("datetime(3)", "2024-01-05 10:11:12.500", "2024-01-05 10:11:12.500"),
    ("date", "0000-00-00", "0000-00-00"),
    ("double", 1e20, "1e21"),  # outside the exact range: the shortest digits
    ("double", 3, "3p0"),  # a JSON integer in a DOUBLE column
    ("double", -1.25, "-1p-1152921504606846976"),  # toward zero, the fraction's sign
    ("double", 0.0009765625, "0p4503599627370496"),  # 2^-10, the range's lowest
    ("float", 1.100000023841858, "11e1"),
    ("binary(4)", "YWI=", "61620000"),  # hex, the binlog's stripped zero bytes back
    ("blob", "", ""),
    ("set('a','b')", "a,b", "3:a,b"),
    ("json", '{"b": 1, "a": []}', '18:{"a":[],"b":1.0E0}'),
    ("inet6", "::ffff:1.2.3.4", "::ffff:1.2.3.4"),
]


@pytest.mark.parametrize(("spec", "wire", "piece"), PIECES)
def test_pieces_of_wire_values(spec: str, wire: object, piece: str) -> None:
    assert python_piece(parse_column_type(spec), wire) == piece  # type: ignore[arg-type]


def test_row_text_is_the_shard_and_every_columns_piece() -> None:
    # RowHasher.text takes most wire values as they are: it must read as the pieces
    # joined, for every kind, for NULL and for a column the row lacks.
    names = [f"c{i}" for i in range(len(PIECES))]
    hasher = RowHasher(names, [parse_column_type(spec) for spec, _, _ in PIECES])
    row: dict[str, Any] = {name: wire for name, (_, wire, _) in zip(names, PIECES, strict=True)}
    pieces = [piece for _, _, piece in PIECES]
    assert hasher.text("d.t", row) == ("3:d.t," + ",".join(pieces)).encode()
    assert hasher.text("d.t", {}) == ("3:d.t," + ",".join(["n"] * len(names))).encode()
    with_null = {**row, "c0": None}
    assert hasher.text("d.t", with_null) == ("3:d.t," + ",".join(["n", *pieces[1:]])).encode()


def test_a_malformed_wire_value_is_refused_not_hashed() -> None:
    uint64, integer = parse_column_type("bigint(20) unsigned"), parse_column_type("int")
    with pytest.raises(ContractError):
        RowHasher(["a", "b"], [uint64, integer]).text("d.t", {"a": 12, "b": 1})
    with pytest.raises(ContractError):
        RowHasher(["a", "b"], [uint64, integer]).text("d.t", {"a": "12", "b": "1"})
    with pytest.raises(ContractError):
        python_piece(parse_column_type("bigint(20) unsigned"), 12)
    with pytest.raises(ContractError):
        python_piece(parse_column_type("int"), "12")


def test_row_hash_tells_apart_values_that_concatenate_alike() -> None:
    text = [parse_column_type("varchar(8)"), parse_column_type("varchar(8)")]
    assert python_row_hash("d.t", text, ["a,b", "c"]) != python_row_hash("d.t", text, ["a", "b,c"])
    assert python_row_hash("d.t", text, ["", None]) != python_row_hash("d.t", text, [None, ""])
    assert python_row_hash("d,t", text, ["a", "b"]) != python_row_hash("d", text, ["t,a", "b"])


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
    assert ChunkDigest.of(3, -1) == ChunkDigest(3, 2**64 - 1)
    assert ChunkDigest.of(3, 2**64 + 5) == ChunkDigest(3, 5)


@pytest.mark.parametrize("spec", REPRESENTATIVE_TYPES)
def test_every_representative_type_has_an_expression_in_each_engine(spec: str) -> None:
    column = parse_column_type(spec)
    assert "`v`" in visit(column, MySqlCanonical())("`v`")
    assert '"v"' in visit(column, PostgresCanonical())('"v"')
    assert MYSQL.piece(None, column) == POSTGRES.piece(None, column) == f"'{NULL_PIECE}'"


def test_double_text_reads_repr_as_float_text_does() -> None:
    rng = random.Random(25)
    values = [0.0, -0.0, 1.0, 100000.0, 1e15, 1e16, 1e-5, 5e-324, 1.7976931348623157e308, 0.5]
    values += [
        struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(5000)
    ]
    values += [rng.uniform(-1e6, 1e6) for _ in range(2000)]
    finite = [v for v in values if math.isfinite(v)]
    assert len(finite) > 6000
    assert [double_text(v) for v in finite] == [float_text(repr(v)) for v in finite]


def test_double_piece_is_exact_and_tells_every_double_apart() -> None:
    """In its range ``<w>p<f>`` reads back as the very value (w + f / 2^62, in exact
    fractions); outside it the shortest digits; no two doubles share a piece."""
    rng = random.Random(12)
    values = [2.0**-10, -(2.0**-10), 2.0**53 - 1, -(2.0**53 - 1), 2.0**53, 1e16, 1e-300]
    values += [0.0, -0.0, 0.1, -0.1, 1.5, -1.5, 0.5, -0.5, 4503599627370495.5, 1e-3, 9.5e-4]
    values += [math.nextafter(2.0**-10, 0), math.nextafter(2.0**53, 0), 0.9999999999999999]
    values += [
        struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(3000)
    ]
    values += [rng.uniform(-1, 1) * 2.0 ** rng.randint(-12, 55) for _ in range(5000)]
    finite = [v for v in values if math.isfinite(v)]
    pieces: dict[str, float] = {}
    for value in finite:
        piece = double_piece(value)
        if 2.0**-10 <= abs(value) < 2.0**53:
            whole, fraction = piece.split("p")
            assert Fraction(int(whole)) + Fraction(int(fraction), 2**62) == Fraction(value)
            assert abs(int(fraction)) < 2**62
        else:
            assert piece == double_text(value)
        assert pieces.setdefault(piece, value) == value or value == 0  # -0.0 is 0.0
    assert double_piece(-0.0) == double_piece(0.0) == "0"


@pytest.mark.parametrize(
    "value", [3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38]
)
def test_float_text_of_float32_extremes_reads_back_exactly(value: float) -> None:
    """FLT_MAX's short texts (3.402824e38) round past float32's range: they are skipped, not
    an OverflowError that would stop validating a FLOAT column holding the maximum."""
    column = parse_column_type("float")
    text = python_canonical(column, value)
    assert text is not None
    sign, digits, power = re.fullmatch(r"(-?)(\d+)e(-?\d+)", text.decode()).groups()  # type: ignore[union-attr]
    assert struct.unpack("<f", struct.pack("<f", float(f"{sign}0.{digits}e{power}")))[0] == value
