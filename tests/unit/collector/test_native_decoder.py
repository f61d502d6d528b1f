"""The native row decoder (collector/_native.c) against its Python reference, on the same bytes.

A table of every column type the collector decodes natively (and one it leaves to its Python
reader) gets rows of arbitrary bytes per column — valid values, values the server never
writes, NULLs — and each rows event is decoded by ``RowDecoder.rows`` (native) and
``RowDecoder.reference_rows`` (Python): both must give the same values, or both fail.
Truncated and garbage events must raise ``ContractError`` (never crash, never read past the
buffer); bytes the native decoder accepts, the reference reads the same.

The packet scanner (``scan_packets``, used by ``BinlogStream``) is held to the Python
packet reading the same way, with packets split across socket reads at every size.

Skipped when the extension is not built (a machine without a C compiler); the integration
test ``test_fast_decoder.py`` requires it.
"""

from __future__ import annotations

import dataclasses
import io
import struct

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import _native
from collector import binlog_events as ev
from collector import native as collector_native
from collector.binlog_events import BinlogColumn, TableMap
from collector.binlog_stream import BinlogStream, _packets
from collector.decoding import EventContext, build_messages
from collector.row_decoder import NATIVE_DECODER, RowDecoder, column_reader, native_spec
from simple_binlog.errors import ContractError
from simple_binlog.message import EventType
from simple_binlog.offsets import OffsetGenerator, OffsetState
from simple_binlog.values import parse_column_type
from tests.unit.collector.test_fast_decoding import packed_decimal, schema_of

pytestmark = pytest.mark.skipif(not NATIVE_DECODER, reason="collector._native is not built")

UTF8MB4, LATIN1, BINARY = 45, 8, 63

# (column, how many bytes a value takes or None for a length-prefixed one)
COLUMNS: list[tuple[BinlogColumn, int | None]] = [
    (BinlogColumn(0, ev.TINY, "ti"), 1),
    (BinlogColumn(0, ev.TINY, "tu", unsigned=True), 1),
    (BinlogColumn(0, ev.SHORT, "si"), 2),
    (BinlogColumn(0, ev.SHORT, "su", unsigned=True), 2),
    (BinlogColumn(0, ev.INT24, "mi"), 3),
    (BinlogColumn(0, ev.INT24, "mu", unsigned=True), 3),
    (BinlogColumn(0, ev.LONG, "id", is_primary=True), 4),
    (BinlogColumn(0, ev.LONG, "iu", unsigned=True), 4),
    (BinlogColumn(0, ev.LONGLONG, "bi"), 8),
    (BinlogColumn(0, ev.LONGLONG, "bu", unsigned=True), 8),
    (BinlogColumn(0, ev.FLOAT, "f", length_size=4), 4),
    (BinlogColumn(0, ev.DOUBLE, "d", length_size=8), 8),
    (BinlogColumn(0, ev.NEWDECIMAL, "dec", precision=30, decimals=10), 14),
    (BinlogColumn(0, ev.NEWDECIMAL, "d50", precision=5, decimals=0), 3),
    (BinlogColumn(0, ev.NEWDECIMAL, "d99", precision=18, decimals=9), 8),
    (BinlogColumn(0, ev.NEWDECIMAL, "d33", precision=3, decimals=3, unsigned=True), 2),
    (BinlogColumn(0, ev.DATETIME2, "dt0"), 5),
    (BinlogColumn(0, ev.DATETIME2, "dt6", fsp=6), 8),
    (BinlogColumn(0, ev.TIMESTAMP2, "ts0"), 4),
    (BinlogColumn(0, ev.TIMESTAMP2, "ts3", fsp=3), 6),
    (BinlogColumn(0, ev.TIME2, "t0"), 3),
    (BinlogColumn(0, ev.TIME2, "t1", fsp=1), 4),
    (BinlogColumn(0, ev.TIME2, "t5", fsp=5), 6),
    (BinlogColumn(0, ev.TIME2, "t2", fsp=2), 4),
    (BinlogColumn(0, ev.TIME2, "t6", fsp=6), 6),
    (BinlogColumn(0, ev.DATETIME2, "dt3", fsp=3), 7),
    (BinlogColumn(0, ev.DATE, "da"), 3),
    (BinlogColumn(0, ev.YEAR, "y"), 1),
    (BinlogColumn(0, ev.BIT, "b1", bits=1), 1),
    (BinlogColumn(0, ev.BIT, "b13", bits=13), 2),
    (BinlogColumn(0, ev.BIT, "b64", bits=64), 8),
    (BinlogColumn(0, ev.ENUM, "e", size=1, enum_values=["a", "b", "c"], collation=UTF8MB4), 1),
    (BinlogColumn(0, ev.SET, "s", size=1, set_values=["x", "y", "zz"], collation=UTF8MB4), 1),
    (BinlogColumn(0, ev.SET, "s9", size=2, set_values=[str(i) for i in range(9)]), 2),
    (BinlogColumn(0, ev.VARCHAR, "vc", max_length=400, collation=UTF8MB4), None),
    (BinlogColumn(0, ev.STRING, "c", max_length=20, collation=LATIN1), None),
    (BinlogColumn(0, ev.VARCHAR, "vb", max_length=10, collation=BINARY), None),
    (BinlogColumn(0, ev.STRING, "bn", max_length=6, collation=BINARY), None),  # BINARY(6)
    (BinlogColumn(0, ev.BLOB, "bl", length_size=2, collation=BINARY), None),
    (BinlogColumn(0, ev.BLOB, "tx", length_size=2, collation=UTF8MB4), None),
    (BinlogColumn(0, ev.BLOB, "lt", length_size=4, collation=UTF8MB4), None),
    (BinlogColumn(0, ev.DATETIME, "legacy"), 8),  # no native reading: its Python reader
]
for index, (column, _) in enumerate(COLUMNS):
    column.index = index


