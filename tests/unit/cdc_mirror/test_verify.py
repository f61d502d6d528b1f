"""cdc_mirror.verify's pure parts: each store's spelling of a value meets MySQL's canonical one,
checksums ignore order, and a comparison names differing keys (never values)."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest

from cdc_mirror.verify import (
    RowDigester,
    TableDigest,
    TableSchema,
    canonical_text,
    check_raw_layer,
    compare,
    from_postgres,
    from_spark,
    from_wire,
)
from simple_binlog.values import parse_column_type

SCHEMA = TableSchema(
    table="shop_orders",
    shards=(("shop_00", "orders_00"),),
    columns={
        "id": "bigint(20) unsigned",
        "amount": "decimal(12,2)",
        "note": "varchar(64)",
        "created": "datetime(3)",
        "updated": "timestamp(6)",
        "payload": "blob",
        "code": "binary(4)",
        "span": "time(6)",
        "ratio": "float",
    },
    key=("id",),
)
MYSQL_ROW = {
    "id": 18446744073709551615,
    "amount": Decimal("12.30"),
    "note": "",
    "created": dt.datetime(2026, 11, 22, 10, 0, 0, 123000),
    "updated": dt.datetime(2026, 11, 22, 9, 59, 59, 5),
    "payload": b"\x00\x01",
    "code": b"ab\x00\x00",
    "span": dt.timedelta(hours=-838),
    "ratio": 0.1,
}
# The same row as the binlog carries it (Redis holds these wire values).
WIRE_ROW = {
    "id": "18446744073709551615",
    "amount": "12.30",
    "note": "",
    "created": "2026-11-22 10:00:00.123",
    "updated": "2026-11-22 09:59:59.000005",
    "payload": "AAE=",
    "code": "YWI=",  # the binlog drops BINARY(n)'s trailing zero bytes
    "span": "-838:00:00.000000",
    "ratio": 0.10000000149011612,
}
# As PostgreSQL (numeric(20), timestamptz in another zone) and Spark (decimal, UTC text) give it.
PG_ROW = {
    **MYSQL_ROW,
    "id": Decimal("18446744073709551615"),
    "updated": dt.datetime(2026, 11, 22, 10, 59, 59, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))),
    "payload": memoryview(b"\x00\x01"),
}
SPARK_ROW = {
    **MYSQL_ROW,
    "id": Decimal("18446744073709551615"),
    "created": "2026-11-22 10:00:00.123",
    "updated": "2026-11-22 09:59:59.000005",
    "payload": bytearray(b"\x00\x01"),
    "span": "-838:00:00.000000",
}


def _digest(convert: object, row: dict[str, object]) -> tuple[str, str]:
    types = SCHEMA.parsed()
    values = {name: convert(types[name], value) for name, value in row.items()}  # type: ignore[operator]
    return RowDigester(SCHEMA).digest("shop_00.orders_00", values)


def test_every_store_spelling_digests_like_mysql() -> None:
    reference = RowDigester(SCHEMA).digest("shop_00.orders_00", MYSQL_ROW)
    assert _digest(from_wire, WIRE_ROW) == reference
    assert _digest(from_postgres, PG_ROW) == reference
    assert _digest(from_spark, SPARK_ROW) == reference
    assert reference[0] == "18446744073709551615"


def test_null_and_empty_string_differ_and_shard_counts() -> None:
    digester = RowDigester(SCHEMA)
    base = digester.digest("shop_00.orders_00", MYSQL_ROW)
    assert digester.digest("shop_00.orders_00", {**MYSQL_ROW, "note": None}) != base
    assert digester.digest("shop_01.orders_00", MYSQL_ROW) != base
    # An absent column reads as NULL (Redis rows written before an ADD COLUMN).
    absent = {k: v for k, v in MYSQL_ROW.items() if k != "note"}
    assert digester.digest("shop_00.orders_00", absent) == digester.digest(
        "shop_00.orders_00", {**MYSQL_ROW, "note": None}
    )


def test_canonical_text_pads_fixed_binary_and_keeps_decimal_scale() -> None:
    binary = parse_column_type("binary(4)")
    assert canonical_text(binary, b"ab") == canonical_text(binary, b"ab\x00\x00")
    assert canonical_text(parse_column_type("decimal(12,2)"), Decimal("12.3")) == '"12.30"'
    assert from_postgres(parse_column_type("uuid"), uuid.UUID(int=1)) == str(uuid.UUID(int=1))


def _table(store: str, rows: dict[str, str], duplicates: list[str] | None = None) -> TableDigest:
    return TableDigest(store, "t", dict(rows), list(duplicates or []))


def test_checksum_ignores_order_and_compare_names_keys() -> None:
    mysql = _table("mysql", {"1": "a", "2": "b", "3": "c"})
    same = _table("redis", {"3": "c", "1": "a", "2": "b"})
    assert same.checksum == mysql.checksum
    other = _table("warehouse", {"1": "a", "2": "x", "4": "d"}, duplicates=["1"])
    agreement = compare(mysql, [same, other])
    assert not agreement.agrees
    redis_row, warehouse_row = agreement.stores
    assert redis_row.agrees and redis_row.summary() == "equal"
    assert (warehouse_row.missing, warehouse_row.unexpected, warehouse_row.different) == (1, 1, 1)
    assert warehouse_row.duplicated == 1
    assert set(warehouse_row.sample_keys) == {"1", "2", "3", "4"}
    assert "MISMATCH" in agreement.describe()
    assert agreement.rows()[0][3] == "reference"


def test_raw_layer_check_finds_missing_duplicated_and_repeated() -> None:
    kafka = [("t", 0, 1, 100), ("t", 0, 3, 101), ("t", 1, 1, 102)]
    assert check_raw_layer("x", kafka, list(reversed(kafka))).exactly_once
    lake = [("t", 0, 1, 100), ("t", 0, 1, 100), ("t", 1, 9, 102)]
    found = check_raw_layer("x", [*kafka, ("t", 2, 0, 100)], lake)
    assert (found.missing, found.duplicated, found.unexpected) == (3, 1, 1)
    assert found.repeated_changes == 1
    assert not found.exactly_once and "missing" in found.describe()


def test_replayed_rows_may_share_their_binlog_offset() -> None:
    # MOCK rows of one replay query carry one offset (query time − 5 min, seq 000000):
    # kafka_coordinates gives them None, and only collected changes must be unique.
    kafka: list[tuple[str, int, int, int | None]] = [
        ("t", 0, 0, None),
        ("t", 0, 1, None),
        ("t", 0, 2, 100),
        ("t", 0, 3, 100),
    ]
    lake = [(t, p, o, 0) for t, p, o, _ in kafka]
    found = check_raw_layer("x", kafka, lake)
    assert (found.missing, found.duplicated, found.repeated_changes) == (0, 0, 1)


@pytest.mark.parametrize("spec", ["bigint(20) unsigned", "bit(64)"])
def test_wide_integers_from_decimal(spec: str) -> None:
    column = parse_column_type(spec)
    assert from_spark(column, Decimal(2**64 - 1)) == 2**64 - 1
    assert from_postgres(column, Decimal(2**64 - 1)) == 2**64 - 1
