"""The collector's pure logic: table filtering, row encoding, message building, the TIME2 fix,
and the in-memory publisher's transaction semantics."""

import datetime as dt
import io
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_platform.config import CollectorSettings, MySQLInstance
from collector.decoding import (
    EventContext,
    TableSchema,
    _read_time2,
    encode_row,
    fix_reader_quirks,
    messages_from_rows,
)
from collector.metrics import CollectorMetrics
from collector.position import CollectorPosition
from collector.publisher import MemoryPublisher
from collector.service import Collector, TableFilter
from simple_binlog.errors import ContractError, ServiceUnavailableError
from simple_binlog.message import EventType, Source
from simple_binlog.offsets import OffsetGenerator, OffsetState, compose
from simple_binlog.values import encode, parse_column_type

FAST = settings(max_examples=150, deadline=None, database=None)
SECOND = 1_700_000_000


# -- TableFilter ---------------------------------------------------------------------------------


def default_filter() -> TableFilter:
    defaults = CollectorSettings()
    return TableFilter(defaults.include, defaults.exclude)


@pytest.mark.parametrize("schema", ["mysql", "information_schema", "performance_schema", "sys"])
def test_default_excludes_system_schemas(schema):
    table_filter = default_filter()
    assert not table_filter(schema, "user")
    assert not table_filter(schema, "any_table")


@pytest.mark.parametrize(
    ("schema", "table"),
    [
        ("app", "orders"),
        ("mysqlx", "t"),  # only the exact schema names are excluded
        ("my_mysql", "t"),
        ("sys2", "t"),
        ("app", "mysql"),  # a table named like a system schema
        ("app", "sys"),
    ],
)
def test_default_includes_everything_else(schema, table):
    assert default_filter()(schema, table)


def test_include_is_a_full_match_on_schema_dot_table():
    table_filter = TableFilter([r"app\.orders"], [])
    assert table_filter("app", "orders")
    assert not table_filter("app", "orders_archive")  # no prefix match
    assert not table_filter("xapp", "orders")  # no search inside the name
    assert not table_filter("app", "order")


def test_exclude_is_a_full_match_too():
    table_filter = TableFilter([r"app\..*", r"shop\..*"], [r"app\.tmp_.*", r"shop\.log"])
    assert table_filter("app", "orders")
    assert not table_filter("app", "tmp_import")
    assert table_filter("app", "orders_tmp_x")  # "tmp_" not at the start of the table
    assert not table_filter("shop", "log")
    assert table_filter("shop", "logins")  # exclude "shop\.log" is not a prefix
    assert not table_filter("other", "orders")  # matches no include pattern


def test_nothing_is_included_without_include_patterns():
    assert not TableFilter([], [])("app", "orders")


def test_decisions_are_stable_when_asked_again():
    table_filter = TableFilter([r"app\..*"], [r"app\.secret"])
    for _ in range(3):
        assert table_filter("app", "orders")
        assert not table_filter("app", "secret")


# -- encode_row ------------------------------------------------------------------------------------

TABLE = TableSchema(
    schema="app",
    table="things",
    column_types={
        "id": "bigint unsigned",
        "tags": "set('a','b','c')",
        "born": "date",
        "seen": "datetime(3)",
        "at": "datetime",
        "price": "decimal(10,2)",
        "blob": "varbinary(16)",
        "note": "varchar",
    },
    primary_keys=("id",),
)


def full_values(**overrides):
    values = {
        "id": 7,
        "tags": {"c", "a"},
        "born": dt.date(2024, 2, 29),
        "seen": dt.datetime(2024, 2, 29, 12, 0, 1, 250000),
        "at": dt.datetime(2024, 1, 1),
        "price": "12.5",
        "blob": b"\x00\x01",
        "note": "hello",
    }
    values.update(overrides)
    return values


def test_encode_row_encodes_values_in_column_order():
    row = encode_row(TABLE, full_values(), {})
    assert row == {
        "id": "7",
        "tags": "a,c",
        "born": "2024-02-29",
        "seen": "2024-02-29 12:00:01.250",
        "at": "2024-01-01 00:00:00",
        "price": "12.50",
        "blob": "AAE=",
        "note": "hello",
    }
    assert list(row) == list(TABLE.column_types)


