"""Keyset planning, key choice, MOCK messages and their encoding, execute time, rate limit."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest

from cdc_platform.mysql_schema import IndexColumn, choose_key
from mock_replay.condition import compile_condition
from mock_replay.errors import ReplayError
from mock_replay.plan import (
    RowEncoder,
    TableShape,
    TokenBucket,
    batch_is_whole,
    chunk_query,
    decode_key,
    encode_key,
    execute_day,
    execute_time_ms,
    json_batch_query,
    json_chunk_query,
    keyset_params,
    keyset_predicate,
)
from simple_binlog.message import EventType, Source, decode_message
from simple_binlog.offsets import mock_offset

SHAPE = TableShape(
    schema="ordercenter_07",
    table="orderinfo_42",
    column_types={
        "shop": "int(11)",
        "order_no": "varchar(32)",
        "amount": "decimal(12,2)",
        "weight": "float",
        "big": "bigint(20) unsigned",
        "paid_at": "timestamp(3)",
        "flags": "bit(4)",
        "tags": "set('a','b','c')",
        "raw": "varbinary(8)",
    },
    key=("shop", "order_no"),
    estimated_rows=10,
)


def test_primary_key_wins_then_first_unique_not_null_key() -> None:
    assert choose_key(
        [
            IndexColumn("uk_a", "a", False, False),
            IndexColumn("PRIMARY", "id", False, False),
            IndexColumn("PRIMARY", "shard", False, False),
        ]
    ) == ("id", "shard")
    assert choose_key(
        [
            IndexColumn("uk_b", "b", False, True),  # nullable: not a usable key
            IndexColumn("uk_c", "c1", False, False),
            IndexColumn("uk_c", "c2", False, False),
            IndexColumn("ix_d", "d", True, False),
        ]
    ) == ("c1", "c2")
    assert choose_key([IndexColumn("ix_d", "d", True, False)]) == ()
    assert choose_key([]) == ()


def test_keyset_predicate_is_the_expanded_form_with_params_in_order() -> None:
    assert keyset_predicate(["a"]) == "((`a` > %s))"
    assert keyset_predicate(["a", "b", "c"]) == (
        "((`a` > %s) OR (`a` = %s AND `b` > %s) OR (`a` = %s AND `b` = %s AND `c` > %s))"
    )
    assert keyset_params((1, "x", 3)) == (1, 1, "x", 1, "x", 3)


def test_first_chunk_has_no_lower_bound_and_float_is_read_as_double() -> None:
    sql, params = chunk_query(SHAPE, None, None, 500)
    assert sql == (
        "SELECT `shop`, `order_no`, `amount`, CAST(`weight` AS DOUBLE) AS `weight`, `big`, "
        "`paid_at`, `flags`, `tags`, `raw` FROM `ordercenter_07`.`orderinfo_42` "
        "ORDER BY `shop`, `order_no` LIMIT 500"
    )
    assert params == ()


def test_next_chunk_binds_the_last_key_then_the_condition() -> None:
    now = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)
    condition = compile_condition("amount > 5 AND order_no LIKE 'A%'", SHAPE.column_types, now)
    sql, params = chunk_query(SHAPE, condition, (7, "A-100"), 1000)
    assert sql.endswith(
        "WHERE ((`shop` > %s) OR (`shop` = %s AND `order_no` > %s)) AND "
        "((`amount` > %s) AND (`order_no` LIKE %s)) ORDER BY `shop`, `order_no` LIMIT 1000"
    )
    assert params == (7, 7, "A-100", 5, "A%")


def _row():
    return (
        7,
        "A-100",
        Decimal("12.3"),
        1.100000023841858,  # the float32 nearest 1.1, as CAST(... AS DOUBLE) returns it
        2**64 - 1,
        dt.datetime(2026, 11, 21, 23, 59, 59, 123000),
        b"\x05",
        "c,a",
        b"\x00\xff",
    )


def test_a_row_becomes_a_mock_insert_in_the_collectors_wire_form() -> None:
    offset = mock_offset(1_795_340_000)
    encoder = RowEncoder(SHAPE, offset, execute_time_ms(dt.date(2026, 11, 21)))
    message = decode_message(encoder.message(_row()).encode())
    assert message.source is Source.MOCK
    assert message.event_type is EventType.INSERT
    assert message.binlog_offset == (1_795_340_000 - 300) * 10**6
    assert message.execute_time == 1_795_219_200_000  # 2026-11-21T00:00:00Z
    assert message.position is None and message.before_content is None
    assert message.primary_keys == ("shop", "order_no")
    assert message.content == {
        "shop": 7,
        "order_no": "A-100",
        "amount": "12.30",
        "weight": 1.100000023841858,
        "big": "18446744073709551615",
        "paid_at": "2026-11-21 23:59:59.123",
        "flags": 5,
        "tags": "a,c",
        "raw": "AP8=",
    }
    assert encoder.key_of(message.content) == (7, "A-100")
    assert encoder.encode(encoder.content(_row())) == encoder.message(_row()).encode()


def test_server_text_of_decimal_and_datetimes_passes_as_the_wire_form() -> None:
    encoder = RowEncoder(SHAPE, 1, 0)
    as_text = ("7", "A-1", "12.30", 1.5, 5, "2026-11-21 23:59:59.123", b"\x05", "a", b"")
    content = encoder.content((7, *as_text[1:]))
    assert content["amount"] == "12.30" and content["paid_at"] == "2026-11-21 23:59:59.123"
    assert content == {**encoder.content(_row()), "order_no": "A-1", "weight": 1.5, "tags": "a",
                       "raw": "", "big": "5"}  # fmt: skip


def test_fast_paths_fall_back_to_the_contract_encoder_for_other_python_types() -> None:
    shape = TableShape("d", "t", {"id": "int(11)", "doc": "json"}, ("id",), 0)
    encoder = RowEncoder(shape, 1, 0)
    # A JSON column read with a binary collation arrives as bytes; it still travels as text.
    assert encoder.content((3, b'{"a": 1}')) == {"id": 3, "doc": '{"a": 1}'}
    assert encoder.content((None, None)) == {"id": None, "doc": None}


def test_last_key_round_trips_through_the_progress_wire_form() -> None:
    shape = TableShape(
        "d",
        "t",
        {"a": "bigint(20) unsigned", "b": "datetime(6)", "c": "varbinary(4)", "d": "decimal(5,2)"},
        ("a", "b", "c", "d"),
        0,
    )
    raw = (2**64 - 1, dt.datetime(2026, 1, 2, 3, 4, 5, 6), b"\x00\x01", Decimal("1.50"))
    stored = encode_key(shape, raw)
    assert stored == ["18446744073709551615", "2026-01-02 03:04:05.000006", "AAE=", "1.50"]
    assert decode_key(shape, stored) == raw
    with pytest.raises(ReplayError, match="the table changed since the run started"):
        decode_key(shape, stored[:2])


def test_execute_day_defaults_to_yesterday_utc_and_is_strict() -> None:
    late_evening_utc = dt.datetime(2026, 11, 22, 23, 30, tzinfo=dt.UTC)
    assert execute_day(None, late_evening_utc) == dt.date(2026, 11, 21)
    assert execute_day("2026-03-01", late_evening_utc) == dt.date(2026, 3, 1)
    with pytest.raises(ReplayError, match="is not a day in the form YYYY-MM-DD"):
        execute_day("yesterday", late_evening_utc)
    assert execute_time_ms(dt.date(1970, 1, 2)) == 86_400_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_paces_to_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=1000, burst=500, clock=clock)
    assert bucket.take(500) == 0.0
    assert bucket.take(500) == pytest.approx(0.5)  # in debt by 500 rows at 1000 rows/s
    clock.now += 0.5
    assert bucket.take(250) == pytest.approx(0.25)
    clock.now += 10  # refills up to the burst, not beyond
    assert bucket.take(500) == 0.0
    assert bucket.take(1) == pytest.approx(0.001)


def test_rate_zero_means_no_limit() -> None:
    bucket = TokenBucket(rate=0, burst=1, clock=FakeClock())
    assert bucket.take(10**9) == 0.0


def test_server_json_query_builds_the_wire_form_for_every_supported_type() -> None:
    shape = TableShape(
        "d",
        "t",
        {
            "id": "bigint(20) unsigned",
            "it's": "int(11)",
            "f": "float",
            "tm": "time(2)",
            "bn": "binary(4)",
            "js": "longtext",
            "v": "varchar(10)",
            "e": "enum('a','b')",
            "p%": "decimal(5,2)",
            "g": "point",
        },
        ("id",),
        0,
    )
    sql, params = json_chunk_query(shape, None, ("5",), 10)
    # Only the column's own NULL is JSON null: a NULL made by a conversion (JSON_QUOTE of
    # bytes invalid in the character set, TO_BASE64 over max_allowed_packet) nulls the whole
    # row, which is refused, never one value; '%' is doubled for the driver.
    assert sql.startswith(
        """SELECT CONCAT('{"id":', IF(`id` IS NULL, 'null', CONCAT('"', CAST(`id` AS CHAR), '"')), """
        """',"it''s":', IF(`it's` IS NULL, 'null', `it's`), """
        """',"f":', IF(`f` IS NULL, 'null', CAST(`f` AS DOUBLE)), """
        """',"tm":', IF(`tm` IS NULL, 'null', CONCAT('"', CAST(`tm` AS CHAR), '"')), """
    )
    # BINARY(n): all n bytes, trailing zeros too, as the collector sends them.
    assert (
        """',"bn":', IF(`bn` IS NULL, 'null', CONCAT('"', REPLACE(TO_BASE64(`bn`), """
        """CHAR(10 USING utf8mb4), ''), '"'))"""
    ) in sql
    assert """',"js":', IF(`js` IS NULL, 'null', JSON_QUOTE(CAST(`js` AS CHAR)))""" in sql
    assert """',"v":', IF(`v` IS NULL, 'null', JSON_QUOTE(`v`))""" in sql
    assert """',"e":', IF(`e` IS NULL, 'null', JSON_QUOTE(`e`))""" in sql
    assert """',"p%%":', IF(`p%%` IS NULL, 'null', CONCAT('"', CAST(`p%%` AS CHAR), '"'))""" in sql
    assert """, '}') FROM `d`.`t` WHERE ((`id` > %s)) ORDER BY `id` LIMIT 10""" in sql
    assert params == ("5",)


def test_server_json_is_not_used_for_a_zerofill_number() -> None:
    # The server prints 00042 for a ZEROFILL column: not a JSON number.
    shape = TableShape("d", "t", {"id": "int(11)", "n": "int(5) unsigned zerofill"}, ("id",), 0)
    assert json_chunk_query(shape, None, None, 10) is None
    assert json_batch_query(shape, None, None, 10) is None


def test_server_json_is_not_used_for_a_column_name_json_must_escape() -> None:
    for name in ("a\\b", 'say "hi"', "tab\there"):
        shape = TableShape("d", "t", {"id": "int(11)", name: "int(11)"}, ("id",), 0)
        assert json_chunk_query(shape, None, None, 10) is None, name
        assert json_batch_query(shape, None, None, 10) is None, name
    shape = TableShape("d", "t", {"id": "int(11)", "a\\b": "int(11)"}, ("id",), 0)
    assert chunk_query(shape, None, None, 10)[0].startswith("SELECT `id`, `a\\b` FROM")


def test_a_batch_query_returns_the_rows_joined_as_bytes_in_key_order() -> None:
    shape = TableShape("d", "t", {"a": "int(11)", "b": "int(11)"}, ("a", "b"), 0)
    query = json_batch_query(shape, None, (1, 2), 100)
    assert query is not None
    sql, params = query
    assert sql.startswith(
        "SELECT COUNT(*), SUM(LENGTH(`_cdc_replay_content`)), CAST(GROUP_CONCAT("
        "`_cdc_replay_content` ORDER BY `a`, `b` SEPARATOR '\n') AS BINARY) FROM (SELECT `a`, `b`, "
    )
    assert sql.endswith("ORDER BY `a`, `b` LIMIT 100) AS `_cdc_replay_chunk`")
    assert params == (1, 1, 2)


def test_a_row_built_by_the_server_gets_the_same_envelope() -> None:
    encoder = RowEncoder(SHAPE, 7, 0)
    content = encoder.content(_row())
    server_text = orjson.dumps(content).decode().replace('":', '": ')
    assert orjson.loads(encoder.encode_json_text(server_text)) == orjson.loads(
        encoder.encode(content)
    )


def test_a_batch_becomes_the_same_messages_as_its_rows_one_by_one() -> None:
    encoder = RowEncoder(SHAPE, 7, 0)
    contents = [
        {"shop": 1, "order_no": "a\nb", "amount": "1.00", "weight": 0.5, "big": "1"},
        {"shop": 2, "order_no": "héllo 😀", "amount": None, "weight": None, "big": "2"},
        {"shop": 3, "order_no": "", "amount": "3.10", "weight": 1e300, "big": "3"},
    ]
    joined = b"\n".join(orjson.dumps(content) for content in contents)
    messages = encoder.encode_batch(joined)
    assert messages == [encoder.encode(content) for content in contents]
    assert [decode_message(m).content for m in messages] == contents
    assert encoder.encode_batch(orjson.dumps(contents[0])) == [encoder.encode(contents[0])]


def test_a_cut_batch_is_recognised_even_when_the_cut_falls_inside_the_last_row() -> None:
    rows = [b'{"id":1}', b'{"id":2,"v":"abc"}', '{"id":3,"v":"héllo"}'.encode()]
    joined = b"\n".join(rows)
    length = sum(len(r) for r in rows)  # bytes, as SUM(LENGTH()) counts them
    assert batch_is_whole(3, length, joined)
    assert not batch_is_whole(3, length, joined[:-3])  # still 3 pieces, the last one cut
    assert not batch_is_whole(3, length, None)
    assert batch_is_whole(0, None, None)


def test_enum_and_set_keys_are_bound_as_their_numbers() -> None:
    shape = TableShape(
        "d", "t", {"kind": "enum('z','a','m')", "tags": "set('x','y','z')", "id": "int(11)"},
        ("kind", "tags", "id"), 0,
    )  # fmt: skip
    assert decode_key(shape, ["a", "x,z", 5]) == (2, 5, 5)
    assert decode_key(shape, ["", "", 1]) == (0, 0, 1)
    timed = TableShape("d", "t", {"t": "time(6)"}, ("t",), 0)
    assert decode_key(timed, ["-0:00:01.000000"]) == (dt.timedelta(seconds=-1),)