def table() -> TableMap:
    return TableMap(7, "shop", "every", [c for c, _ in COLUMNS], has_names=True)


def prefix_bytes(column: BinlogColumn) -> int:
    if column.type == ev.BLOB:
        return column.length_size
    return 2 if column.max_length > 255 else 1


@st.composite
def values(draw: st.DrawFn, column: BinlogColumn, width: int | None) -> bytes | None:
    if not column.is_primary and draw(st.integers(0, 9)) == 0:
        return None
    if width is None:
        raw = draw(
            st.one_of(
                st.text(max_size=12).map(lambda text: text.encode("utf-8")),
                st.binary(max_size=12),
            )
        )
        return len(raw).to_bytes(prefix_bytes(column), "little") + raw
    if column.type == ev.NEWDECIMAL and draw(st.booleans()):
        digits = column.precision - column.decimals
        whole = draw(st.integers(0, 10**digits - 1)) if digits else 0
        fraction = draw(st.integers(0, 10**column.decimals - 1)) if column.decimals else 0
        sign = "-" if draw(st.booleans()) else ""
        text = f"{sign}{whole}" + (f".{fraction:0{column.decimals}d}" if column.decimals else "")
        return packed_decimal(text, column.precision, column.decimals)
    if column.type in (ev.DATE, ev.DATETIME2) and draw(st.booleans()):
        return draw(temporal_with_zero_parts(column))[0]
    return draw(st.binary(min_size=width, max_size=width))


