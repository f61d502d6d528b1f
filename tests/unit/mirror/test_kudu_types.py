"""The Kudu type of every SimpleBinlog Kind, and values through ``to_java``/``from_java``
unchanged (what the applier sends and what a scan returns, without a JVM)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from mirror.kudu_types import key_refusal, kudu_type
from simple_binlog.errors import UnsupportedTypeError
from simple_binlog.values import Kind, decode, encode, parse_column_type

# One column type per Kind (several where the mapping branches) with an extreme value.
CASES = {
    "tinyint": (-128, "INT8"),
    "tinyint unsigned": (255, "INT16"),
    "smallint unsigned": (65535, "INT32"),
    "mediumint": (-8388608, "INT32"),
    "int unsigned": (4294967295, "INT64"),
    "bigint": (-(2**63), "INT64"),
    "bigint unsigned": (2**64 - 1, "DECIMAL(20,0)"),
    "decimal(38,10)": (Decimal("-" + "9" * 28 + "." + "9" * 10), "DECIMAL(38,10)"),
    "decimal(65,30)": (Decimal("9" * 35 + "." + "1" * 30), "STRING"),
    "float": (3.4028234663852886e38, "FLOAT"),
    "double": (-1.7976931348623157e308, "DOUBLE"),
    "date": (dt.date(1000, 1, 1), "DATE"),
    "datetime(6)": (dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "UNIXTIME_MICROS"),
    "timestamp(3)": (dt.datetime(1970, 1, 1, 0, 0, 1, 123000), "UNIXTIME_MICROS"),
    "time(6)": (-dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999), "INT64"),
    "year": (2155, "INT16"),
    "bit(5)": (31, "INT64"),
    "bit(64)": (2**64 - 1, "DECIMAL(20,0)"),
    "enum('a','b')": ("b", "STRING"),
    "set('a','b')": ("a,b", "STRING"),
    "varchar(64)": ("ünïcode ✓", "STRING"),
    "json": ('{"a": [1, 2.5]}', "STRING"),
    "binary(4)": (b"\x00\x01\x00\x00", "BINARY"),
    "blob": (bytes(range(256)), "BINARY"),
    "geometry": (b"\x01\x01\x00\x00\x00" + bytes(16), "BINARY"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "STRING"),
    "inet4": ("192.168.0.1", "STRING"),
    "inet6": ("::ffff:1.2.3.4", "STRING"),
}


def test_every_kind_has_a_case() -> None:
    assert {parse_column_type(spec).kind for spec in CASES} == set(Kind)


@pytest.mark.parametrize("spec", sorted(CASES))
def test_each_type_maps_and_round_trips_without_loss(spec: str) -> None:
    value, kudu_text = CASES[spec]
    column = parse_column_type(spec)
    kudu = kudu_type(column)
    assert kudu.text == kudu_text
    canonical = decode(column, encode(column, value))
    carried = kudu.to_java(canonical)
    # What a scan returns: the same scalar (DECIMAL comes back as BigDecimal's plain text).
    returned = str(carried) if kudu.name == "DECIMAL" else carried
    back = kudu.from_java(returned)
    assert back == canonical and type(back) is type(canonical)


def test_the_zero_date_stops_with_one_sentence() -> None:
    for spec in ("date", "datetime", "timestamp(6)"):
        column = parse_column_type(spec)
        with pytest.raises(
            UnsupportedTypeError, match=r"^Kudu's \w+ cannot hold MySQL's zero date"
        ):
            kudu_type(column).to_java(decode(column, encode(column, "0000-00-00 00:00:00")))


def test_floating_point_keys_are_refused_and_others_are_not() -> None:
    assert key_refusal("x", parse_column_type("double")) == (
        "key column x is double, which Kudu cannot hold in a primary key"
    )
    assert key_refusal("x", parse_column_type("float")) is not None
    for spec in ("bigint unsigned", "varchar(8)", "binary(16)", "datetime(6)", "decimal(12,2)"):
        assert key_refusal("x", parse_column_type(spec)) is None
