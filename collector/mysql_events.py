"""MySQL's binlog events beside MariaDB's: the format description (flavour, version,
checksum), GTID / ANONYMOUS_GTID / GTID_TAGGED_LOG and PREVIOUS_GTIDS, TRANSACTION_PAYLOAD
(zstd-compressed transactions) and PARTIAL_UPDATE_ROWS (JSON diffs). Pure logic: bytes in.

Layouts: MySQL ``libs/mysql/binlog/event`` (control_events.h, rows_event.h,
compression/payload_event_buffer_istream.h); the tagged GTID event is written in MySQL's
serialization library format (``libs/mysql/serialization``: each integer in 1-9 bytes, the
byte count in the low bits of the first). python-mysql-replication 1.0.17 reads neither
tagged GTIDs nor TRANSACTION_PAYLOAD, and its rows events are objects the collector keeps
out of its hot path (``collector.binlog_events``), hence these readers.

Which event types the collector reads, which it knows carry nothing it needs, and which would
carry row changes it cannot read (and so stop it) are listed here, in one place.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from collector import binlog_events as ev
from collector import mysql_gtid, mysql_json
from collector.ddl import TRANSACTION_STARTS
from collector.mysql_gtid import uuid_text
from simple_binlog.errors import ContractError

# Event types beyond collector.binlog_events' (MySQL log_event.h, MariaDB log_event.h).
START_V3, STOP, INTVAR, LOAD = 1, 3, 5, 6
CREATE_FILE, APPEND_BLOCK, EXEC_LOAD, DELETE_FILE, NEW_LOAD, RAND, USER_VAR = (
    8,
    9,
    10,
    11,
    12,
    13,
    14,
)
BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY = 17, 18
PRE_GA_WRITE_ROWS, PRE_GA_UPDATE_ROWS, PRE_GA_DELETE_ROWS = 20, 21, 22
INCIDENT, IGNORABLE, ROWS_QUERY = 26, 28, 29
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35
TRANSACTION_CONTEXT, VIEW_CHANGE, XA_PREPARE = 36, 37, 38
PARTIAL_UPDATE_ROWS, TRANSACTION_PAYLOAD, HEARTBEAT_V2, GTID_TAGGED = 39, 40, 41, 42
MARIADB_ANNOTATE_ROWS, MARIADB_CHECKPOINT, MARIADB_GTID_LIST = 160, 161, 163
MARIADB_START_ENCRYPTION = 164

MYSQL_GTIDS = frozenset({GTID, ANONYMOUS_GTID, GTID_TAGGED})

# Read by the collector elsewhere, or known to carry nothing a row mirror needs: the stream's
# own bookkeeping, statement context (only used with statement-format data, which a QUERY
# event then carries and the collector refuses), replication topology.
IGNORED = frozenset(
    {
        ev.FORMAT_DESCRIPTION,
        ev.ROTATE,
        START_V3,
        STOP,
        INTVAR,
        RAND,
        USER_VAR,
        IGNORABLE,
        ROWS_QUERY,
        PREVIOUS_GTIDS,
        TRANSACTION_CONTEXT,
        VIEW_CHANGE,
        MARIADB_ANNOTATE_ROWS,
        MARIADB_CHECKPOINT,
        MARIADB_GTID_LIST,
        MARIADB_START_ENCRYPTION,
    }
)

# Events that carry row changes (or say some were lost) the collector cannot read: it stops.
_UNREADABLE_CHANGES = {
    LOAD: "LOAD DATA written as a statement",
    CREATE_FILE: "LOAD DATA written as a statement",
    APPEND_BLOCK: "LOAD DATA written as a statement",
    EXEC_LOAD: "LOAD DATA written as a statement",
    NEW_LOAD: "LOAD DATA written as a statement",
    DELETE_FILE: "LOAD DATA written as a statement",
    BEGIN_LOAD_QUERY: "LOAD DATA written as a statement",
    EXECUTE_LOAD_QUERY: "LOAD DATA written as a statement",
    PRE_GA_WRITE_ROWS: "a rows event of a MySQL 5.1 pre-GA server",
    PRE_GA_UPDATE_ROWS: "a rows event of a MySQL 5.1 pre-GA server",
    PRE_GA_DELETE_ROWS: "a rows event of a MySQL 5.1 pre-GA server",
    INCIDENT: "an INCIDENT event (the server says changes may be missing from the binlog)",
    **dict.fromkeys(ev.MARIADB_COMPRESSED, "a compressed MariaDB event (log_bin_compress=ON)"),
}


def unreadable_changes(kind: int) -> str | None:
    """What an event of type ``kind`` holds that the collector cannot read, or None."""
    return _UNREADABLE_CHANGES.get(kind)


# A statement that changes rows, written as a QUERY event (binlog_format STATEMENT/MIXED).
_STATEMENT_DML = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(?:INSERT|UPDATE|DELETE|REPLACE|LOAD\s+DATA|LOAD\s+XML)\b",
    re.IGNORECASE | re.DOTALL,
)


def ends_transaction(header: ev.EventHeader, body: bytes) -> bool:
    """Whether the event ends a transaction: an XID (commit), an XA PREPARE, or a query that
    is not one of ``TRANSACTION_STARTS`` (COMMIT, ROLLBACK, a DDL statement)."""
    if header.type in (ev.XID, XA_PREPARE):
        return True
    if header.type != ev.QUERY:
        return False
    return ev.query_event(body).query.strip().upper() not in TRANSACTION_STARTS


def is_statement_dml(query: str) -> bool:
    return _STATEMENT_DML.match(query) is not None


# -- format description ------------------------------------------------------------------------

_CHECKSUM_OFF, _CHECKSUM_CRC32 = 0, 1


@dataclass(frozen=True, slots=True)
class FormatDescription:
    binlog_version: int
    server_version: str
    header_length: int
    post_header_lengths: bytes
    checksum: bool  # events end with a CRC32

    @property
    def flavour(self) -> str:
        return "mariadb" if "mariadb" in self.server_version.lower() else "mysql"

    @property
    def version(self) -> tuple[int, int, int]:
        return version_tuple(self.server_version)

    # Event type numbers as this server wrote them → today's numbers (empty: the same).
    renumbered: dict[int, int] = field(default_factory=dict)

    def post_header_length(self, kind: int) -> int | None:
        if 1 <= kind <= len(self.post_header_lengths):
            return self.post_header_lengths[kind - 1]
        return None

    def current_type(self, kind: int) -> int:
        """Today's number of an event type this server wrote as ``kind``."""
        return self.renumbered.get(kind, kind)


