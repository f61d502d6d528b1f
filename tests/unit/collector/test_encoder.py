"""``MessageEncoder`` gives exactly the bytes of ``SimpleBinlog.encode()``: on generated
messages of every JSON scalar form the columns take, on before-images, on positions with and
without a GTID, when one table's ``column_types`` changes (a governance policy dropping a
column), and for messages with ``extra`` fields (left to ``encode()``)."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from collector.encoder import MessageEncoder
from simple_binlog.message import BinlogPosition, EventType, SimpleBinlog, Source, from_json

names = st.text(min_size=1, max_size=12)
scalars = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),  # unicode, quotes, backslashes, control characters
)
rows = st.dictionaries(names, scalars, min_size=1, max_size=8)
positions = st.one_of(
    st.none(),
    st.builds(
        BinlogPosition,
        server_id=st.integers(0, 2**32 - 1),
        file=st.text(max_size=20),
        pos=st.integers(0, 2**63 - 1),
        row_index=st.integers(0, 10**6),
        gtid=st.one_of(st.none(), st.from_regex(r"\d{1,3}-\d{1,5}-\d{1,12}", fullmatch=True)),
    ),
)


@st.composite
def messages(draw: st.DrawFn) -> SimpleBinlog:
    content = draw(rows)
    event_type = draw(st.sampled_from(list(EventType)))
    before = {name: draw(scalars) for name in content} if event_type is EventType.UPDATE else None
    return SimpleBinlog(
        binlog_offset=draw(st.integers(1, 2**62)),
        execute_time=draw(st.integers(0, 2**45)),
        event_type=event_type,
        schema_name=draw(names),
        table_name=draw(names),
        source=draw(st.sampled_from(list(Source))),
        content=content,
        column_types={
            name: draw(st.sampled_from(["int", "varchar(20)", "double"])) for name in content
        },
        primary_keys=tuple(
            draw(st.lists(st.sampled_from(sorted(content)), max_size=2, unique=True))
        ),
        before_content=before,
        position=draw(positions),
    )


@given(st.lists(messages(), min_size=1, max_size=5))
def test_the_bytes_are_those_of_encode(batch: list[SimpleBinlog]) -> None:
    encoder = MessageEncoder()
    for message in batch + batch:  # the second time from the table cache
        assert encoder.encode(message) == message.encode()


def test_every_column_form_of_a_real_table() -> None:
    column_types = {
        "id": "bigint unsigned",
        "amount": "decimal(12,2)",
        "ratio": "double",
        "note": "varchar(64)",
        "created_at": "datetime(3)",
        "flags": "bit(8)",
        "data": "blob",
    }
    content = {
        "id": "18446744073709551615",
        "amount": "-12.50",
        "ratio": 0.1,
        "note": 'caf\u00e9 "quoted" \\ \n tab\t \U0001f600',
        "created_at": "2026-11-22 18:00:00.123",
        "flags": 5,
        "data": None,
    }
    encoder = MessageEncoder()
    for index, event_type in enumerate(EventType):
        message = SimpleBinlog(
            binlog_offset=1_795_000_000_000_001 + index,
            execute_time=1_795_000_000_000,
            event_type=event_type,
            schema_name="sh\u00f6p",
            table_name="orders",
            source=Source.BINLOG,
            content=content,
            column_types=column_types,
            primary_keys=("id",),
            before_content=dict(content, ratio=-1e300) if event_type is EventType.UPDATE else None,
            position=BinlogPosition(1, "mariadb-bin.000001", 4_000, index, "0-1-9"),
        )
        encoded = encoder.encode(message)
        assert encoded == message.encode()
        assert from_json(orjson.loads(encoded)) == message


def test_a_new_column_types_object_of_the_same_table_is_serialised_anew() -> None:
    encoder = MessageEncoder()
    full = SimpleBinlog(
        1,
        0,
        EventType.INSERT,
        "s",
        "t",
        Source.BINLOG,
        {"a": 1, "b": 2},
        {"a": "int", "b": "int"},
        ("a",),
    )
    masked = SimpleBinlog(
        2, 0, EventType.INSERT, "s", "t", Source.BINLOG, {"a": 1}, {"a": "int"}, ("a",)
    )
    for message in (full, masked, full):
        assert encoder.encode(message) == message.encode()


def test_the_same_column_types_under_another_table_name_is_not_mixed_up() -> None:
    encoder = MessageEncoder()
    shared = {"a": "int"}
    first = SimpleBinlog(1, 0, EventType.INSERT, "s", "t1", Source.BINLOG, {"a": 1}, shared, ())
    second = SimpleBinlog(2, 0, EventType.INSERT, "s", "t2", Source.MOCK, {"a": 1}, shared, ())
    assert encoder.encode(first) == first.encode()
    assert encoder.encode(second) == second.encode()


def test_extra_fields_are_encoded_by_the_message_itself() -> None:
    message = SimpleBinlog(
        1,
        0,
        EventType.DELETE,
        "s",
        "t",
        Source.BINLOG,
        {"a": 1},
        {"a": "int"},
        ("a",),
        extra={"content": {"a": 2}, "note": "x"},
    )
    assert MessageEncoder().encode(message) == message.encode()


def test_the_table_cache_is_bounded() -> None:
    encoder = MessageEncoder(limit=2)
    kept = []
    for index in range(5):
        column_types = {"a": "int"}
        kept.append(column_types)
        message = SimpleBinlog(
            index + 1,
            0,
            EventType.INSERT,
            "s",
            f"t{index}",
            Source.BINLOG,
            {"a": index},
            column_types,
            (),
        )
        assert encoder.encode(message) == message.encode()
    assert len(encoder._tables) <= 2
