"""Archived binlog files as an event source: ``cdc-mirror collect --from-files PATH...``.

Files as ``mysqlbinlog --raw`` (or the server) writes them: the 4-byte magic ``fe 62 69 6e``,
then events, the first a FORMAT_DESCRIPTION that names the server (flavour, version) and
whether events end with a CRC32. The events go through the same decoder, schema handling
and publisher as a server's (``collector.event_source``); only their bytes come from here.

Nothing is guessed: an event that does not fit in its file, a checksum that does not match,
or a body its decoder finds malformed stops the read with an error naming the file and the
byte position of the event, before any row of it is published. Each ``log_pos`` is the end
of the event in its file, which is the header's own log_pos in a server's binlog (a relay
log's headers hold its source's positions instead).

Local paths for now; the lake's object storage (HDFS/S3) is a later source of the same bytes
(``open_file`` is the one place that opens them).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from collector import binlog_events as ev
from collector import mysql_events as mev
from collector.decoding import TableSchema
from collector.position import CollectorPosition
from collector.schema import BinlogTableSchemas
from simple_binlog.errors import ContractError

log = logging.getLogger(__name__)

MAGIC = b"\xfebin"
_TABLE_ID_WIDENED = frozenset(
    {
        ev.TABLE_MAP,
        ev.WRITE_ROWS_V1,
        ev.UPDATE_ROWS_V1,
        ev.DELETE_ROWS_V1,
        mev.PRE_GA_WRITE_ROWS,
        mev.PRE_GA_UPDATE_ROWS,
        mev.PRE_GA_DELETE_ROWS,
    }
)


class BinlogFileError(ContractError):
    """A binlog file that cannot be read exactly: names the file and the byte position."""


def open_file(path: str) -> BinaryIO:
    """The bytes of one archived binlog file (a local path)."""
    return open(path, "rb")


class BinlogFiles:
    """The events of binlog files, in the order given, after a committed position."""

    finite = True

    def __init__(self, paths: Sequence[str], start: CollectorPosition | None = None) -> None:
        if not paths:
            raise ContractError("no binlog files to read were given.")
        self._paths = list(paths)
        self._start = start
        self._closed = False
        self.log_file = ""
        self.log_pos = 0
        self.drained = False  # the next events are always at hand
        self.format: mev.FormatDescription | None = None
        # The file and byte position of the last event handed out (for error messages).
        self.event_path = ""
        self.event_offset = 0

    def where(self) -> str:
        return f"{self.event_path} at byte {self.event_offset}"

    def close(self) -> None:
        self._closed = True

    def __iter__(self) -> Iterator[tuple[ev.EventHeader, bytes]]:
        events = self._after_start(self._all_events())
        for header, body in events:
            mysql = self.format is not None and self.format.flavour == "mysql"
            if mysql and header.type == mev.TRANSACTION_PAYLOAD:
                yield from self._payload(header, body)
                continue
            yield header, body

    def _payload(
        self, header: ev.EventHeader, body: bytes
    ) -> Iterator[tuple[ev.EventHeader, bytes]]:
        try:
            inner = list(mev.expanded(iter([(header, body)])))
        except ContractError as exc:
            raise BinlogFileError(f"{self.where()}: {exc}") from None
        yield from inner

    def _after_start(
        self, events: Iterator[tuple[ev.EventHeader, bytes]]
    ) -> Iterator[tuple[ev.EventHeader, bytes]]:
        """Whole transactions that end at or before the start position are left out; the one
        the start falls into (a split transaction) is handed out from its first event."""
        start = self._start
        if start is None or not start.file:
            yield from events
            return
        # Held with where each event is, so the position is its own when it is handed out.
        held: list[tuple[ev.EventHeader, bytes, str, int, int]] = []
        for header, body in events:
            held.append((header, body, self.log_file, self.log_pos, self.event_offset))
            if not mev.ends_transaction(header, body):
                continue
            if (self.log_file, self.log_pos) <= (start.file, start.pos):
                held = []
                continue
            break
        for header, body, self.log_file, self.log_pos, self.event_offset in held:
            yield header, body
        yield from events

    def initial_previous_gtids(self) -> str:
        """The PREVIOUS_GTIDS of the first file: the GTID set written before it ("" if the
        server wrote none)."""
        with open_file(self._paths[0]) as stream:
            reader = _FileReader(self._paths[0], stream)
            for header, body in reader.events():
                if header.type == mev.PREVIOUS_GTIDS:
                    return mev.previous_gtids(body)
                if header.type not in (ev.FORMAT_DESCRIPTION, ev.ROTATE):
                    break
        return ""

    def _all_events(self) -> Iterator[tuple[ev.EventHeader, bytes]]:
        for path in self._paths:
            with open_file(path) as stream:
                reader = _FileReader(path, stream)
                name = os.path.basename(path)
                for header, body in reader.events():
                    if self._closed:
                        return
                    self.format = reader.format
                    self.log_file, self.log_pos = name, reader.end
                    self.event_path, self.event_offset = path, reader.offset
                    yield header, body


class _FileReader:
    """One file's events, checked: header, size, checksum; the table id of a MySQL 5.1
    pre-GA table map or rows event (4 bytes) widened to the 6 bytes the decoders read."""

    def __init__(self, path: str, stream: BinaryIO) -> None:
        self._path = path
        self._stream = stream
        self.format: mev.FormatDescription | None = None
        self.offset = 0  # where the last event read starts
        self.end = 0  # where it ends

    def _error(self, offset: int, what: str) -> BinlogFileError:
        return BinlogFileError(f"binlog file {self._path} at byte {offset}: {what}")

    def events(self) -> Iterator[tuple[ev.EventHeader, bytes]]:
        if self._stream.read(4) != MAGIC:
            raise self._error(0, "not a binlog file (no fe 62 69 6e magic number).")
        offset = 4
        while True:
            raw = self._stream.read(ev.HEADER_LENGTH)
            if not raw:
                return
            if len(raw) < ev.HEADER_LENGTH:
                raise self._error(
                    offset,
                    f"the file ends inside an event header ({len(raw)} of "
                    f"{ev.HEADER_LENGTH} bytes); it is truncated.",
                )
            header = ev.read_header(raw)
            if self.format is not None and self.format.renumbered:
                header = header._replace(type=self.format.current_type(header.type))
            if header.size < ev.HEADER_LENGTH:
                raise self._error(offset, f"an event claims {header.size} bytes; it is corrupt.")
            rest = self._stream.read(header.size - ev.HEADER_LENGTH)
            if len(rest) < header.size - ev.HEADER_LENGTH:
                raise self._error(
                    offset,
                    f"the file ends inside an event of type {header.type} "
                    f"({ev.HEADER_LENGTH + len(rest)} of {header.size} bytes); it is truncated.",
                )
            self.offset, self.end = offset, offset + header.size
            body = self._checked(header, raw, rest, offset)
            offset += header.size
            yield header, body

    def _checked(self, header: ev.EventHeader, raw: bytes, rest: bytes, offset: int) -> bytes:
        if header.type == ev.FORMAT_DESCRIPTION:
            try:
                self.format = mev.format_description(rest)
            except ContractError as exc:
                raise self._error(offset, str(exc)) from None
            if self.format.header_length != ev.HEADER_LENGTH:
                raise self._error(
                    offset,
                    f"event headers of {self.format.header_length} bytes (binlog version "
                    f"{self.format.binlog_version}) are not read; only version 4 binlogs are.",
                )
        elif self.format is None:
            raise self._error(offset, "the first event is not a FORMAT_DESCRIPTION event.")
        if self.format.checksum:
            if len(rest) < 4:
                raise self._error(offset, "an event is too short for its checksum; it is corrupt.")
            expected = int.from_bytes(rest[-4:], "little")
            # A format description's checksum is taken with its "binlog in use" flag clear.
            cleared = raw[:17] + bytes([raw[17] & 0xFE]) + raw[18:]
            if expected not in (zlib.crc32(raw + rest[:-4]), zlib.crc32(cleared + rest[:-4])):
                raise self._error(
                    offset,
                    f"the CRC32 of an event of type {header.type} does not match; it is corrupt.",
                )
            rest = rest[:-4]
        if header.type in _TABLE_ID_WIDENED and self.format.post_header_length(header.type) == 6:
            rest = rest[:4] + b"\x00\x00" + rest[4:]
        if header.type == ev.QUERY:
            try:
                ev.query_event(rest)
            except (ContractError, IndexError, UnicodeDecodeError) as exc:
                raise self._error(offset, f"a QUERY event is corrupt ({exc}).") from None
        return rest


class PositionalTableSchemas(BinlogTableSchemas):
    """Table schemas for binlog files read with no server to ask: a table map without column
    names (``binlog_row_metadata`` MINIMAL, or a server before 8.0) names its columns
    ``@1``, ``@2``, … as ``mysqlbinlog -v`` does, and types are the table map's spelling."""

    def for_event(self, event: Any) -> TableSchema:
        if not getattr(event, "has_names", True):
            for column in event.columns:
                if column.name is None:
                    column.name = f"@{column.index + 1}"
        return super().for_event(event)


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Directories are read as their files in name order (a server's binlog.000001 …)."""
    result: list[str] = []
    for path in paths:
        candidate = Path(path)
        if candidate.is_dir():
            result.extend(
                str(child)
                for child in sorted(candidate.iterdir())
                if child.is_file() and not child.name.endswith(".index")
            )
        else:
            result.append(path)
    return result
