"""Rows events decoded by a decoder compiled once per table map. Pure logic.

For each column the decoder holds one small function that reads the column's wire format and
returns its canonical SimpleBinlog value directly (``simple_binlog.values`` documents the
forms), so a row costs one call per column and no intermediate driver values. The forms are
the same as ``encode()`` gives for python-mysql-replication's values; the integration test
``tests/integration/collector/test_fast_decoder.py`` decodes the same binlog both ways and
compares every message.

The same plan runs natively when the C extension ``collector._native`` is built (the editable
install compiles ``collector/_native.c``): ``native_spec`` describes each column to it, and a
column or value it does not handle is read by the Python reader described here. The Python
path stays the reference (``RowDecoder.reference_rows``); without the extension it is the
path, and ``NATIVE_DECODER`` says which one runs.
"""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import struct
from collections.abc import Callable
from typing import Any

from collector import binlog_events as ev
from collector import mysql_json, native
from collector.binlog_events import BinlogColumn, TableMap, lenenc
from collector.decoding import TableSchema
from collector.schema import BinlogTableSchemas
from simple_binlog.errors import ContractError, UnsupportedTypeError
from simple_binlog.values import ColumnType, JsonScalar, Kind, encode, parse_column_type

NATIVE_DECODER = native.AVAILABLE
_native = native.module()

Row = dict[str, JsonScalar]
Reader = Callable[[bytes, int], tuple[JsonScalar, int]]
# (name, code, width, fsp, unit, labels, fallback): one column for ``_native.RowPlan``.
NativeSpec = tuple[str, int, int, int, int, tuple[str, ...] | None, Callable[..., Any] | None]


_EPOCH = dt.datetime(1970, 1, 1)
_COMPRESSED_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_FRACTION_BYTES = (0, 1, 1, 2, 2, 3, 3)
_FRACTION_UNIT = {0: 0, 1: 10_000, 2: 100, 3: 1}

_S8, _U8 = struct.Struct("<b"), struct.Struct("<B")
_S16, _U16 = struct.Struct("<h"), struct.Struct("<H")
_S32, _U32 = struct.Struct("<i"), struct.Struct("<I")
_S64, _U64 = struct.Struct("<q"), struct.Struct("<Q")
_F32, _F64 = struct.Struct("<f"), struct.Struct("<d")


def _fraction(micros: int, fsp: int) -> str:
    return "." + f"{micros:06d}"[:fsp] if fsp else ""


def _zero_datetime(fsp: int) -> str:
    return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")


def _integer(column: BinlogColumn, kind: Kind) -> Reader:
    width = {ev.TINY: 1, ev.SHORT: 2, ev.INT24: 3, ev.LONG: 4, ev.LONGLONG: 8}[column.type]
    if width == 3:
        signed = not column.unsigned

        def read24(data: bytes, offset: int) -> tuple[JsonScalar, int]:
            value = int.from_bytes(data[offset : offset + 3], "little", signed=signed)
            return value, offset + 3

        return read24
    layout = {
        (1, False): _S8,
        (1, True): _U8,
        (2, False): _S16,
        (2, True): _U16,
        (4, False): _S32,
        (4, True): _U32,
        (8, False): _S64,
        (8, True): _U64,
    }[(width, column.unsigned)]
    unpack = layout.unpack_from
    if kind is Kind.UINT64:

        def read_text(data: bytes, offset: int) -> tuple[JsonScalar, int]:
            return str(unpack(data, offset)[0]), offset + 8

        return read_text

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        return unpack(data, offset)[0], offset + width

    return read