@st.composite
def temporal_with_zero_parts(draw: st.DrawFn, column: BinlogColumn) -> tuple[bytes, str]:
    """A DATE or DATETIME2 as the server writes one, its year, month or day often zero
    (permissive sql_modes: ``2024-00-15``, ``2024-03-00 10:11:12``, ``0000-00-00``), and the
    text MySQL prints for it."""
    year = draw(st.sampled_from([0, 1, 999, 2024, 9999]) | st.integers(0, 9999))
    month = draw(st.sampled_from([0, 0, 1, 12]) | st.integers(0, 12))
    day = draw(st.sampled_from([0, 0, 1, 31]) | st.integers(0, 31))
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if column.type == ev.DATE:
        return ((year << 9) | (month << 5) | day).to_bytes(3, "little"), date
    hour, minute, second = (
        draw(st.integers(0, 23)),
        draw(st.integers(0, 59)),
        draw(st.integers(0, 59)),
    )
    clock = (hour << 12) | (minute << 6) | second
    packed = ((((year * 13 + month) << 5) | day) << 17 | clock) + 0x8000000000
    fraction_bytes = (column.fsp + 1) // 2
    digits = draw(st.integers(0, 10 ** (fraction_bytes * 2) - 1)) if fraction_bytes else 0
    text = f"{date} {hour:02d}:{minute:02d}:{second:02d}"
    if column.fsp:
        micros = digits * {1: 10_000, 2: 100, 3: 1}[fraction_bytes]
        text += "." + f"{micros:06d}"[: column.fsp]
    return packed.to_bytes(5, "big") + digits.to_bytes(fraction_bytes, "big"), text


ZERO_PART_COLUMNS = [
    BinlogColumn(0, ev.LONG, "id", is_primary=True),
    BinlogColumn(1, ev.DATE, "d"),
    BinlogColumn(2, ev.DATETIME2, "dt0"),
    BinlogColumn(3, ev.DATETIME2, "dt1", fsp=1),
    BinlogColumn(4, ev.DATETIME2, "dt4", fsp=4),
    BinlogColumn(5, ev.DATETIME2, "dt6", fsp=6),
]
ZERO_PART_DECODER = RowDecoder(
    TableMap(10, "shop", "zero_parts", ZERO_PART_COLUMNS, has_names=True),
    schema_of(TableMap(10, "shop", "zero_parts", ZERO_PART_COLUMNS, has_names=True)),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_zero_part_dates_read_natively_and_in_python_as_mysql_prints_them(data) -> None:
    """Native = reference = MySQL's text, for dates whose year, month or day is zero."""
    drawn = [data.draw(temporal_with_zero_parts(c)) for c in ZERO_PART_COLUMNS[1:]]
    values = struct.pack("<i", 1) + b"".join(raw for raw, _ in drawn)
    body = (10).to_bytes(6, "little") + b"\x01\x00" + bytes([6, 0x3F]) + b"\x00" + values
    expected = {"id": 1} | {
        c.name: text for c, (_, text) in zip(ZERO_PART_COLUMNS[1:], drawn, strict=True)
    }
    assert ZERO_PART_DECODER.native
    assert ZERO_PART_DECODER.rows(body, ev.WRITE_ROWS_V1) == [(None, expected)]
    assert ZERO_PART_DECODER.reference_rows(body, ev.WRITE_ROWS_V1) == [(None, expected)]


@st.composite
def row_images(draw: st.DrawFn) -> bytes:
    parts = [draw(values(column, width)) for column, width in COLUMNS]
    nulls = sum(1 << index for index, part in enumerate(parts) if part is None)
    bitmap = nulls.to_bytes((len(COLUMNS) + 7) // 8, "little")
    return bitmap + b"".join(part for part in parts if part is not None)


def rows_event(images: list[bytes], update: bool, v2: bool) -> bytes:
    count = len(COLUMNS)
    present = ((1 << count) - 1).to_bytes((count + 7) // 8, "little")
    body = (7).to_bytes(6, "little") + b"\x01\x00"
    if v2:
        body += struct.pack("<H", 2)  # no extra data
    body += bytes([count]) + present * (2 if update else 1)
    return body + b"".join(images)


def outcome(decode, body: bytes, event_type: int) -> tuple[str, str]:
    try:
        # repr: NaN equals itself there, and -0.0 differs from 0.0.
        return "rows", repr(decode(body, event_type))
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return "error", type(exc).__name__


DECODER = RowDecoder(table(), schema_of(table()))
EVENT_TYPES = [
    (ev.WRITE_ROWS_V1, False, False),
    (ev.UPDATE_ROWS_V2, True, True),
    (ev.DELETE_ROWS_V2, False, True),
]


def test_every_column_type_is_decoded_natively_but_the_legacy_one() -> None:
    assert DECODER.native
    schema = schema_of(table())
    left_to_python = []
    for column, _ in COLUMNS:
        column_type = parse_column_type(schema.column_types[column.name])
        spec = native_spec(column, column_type, column_reader(column, column_type))
        if spec[1] == _native.FALLBACK:
            left_to_python.append(column.name)
    assert left_to_python == ["legacy"]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row_images(), min_size=1, max_size=4), st.sampled_from(EVENT_TYPES))
def test_native_rows_equal_the_reference(images: list[bytes], kind) -> None:
    event_type, update, v2 = kind
    if update and len(images) % 2:
        images = [*images, images[0]]
    body = rows_event(images, update, v2)
    native = outcome(DECODER.rows, body, event_type)
    reference = outcome(DECODER.reference_rows, body, event_type)
    if native[0] == "error":
        assert native[1] == "ContractError"
        assert reference[0] == "error", f"the reference reads it: {reference[1]}"
    else:
        assert native == reference


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(row_images(), st.data())
def test_a_truncated_event_raises_a_contract_error(image: bytes, data: st.DataObject) -> None:
    body = rows_event([image], update=False, v2=False)
    cut = data.draw(st.integers(0, len(body) - 1))
    try:
        rows = DECODER.rows(body[:cut], ev.WRITE_ROWS_V1)
    except ContractError as exc:
        assert "shop.every" in str(exc) or "length-encoded" in str(exc)
    else:
        # Only a cut that leaves the row images out entirely reads (as no rows).
        assert rows == []
        assert DECODER.reference_rows(body[:cut], ev.WRITE_ROWS_V1) == []


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.sampled_from([t for t, _, _ in EVENT_TYPES]))
def test_garbage_raises_a_contract_error_or_reads_as_the_reference(
    garbage: bytes, event_type: int
) -> None:
    try:
        rows = DECODER.rows(garbage, event_type)
    except ContractError:
        return
    assert repr(rows) == repr(DECODER.reference_rows(garbage, event_type))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(row_images(), st.data())