def test_encode_row_restores_what_none_stands_for():
    values = full_values(tags=None, born=None, seen=None, at=None, note=None, price=None)
    sources = {
        "tags": "empty set",
        "born": "out of date range",
        "seen": "out of datetime2 range",
        "at": "out of datetime range",
        "note": "null",
        # "price" has no entry: a plain NULL
    }
    row = encode_row(TABLE, values, sources)
    assert row["tags"] == ""
    assert row["born"] == "0000-00-00"
    assert row["seen"] == "0000-00-00 00:00:00.000"
    assert row["at"] == "0000-00-00 00:00:00"
    assert row["note"] is None
    assert row["price"] is None


def test_zero_dates_carry_the_column_fsp():
    table = TableSchema("app", "t", {"t6": "timestamp(6)", "d0": "datetime"}, ())
    row = encode_row(
        table, {"t6": None, "d0": None}, {"t6": "out of date range", "d0": "out of date range"}
    )
    assert row == {"t6": "0000-00-00 00:00:00.000000", "d0": "0000-00-00 00:00:00"}


def test_a_column_missing_from_the_row_image_is_an_error():
    with pytest.raises(ContractError, match="binlog_row_image=FULL") as caught:
        encode_row(TABLE, full_values(note=None), {"note": "cols bitmap"})
    assert "app.things.note" in str(caught.value)


def test_a_column_absent_from_the_values_is_an_error():
    values = full_values()
    del values["price"]
    with pytest.raises(ContractError, match=r"app\.things\.price is missing"):
        encode_row(TABLE, values, {})


def test_a_column_unknown_to_the_schema_is_an_error():
    with pytest.raises(ContractError, match="'added_later'") as caught:
        encode_row(TABLE, full_values(added_later=1), {})
    assert "app.things" in str(caught.value)
    assert "DDL" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("id", "out of date range"),  # not a date column: no zero date to restore
        ("note", "same with before values"),  # a partial JSON update
        ("note", "something new"),
    ],
)
def test_an_unexplained_none_is_an_error(name, source):
    with pytest.raises(ContractError, match=rf"app\.things\.{name} came back empty"):
        encode_row(TABLE, full_values(**{name: None}), {name: source})


def test_a_value_of_the_wrong_type_names_the_column():
    with pytest.raises(ContractError, match="column born"):
        encode_row(TABLE, full_values(born="yesterday"), {})


# -- messages_from_rows ----------------------------------------------------------------------------

SMALL = TableSchema("app", "orders", {"id": "int", "state": "varchar"}, ("id",))
CONTEXT = EventContext(
    server_id=11, file="mysql-bin.000004", pos=12345, timestamp=SECOND, gtid="0-11-99"
)


def insert_rows(count: int):
    return [{"values": {"id": i, "state": f"s{i}"}, "none_sources": {}} for i in range(count)]


def test_messages_from_rows_builds_one_message_per_row():
    offsets = OffsetGenerator()
    messages = messages_from_rows("WriteRowsEvent", insert_rows(3), SMALL, CONTEXT, offsets)
    assert [m.content for m in messages] == [{"id": i, "state": f"s{i}"} for i in range(3)]
    assert [m.binlog_offset for m in messages] == [compose(SECOND, seq) for seq in (1, 2, 3)]
    for index, message in enumerate(messages):
        assert message.event_type is EventType.INSERT
        assert message.source is Source.BINLOG
        assert (message.schema_name, message.table_name) == ("app", "orders")
        assert message.execute_time == SECOND * 1000
        assert message.column_types == SMALL.column_types
        assert message.primary_keys == ("id",)
        assert message.before_content is None
        assert message.position is not None
        assert message.position.to_json() == {
            "serverId": 11,
            "file": "mysql-bin.000004",
            "pos": 12345,
            "rowIndex": index,
            "gtid": "0-11-99",
        }