def _decimal(column: BinlogColumn) -> Reader:
    """MySQL's packed DECIMAL: groups of 9 digits in 4 bytes, the leftover digits of each
    side in 1-4 bytes, big-endian, the sign in the first bit; a negative number is stored
    with every bit inverted. The text keeps exactly ``decimals`` digits after the point."""
    integral = column.precision - column.decimals
    full_integral, rest_integral = divmod(integral, 9)
    full_fraction, rest_fraction = divmod(column.decimals, 9)
    integral_groups = [rest_integral] * bool(rest_integral) + [9] * full_integral
    fraction_groups = [9] * full_fraction + [rest_fraction] * bool(rest_fraction)
    # (start, end, 10 ** digits) of every group, integral part first: each side's groups are
    # accumulated as one integer and formatted once (a third of the cost of formatting each).
    layout = []
    position = 0
    for count in integral_groups + fraction_groups:
        width = _COMPRESSED_BYTES[count]
        layout.append((position, position + width, 10**count))
        position += width
    size = position
    integral_layout = layout[: len(integral_groups)]
    fraction_layout = layout[len(integral_groups) :]
    decimals = column.decimals

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        raw = bytearray(data[offset : offset + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(byte ^ 0xFF for byte in raw)
        whole = 0
        for start, end, shift in integral_layout:
            whole = whole * shift + int.from_bytes(raw[start:end], "big")
        text = f"-{whole}" if negative else str(whole)
        if decimals:
            fraction = 0
            for start, end, shift in fraction_layout:
                fraction = fraction * shift + int.from_bytes(raw[start:end], "big")
            text += f".{fraction:0{decimals}d}"
        return text, offset + size

    return read


def _float(column: BinlogColumn) -> Reader:
    layout, width = (_F32, 4) if column.type == ev.FLOAT else (_F64, 8)
    unpack = layout.unpack_from

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        return unpack(data, offset)[0], offset + width

    return read


def _fraction_reader(fsp: int) -> tuple[int, int]:
    """(bytes, microseconds per unit) of a temporal value's fraction."""
    width = _FRACTION_BYTES[fsp]
    return width, _FRACTION_UNIT[width]


def _datetime2(column: BinlogColumn) -> Reader:
    fsp = column.fsp
    width, unit = _fraction_reader(fsp)

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        packed = int.from_bytes(data[offset : offset + 5], "big") - 0x8000000000
        micros = int.from_bytes(data[offset + 5 : offset + 5 + width], "big") * unit
        day_part, time_part = packed >> 17, packed & 0x1FFFF
        year_month = day_part >> 5
        year, month, day = year_month // 13, year_month % 13, day_part & 31
        end = offset + 5 + width
        # A zero year, month or day (permissive sql_modes) is printed as it is, as MySQL does.
        text = (
            f"{year:04d}-{month:02d}-{day:02d} {time_part >> 12:02d}:"
            f"{(time_part >> 6) & 63:02d}:{time_part & 63:02d}"
        )
        return text + _fraction(micros, fsp), end

    return read


def _timestamp2(column: BinlogColumn) -> Reader:
    fsp = column.fsp
    width, unit = _fraction_reader(fsp)

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        seconds = int.from_bytes(data[offset : offset + 4], "big")
        micros = int.from_bytes(data[offset + 4 : offset + 4 + width], "big") * unit
        end = offset + 4 + width
        if seconds == 0 and micros == 0:
            return _zero_datetime(fsp), end
        moment = _EPOCH + dt.timedelta(seconds=seconds)
        return moment.isoformat(sep=" ") + _fraction(micros, fsp), end

    return read


def _time2(column: BinlogColumn) -> Reader:
    fsp = column.fsp
    width, unit = _fraction_reader(fsp)

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        packed = int.from_bytes(data[offset : offset + 3 + width], "big") - (
            0x800000 << (8 * width)
        )
        sign = "-" if packed < 0 else ""
        whole, fraction = divmod(abs(packed), 1 << (8 * width))
        hours, minutes, seconds = (whole >> 12) & 0x3FF, (whole >> 6) & 0x3F, whole & 0x3F
        text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}" + _fraction(fraction * unit, fsp)
        return text, offset + 3 + width

    return read


def _date(_column: BinlogColumn) -> Reader:
    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        packed = int.from_bytes(data[offset : offset + 3], "little")
        year, month, day = packed >> 9, (packed >> 5) & 15, packed & 31
        # A zero year, month or day (permissive sql_modes) is kept as MySQL prints it.
        return f"{year:04d}-{month:02d}-{day:02d}", offset + 3

    return read


def _year(_column: BinlogColumn) -> Reader:
    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        value = data[offset]
        return (value + 1900 if value else 0), offset + 1

    return read


def _bit(column: BinlogColumn) -> Reader:
    width = (column.bits + 7) // 8

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        return int.from_bytes(data[offset : offset + width], "big"), offset + width

    return read


def _enum(column: BinlogColumn) -> Reader:
    labels = ["", *(column.enum_values or [])]
    width = column.size

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        index = int.from_bytes(data[offset : offset + width], "little")
        return labels[index], offset + width

    return read


def _set(column: BinlogColumn) -> Reader:
    labels = list(column.set_values or [])
    width = column.size

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        mask = int.from_bytes(data[offset : offset + width], "little")
        members = [label for bit, label in enumerate(labels) if mask >> bit & 1]
        return ",".join(members), offset + width

    return read


def _bytes_value(
    kind: Kind, column_type: ColumnType, column: BinlogColumn
) -> Callable[[bytes], JsonScalar]:
    """How the bytes of a string/blob column become its canonical value."""
    if column_type.is_fixed_binary and column_type.length:
        # The binlog strips BINARY(n)'s trailing zero bytes: put them back, so the message
        # holds the column's n bytes.
        size = column_type.length
        return lambda raw: base64.b64encode(raw.ljust(size, b"\x00")).decode("ascii")
    if kind is Kind.BINARY or kind is Kind.GEOMETRY:
        return lambda raw: base64.b64encode(raw).decode("ascii")
    if kind is Kind.TEXT and column.character_set_name != "binary":
        encoding = column.encoding
        return lambda raw: raw.decode(encoding)
    name = column.name or "?"
    return lambda raw: encode(column_type, raw, name)


def _length_prefix(column: BinlogColumn) -> int:
    if column.type in (ev.BLOB, ev.GEOMETRY, ev.VECTOR):
        return column.length_size
    return 2 if column.max_length > 255 else 1


def _string(column: BinlogColumn, kind: Kind, column_type: ColumnType) -> Reader:
    prefix = _length_prefix(column)
    convert = _bytes_value(kind, column_type, column)

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        start = offset + prefix
        end = start + int.from_bytes(data[offset:start], "little")
        return convert(data[start:end]), end

    return read


def _legacy_temporal(column: BinlogColumn, column_type: ColumnType) -> Reader:
    """DATETIME/TIME/TIMESTAMP in the pre-5.6 formats (tables older than the server's
    temporal format): rare, so decoded to driver values and encoded the general way."""
    name = column.name or "?"

    def read(data: bytes, offset: int) -> tuple[JsonScalar, int]:
        if column.type == ev.TIMESTAMP:
            seconds = _U32.unpack_from(data, offset)[0]
            if seconds == 0:
                return _zero_datetime(0), offset + 4
            return encode(column_type, _EPOCH + dt.timedelta(seconds=seconds), name), offset + 4
        if column.type == ev.DATETIME:
            value = _U64.unpack_from(data, offset)[0]
            date, clock = divmod(value, 1_000_000)
            year, rest = divmod(date, 10_000)
            month, day = divmod(rest, 100)
            hour, rest = divmod(clock, 10_000)
            minute, second = divmod(rest, 100)
            if year == 0 or month == 0 or day == 0:
                text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
                return text, offset + 8
            moment = dt.datetime(year, month, day, hour, minute, second)
            return encode(column_type, moment, name), offset + 8
        value = int.from_bytes(data[offset : offset + 3], "little", signed=True)
        sign = -1 if value < 0 else 1
        hours, rest = divmod(abs(value), 10_000)
        minutes, seconds = divmod(rest, 100)
        delta = sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds)
        return encode(column_type, delta, name), offset + 3

    return read


