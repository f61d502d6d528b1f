"""Row images → SimpleBinlog messages (``build_messages``, ``TableSchema``, ``EventContext``),
and the reference decoding through python-mysql-replication's own rows events. No I/O.

The collector decodes with ``collector.row_decoder``; ``messages_from_rows`` (the library's
events) stays as the reference that ``tests/integration/collector/test_fast_decoder.py``
checks it against on every column type. Two things python-mysql-replication 1.0.17 gets
wrong or ambiguous, fixed here for that reference path:

* A negative ``TIME(fsp>0)`` is decoded with its fraction on the wrong side of the second
  (``-838:59:59.1234`` comes back as ``-838:59:59.8766``): ``fix_reader_quirks`` replaces
  that one decoder with a correct reading of the packed value.
* ``None`` stands for NULL but also for an empty SET and a zero date; the row's
  ``none_sources`` tells them apart, and ``encode_row`` restores ``""`` and ``0000-00-00``.
  A column missing from the row image (``binlog_row_image`` not FULL) is an error: a mirror
  cannot be kept exact from partial rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collector import native as _native_extension
from simple_binlog.errors import ContractError
from simple_binlog.message import FORMAT_VERSION, BinlogPosition, EventType, SimpleBinlog, Source
from simple_binlog.offsets import OffsetGenerator
from simple_binlog.values import JsonScalar, Kind, encode, parse_column_type

_native_messages = _native_extension.MESSAGES
_native_build: Any = _native_extension.module().build_messages if _native_messages else None
_FRACTION_UNIT = {0: 0, 1: 10_000, 2: 100, 3: 1}  # microseconds per unit, by fraction bytes


def _read_time2(self: Any, column: Any) -> dt.timedelta:
    """TIME2: 3 bytes of sign/hour/minute/second then 0-3 fraction bytes, stored together as
    one big-endian integer offset by 0x800000 << fraction bits (MySQL's my_time_packed_...)."""
    fraction_bytes = (column.fsp + 1) // 2
    raw = self.packet.read(3 + fraction_bytes)
    packed = int.from_bytes(raw, "big") - (0x800000 << (8 * fraction_bytes))
    sign = -1 if packed < 0 else 1
    intpart, fraction = divmod(abs(packed), 1 << (8 * fraction_bytes))
    value = dt.timedelta(
        hours=(intpart >> 12) & 0x3FF,
        minutes=(intpart >> 6) & 0x3F,
        seconds=intpart & 0x3F,
        microseconds=fraction * _FRACTION_UNIT[fraction_bytes],
    )
    return sign * value


def fix_reader_quirks() -> None:
    """Patch python-mysql-replication where it loses data or hides failures.

    * the TIME2 decoder (see the module docstring);
    * a lost stream connection is retried forever from a stale position, silently but for
      a log line, with no bound: make it an error instead, so the caller reconnects from the
      position it has committed and a user sees why the collector stopped.
    """
    from pymysqlreplication import binlogstream  # noqa: PLC0415
    from pymysqlreplication.row_event import RowsEvent  # noqa: PLC0415

    RowsEvent._RowsEvent__read_time2 = _read_time2
    binlogstream.MYSQL_EXPECTED_ERROR_CODES = []


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Column order, MySQL column types (information_schema spelling) and the key."""

    schema: str
    table: str
    column_types: dict[str, str]
    primary_keys: tuple[str, ...]


_ZERO_DATES = {
    Kind.DATE: "0000-00-00",
    Kind.DATETIME: "0000-00-00 00:00:00",
    Kind.TIMESTAMP: "0000-00-00 00:00:00",
}


# python-mysql-replication turns YEAR 0000 into 1900 and a zero TIMESTAMP into the epoch;
# neither is a value those columns can hold (YEAR is 1901..2155, TIMESTAMP starts one second
# after the epoch), so both are unambiguous.
_LIBRARY_YEAR_ZERO = 1900
_LIBRARY_TIMESTAMP_ZERO = dt.datetime(1970, 1, 1)


def _restore_none(table: TableSchema, name: str, source: str) -> JsonScalar:
    if source == "null":
        return None
    column = parse_column_type(table.column_types[name])
    if source == "empty set":
        return ""
    if source.startswith("out of date"):
        zero = _ZERO_DATES.get(column.kind)
        if zero is not None:
            return zero + ("." + "0" * column.fsp if column.fsp else "")
    if source == "cols bitmap":
        raise ContractError(
            f"{table.schema}.{table.table}.{name} is missing from the binlog row image; "
            "set binlog_row_image=FULL on the server."
        )
    raise ContractError(f"{table.schema}.{table.table}.{name} came back empty ({source}).")


def encode_row(
    table: TableSchema, values: Mapping[str, Any], none_sources: Mapping[str, str]
) -> dict[str, JsonScalar]:
    """One row image as SimpleBinlog ``content``, in the table's column order."""
    unknown = [name for name in values if name not in table.column_types]
    if unknown:
        raise ContractError(
            f"{table.schema}.{table.table} has a column {unknown[0]!r} in the binlog that its "
            "schema does not list (a DDL the collector has not seen yet)."
        )
    row: dict[str, JsonScalar] = {}
    for name, type_spec in table.column_types.items():
        if name not in values:
            raise ContractError(
                f"{table.schema}.{table.table}.{name} is missing from the binlog row image; "
                "set binlog_row_image=FULL on the server."
            )
        value = values[name]
        if value is None:
            row[name] = _restore_none(table, name, str(none_sources.get(name, "null")))
            continue
        column = parse_column_type(type_spec)
        if column.kind is Kind.YEAR and value == _LIBRARY_YEAR_ZERO:
            value = 0
        elif column.kind is Kind.TIMESTAMP and value == _LIBRARY_TIMESTAMP_ZERO:
            row[name] = _ZERO_DATES[Kind.TIMESTAMP] + ("." + "0" * column.fsp if column.fsp else "")
            continue
        row[name] = encode(column, value, name)
    return row


# Not frozen: one is made per rows event (a frozen dataclass's __init__ costs several times
# a plain one's); nothing changes it after creation.
@dataclass(slots=True)
class EventContext:
    """Where a rows event sits in the binlog, shared by all its rows."""

    server_id: int
    file: str
    pos: int
    timestamp: int  # seconds, from the event header
    gtid: str | None

    @classmethod
    def of(cls, event: Any, reader: Any, gtid: str | None) -> EventContext:
        """The context of a python-mysql-replication rows event just read by ``reader``."""
        return cls(
            server_id=event.packet.server_id,
            file=reader.log_file,
            pos=reader.log_pos,
            timestamp=event.timestamp,
            gtid=gtid,
        )


_EVENT_TYPES = {
    "WriteRowsEvent": EventType.INSERT,
    "UpdateRowsEvent": EventType.UPDATE,
    "DeleteRowsEvent": EventType.DELETE,
}


def messages_from_rows(
    event_class: str,
    rows: list[dict[str, Any]],
    table: TableSchema,
    context: EventContext,
    offsets: OffsetGenerator,
    first_row: int = 0,
) -> list[SimpleBinlog]:
    """The SimpleBinlog messages of one python-mysql-replication rows event from row
    ``first_row`` on (rows before it were published before a restart)."""
    event_type = _EVENT_TYPES.get(event_class)
    if event_type is None:
        raise ContractError(f"{event_class} is not a rows event.")
    images: list[tuple[dict[str, JsonScalar] | None, dict[str, JsonScalar]]] = []
    for row in rows[first_row:]:
        if event_type is EventType.UPDATE:
            before = encode_row(table, row["before_values"], row.get("before_none_sources", {}))
            after = encode_row(table, row["after_values"], row.get("after_none_sources", {}))
            images.append((before, after))
        else:
            images.append((None, encode_row(table, row["values"], row.get("none_sources", {}))))
    return build_messages(event_type, images, table, context, offsets, first_row)


def build_messages(
    event_type: EventType,
    images: list[tuple[dict[str, JsonScalar] | None, dict[str, JsonScalar]]],
    table: TableSchema,
    context: EventContext,
    offsets: OffsetGenerator,
    first_row: int = 0,
    native: bool = True,
) -> list[SimpleBinlog]:
    """Messages for decoded row images ``(before image of an UPDATE, content)`` of one rows
    event, the first of them being row ``first_row``; offsets assigned in row order.
    ``native``: made by the C extension when it is built (the same messages, see
    ``collector.native``); otherwise, and as the reference, by the dataclasses' constructors."""
    execute_time = context.timestamp * 1000
    if native and _native_messages:
        messages: list[SimpleBinlog] = _native_build(
            images,
            first_row,
            offsets.next,
            (
                SimpleBinlog,
                BinlogPosition,
                context.timestamp,
                execute_time,
                event_type,
                table.schema,
                table.table,
                Source.BINLOG,
                table.column_types,
                table.primary_keys,
                context.server_id,
                context.file,
                context.pos,
                context.gtid,
                FORMAT_VERSION,
            ),
        )
        return messages
    return [
        SimpleBinlog(
            binlog_offset=offsets.next(context.timestamp),
            execute_time=execute_time,
            event_type=event_type,
            schema_name=table.schema,
            table_name=table.table,
            source=Source.BINLOG,
            content=content,
            column_types=table.column_types,
            primary_keys=table.primary_keys,
            before_content=before,
            position=BinlogPosition(
                server_id=context.server_id,
                file=context.file,
                pos=context.pos,
                row_index=index,
                gtid=context.gtid,
            ),
        )
        for index, (before, content) in enumerate(images, start=first_row)
    ]