def version_tuple(text: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    if match is None:
        return (0, 0, 0)
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _has_checksum_field(version: str) -> bool:
    """Servers that write the checksum algorithm into the format description: MySQL 5.6.1+,
    MariaDB 5.3+."""
    numbers = version_tuple(version)
    if "mariadb" in version.lower():
        return numbers >= (5, 3, 0)
    return numbers >= (5, 6, 1)


# The development trees of MySQL 5.1/5.2's row-based replication (the "-a_drop5/6" builds)
# numbered the events after FORMAT_DESCRIPTION differently from every release: TABLE_MAP was
# 16, the (pre-GA) rows events 17-19, XID 20, BEGIN/EXECUTE_LOAD_QUERY 21-22. MySQL's own
# reader recognises these builds by their server version and renumbers; so does this one, so
# their files read as a pre-GA server's (whose rows events the collector refuses by name)
# instead of as garbage.
_DROP_TREE_VERSION = re.compile(r"5\.1\.[1-5]-a_drop5|5\.1\.4-a_drop6|5\.2\.[12]-a_drop6")
_DROP_TREE_TYPES = {
    16: ev.TABLE_MAP,
    17: PRE_GA_WRITE_ROWS,
    18: PRE_GA_UPDATE_ROWS,
    19: PRE_GA_DELETE_ROWS,
    20: ev.XID,
    21: BEGIN_LOAD_QUERY,
    22: EXECUTE_LOAD_QUERY,
}


def format_description(body: bytes) -> FormatDescription:
    """A FORMAT_DESCRIPTION event body (the whole body: its checksum, if any, is recognised
    here)."""
    if len(body) < 57:
        raise ContractError("a FORMAT_DESCRIPTION event is truncated.")
    binlog_version = struct.unpack_from("<H", body, 0)[0]
    server_version = body[2:52].split(b"\x00", 1)[0].decode("ascii", "replace")
    header_length = body[56]
    rest = body[57:]
    checksum = False
    if _has_checksum_field(server_version):
        if len(rest) < 5:
            raise ContractError("a FORMAT_DESCRIPTION event is truncated.")
        algorithm = rest[-5]
        if algorithm not in (_CHECKSUM_OFF, _CHECKSUM_CRC32):
            raise ContractError(f"binlog checksum algorithm {algorithm} is unknown.")
        checksum = algorithm == _CHECKSUM_CRC32
        rest = rest[:-5]
    renumbered = _DROP_TREE_TYPES if _DROP_TREE_VERSION.match(server_version) else {}
    if renumbered:
        lengths = bytearray(rest)
        for written, current in renumbered.items():
            if max(written, current) <= len(rest):
                lengths[current - 1] = rest[written - 1]
        rest = bytes(lengths)
    return FormatDescription(
        binlog_version, server_version, header_length, rest, checksum, dict(renumbered)
    )


# -- GTIDs ---------------------------------------------------------------------------------------


def _varlen_uint(data: bytes, offset: int) -> tuple[int, int]:
    """An unsigned integer of MySQL's serialization library: the number of trailing one bits
    of the first byte, plus one, is its byte count (9: the next 8 bytes hold the value)."""
    if offset >= len(data):
        raise ContractError("a tagged GTID event is truncated.")
    first = data[offset]
    count = 1
    while count < 9 and first >> (count - 1) & 1:
        count += 1
    if offset + count > len(data):
        raise ContractError("a tagged GTID event is truncated.")
    if count == 9:
        return int.from_bytes(data[offset + 1 : offset + 9], "little"), offset + 9
    return int.from_bytes(data[offset : offset + count], "little") >> count, offset + count


def _varlen_int(data: bytes, offset: int) -> tuple[int, int]:
    value, offset = _varlen_uint(data, offset)
    return (-(value >> 1) - 1 if value & 1 else value >> 1), offset


_TAGGED_SID, _TAGGED_GNO, _TAGGED_TAG = 1, 2, 3


def _tagged_gtid(body: bytes) -> str:
    """``uuid:tag:gno`` of a GTID_TAGGED_LOG event (serialization format version 2)."""
    if not body or body[0] != 2:
        raise ContractError("a tagged GTID event has an unknown serialization version.")
    size, offset = _varlen_uint(body, 1)
    last_non_ignorable, offset = _varlen_uint(body, offset)
    end = min(size, len(body))
    uuid = tag = None
    gno = 0
    while offset < end:
        field, offset = _varlen_uint(body, offset)
        if field == _TAGGED_SID:
            raw = bytearray()
            for _ in range(16):
                byte, offset = _varlen_uint(body, offset)
                raw.append(byte)
            uuid = uuid_text(bytes(raw))
        elif field == _TAGGED_GNO:
            gno, offset = _varlen_int(body, offset)
        elif field == _TAGGED_TAG:
            length, offset = _varlen_uint(body, offset)
            tag = body[offset : offset + length].decode("ascii")
            offset += length
        elif field <= last_non_ignorable and field not in range(12):
            raise ContractError(f"a tagged GTID event has an unknown required field {field}.")
        elif field in (0, 4, 5, 6, 7, 8, 9, 10, 11):
            # flags, logical clocks, timestamps, length, versions, ticket: one integer each
            _, offset = _varlen_uint(body, offset)
        else:
            break  # an ignorable field of a later version: nothing after it is needed
        if uuid is not None and tag is not None and gno:
            break
    if uuid is None or tag is None or gno < 1:
        raise ContractError("a tagged GTID event lacks its uuid, tag or number.")
    return f"{uuid}:{tag.lower()}:{gno}"


def gtid_text(kind: int, body: bytes) -> str:
    """The GTID of a MySQL GTID event as text; "" for an anonymous transaction."""
    if kind == ANONYMOUS_GTID:
        return ""
    if kind == GTID_TAGGED:
        return _tagged_gtid(body)
    if len(body) < 25:
        raise ContractError("a GTID event is truncated.")
    gno = struct.unpack_from("<q", body, 17)[0]
    return f"{uuid_text(body[1:17])}:{gno}"


def previous_gtids(body: bytes) -> str:
    """The GTID set a PREVIOUS_GTIDS event lists (the set written before this file), in both
    of MySQL's formats (``collector.mysql_gtid.decode``)."""
    if len(body) < 8:
        raise ContractError("a PREVIOUS_GTIDS event is truncated.")
    try:
        return str(mysql_gtid.decode(body))
    except ContractError as exc:
        raise ContractError(f"a PREVIOUS_GTIDS event is malformed ({exc})") from None


# -- compressed transactions -------------------------------------------------------------------

_PAYLOAD_END, _PAYLOAD_SIZE, _PAYLOAD_COMPRESSION, _PAYLOAD_UNCOMPRESSED = 0, 1, 2, 3
_ZSTD, _NONE = 0, 255


def transaction_payload(body: bytes) -> bytes:
    """The events a TRANSACTION_PAYLOAD event holds, decompressed (header + body each, no
    checksums)."""
    offset = 0
    size = algorithm = uncompressed = None
    while offset < len(body):
        field, offset = ev.lenenc(body, offset)
        if field == _PAYLOAD_END:
            break
        length, offset = ev.lenenc(body, offset)
        value, _ = ev.lenenc(body, offset)
        offset += length
        if field == _PAYLOAD_SIZE:
            size = value
        elif field == _PAYLOAD_COMPRESSION:
            algorithm = value
        elif field == _PAYLOAD_UNCOMPRESSED:
            uncompressed = value
    if size is None or algorithm is None or offset + size > len(body):
        raise ContractError("a TRANSACTION_PAYLOAD event is malformed (its header).")
    payload = body[offset : offset + size]
    if algorithm == _NONE:
        return payload
    if algorithm != _ZSTD:
        raise ContractError(f"a TRANSACTION_PAYLOAD event uses compression {algorithm}.")
    import zstandard  # noqa: PLC0415 - MySQL sources only

    try:
        data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=uncompressed or 0)
    except zstandard.ZstdError as exc:
        raise ContractError(f"a TRANSACTION_PAYLOAD event does not decompress ({exc}).") from None
    if uncompressed is not None and len(data) != uncompressed:
        raise ContractError("a TRANSACTION_PAYLOAD event decompresses to the wrong size.")
    return data