def column_reader(  # noqa: PLR0911, PLR0912 - one reader per wire type
    column: BinlogColumn, column_type: ColumnType
) -> Reader:
    """The reader of one column, by its wire type and its canonical kind."""
    kind = column_type.kind
    wire = column.type
    if wire in (ev.TINY, ev.SHORT, ev.INT24, ev.LONG, ev.LONGLONG):
        return _integer(column, kind)
    if wire == ev.NEWDECIMAL:
        return _decimal(column)
    if wire in (ev.FLOAT, ev.DOUBLE):
        return _float(column)
    if wire == ev.DATETIME2:
        return _datetime2(column)
    if wire == ev.TIMESTAMP2:
        return _timestamp2(column)
    if wire == ev.TIME2:
        return _time2(column)
    if wire in (ev.DATE, ev.NEWDATE):
        return _date(column)
    if wire == ev.YEAR:
        return _year(column)
    if wire == ev.BIT:
        return _bit(column)
    if wire == ev.ENUM:
        return _enum(column)
    if wire == ev.SET:
        return _set(column)
    if wire in (ev.STRING, ev.VARCHAR, ev.VAR_STRING, ev.BLOB, ev.GEOMETRY):
        return _string(column, kind, column_type)
    if wire in (ev.DATETIME, ev.TIME, ev.TIMESTAMP):
        return _legacy_temporal(column, column_type)
    if wire == ev.JSON:  # MySQL's binary JSON, as text (MariaDB's JSON is a text column)
        return mysql_json.ColumnReader(column.length_size)
    if wire == ev.VECTOR:  # MySQL 9: float32s, carried as their bytes
        return _string(column, kind, column_type)
    raise UnsupportedTypeError(
        f"column {column.name} has binlog type {wire}, which SimpleBinlog does not carry."
    )


