"""Redis key/value encoding and the PostgreSQL type mapping (pure functions)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirror.pgtypes import RowConverters, pg_text, pg_type
from mirror.plan import RowChange
from mirror.redis_applier import OFFSET_WIDTH, decode_value, encode_value, redis_key


@given(st.integers(1, 10**OFFSET_WIDTH - 1), st.integers(1, 10**OFFSET_WIDTH - 1))
def test_fixed_width_offsets_order_like_the_numbers(a: int, b: int) -> None:
    # The Lua guard compares these strings; numbers beyond 2^53 must still order exactly.
    assert (str(a).zfill(OFFSET_WIDTH) < str(b).zfill(OFFSET_WIDTH)) == (a < b)


def test_offsets_beyond_two_to_the_53_are_distinguished() -> None:
    a, b = 2**53, 2**53 + 1
    assert float(a) == float(b)  # what a Lua number would see
    assert str(a).zfill(OFFSET_WIDTH) < str(b).zfill(OFFSET_WIDTH)


@given(
    st.lists(st.one_of(st.text(), st.integers()), min_size=1, max_size=3),
    st.lists(st.one_of(st.text(), st.integers()), min_size=1, max_size=3),
)
def test_composite_keys_never_collide(a: list, b: list) -> None:
    if [str(x) for x in a] != [str(x) for x in b]:
        assert redis_key("p", "t", a) != redis_key("p", "t", b)


def test_key_layout() -> None:
    assert redis_key("cdc", "shop_orders", ["18446744073709551615"]) == (
        "cdc:shop_orders:18446744073709551615"
    )
    assert redis_key("cdc", "t", ["a:b", 7]) == "cdc:t:a%3Ab:7"


def test_value_starts_with_the_offset_at_a_fixed_place_and_round_trips() -> None:
    change = RowChange(
        "t",
        (1,),
        1_795_333_510_000_001,
        False,
        {"id": 1, "n": None, "s": ""},
        {},
        ("id",),
        "db_1.t_2",
        0,
    )
    raw = encode_value(change, None)
    assert raw[12:32] == b"00001795333510000001"
    assert decode_value(raw) == (1_795_333_510_000_001, "db_1.t_2", {"id": 1, "n": None, "s": ""})
    projected = decode_value(encode_value(change, ["s"]))[2]
    assert projected == {"s": ""}
    tomb = RowChange("t", (1,), 5, True, {"id": 1}, {}, ("id",), "db_1.t_2", 0)
    assert decode_value(encode_value(tomb, None)) == (5, "db_1.t_2", None)


def test_mysql_types_map_to_postgres_types_that_hold_every_value() -> None:
    assert pg_type("bigint(20) unsigned") == "numeric(20)"
    assert pg_type("int(10) unsigned") == "bigint"
    assert pg_type("decimal(65,30)") == "numeric(65,30)"
    assert pg_type("datetime(3)") == "timestamp(3)"
    assert pg_type("timestamp(6)") == "timestamptz(6)"
    assert pg_type("json") == "jsonb"
    assert pg_type("mediumblob") == "bytea"
    assert pg_type("bit(64)") == "numeric(20)"
    assert pg_type("time(6)") == "interval"
    assert pg_type(None) == "text"


def test_values_become_postgres_input_text() -> None:
    assert pg_text("timestamp(6)", "2026-01-02 03:04:05.000006") == "2026-01-02 03:04:05.000006+00"
    assert pg_text("binary(4)", "AQ==") == "\\x01000000"
    assert pg_text("datetime", "0000-00-00 00:00:00") == "-infinity"
    assert pg_text("double", 0.1) == "0.1"
    assert pg_text("int(11)", None) is None
    assert pg_text("varchar(5)", "") == ""


def test_copy_rows_convert_only_what_postgres_would_misread() -> None:
    """Strings, numbers and NULL pass as they are (psycopg writes them as PostgreSQL reads
    them); dates, timestamps, binaries and untyped values are converted as ``pg_text`` does,
    by the change's own column types, which may differ from the previous change's."""
    converters = RowConverters(["id", "at", "raw", "note", "gone"])
    types = {"id": "bigint(20)", "at": "timestamp(3)", "raw": "blob", "note": "varchar(9)"}
    row = {"id": 7, "at": "2026-01-02 03:04:05.123", "raw": "AQI=", "note": "a\tb"}
    assert converters.values(row, types) == [
        7,
        "2026-01-02 03:04:05.123+00",
        "\\x0102",
        "a\tb",
        None,
    ]
    # Another change whose types say otherwise (e.g. the column was retyped, or carries none).
    retyped = {"id": "bigint(20)", "at": "varchar(30)", "raw": "varchar(9)"}
    assert converters.values(row, retyped) == [7, "2026-01-02 03:04:05.123", "AQI=", "a\tb", None]
    assert converters.values({"id": 8, "gone": 1.5}, {}) == ["8", None, None, None, "1.5"]
    for row_types in (types, retyped, {}):
        expected = [pg_text(row_types.get(c), row.get(c)) for c in ["id", "at", "raw", "note"]]
        got = converters.values(row, row_types)[:4]
        assert [None if v is None else str(v) for v in got] == expected