def payload_events(data: bytes) -> Iterator[tuple[ev.EventHeader, bytes]]:
    """The events of a decompressed transaction payload."""
    offset = 0
    while offset < len(data):
        if offset + ev.HEADER_LENGTH > len(data):
            raise ContractError("a TRANSACTION_PAYLOAD event holds a truncated event.")
        header = ev.read_header(data, offset)
        if header.size < ev.HEADER_LENGTH or offset + header.size > len(data):
            raise ContractError("a TRANSACTION_PAYLOAD event holds a truncated event.")
        yield header, data[offset + ev.HEADER_LENGTH : offset + header.size]
        offset += header.size


def expanded(
    events: Iterator[tuple[ev.EventHeader, bytes]],
) -> Iterator[tuple[ev.EventHeader, bytes]]:
    """``events`` with each TRANSACTION_PAYLOAD replaced by the events it holds (MySQL sources
    only: a MariaDB stream is never wrapped, so its hot path has no extra step)."""
    for header, body in events:
        if header.type == TRANSACTION_PAYLOAD:
            for inner, inner_body in payload_events(transaction_payload(body)):
                # Inner events carry no position of their own: the payload's stands for them.
                yield inner._replace(log_pos=header.log_pos, timestamp=header.timestamp), inner_body
        else:
            yield header, body


