"""Shared by the tests on recorded binlog files (../shared/fixtures/mysql-binlogs/): every rows
event of a file decoded by the collector (native and Python reference), and the same bytes
read by python-mysql-replication, the independent decoder they are checked against."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import binlog_events as ev
from collector.binlog_files import BinlogFiles, PositionalTableSchemas
from collector.decoding import TableSchema, encode_row
from collector.row_decoder import RowDecoder, TableDecoders
from simple_binlog.errors import ContractError

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "mysql-binlogs"


def no_server(schema: str, table: str) -> TableSchema:
    raise ContractError(f"{schema}.{table}: no server in these tests.")


@dataclass
class DecodedEvent:
    offset: int
    kind: int
    table: str
    column_types: dict[str, str]
    native: list[Any] | None = None
    reference: list[Any] | None = None
    error: str | None = None
    library: list[Any] | None = None
    library_error: str | None = None


@dataclass
class FileDecoding:
    name: str
    flavour: str = ""
    version: str = ""
    events: list[DecodedEvent] = field(default_factory=list)
    error: str | None = None


class _Packet:
    """What python-mysql-replication's packet wrapper reads from: an OK byte, then the event."""

    def __init__(self, data: bytes) -> None:
        self._data = b"\x00" + data
        self._position = 0

    def read(self, size: int) -> bytes:
        chunk = self._data[self._position : self._position + size]
        self._position += len(chunk)
        return chunk

    def advance(self, size: int) -> None:
        self._position += size


class _Cursor:
    def __init__(self, names: list[str]) -> None:
        self._names = names

    def execute(self, *_: Any) -> None:
        pass

    def fetchall(self) -> list[tuple[str]]:
        return [(name,) for name in self._names]

    def close(self) -> None:
        pass


class _Connection:
    """The library's control connection: column names for maps without them (``@1``, …)."""

    charset = "utf8mb4"

    def __init__(self, dbms: str) -> None:
        self._dbms = dbms
        self.names: list[str] = []

    def _get_dbms(self) -> str:
        return self._dbms

    def cursor(self, *_: Any) -> _Cursor:
        return _Cursor(self.names)


class _Library:
    """python-mysql-replication 1.0.17 reading single events from bytes."""

    def __init__(self, flavour: str, version: tuple[int, int, int]) -> None:
        from pymysqlreplication import row_event

        self._row_event = row_event
        self._connection = _Connection(flavour)
        self._tables: dict[int, Any] = {}
        self.failed: dict[int, str] = {}
        self._version = version

    def _wrap(self, header: bytes, body: bytes, table_names: int = 0) -> Any:
        from pymysqlreplication.packet import BinLogPacketWrapper

        row_event = self._row_event
        self._connection.names = [f"@{i + 1}" for i in range(table_names)]
        return BinLogPacketWrapper(
            # With a (dummy) CRC32 after the event: the library stops reading 4 bytes early.
            _Packet(header + body + b"\x00\x00\x00\x00"),
            self._tables,
            self._connection,
            self._version,
            True,
            {
                row_event.TableMapEvent,
                row_event.WriteRowsEvent,
                row_event.UpdateRowsEvent,
                row_event.DeleteRowsEvent,
                row_event.PartialUpdateRowsEvent,
            },
            None,
            None,
            None,
            None,
            False,
            False,
            False,
            True,
            False,
        )

    def table_map(self, header: bytes, body: bytes, columns: int) -> None:
        table_id = int.from_bytes(body[:6], "little")
        try:
            event = self._wrap(header, body, columns).event
        except ValueError as exc:  # an optional metadata kind it does not know (VECTOR's)
            self._tables.pop(table_id, None)
            self.failed[table_id] = f"table map: {type(exc).__name__}: {exc}"
            return
        self.failed.pop(table_id, None)
        self._tables[event.table_id] = event.get_table()

    def rows(self, header: bytes, body: bytes) -> list[dict[str, Any]]:
        failed = self.failed.get(int.from_bytes(body[:6], "little"))
        if failed is not None:
            raise ValueError(failed)
        rows: list[dict[str, Any]] = self._wrap(header, body).event.rows
        return rows