def test_first_row_skips_published_rows_and_keeps_absolute_row_indexes():
    offsets = OffsetGenerator()
    messages = messages_from_rows(
        "WriteRowsEvent", insert_rows(5), SMALL, CONTEXT, offsets, first_row=2
    )
    assert [m.content["id"] for m in messages] == [2, 3, 4]
    assert [m.position.row_index for m in messages] == [2, 3, 4]
    # Offsets are handed out for emitted rows only.
    assert [m.binlog_offset for m in messages] == [compose(SECOND, seq) for seq in (1, 2, 3)]
    assert offsets.state == OffsetState(compose(SECOND, 3))


def test_first_row_past_the_end_emits_nothing_and_consumes_no_offset():
    offsets = OffsetGenerator(OffsetState(compose(SECOND, 41)))
    assert messages_from_rows("WriteRowsEvent", insert_rows(3), SMALL, CONTEXT, offsets, 3) == []
    assert messages_from_rows("WriteRowsEvent", insert_rows(3), SMALL, CONTEXT, offsets, 9) == []
    assert offsets.state == OffsetState(compose(SECOND, 41))


@FAST
@given(st.integers(0, 30), st.integers(0, 35), st.integers(0, 999_000))
def test_a_restart_after_any_row_reproduces_the_same_messages(count, done, start_seq):
    """Publishing rows [0, done), then restarting from the position after them with
    first_row=done, gives exactly the messages an uninterrupted run would."""
    start = OffsetState(compose(SECOND, start_seq) if start_seq else 0)
    rows = insert_rows(count)
    whole = messages_from_rows("WriteRowsEvent", rows, SMALL, CONTEXT, OffsetGenerator(start))
    published = whole[: min(done, count)]
    resume_state = OffsetState(published[-1].binlog_offset) if published else start
    rest = messages_from_rows(
        "WriteRowsEvent", rows, SMALL, CONTEXT, OffsetGenerator(resume_state), first_row=done
    )
    assert published + rest == whole
    assert [m.position.row_index for m in whole] == list(range(count))


def test_update_rows_carry_before_and_after_images():
    rows = [
        {
            "before_values": {"id": 1, "state": None},
            "before_none_sources": {"state": "null"},
            "after_values": {"id": 2, "state": "paid"},
            "after_none_sources": {},
        }
    ]
    (message,) = messages_from_rows("UpdateRowsEvent", rows, SMALL, CONTEXT, OffsetGenerator())
    assert message.event_type is EventType.UPDATE
    assert message.before_content == {"id": 1, "state": None}
    assert message.content == {"id": 2, "state": "paid"}


def test_update_rows_restore_none_sources_on_each_side():
    table = TableSchema("app", "t", {"id": "int", "tags": "set('x','y')"}, ("id",))
    rows = [
        {
            "before_values": {"id": 1, "tags": None},
            "before_none_sources": {"tags": "empty set"},
            "after_values": {"id": 1, "tags": None},
            "after_none_sources": {"tags": "null"},
        }
    ]
    (message,) = messages_from_rows("UpdateRowsEvent", rows, table, CONTEXT, OffsetGenerator())
    assert message.before_content == {"id": 1, "tags": ""}
    assert message.content == {"id": 1, "tags": None}


def test_delete_rows_carry_the_before_image_as_content():
    rows = [{"values": {"id": 5, "state": "gone"}}]  # none_sources may be absent
    (message,) = messages_from_rows("DeleteRowsEvent", rows, SMALL, CONTEXT, OffsetGenerator())
    assert message.event_type is EventType.DELETE
    assert message.content == {"id": 5, "state": "gone"}
    assert message.before_content is None


def test_a_non_rows_event_is_an_error():
    offsets = OffsetGenerator()
    with pytest.raises(ContractError, match="QueryEvent is not a rows event"):
        messages_from_rows("QueryEvent", insert_rows(1), SMALL, CONTEXT, offsets)
    assert offsets.state == OffsetState()


# -- the TIME2 decoder -----------------------------------------------------------------------------

_UNIT = {1: 10_000, 2: 100, 3: 1}


