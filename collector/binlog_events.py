"""The collector's own reading of raw binlog events: headers, GTIDs, queries, table maps.

python-mysql-replication stays the connection and the replication protocol (handshake,
registration, the dump command); its event objects are left out of the hot path because
profiling showed them dominating the collector's time: every single-row transaction re-parses
its table map (optional metadata, column objects, charset lookups) and every row becomes a
dict built through a chain of generic reads. Here a table map is parsed once per distinct
body (``TableMapCache``), and rows are decoded by a decoder compiled for that map
(``collector.row_decoder``). Pure logic: bytes in, values out.

Formats: MariaDB's replication protocol and the MySQL binlog event layout
(https://mariadb.com/kb/en/replication-protocol/). What a row-based binlog of MariaDB or
MySQL holds is read (MySQL's own events: ``collector.mysql_events``); anything this reader
cannot honour exactly (MariaDB's compressed events) is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from collector.charsets import BINARY_COLLATION, charset_name, python_codec
from simple_binlog.errors import ContractError

HEADER_LENGTH = 19
CHECKSUM_LENGTH = 4

# Event types (MySQL log_event.h and MariaDB's additions).
QUERY, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP, HEARTBEAT = 2, 4, 15, 16, 19, 27
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
PARTIAL_UPDATE_ROWS = 39
MARIADB_GTID = 162
# log_bin_compress: the row images are zlib-compressed; refused rather than half-read.
MARIADB_COMPRESSED = frozenset({165, 166, 167, 168, 169, 170, 171})

ROWS_EVENTS = {
    WRITE_ROWS_V1: "INSERT",
    UPDATE_ROWS_V1: "UPDATE",
    DELETE_ROWS_V1: "DELETE",
    WRITE_ROWS_V2: "INSERT",
    UPDATE_ROWS_V2: "UPDATE",
    DELETE_ROWS_V2: "DELETE",
    PARTIAL_UPDATE_ROWS: "UPDATE",  # MySQL, binlog_row_value_options=PARTIAL_JSON
}

# MySQL protocol field types (include/mysql_com.h).
TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = 1, 2, 3, 4, 5, 6, 7, 8, 9
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT = 10, 11, 12, 13, 14, 15, 16
TIMESTAMP2, DATETIME2, TIME2 = 17, 18, 19
VECTOR, JSON, NEWDECIMAL, ENUM, SET = 242, 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = (
    249,
    250,
    251,
    252,
    253,
    254,
    255,
)

_NUMERIC = frozenset({TINY, SHORT, INT24, LONG, LONGLONG, NEWDECIMAL, FLOAT, DOUBLE, YEAR})
# Columns whose charset the table map lists (MariaDB counts GEOMETRY among them).
_CHARACTER = frozenset({STRING, VAR_STRING, VARCHAR, BLOB, GEOMETRY})

# Optional metadata kinds (binlog_row_metadata=FULL).
_SIGNEDNESS, _DEFAULT_CHARSET, _COLUMN_CHARSET, _COLUMN_NAME = 1, 2, 3, 4
_SET_STR_VALUE, _ENUM_STR_VALUE, _GEOMETRY_TYPE = 5, 6, 7
_SIMPLE_PRIMARY_KEY, _PRIMARY_KEY_WITH_PREFIX = 8, 9
_ENUM_AND_SET_DEFAULT_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET = 10, 11

# The header's fields up to the log position (its 2 flag bytes are not needed).
_HEADER = struct.Struct("<IBIII")


class EventHeader(NamedTuple):
    # A named tuple, not a frozen dataclass: one is made per event (four per single-row
    # transaction), and a tuple is built in a third of the time.
    timestamp: int
    type: int
    server_id: int
    size: int
    log_pos: int


_make_header = EventHeader._make


def read_header(data: bytes | memoryview, offset: int = 0) -> EventHeader:
    return _make_header(_HEADER.unpack_from(data, offset))


def lenenc(data: bytes | memoryview, offset: int) -> tuple[int, int]:
    """A length-encoded integer at ``offset``: (value, offset after it)."""
    first = data[offset]
    if first < 0xFB:
        return first, offset + 1
    if first == 0xFC:
        return int.from_bytes(data[offset + 1 : offset + 3], "little"), offset + 3
    if first == 0xFD:
        return int.from_bytes(data[offset + 1 : offset + 4], "little"), offset + 4
    if first == 0xFE:
        return int.from_bytes(data[offset + 1 : offset + 9], "little"), offset + 9
    raise ContractError(f"malformed length-encoded integer (0x{first:02x}) in a binlog event.")


def mariadb_gtid(body: bytes | memoryview, server_id: int) -> str:
    """``domain-server-sequence`` of a MariaDB GTID event."""
    sequence, domain = struct.unpack_from("<QI", body, 0)
    return f"{domain}-{server_id}-{sequence}"


@dataclass(frozen=True, slots=True)
class QueryEvent:
    schema: str
    query: str


def query_event(body: bytes | memoryview) -> QueryEvent:
    schema_length = body[8]
    status_length = struct.unpack_from("<H", body, 11)[0]
    start = 13 + status_length
    if start + schema_length + 1 > len(body):
        raise ContractError("a QUERY event is malformed (its lengths run past its end).")
    schema = bytes(body[start : start + schema_length]).decode("utf-8", "replace")
    query = bytes(body[start + schema_length + 1 :]).decode("utf-8", "replace")
    return QueryEvent(schema, query)


def rotate_event(body: bytes | memoryview) -> tuple[str, int]:
    """(next file, position in it)."""
    position = struct.unpack_from("<Q", body, 0)[0]
    return bytes(body[8:]).decode("utf-8"), position


@dataclass(slots=True)
class BinlogColumn:
    """One column of a table map. Attribute names follow python-mysql-replication's
    ``Column`` where ``collector.binlog_types.column_type`` reads them."""

    index: int
    type: int
    name: str | None = None
    unsigned: bool = False
    is_primary: bool = False
    collation: int | None = None
    max_length: int = 0
    length_size: int = 0
    precision: int = 0
    decimals: int = 0
    fsp: int = 0
    bits: int = 0
    size: int = 0  # bytes of an ENUM/SET value
    enum_values: list[str] | None = None
    set_values: list[str] | None = None

    @property
    def character_set_name(self) -> str | None:
        if self.collation is None:
            return None
        return charset_name(self.collation)

    @property
    def encoding(self) -> str:
        """Python codec of a text column (utf-8 when the map names none)."""
        if self.collation is None or self.collation == BINARY_COLLATION:
            return "utf-8"
        return python_codec(charset_name(self.collation))


@dataclass(slots=True)
class TableMap:
    table_id: int
    schema: str
    table: str
    columns: list[BinlogColumn] = field(default_factory=list)
    has_names: bool = False


def _column_metadata(  # noqa: PLR0911 - one return per metadata layout
    column: BinlogColumn, data: bytes | memoryview, offset: int
) -> int:
    """Read the column's metadata bytes from the table map's metadata block."""
    kind = column.type
    if kind == VARCHAR:
        column.max_length = struct.unpack_from("<H", data, offset)[0]
        return offset + 2
    if kind in (FLOAT, DOUBLE, BLOB, GEOMETRY, JSON, VECTOR):
        column.length_size = data[offset]
        return offset + 1
    if kind in (TIMESTAMP2, DATETIME2, TIME2):
        column.fsp = data[offset]
        return offset + 1
    if kind == NEWDECIMAL:
        column.precision, column.decimals = data[offset], data[offset + 1]
        return offset + 2
    if kind == BIT:
        column.bits = data[offset + 1] * 8 + data[offset]
        return offset + 2
    if kind in (STRING, VAR_STRING):
        metadata = (data[offset] << 8) | data[offset + 1]
        real_type = metadata >> 8
        if real_type in (ENUM, SET):
            column.type = real_type
            column.size = metadata & 0xFF
        else:
            column.max_length = (((metadata >> 4) & 0x300) ^ 0x300) + (metadata & 0xFF)
        return offset + 2
    if kind in (ENUM, SET):
        column.size = data[offset + 1]
        return offset + 2
    return offset


def _strings(data: bytes | memoryview, offset: int, end: int) -> list[str]:
    values = []
    while offset < end:
        length, offset = lenenc(data, offset)
        values.append(bytes(data[offset : offset + length]).decode("utf-8"))
        offset += length
    return values


def _ints(data: bytes | memoryview, offset: int, end: int) -> list[int]:
    values = []
    while offset < end:
        value, offset = lenenc(data, offset)
        values.append(value)
    return values


def _charsets(
    columns: list[BinlogColumn], kind: int, value: list[int], applies: frozenset[int]
) -> None:
    targets = [c for c in columns if c.type in applies]
    if kind in (_DEFAULT_CHARSET, _ENUM_AND_SET_DEFAULT_CHARSET):
        default, pairs = value[0], value[1:]
        overrides = dict(zip(pairs[::2], pairs[1::2], strict=True))
        for position, column in enumerate(targets):
            column.collation = overrides.get(position, default)
    else:
        for column, collation in zip(targets, value, strict=False):
            column.collation = collation


def _optional_metadata(  # noqa: PLR0912 - one branch per metadata kind
    columns: list[BinlogColumn], data: bytes | memoryview, offset: int
) -> bool:
    """Apply the TLV optional metadata; True if it named the columns."""
    has_names = False
    end = len(data)
    # ENUM/SET labels are written in the column's character set, which MariaDB lists after
    # them: decoded once the whole metadata is read (a latin1 'é' is not UTF-8).
    labels: dict[int, list[bytes]] = {}
    while offset < end:
        kind = data[offset]
        length, offset = lenenc(data, offset + 1)
        stop = offset + length
        if kind == _SIGNEDNESS:
            numeric = [c for c in columns if c.type in _NUMERIC]
            for position, column in enumerate(numeric):
                column.unsigned = bool(data[offset + position // 8] & (0x80 >> (position % 8)))
        elif kind in (_DEFAULT_CHARSET, _COLUMN_CHARSET):
            _charsets(columns, kind, _ints(data, offset, stop), _CHARACTER)
        elif kind in (_ENUM_AND_SET_DEFAULT_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET):
            _charsets(columns, kind, _ints(data, offset, stop), frozenset({ENUM, SET}))
        elif kind == _COLUMN_NAME:
            for column, name in zip(columns, _strings(data, offset, stop), strict=True):
                column.name = name
            has_names = True
        elif kind in (_SET_STR_VALUE, _ENUM_STR_VALUE):
            wanted = SET if kind == _SET_STR_VALUE else ENUM
            targets = iter(c for c in columns if c.type == wanted)
            position = offset
            while position < stop:
                count, position = lenenc(data, position)
                raw = []
                for _ in range(count):
                    size, position = lenenc(data, position)
                    raw.append(bytes(data[position : position + size]))
                    position += size
                labels[next(targets).index] = raw
        elif kind == _SIMPLE_PRIMARY_KEY:
            for index in _ints(data, offset, stop):
                columns[index].is_primary = True
        elif kind == _PRIMARY_KEY_WITH_PREFIX:
            for index in _ints(data, offset, stop)[::2]:
                columns[index].is_primary = True
        offset = stop
    for index, raw in labels.items():
        column = columns[index]
        text = [label.decode(column.encoding) for label in raw]
        if column.type == SET:
            column.set_values = text
        else:
            column.enum_values = text
    return has_names


def table_names(body: bytes | memoryview) -> tuple[str, str]:
    """The schema and table a TABLE_MAP event names, without parsing its columns."""
    offset = 8
    schema_length = body[offset]
    schema = bytes(body[offset + 1 : offset + 1 + schema_length]).decode("utf-8")
    offset += 2 + schema_length
    table_length = body[offset]
    return schema, bytes(body[offset + 1 : offset + 1 + table_length]).decode("utf-8")


def table_map_event(body: bytes | memoryview) -> TableMap:
    """Parse a TABLE_MAP event body (checksum already cut off)."""
    table_id = int.from_bytes(body[0:6], "little")
    offset = 8
    schema_length = body[offset]
    schema = bytes(body[offset + 1 : offset + 1 + schema_length]).decode("utf-8")
    offset += 2 + schema_length
    table_length = body[offset]
    table = bytes(body[offset + 1 : offset + 1 + table_length]).decode("utf-8")
    offset += 2 + table_length
    count, offset = lenenc(body, offset)
    columns = [BinlogColumn(index, body[offset + index]) for index in range(count)]
    offset += count
    if offset == len(body):
        # Servers before MySQL 5.1.14 (and the 5.1/5.2 development trees) end the table map
        # here: no column metadata, no NULL bitmap. Their rows events are refused by name.
        return TableMap(table_id, schema, table, columns, False)
    metadata_length, offset = lenenc(body, offset)
    position = offset
    for column in columns:
        position = _column_metadata(column, body, position)
    offset += metadata_length + (count + 7) // 8  # metadata block, then the NULL bitmap
    has_names = _optional_metadata(columns, body, offset)
    return TableMap(table_id, schema, table, columns, has_names)


class TableMapCache:
    """Table maps parsed once per distinct body: the same table's map repeats, byte for byte,
    in front of every transaction that changes it until a DDL or a server restart."""

    def __init__(self, limit: int = 4096) -> None:
        self._parsed: dict[bytes, TableMap] = {}
        self._limit = limit

    def get(self, body: bytes) -> TableMap:
        table_map = self._parsed.get(body)
        if table_map is None:
            if len(self._parsed) >= self._limit:
                self._parsed.clear()
            table_map = table_map_event(body)
            self._parsed[body] = table_map
        return table_map