_INTEGER_WIDTHS = {ev.TINY: 1, ev.SHORT: 2, ev.INT24: 3, ev.LONG: 4, ev.LONGLONG: 8}


def _native_code(  # noqa: PLR0911, PLR0912 - one case per wire type, as column_reader
    column: BinlogColumn, column_type: ColumnType
) -> tuple[int, int, int, int, tuple[str, ...] | None]:
    """(code, width, fsp, unit, labels) of a column for the native plan; code FALLBACK
    where the native decoder would not give exactly what ``column_reader``'s reader gives."""
    native: Any = _native
    kind = column_type.kind
    wire = column.type
    if wire in _INTEGER_WIDTHS:
        width = _INTEGER_WIDTHS[wire]
        integer = native.UINT if column.unsigned else native.INT
        if width == 3:
            return integer, width, 0, 0, None
        if kind is Kind.UINT64:
            if width == 8 and column.unsigned:
                return native.UINT64_TEXT, width, 0, 0, None
            return native.FALLBACK, 0, 0, 0, None
        return integer, width, 0, 0, None
    if wire == ev.NEWDECIMAL:
        if 1 <= column.precision <= 65 and 0 <= column.decimals <= column.precision:
            # The plan's ``unit`` carries the precision, its ``fsp`` the scale.
            return native.DECIMAL, 0, column.decimals, column.precision, None
        return native.FALLBACK, 0, 0, 0, None
    if wire == ev.FLOAT:
        return native.FLOAT, 4, 0, 0, None
    if wire == ev.DOUBLE:
        return native.DOUBLE, 8, 0, 0, None
    if wire in (ev.DATETIME2, ev.TIMESTAMP2, ev.TIME2):
        width, unit = _fraction_reader(column.fsp)
        code = {
            ev.DATETIME2: native.DATETIME2,
            ev.TIMESTAMP2: native.TIMESTAMP2,
            ev.TIME2: native.TIME2,
        }[wire]
        return code, width, column.fsp, unit, None
    if wire in (ev.DATE, ev.NEWDATE):
        return native.DATE, 3, 0, 0, None
    if wire == ev.YEAR:
        return native.YEAR, 1, 0, 0, None
    if wire == ev.BIT and column.bits <= 64:
        return native.BIT, (column.bits + 7) // 8, 0, 0, None
    if wire == ev.ENUM and column.size <= 8:
        return native.ENUM, column.size, 0, 0, ("", *(column.enum_values or []))
    if wire == ev.SET and column.size <= 8:
        return native.SET, column.size, 0, 0, tuple(column.set_values or [])
    if wire in (ev.STRING, ev.VARCHAR, ev.VAR_STRING, ev.BLOB, ev.GEOMETRY):
        prefix = _length_prefix(column)
        if not 1 <= prefix <= 4:
            return native.FALLBACK, 0, 0, 0, None
        if kind is Kind.BINARY or kind is Kind.GEOMETRY:
            # ``unit``: BINARY(n)'s n, the size its stripped trailing zero bytes are padded to.
            pad = column_type.length if column_type.is_fixed_binary else 0
            return native.BASE64, prefix, 0, pad or 0, None
        if (
            kind is Kind.TEXT
            and column.character_set_name != "binary"
            and codecs.lookup(column.encoding).name == "utf-8"
        ):
            return native.TEXT_UTF8, prefix, 0, 0, None
        return native.CONVERT, prefix, 0, 0, None
    return native.FALLBACK, 0, 0, 0, None