def time2_bytes(sign: int, hours: int, minutes: int, seconds: int, micros: int, fsp: int) -> bytes:
    """TIME2 as the server writes it: the packed value, offset, big-endian."""
    frac_bytes = (fsp + 1) // 2
    frac_units = micros // _UNIT[frac_bytes] if frac_bytes else 0
    packed = sign * ((((hours << 12) | (minutes << 6) | seconds) << (8 * frac_bytes)) + frac_units)
    return (packed + (0x800000 << (8 * frac_bytes))).to_bytes(3 + frac_bytes, "big")


def mysql_time2_bytes(sign: int, hours: int, minutes: int, seconds: int, micros: int, fsp: int):
    """The same, following MySQL's my_time_packed_to_binary() literally (C division and
    remainder truncate toward zero; the int part is an arithmetic shift)."""
    hms = (hours << 12) | (minutes << 6) | seconds
    nr = sign * ((hms << 24) + micros)  # TIME_to_longlong_time_packed

    def c_div(a: int, b: int) -> int:
        return -(abs(a) // b) if a < 0 else a // b

    int_part = nr >> 24
    frac_part = nr - c_div(nr, 1 << 24) * (1 << 24)  # C's nr % (1 << 24)
    if fsp in (1, 2):
        return (0x800000 + int_part).to_bytes(3, "big") + bytes([c_div(frac_part, 10_000) & 0xFF])
    if fsp in (3, 4):
        return (0x800000 + int_part).to_bytes(3, "big") + (c_div(frac_part, 100) & 0xFFFF).to_bytes(
            2, "big"
        )
    if fsp in (5, 6):
        return (nr + (0x800000 << 24)).to_bytes(6, "big")
    return (0x800000 + int_part).to_bytes(3, "big")


def read_time2(raw: bytes, fsp: int) -> dt.timedelta:
    packet = io.BytesIO(raw + b"\xff\xee")  # bytes of the next column must stay unread
    value = _read_time2(SimpleNamespace(packet=packet), SimpleNamespace(fsp=fsp))
    assert packet.read() == b"\xff\xee"
    return value


def duration(sign: int, hours: int, minutes: int, seconds: int, micros: int) -> dt.timedelta:
    return sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)


@pytest.mark.parametrize(
    ("sign", "hms_micros", "fsp", "wire"),
    [
        (-1, (838, 59, 59, 123_400), 4, "-838:59:59.1234"),
        (1, (838, 59, 59, 123_400), 4, "838:59:59.1234"),
        (1, (12, 34, 56, 500_000), 1, "12:34:56.5"),
        (-1, (12, 34, 56, 500_000), 1, "-12:34:56.5"),
        (-1, (0, 0, 0, 1), 6, "-00:00:00.000001"),
        (1, (0, 0, 0, 0), 0, "00:00:00"),
        (-1, (838, 59, 59, 0), 0, "-838:59:59"),
        (-1, (1, 0, 0, 990_000), 2, "-01:00:00.99"),
        (-1, (0, 0, 1, 999_990), 5, "-00:00:01.99999"),
        (-1, (0, 0, 0, 100_000), 1, "-00:00:00.1"),
    ],
)
def test_read_time2(sign, hms_micros, fsp, wire):
    raw = time2_bytes(sign, *hms_micros, fsp)
    assert raw == mysql_time2_bytes(sign, *hms_micros, fsp)
    value = read_time2(raw, fsp)
    assert value == duration(sign, *hms_micros)
    assert encode(parse_column_type(f"time({fsp})" if fsp else "time"), value) == wire


def test_read_time2_known_bytes():
    # -00:00:00.000001 (fsp 6) is one below the offset.
    assert read_time2(bytes.fromhex("7fffffffffff"), 6) == dt.timedelta(microseconds=-1)
    # 00:00:00 (fsp 0) is the offset itself.
    assert read_time2(bytes.fromhex("800000"), 0) == dt.timedelta(0)


@st.composite
def times(draw):
    fsp = draw(st.integers(0, 6))
    step = 10 ** (6 - fsp)
    return (
        draw(st.sampled_from([1, -1])),
        draw(st.integers(0, 838)),
        draw(st.integers(0, 59)),
        draw(st.integers(0, 59)),
        draw(st.integers(0, 10**fsp - 1)) * step if fsp else 0,
        fsp,
    )


