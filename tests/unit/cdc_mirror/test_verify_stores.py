"""verify with fake stores (``MemoryStore``): every store's spelling of the same rows agrees
with MySQL, and a store that differs by one value, one row missing or one row too many
cannot pass; the difference is told in one sentence naming the store and the table."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest

from cdc_mirror.verify import (
    DigestStore,
    KuduStore,
    MemoryStore,
    RedisStore,
    StoreRow,
    TableSchema,
    digest_rows,
    from_postgres,
    from_spark,
    from_wire,
    kudu_rows,
    mirror_stores,
    redis_rows,
    verify_stores,
)
from cdc_platform.config import Settings, TableMirror
from simple_binlog.errors import ConfigError

SCHEMA = TableSchema(
    table="shop_orders",
    shards=(("shop_00", "orders_00"), ("shop_01", "orders_00")),
    columns={
        "id": "bigint(20) unsigned",
        "amount": "decimal(12,2)",
        "note": "varchar(64)",
        "updated": "timestamp(6)",
    },
    key=("id",),
)
UTC_PLUS_2 = dt.timezone(dt.timedelta(hours=2))


def _mysql(n: int, amount: str = "1.50", note: str | None = "gift") -> StoreRow:
    shard = "shop_00.orders_00" if n % 2 else "shop_01.orders_00"
    updated = dt.datetime(2026, 1, 2, 3, 4, 5, n)
    return shard, {"id": n, "amount": Decimal(amount), "note": note, "updated": updated}


def _wire(row: StoreRow) -> StoreRow:
    shard, v = row
    return shard, {
        "id": str(v["id"]),
        "amount": str(v["amount"]),
        "note": v["note"],
        "updated": v["updated"].isoformat(sep=" "),
    }


def _postgres(row: StoreRow) -> StoreRow:
    shard, v = row
    aware = v["updated"].replace(tzinfo=dt.UTC).astimezone(UTC_PLUS_2)
    # numeric(20) for the unsigned key, timestamptz in another zone, a column of its own.
    return shard, {**v, "id": Decimal(v["id"]), "updated": aware, "_mirror_at": "ignored"}


def _spark(row: StoreRow) -> StoreRow:
    shard, v = row
    return shard, {**v, "id": Decimal(v["id"]), "updated": v["updated"].isoformat(sep=" ")}


MYSQL_ROWS = [_mysql(n) for n in range(1, 6)]
REFERENCE = MemoryStore("mysql", MYSQL_ROWS)


def _stores(rows: list[StoreRow]) -> dict[str, MemoryStore]:
    return {
        "warehouse": MemoryStore("warehouse", [_postgres(r) for r in rows], from_postgres),
        "redis": MemoryStore("redis", [_wire(r) for r in rows], from_wire),
        "hive": MemoryStore("hive", [_spark(r) for r in rows], from_spark),
    }


def test_every_store_in_its_own_spelling_agrees_with_mysql() -> None:
    agreement = verify_stores(SCHEMA, REFERENCE, list(_stores(MYSQL_ROWS).values()))
    assert agreement.agrees, agreement.describe()
    assert agreement.disagreements() == []
    assert [row[3] for row in agreement.rows()] == ["reference", "equal", "equal", "equal"]
    checksums = {row[2] for row in agreement.rows()}
    assert len(checksums) == 1 and {row[1] for row in agreement.rows()} == {"5"}


ALTERED = [*MYSQL_ROWS[:2], _mysql(3, amount="1.51"), *MYSQL_ROWS[3:]]
MISSING = [r for r in MYSQL_ROWS if r[1]["id"] != 4]
EXTRA = [*MYSQL_ROWS, _mysql(9)]


@pytest.mark.parametrize("store", ["warehouse", "redis", "hive"])
@pytest.mark.parametrize(
    ("rows", "count", "sentence"),
    [
        (ALTERED, 5, "1 different; e.g. keys 3"),
        (MISSING, 4, "1 missing; e.g. keys 4"),
        (EXTRA, 6, "1 unexpected; e.g. keys 9"),
    ],
    ids=["one-altered-value", "one-missing-row", "one-extra-row"],
)
def test_a_store_that_differs_cannot_pass_and_is_named_in_one_sentence(
    store: str, rows: list[StoreRow], count: int, sentence: str
) -> None:
    others = {**_stores(MYSQL_ROWS), store: _stores(rows)[store]}
    agreement = verify_stores(SCHEMA, REFERENCE, list(others.values()))
    assert not agreement.agrees
    assert agreement.disagreements() == [
        f"{store}'s copy of shop_orders differs from mysql: {sentence}."
    ]
    by_store = {row[0]: row for row in agreement.rows()}
    assert by_store[store][1] == str(count)
    assert by_store[store][2] != by_store["mysql"][2]  # the checksum tells too
    assert "MISMATCH" in agreement.describe()


def test_a_value_altered_only_in_the_shard_column_is_a_difference() -> None:
    moved = [("shop_09.orders_00", MYSQL_ROWS[0][1]), *MYSQL_ROWS[1:]]
    agreement = verify_stores(SCHEMA, REFERENCE, [MemoryStore("redis", moved)])
    assert agreement.disagreements() == [
        "redis's copy of shop_orders differs from mysql: 1 different; e.g. keys 1."
    ]


def test_null_is_not_the_empty_string_in_any_store() -> None:
    rows = [_mysql(1, note=None)]
    empty = [_wire(_mysql(1, note=""))]
    agreement = verify_stores(
        SCHEMA, MemoryStore("mysql", rows), [MemoryStore("redis", empty, from_wire)]
    )
    assert not agreement.agrees


def test_a_reference_holding_a_key_twice_says_so_in_its_own_row() -> None:
    # Before: the reference was listed twice, both times as "reference", and the table showed
    # no disagreement although the verdict was "do not agree".
    twice = MemoryStore("mysql", [*MYSQL_ROWS, ("shop_01.orders_00", MYSQL_ROWS[0][1])])
    agreement = verify_stores(SCHEMA, twice, [_stores(MYSQL_ROWS)["redis"]])
    assert not agreement.agrees
    assert [row[0] for row in agreement.rows()] == ["mysql", "redis"]
    assert agreement.rows()[0][3] == "reference: 1 duplicated; e.g. keys 1"
    assert agreement.disagreements() == [
        "mysql's shop_orders holds keys more than once (1 duplicated; e.g. keys 1).",
        # The later copy (another shard) is what MySQL's digest kept for the key.
        "redis's copy of shop_orders differs from mysql: 1 different; e.g. keys 1.",
    ]


def test_a_projecting_store_is_compared_on_the_columns_it_keeps() -> None:
    # Redis with redis_columns keeps a projection. Before, it was compared with MySQL's
    # digest of every column, so each of its rows read as "different".
    kept = ["id", "amount"]
    projected = [
        (shard, {k: v for k, v in row.items() if k in kept})
        for shard, row in (_wire(r) for r in MYSQL_ROWS)
    ]
    redis = MemoryStore("redis", projected, from_wire, columns=kept)
    assert verify_stores(SCHEMA, REFERENCE, [redis]).agrees
    # The old comparison, against every column, could not pass.
    full = REFERENCE.digest(SCHEMA)
    assert full.rows != redis.digest(SCHEMA).rows
    # And a projected value that differs is still found.
    changed = [projected[0], (projected[1][0], {**projected[1][1], "amount": "9.99"})]
    short = MemoryStore("mysql", MYSQL_ROWS[:2])
    agreement = verify_stores(SCHEMA, short, [MemoryStore("redis", changed, from_wire, kept)])
    assert agreement.disagreements() == [
        "redis's copy of shop_orders differs from mysql: 1 different; e.g. keys 2."
    ]


def test_a_digest_made_elsewhere_is_compared_as_made() -> None:
    made = digest_rows("hive", SCHEMA, [_spark(r) for r in MISSING], from_spark)
    agreement = verify_stores(SCHEMA, REFERENCE, [DigestStore(made)])
    assert agreement.disagreements() == [
        "hive's copy of shop_orders differs from mysql: 1 missing; e.g. keys 4."
    ]


def test_a_projection_naming_an_unknown_column_is_refused() -> None:
    with pytest.raises(ConfigError, match="column 'phone' is not a column of shop_orders"):
        digest_rows("redis", SCHEMA, [], columns=["id", "phone"])


def test_redis_rows_skip_expired_keys_and_tombstones() -> None:
    def decode(raw: bytes) -> tuple[int, str, dict[str, object] | None]:
        document = orjson.loads(raw)
        return document["_offset"], document["_shard"], document["row"]

    raws = [
        orjson.dumps({"_offset": 1, "_shard": "s.t", "row": {"id": "1"}}),
        None,  # expired between SCAN and MGET
        orjson.dumps({"_offset": 2, "_shard": "s.t", "row": None}),  # a delete
    ]
    assert list(redis_rows(raws, decode)) == [("s.t", {"id": "1"})]


# -- Kudu ----------------------------------------------------------------------------------


def _kudu(row: StoreRow, offset: int, deleted: bool = False) -> dict[str, object]:
    """A row as ``KuduApplier.scan`` gives it: canonical values (the unsigned key from its
    DECIMAL(20,0), the TIMESTAMP from UNIXTIME_MICROS) and the bookkeeping columns."""
    shard, v = row
    return {**v, "_binlog_offset": offset, "_shard": shard, "_deleted": deleted}


def test_kudu_rows_agree_with_mysql_and_tombstones_are_not_rows() -> None:
    stored = [_kudu(r, 100 + n) for n, r in enumerate(MYSQL_ROWS)]
    stored.append(_kudu(_mysql(9), 200, deleted=True))  # a deleted row, kept as a tombstone
    agreement = verify_stores(SCHEMA, REFERENCE, [MemoryStore("kudu", list(kudu_rows(stored)))])
    assert agreement.agrees, agreement.describe()
    assert [row[0] for row in agreement.rows()] == ["mysql", "kudu"]


def test_a_kudu_copy_with_a_row_tombstoned_too_early_is_named() -> None:
    stored = [_kudu(r, 100 + n, deleted=n == 2) for n, r in enumerate(MYSQL_ROWS)]
    agreement = verify_stores(SCHEMA, REFERENCE, [MemoryStore("kudu", list(kudu_rows(stored)))])
    assert agreement.disagreements() == [
        "kudu's copy of shop_orders differs from mysql: 1 missing; e.g. keys 3."
    ]


def test_the_real_time_stores_checked_follow_the_table_mirror_s_targets() -> None:
    settings = Settings()
    both = TableMirror(db_prefix="shop", table_prefix="orders", targets=["hive", "redis", "kudu"])
    assert [type(s) for s in mirror_stores(settings, both)] == [RedisStore, KuduStore]
    default = TableMirror(db_prefix="shop", table_prefix="orders")
    assert [s.store for s in mirror_stores(settings, default)] == ["warehouse", "redis"]