def native_spec(column: BinlogColumn, column_type: ColumnType, reader: Reader) -> NativeSpec:
    """One column of a ``_native.RowPlan``: its native reading and the Python reader it falls
    back to (for CONVERT columns: the bytes → value conversion)."""
    code, width, fsp, unit, labels = _native_code(column, column_type)
    fallback: Callable[..., Any] = reader
    if code == getattr(_native, "CONVERT", None):
        fallback = _bytes_value(column_type.kind, column_type, column)
    return (column.name or f"?{column.index}", code, width, fsp, unit, labels, fallback)


class RowDecoder:
    """Decodes the rows of the rows events that follow one table map: natively when the
    extension is built (``native``), else, and always in ``reference_rows``, in Python."""

    def __init__(self, table_map: TableMap, schema: TableSchema, native: bool = True) -> None:
        self.schema = schema
        self._names = [column.name or f"?{column.index}" for column in table_map.columns]
        column_types = [parse_column_type(schema.column_types[name]) for name in self._names]
        self._readers = [
            column_reader(column, column_type)
            for column, column_type in zip(table_map.columns, column_types, strict=True)
        ]
        self._plan: Any = None
        if native and NATIVE_DECODER:
            specs = tuple(
                native_spec(column, column_type, reader)
                for column, column_type, reader in zip(
                    table_map.columns, column_types, self._readers, strict=True
                )
            )
            self._plan = _native.RowPlan(schema.schema, schema.table, specs)
        self._columns = list(zip(self._names, self._readers, strict=True))
        self._count = len(self._readers)
        self._bitmap_bytes = (self._count + 7) // 8
        self._all_columns = (1 << self._count) - 1

    @property
    def columns(self) -> list[tuple[str, Reader]]:
        """(name, Python reader) per column: for layouts read outside this class (MySQL's
        partial JSON updates, ``collector.mysql_events``)."""
        return self._columns

    @property
    def native(self) -> bool:
        return self._plan is not None

    def rows(self, body: bytes, event_type: int) -> list[tuple[Row | None, Row]]:
        """(before image of an UPDATE or None, content) per row, in binlog order."""
        if self._plan is None:
            return self.reference_rows(body, event_type)
        try:
            rows: list[tuple[Row | None, Row]] = self._plan.rows(body, event_type)
        except (struct.error, IndexError, ValueError) as exc:
            # Raised by a Python reader the plan fell back to, or a text column's bytes that
            # are not in its character set: the event is malformed, said in one sentence.
            raise ContractError(
                f"a rows event of {self.schema.schema}.{self.schema.table} is malformed "
                f"({type(exc).__name__}: {exc})."
            ) from None
        return rows

    def reference_rows(self, body: bytes, event_type: int) -> list[tuple[Row | None, Row]]:
        """``rows`` in Python: the reference the native decoder is tested against."""
        offset = 8
        if event_type >= ev.WRITE_ROWS_V2:
            offset += _U16.unpack_from(body, offset)[0]
        count, offset = lenenc(body, offset)
        if count != self._count:
            raise ContractError(
                f"a rows event of {self.schema.schema}.{self.schema.table} has {count} "
                f"columns, its table map {self._count}."
            )
        update = event_type in (ev.UPDATE_ROWS_V1, ev.UPDATE_ROWS_V2)
        images = 2 if update else 1
        for _ in range(images):
            # The bits past the last column are padding (MySQL sets them, MariaDB clears them).
            present = int.from_bytes(body[offset : offset + self._bitmap_bytes], "little")
            if present & self._all_columns != self._all_columns:
                raise ContractError(
                    f"{self.schema.schema}.{self.schema.table} is missing columns in the "
                    "binlog row image; set binlog_row_image=FULL on the server."
                )
            offset += self._bitmap_bytes
        rows: list[tuple[Row | None, Row]] = []
        end = len(body)
        while offset < end:
            row_start = offset
            first, offset = self._row(body, offset)
            if offset == row_start:
                # Only a table map without columns reads no bytes; never loop on it.
                raise ContractError(
                    f"{self.schema.schema}.{self.schema.table}: a rows event holds data for a "
                    "table map without columns; the event is malformed."
                )
            if update:
                second, offset = self._row(body, offset)
                rows.append((first, second))
            else:
                rows.append((None, first))
        return rows

    def _row(self, body: bytes, offset: int) -> tuple[Row, int]:
        nulls = int.from_bytes(body[offset : offset + self._bitmap_bytes], "little")
        offset += self._bitmap_bytes
        row: Row = {}
        if not nulls:  # the common case, kept to one call per column
            for name, read in self._columns:
                row[name], offset = read(body, offset)
            return row, offset
        for index, (name, read) in enumerate(self._columns):
            if nulls >> index & 1:
                row[name] = None
            else:
                row[name], offset = read(body, offset)
        return row, offset