def test_flipped_bytes_raise_a_contract_error_or_read_as_the_reference(
    image: bytes, data: st.DataObject
) -> None:
    body = bytearray(rows_event([image, image], update=False, v2=True))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(8, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        rows = DECODER.rows(bytes(body), ev.WRITE_ROWS_V2)
    except ContractError:
        return
    assert repr(rows) == repr(DECODER.reference_rows(bytes(body), ev.WRITE_ROWS_V2))


def test_a_malformed_value_is_one_sentence_naming_the_table() -> None:
    image = bytearray(rows_event([b""], update=False, v2=False))
    body = bytes(image) + b"\x00" * 4  # a NULL bitmap and then too few bytes for the row
    with pytest.raises(ContractError, match=r"rows event of shop\.every is truncated"):
        DECODER.rows(body, ev.WRITE_ROWS_V1)


def test_rows_for_a_table_map_without_columns_are_refused_not_looped_on() -> None:
    """A malformed zero-column table map reads no bytes a row: both decoders must refuse the
    event rather than append empty rows until memory runs out."""
    empty = TableMap(9, "shop", "empty", [], has_names=True)
    decoder = RowDecoder(empty, schema_of(empty))
    body = bytes(8) + b"\x00" + b"\x01\x02"  # table id, flags, no columns, then data
    for decode in (decoder.rows, decoder.reference_rows):
        with pytest.raises(ContractError, match=r"shop\.empty: a rows event holds data"):
            decode(body, ev.WRITE_ROWS_V1)


def test_partial_zero_dates_time_fsp_and_fixed_binary_read_natively_as_mysql_prints_them():
    """Values written by hand for the cases of issue 24: a zero month or day is kept (not the
    all-zero date), TIME has exactly its fsp digits, BINARY(n) gets its stripped zeros back."""
    columns = [
        BinlogColumn(0, ev.LONG, "id", is_primary=True),
        BinlogColumn(1, ev.DATE, "d"),
        BinlogColumn(2, ev.DATETIME2, "dt"),
        BinlogColumn(3, ev.DATETIME2, "dt3", fsp=3),
        BinlogColumn(4, ev.TIME2, "t2", fsp=2),
        BinlogColumn(5, ev.STRING, "bn", max_length=6, collation=BINARY),
    ]
    parsed = TableMap(9, "shop", "zero", columns, has_names=True)
    decoder = RowDecoder(parsed, schema_of(parsed))
    assert decoder.native

    def datetime2(year: int, month: int, day: int, h: int, mi: int, sec: int) -> bytes:
        ymd = ((year * 13 + month) << 5) | day
        return (((ymd << 17) | (h << 12) | (mi << 6) | sec) + 0x8000000000).to_bytes(5, "big")

    values = (
        struct.pack("<i", 1)
        + ((2024 << 9) | (0 << 5) | 15).to_bytes(3, "little")
        + datetime2(2024, 0, 0, 10, 11, 12)
        + datetime2(2024, 3, 0, 23, 59, 59)
        + (5000).to_bytes(2, "big")  # fsp 3: hundreds of microseconds
        + (0x800000 - ((1 << 12) | (2 << 6) | 3)).to_bytes(3, "big")
        + bytes([0])  # -01:02:03.00: the fraction byte of the packed TIME2
        + bytes([2])
        + b"\x01\x02"
    )
    body = (9).to_bytes(6, "little") + b"\x01\x00" + bytes([6, 0x3F]) + b"\x00" + values
    expected = {
        "id": 1,
        "d": "2024-00-15",
        "dt": "2024-00-00 10:11:12",
        "dt3": "2024-03-00 23:59:59.500",
        "t2": "-01:02:03.00",
        "bn": "AQIAAAAA",
    }
    assert decoder.rows(body, ev.WRITE_ROWS_V1) == [(None, expected)]
    assert decoder.reference_rows(body, ev.WRITE_ROWS_V1) == [(None, expected)]


def test_known_values_read_natively() -> None:
    """A few values written by hand, so the comparison above is not two equal mistakes."""
    columns = [
        BinlogColumn(0, ev.LONGLONG, "bu", unsigned=True, is_primary=True),
        BinlogColumn(1, ev.NEWDECIMAL, "amount", precision=12, decimals=2),
        BinlogColumn(2, ev.TIMESTAMP2, "at", fsp=3),
        BinlogColumn(3, ev.TIME2, "t", fsp=0),
        BinlogColumn(4, ev.SET, "s", size=1, set_values=["x", "y", "z"]),
        BinlogColumn(5, ev.BLOB, "bl", length_size=2, collation=BINARY),
    ]
    parsed = TableMap(8, "shop", "known", columns, has_names=True)
    decoder = RowDecoder(parsed, schema_of(parsed))
    assert decoder.native
    values = (
        struct.pack("<Q", 2**64 - 1)
        + packed_decimal("-1234567890.05", 12, 2)
        + (1_800_000_000).to_bytes(4, "big")
        + (1230).to_bytes(2, "big")  # fsp 3: hundreds of microseconds
        + (0x800000 - ((838 << 12) | (59 << 6) | 59)).to_bytes(3, "big")
        + bytes([0b101])
        + (3).to_bytes(2, "little")
        + b"\x00\xff\x10"
    )
    body = (8).to_bytes(6, "little") + b"\x01\x00" + bytes([6, 0x3F]) + b"\x00" + values
    assert decoder.rows(body, ev.WRITE_ROWS_V1) == [
        (
            None,
            {
                "bu": "18446744073709551615",
                "amount": "-1234567890.05",
                "at": "2027-01-15 08:00:00.123",
                "t": "-838:59:59",
                "s": "x,z",
                "bl": "AP8Q",
            },
        )
    ]


# -- the dump's packets ------------------------------------------------------------------------


class Trickle(io.RawIOBase):
    """A socket that hands out at most ``step`` bytes per read: packets arrive split."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._at, self._step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        size = min(len(target), self._step, len(self._data) - self._at)
        target[:size] = self._data[self._at : self._at + size]
        self._at += size
        return size


def packet(payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + b"\x00" + payload


def event_packet(kind: int, body: bytes, log_pos: int, trailer: int = 4) -> bytes:
    header = struct.pack("<IBIIIH", 1_800_000_000, kind, 1, 19 + len(body) + trailer, log_pos, 0)
    return packet(b"\x00" + header + body + b"\xee" * trailer)


EOF_PACKET = packet(b"\xfe\x00\x00\x02\x00")


def connection_over(data: bytes, step: int):
    class Connection:
        _rfile = io.BufferedReader(Trickle(data, step), buffer_size=64)

    return Connection()


def python_events(data: bytes, trailer: int) -> list:
    """The reference: ``_packets`` and the Python header reading."""
    events = []
    for payload in _packets(connection_over(data, len(data) or 1)):
        header = ev.read_header(payload, 1)
        events.append((header, payload[1 + ev.HEADER_LENGTH : len(payload) - trailer]))
    return events


def scanned_events(data: bytes, trailer: int, step: int) -> list:
    stream = BinlogStream.__new__(BinlogStream)
    stream.log_file, stream.log_pos = "", 0
    return list(stream._scanned(connection_over(data, step), trailer))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from([2, 15, 16, 19, 27, 30, 162]), st.binary(max_size=700)),
        max_size=12,
    ),
    st.integers(1, 900),
    st.sampled_from([0, 4]),
)
def test_scanned_packets_equal_the_python_reading(events, step: int, trailer: int) -> None:
    data = b"".join(
        event_packet(kind, body, 1000 + i, trailer) for i, (kind, body) in enumerate(events)
    )
    data += packet(b"\x01 not an event") + EOF_PACKET
    expected = python_events(data, trailer)
    assert len(expected) == len(events)
    assert scanned_events(data, trailer, step) == expected


def test_a_server_error_packet_is_raised_as_pymysql_does() -> None:
    error = packet(b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"binlog purged")
    data = event_packet(2, b"x" * 20, 100) + error
    with pytest.raises(pymysql.err.OperationalError, match="binlog purged"):
        scanned_events(data, 4, 7)


def test_a_closed_connection_mid_packet_is_a_lost_connection() -> None:
    data = event_packet(2, b"x" * 50, 100)
    with pytest.raises(pymysql.err.OperationalError, match="closed the binlog connection"):
        scanned_events(data[:-10], 4, 13)


@settings(max_examples=300)
@given(st.binary(max_size=400), st.integers(0, 8))
def test_scanning_garbage_raises_a_contract_error_or_returns(garbage: bytes, trailer: int) -> None:
    try:
        events, offset, stop = _native.scan_packets(garbage, 0, trailer, ev.EventHeader)
    except ContractError:
        return
    assert 0 <= offset <= len(garbage)
    assert stop in (_native.SCAN_MORE, _native.SCAN_LARGE, _native.SCAN_ERROR, _native.SCAN_EOF)
    for header, body in events:
        assert isinstance(header, ev.EventHeader)
        assert len(body) <= len(garbage)


def test_a_payload_over_16_mib_is_joined() -> None:
    body = bytes(range(256)) * (17 * 4096)  # 17 MiB: two packets on the wire
    header = struct.pack("<IBIIIH", 1_800_000_000, 30, 1, 19 + len(body) + 4, 777, 0)
    payload = b"\x00" + header + body + b"\xee" * 4
    wire = b""
    for start in range(0, len(payload) + 1, 0xFFFFFF):
        part = payload[start : start + 0xFFFFFF]
        wire += len(part).to_bytes(3, "little") + b"\x00" + part
    wire += EOF_PACKET
    [(parsed, read_body)] = scanned_events(wire, 4, 1 << 20)
    assert (parsed.type, parsed.log_pos) == (30, 777)
    assert read_body == body


# -- messages --------------------------------------------------------------------------------


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(row_images(), min_size=1, max_size=5),
    st.sampled_from(list(EventType)),
    st.integers(0, 3),
    st.sampled_from([None, "0-1-42"]),
    st.integers(1_700_000_000, 1_900_000_000),
)
def test_native_messages_equal_the_dataclasses(images, event_type, first_row, gtid, second):
    body = rows_event(images, update=False, v2=False)
    decoded = (
        DECODER.reference_rows(body, ev.WRITE_ROWS_V1)
        if _decodes(body)
        else [(None, {"id": index, "vc": None}) for index in range(len(images))]
    )
    rows = [
        (content if event_type is EventType.UPDATE else None, content) for _, content in decoded
    ]
    context = EventContext(7, "mariadb-bin.000009", 4321, second, gtid)
    schema = DECODER.schema
    made = {}
    for native in (True, False):
        offsets = OffsetGenerator(OffsetState((second - 1) * 1_000_000 + 5))
        made[native] = build_messages(
            event_type, rows, schema, context, offsets, first_row, native=native
        )
        made[native].append(offsets.state)  # the generator advanced the same way
    assert made[True] == made[False]
    assert [m.encode() for m in made[True][:-1]] == [m.encode() for m in made[False][:-1]]
    extras = [message.extra for message in made[True][:-1]]
    assert all(extra == {} for extra in extras)
    assert len({id(extra) for extra in extras}) == len(extras)  # a dict of its own each
    for message in made[True][:-1]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            message.binlog_offset = 0


def _decodes(body: bytes) -> bool:
    try:
        DECODER.reference_rows(body, ev.WRITE_ROWS_V1)
    except Exception:  # noqa: BLE001 - arbitrary bytes: only the readable ones are used
        return False
    return True


def test_messages_are_built_natively() -> None:
    assert collector_native.MESSAGES


def test_the_stream_says_when_no_received_transaction_end_is_left() -> None:
    """Two transactions and the start of a third arrive together: a reader may gather up to
    the second's end, not past it (the third's end is not received yet)."""
    begin = struct.pack("<IIBHH", 1, 0, 0, 0, 0) + b"\x00" + b"BEGIN"
    kinds = [ev.MARIADB_GTID, ev.TABLE_MAP, ev.WRITE_ROWS_V1, ev.XID] * 2 + [
        ev.MARIADB_GTID,
        ev.QUERY,
    ]
    bodies = [begin if kind == ev.QUERY else b"q" * 30 for kind in kinds]
    first_read = b"".join(
        event_packet(kind, body, 100 + i)
        for i, (kind, body) in enumerate(zip(kinds, bodies, strict=True))
    )
    rest = event_packet(ev.TABLE_MAP, b"q" * 30, 200) + event_packet(ev.XID, b"q" * 8, 201)
    stream = BinlogStream.__new__(BinlogStream)
    stream.log_file, stream.log_pos = "", 0
    connection = connection_over(first_read + rest + EOF_PACKET, len(first_read))
    seen = [(header.type, stream.drained) for header, _ in stream._scanned(connection, 4)]
    assert [drained for _, drained in seen] == [False] * 7 + [True] * 3 + [False, True]
    assert seen[7] == (ev.XID, True)  # the first read's last transaction end
    assert stream.log_pos == 201