@FAST
@given(times())
def test_read_time2_decodes_every_time(case):
    sign, hours, minutes, seconds, micros, fsp = case
    raw = time2_bytes(sign, hours, minutes, seconds, micros, fsp)
    assert raw == mysql_time2_bytes(sign, hours, minutes, seconds, micros, fsp)
    assert read_time2(raw, fsp) == duration(sign, hours, minutes, seconds, micros)


def test_fix_reader_quirks_installs_the_decoder(monkeypatch):
    from pymysqlreplication import binlogstream
    from pymysqlreplication.row_event import RowsEvent

    # Registered first so that monkeypatch puts the library back afterwards.
    monkeypatch.setattr(RowsEvent, "_RowsEvent__read_time2", RowsEvent._RowsEvent__read_time2)
    monkeypatch.setattr(binlogstream, "MYSQL_EXPECTED_ERROR_CODES", [2013, 2006])
    fix_reader_quirks()
    assert RowsEvent._RowsEvent__read_time2 is _read_time2
    assert binlogstream.MYSQL_EXPECTED_ERROR_CODES == []


# -- MemoryPublisher -------------------------------------------------------------------------------


def some_messages(count: int, first: int = 0):
    rows = insert_rows(first + count)
    return messages_from_rows(
        "WriteRowsEvent", rows, SMALL, CONTEXT, OffsetGenerator(), first_row=first
    )


def at(gtid: str) -> CollectorPosition:
    return CollectorPosition("db1", gtid, OffsetState())


def test_memory_publisher_start():
    assert MemoryPublisher().start() is None
    assert MemoryPublisher(at("0-1-5")).start() == at("0-1-5")


def test_memory_publisher_shows_nothing_before_commit():
    publisher = MemoryPublisher()
    first, second = some_messages(2)
    publisher.add(first)
    publisher.dead_letter(second, "too large")
    assert publisher.committed == []
    assert publisher.dead == []
    assert publisher.positions == []
    publisher.commit(at("0-1-6"))
    assert publisher.committed == [first]
    assert publisher.dead == [(second, "too large")]
    assert publisher.positions == [at("0-1-6")]
    assert publisher.pending == []
    assert publisher.start() == at("0-1-6")


def test_memory_publisher_abort_drops_pending_rows_and_dead_letters():
    publisher = MemoryPublisher(at("0-1-5"))
    kept, dropped, dropped_dead, later = some_messages(4)
    publisher.add(kept)
    publisher.commit(at("0-1-6"))
    publisher.add(dropped)
    publisher.dead_letter(dropped_dead, "too large")
    publisher.abort()
    assert publisher.pending == []
    publisher.add(later)
    publisher.commit(at("0-1-7"))
    assert publisher.committed == [kept, later]
    assert publisher.dead == []  # the aborted dead letter never shows up
    assert publisher.positions == [at("0-1-5"), at("0-1-6"), at("0-1-7")]


def test_memory_publisher_close_aborts():
    publisher = MemoryPublisher()
    (message,) = some_messages(1)
    publisher.add(message)
    publisher.dead_letter(message, "x")
    publisher.close()
    publisher.commit(at("0-1-1"))
    assert publisher.committed == []
    assert publisher.dead == []


# -- taking over while Kafka is away ---------------------------------------------------------------


class _KafkaAwayAtFirst(MemoryPublisher):
    """Kafka does not answer the first ``failures`` starts; the next one stops the collector
    (as a lost leadership would), so the test ends without MySQL."""

    def __init__(self, failures: int, stop: threading.Event) -> None:
        super().__init__()
        self.failures, self.stop, self.starts, self.closes = failures, stop, 0, 0

    def start(self) -> CollectorPosition | None:
        self.starts += 1
        if self.starts <= self.failures:
            raise ServiceUnavailableError("Kafka at 127.0.0.1:1 did not answer.")
        self.stop.set()
        return super().start()

    def close(self) -> None:
        self.closes += 1
        super().close()