class TableDecoders:
    """Row decoders by table id, each built once per distinct table map.

    A TABLE_MAP event precedes the rows events of every table in a transaction; its bytes
    repeat unchanged until a DDL (or a server restart) gives the table a new map, so they are
    the cache key. Tables the filter excludes get no decoder: their rows are not decoded.
    """

    def __init__(
        self,
        schemas: BinlogTableSchemas,
        include: Callable[[str, str], bool],
        limit: int = 4096,
        native: bool = True,
    ) -> None:
        """``native``: decode with the C extension when it is built (False: the reference)."""
        self._schemas = schemas
        self._include = include
        self._limit = limit
        self._native = native
        self._by_map: dict[bytes, RowDecoder | None] = {}
        self._by_table_id: dict[int, RowDecoder | None] = {}

    def on_table_map(self, body: bytes) -> None:
        decoder = self._by_map.get(body, _MISSING)
        if decoder is _MISSING:
            if len(self._by_map) >= self._limit:
                self._by_map.clear()
            decoder = None
            # The names first: an excluded table's columns are never parsed.
            if self._include(*ev.table_names(body)):
                table_map = ev.table_map_event(body)
                decoder = RowDecoder(table_map, self._schemas.for_event(table_map), self._native)
            self._by_map[body] = decoder
        self._by_table_id[int.from_bytes(body[0:6], "little")] = decoder

    def for_rows(self, body: bytes) -> RowDecoder | None:
        """The decoder of a rows event's table; None if the table is not collected."""
        table_id = int.from_bytes(body[0:6], "little")
        try:
            return self._by_table_id[table_id]
        except KeyError:
            raise ContractError(
                f"a rows event refers to table id {table_id}, for which the binlog stream "
                "carried no table map."
            ) from None

    def forget(self) -> None:
        """After a DDL: schemas read from information_schema may have changed."""
        self._by_map.clear()
        self._by_table_id.clear()


_MISSING: Any = object()