def _raw_header(header: ev.EventHeader, body: bytes) -> bytes:
    return struct.pack(
        "<IBIIIH",
        header.timestamp,
        header.type,
        header.server_id,
        23 + len(body),
        header.log_pos,
        0,
    )


def _renamed(schema: TableSchema, row: dict[str, Any]) -> dict[str, Any]:
    """The library names unnamed columns UNKNOWN_COL0, …: its values by position."""
    names = list(schema.column_types)
    renamed = {}
    for key, value in row.items():
        if key.endswith("_values") or key.endswith("none_sources") or key == "values":
            positions = {
                old: new
                for old, new in zip(
                    list(row.get("values", row.get("after_values", value))), names, strict=False
                )
            }
            renamed[key] = {positions.get(k, k): v for k, v in value.items()}
        else:
            renamed[key] = value
    return renamed


def _library_images(rows: list[dict[str, Any]], schema: TableSchema, kind: int) -> list[Any]:
    images: list[Any] = []
    for row in map(lambda r: _renamed(schema, r), rows):
        if kind in (ev.UPDATE_ROWS_V1, ev.UPDATE_ROWS_V2, ev.PARTIAL_UPDATE_ROWS):
            before = encode_row(schema, row["before_values"], row.get("before_none_sources", {}))
            after = encode_row(schema, row["after_values"], row.get("after_none_sources", {}))
            images.append((before, after))
        else:
            images.append((None, encode_row(schema, row["values"], row.get("none_sources", {}))))
    return images


def decode_file(path: Path, with_library: bool = True) -> FileDecoding:
    """Every rows event of a file: the collector's rows (native, reference) and the
    library's, or the error each gave."""
    result = FileDecoding(path.name)
    source = BinlogFiles([str(path)])
    decoders = TableDecoders(PositionalTableSchemas(no_server), lambda _s, _t: True)
    library: _Library | None = None
    current: RowDecoder | None = None
    try:
        for header, body in source:
            if source.format is not None and library is None:
                result.flavour, result.version = source.format.flavour, source.format.server_version
                library = _Library(source.format.flavour, source.format.version)
            if header.type == ev.TABLE_MAP:
                decoders.on_table_map(body)
                if with_library and library is not None:
                    columns = len(ev.table_map_event(body).columns)
                    library.table_map(_raw_header(header, body), body, columns)
            elif header.type in ev.ROWS_EVENTS:
                current = decoders.for_rows(body)
                assert current is not None
                result.events.append(_decode_rows(source, header, body, current, library))
    except (ContractError, UnicodeDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _decode_rows(
    source: BinlogFiles,
    header: ev.EventHeader,
    body: bytes,
    decoder: RowDecoder,
    library: _Library | None,
) -> DecodedEvent:
    schema = decoder.schema
    event = DecodedEvent(
        source.event_offset, header.type, f"{schema.schema}.{schema.table}", schema.column_types
    )
    try:
        if header.type == ev.PARTIAL_UPDATE_ROWS:
            from collector.mysql_events import partial_update_rows

            event.native = event.reference = partial_update_rows(decoder, body)
        else:
            event.native = decoder.rows(body, header.type)
            event.reference = decoder.reference_rows(body, header.type)
    except ContractError as exc:
        event.error = str(exc)
    if library is not None:
        try:
            rows = library.rows(_raw_header(header, body), body)
            event.library = _library_images(rows, schema, header.type)
        except Exception as exc:  # noqa: BLE001 - the library's failure is recorded, compared
            event.library_error = f"{type(exc).__name__}: {exc}"
    return event


def fixture_files() -> Iterator[Path]:
    yield from sorted(path for path in FIXTURES.iterdir() if path.is_file())