def test_a_collector_waits_for_kafka_at_start_instead_of_exiting():
    stop = threading.Event()
    publisher = _KafkaAwayAtFirst(failures=2, stop=stop)
    metrics = CollectorMetrics()
    collector = Collector(
        MySQLInstance(name="away", host="127.0.0.1"),
        CollectorSettings(reconnect_backoff_max_s=0.01),
        publisher,
        metrics,
        stop=stop,
    )
    collector.run()  # returns: stopped after the third start, nothing published
    assert publisher.starts == 3
    assert not collector.started.is_set()
    assert publisher.closes == 3  # each failed start let go of its producer, then the stop
    unavailable = metrics.registry.get_sample_value(
        "cdc_collector_errors_total", {"instance": "away", "kind": "unavailable"}
    )
    assert unavailable == 2


def test_progress_works_out_the_position_after_rows_only_when_read() -> None:
    from collector.service import _Progress

    start = CollectorPosition("local", "0-1-10", OffsetState(compose(1_800_000_000, 4)), epoch=3)
    offset = compose(1_800_000_001, 1)
    after_rows = start.after_row("0-1-11", 2, "mariadb-bin.000002", 900, offset)
    expected = after_rows.after_transaction("0-1-11", "mariadb-bin.000002", 1000)

    progress = _Progress(start)
    progress.rows_added("0-1-11", 2, "mariadb-bin.000002", 900, offset)
    progress.transaction_ended("0-1-11", "mariadb-bin.000002", 1000)
    assert progress.position == expected
    assert progress.position.offset_state.last_offset == offset

    read_between = _Progress(start)
    read_between.rows_added("0-1-11", 2, "mariadb-bin.000002", 900, offset)
    assert read_between.position == after_rows  # inside the transaction: rows done, partial
    read_between.transaction_ended("0-1-11", "mariadb-bin.000002", 1000)
    assert read_between.position == expected

    no_rows = _Progress(start)  # e.g. a DDL: the offset state stays
    no_rows.transaction_ended("0-1-11", "mariadb-bin.000002", 1000)
    assert no_rows.position == start.after_transaction("0-1-11", "mariadb-bin.000002", 1000)
    assert no_rows.position.offset_state == start.offset_state


class _SlowCommits(MemoryPublisher):
    """Each commit takes ``seconds`` of the fake clock."""

    def __init__(self, clock: list[float], seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def commit(self, position: CollectorPosition) -> None:
        self.clock[0] += self.seconds
        super().commit(position)


def test_the_commit_interval_counts_from_the_start_of_the_commit_before(monkeypatch) -> None:
    """A slow commit is not followed by a whole interval more: the transactions read while it
    ran are committed once the interval since its start is over, and never more often."""
    from collector import service
    from collector.service import _Progress
    from collector.work import TransactionEnd

    clock = [100.0]
    monkeypatch.setattr(service.time, "monotonic", lambda: clock[0])
    publisher = _SlowCommits(clock, seconds=0.3)  # six intervals of 50 ms
    collector = Collector(
        MySQLInstance(name="slow", host="127.0.0.1"),
        CollectorSettings(commit_interval_ms=50),
        publisher,
        CollectorMetrics(),
    )
    start = CollectorPosition("slow", "0-1-10", OffsetState(compose(1_800_000_000, 4)))
    collector.committed = start
    progress = _Progress(start)
    clock[0] += 0.06
    end = TransactionEnd("0-1-11", "mariadb-bin.000002", 1000, SECOND)
    progress = collector._end_transaction(progress, end)  # the interval is over: committed
    assert len(publisher.positions) == 1 and clock[0] == pytest.approx(100.36)
    # Read while that commit ran (it began at 100.06): committed at once after it returned.
    publisher.seconds = 0.0
    progress = collector._end_transaction(progress, TransactionEnd("0-1-12", "f", 1100, SECOND))
    assert len(publisher.positions) == 2
    # That commit began at 100.36: a transaction ended 10 ms later waits for the interval.
    clock[0] += 0.01
    progress = collector._end_transaction(progress, TransactionEnd("0-1-13", "f", 1200, SECOND))
    assert len(publisher.positions) == 2