# -- partial JSON updates ------------------------------------------------------------------------

_PARTIAL_JSON_UPDATES = 1


def partial_update_rows(decoder: Any, body: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(before, after) per row of a PARTIAL_UPDATE_ROWS event, the after image complete: each
    JSON column written as diffs (``binlog_row_value_options=PARTIAL_JSON``) is its before
    value with the diffs applied. Decoded by the table's Python readers (the native decoder
    reads the other rows events)."""
    columns: list[tuple[str, Any]] = decoder.columns
    count = len(columns)
    bitmap = (count + 7) // 8
    offset = 8
    offset += struct.unpack_from("<H", body, offset)[0]
    width, offset = ev.lenenc(body, offset)
    if width != count:
        raise ContractError(
            f"a rows event of {decoder.schema.schema}.{decoder.schema.table} has {width} "
            f"columns, its table map {count}."
        )
    full = (1 << count) - 1
    for _ in range(2):
        if int.from_bytes(body[offset : offset + bitmap], "little") & full != full:
            raise ContractError(
                f"{decoder.schema.schema}.{decoder.schema.table} is missing columns in the "
                "binlog row image; set binlog_row_image=FULL on the server."
            )
        offset += bitmap
    json_columns = [
        i for i, (_, read) in enumerate(columns) if isinstance(read, mysql_json.ColumnReader)
    ]
    rows = []
    while offset < len(body):
        before, parsed, offset = _image(columns, body, offset, bitmap, {})
        options, offset = ev.lenenc(body, offset)
        partial: set[int] = set()
        if options & _PARTIAL_JSON_UPDATES:
            bits = int.from_bytes(body[offset : offset + (len(json_columns) + 7) // 8], "little")
            partial = {index for n, index in enumerate(json_columns) if bits >> n & 1}
            offset += (len(json_columns) + 7) // 8
        diffs_of = {index: parsed.get(index) for index in partial}
        after, _, offset = _image(columns, body, offset, bitmap, diffs_of)
        rows.append((before, after))
    return rows


def _image(
    columns: list[tuple[str, Any]],
    body: bytes,
    offset: int,
    bitmap: int,
    partial: dict[int, Any],
) -> tuple[dict[str, Any], dict[int, Any], int]:
    """One row image; JSON columns in ``partial`` (index → before value) are read as diffs.
    Also returns the parsed JSON values by column index."""
    nulls = int.from_bytes(body[offset : offset + bitmap], "little")
    offset += bitmap
    row: dict[str, Any] = {}
    parsed: dict[int, Any] = {}
    for index, (name, read) in enumerate(columns):
        if nulls >> index & 1:
            row[name] = None
            continue
        if isinstance(read, mysql_json.ColumnReader):
            if index in partial:
                value, offset = read.apply_diffs(body, offset, partial[index])
            else:
                value, offset = read.value(body, offset)
            parsed[index] = value
            row[name] = mysql_json.to_text(value)
        else:
            row[name], offset = read(body, offset)
    return row, parsed, offset
