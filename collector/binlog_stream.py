"""A MariaDB or MySQL binlog dump as raw events: (header, body) pairs, with the reader's position.

The server's flavour and version are read from the handshake when the stream connects
(``collector.mysql_dump.ServerVersion``). For MariaDB, python-mysql-replication speaks the
replication protocol on that connection (checksum negotiation, heartbeat period, the GTID
dump command); for MySQL, ``collector.mysql_dump`` does (COM_BINLOG_DUMP_GTID with tagged
GTID sets, or COM_BINLOG_DUMP from a file and position when the server has no GTIDs). From
there on this module reads the packets itself and hands out the event bytes, which
``collector.binlog_events`` and ``collector.row_decoder`` decode (see there for why); a MySQL
stream's compressed transactions (TRANSACTION_PAYLOAD) are expanded on the way.
With the C extension built, the socket is read in large chunks and each chunk's complete
packets are split into events by ``collector._native.scan_packets``; without it, packet by
packet in Python (``_packets``), the reference.
The library is pinned (pyproject.toml): the two private members used here are its stream
connection and its checksum flag.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pymysql

from cdc_platform import mysql_source
from cdc_platform.config import MySQLInstance
from collector import binlog_events as ev
from collector import charsets, native
from collector import mysql_events as mev
from collector.ddl import TRANSACTION_STARTS
from collector.mysql_dump import ServerVersion, start_dump
from collector.mysql_executed import executed_at
from simple_binlog.errors import ContractError

# Bytes asked of the socket per read by the native scanner: a few hundred single-row
# transactions, so the reader thread releases and re-takes the GIL once per chunk, not per
# 8 KiB buffer of pymysql's socket file.
_CHUNK = 1 << 18


class BinlogStream:
    """Events after a GTID position, blocking for new ones; heartbeats while idle. An
    ``EventSource`` (``collector.event_source``) that never ends by itself."""

    finite = False

    def __init__(
        self,
        instance: MySQLInstance,
        server_id: int,
        gtid: str,
        heartbeat_s: float | None = None,
        file: str = "",
        pos: int = 0,
        partial: bool = False,
    ) -> None:
        """``gtid``: read after this GTID position. A MySQL server without GTIDs is read from
        ``file`` at ``pos`` instead: a transaction end, or with ``partial`` inside the
        transaction to hand out whole (it is then read from the file's start)."""
        self._instance = instance
        self._server_id = server_id
        self._gtid = gtid
        self._heartbeat_s = heartbeat_s
        self._file, self._pos, self._partial = file, pos, partial
        self._library: Any = None
        self._connection: Any = None
        self.server: ServerVersion | None = None
        # The server sends a heartbeat every ``heartbeat_s`` while idle: silence for much
        # longer means it is gone without closing the connection (a dead host, a cut
        # network); the read then fails and the caller reconnects.
        self._silence_limit = heartbeat_s * 5 + 5 if heartbeat_s else None
        self.log_file = ""
        self.log_pos = 0
        # False while the events already received hold another transaction end after the
        # last event handed out: a reader may gather work up to it before handing it over,
        # as it reaches it without waiting on the network.
        self.drained = True

    def __iter__(self) -> Iterator[tuple[ev.EventHeader, bytes]]:
        connection: Any = mysql_source.connect(self._instance)
        self._connection = connection
        self.server = server = ServerVersion.of(connection)
        charsets.learn(connection)  # the server's collation ids, before any table map
        if server.is_mysql:
            trailer = self._mysql_dump(connection, server)
        else:
            trailer = self._mariadb_dump(connection)
        if self._silence_limit is not None:
            connection._sock.settimeout(self._silence_limit)
        events = (
            self._scanned(connection, trailer)
            if native.AVAILABLE
            else self._read(connection, trailer)
        )
        if server.is_mysql:
            events = mev.expanded(events)
            if self._partial and self._file and not self._gtid:
                events = self._from_transaction_at(events)
        yield from events

    def _mariadb_dump(self, connection: Any) -> int:
        """python-mysql-replication opens MariaDB's GTID dump on ``connection``."""
        from pymysqlreplication import BinLogStreamReader  # noqa: PLC0415

        self._library = library = BinLogStreamReader(
            # The library opens its connections from these (the cleartext-password rule too);
            # its stream connection is the one already open.
            connection_settings=mysql_source.connect_settings(self._instance),
            pymysql_wrapper=lambda **_: connection,
            server_id=self._server_id,
            auto_position=self._gtid,
            # Blocking: MariaDB resets a non-blocking GTID dump part-way through an active
            # binlog (seen on 10.11); bounded readers stop at a known position themselves.
            blocking=True,
            slave_heartbeat=self._heartbeat_s,
            is_mariadb=True,
            enable_logging=False,  # its parameter dump (INFO) is noise in our logs
        )
        library._BinLogStreamReader__connect_to_stream()
        return ev.CHECKSUM_LENGTH if library._BinLogStreamReader__use_checksum else 0

    def _mysql_dump(self, connection: Any, server: ServerVersion) -> int:
        file, pos = self._file, self._pos
        if self._partial and not self._gtid:
            pos = 4  # the transaction's start is not known: from the file's start
        checksum = start_dump(
            connection, server, self._server_id, self._gtid, file, pos, self._heartbeat_s
        )
        return ev.CHECKSUM_LENGTH if checksum else 0

    def _read(self, connection: Any, trailer: int) -> Iterator[tuple[ev.EventHeader, bytes]]:
        for data in _packets(connection):
            header = ev.read_header(data, 1)
            body = data[1 + ev.HEADER_LENGTH : len(data) - trailer]
            if header.type == ev.ROTATE:
                self.log_file, self.log_pos = ev.rotate_event(body)
            elif header.log_pos and header.type not in _HEARTBEATS:
                self.log_pos = header.log_pos
            yield header, body

    def _from_transaction_at(
        self, events: Iterator[tuple[ev.EventHeader, bytes]]
    ) -> Iterator[tuple[ev.EventHeader, bytes]]:
        """Whole transactions that end at or before (file, pos) left out: the one ``pos``
        falls into is handed out from its first event (as ``collector.binlog_files``)."""
        held: list[tuple[ev.EventHeader, bytes, str, int]] = []
        for header, body in events:
            if header.type in _HEARTBEATS:
                continue
            held.append((header, body, self.log_file, self.log_pos))
            if header.type not in (ev.XID, ev.QUERY, mev.XA_PREPARE):
                continue
            if header.type == ev.QUERY and not _ends_transaction(body):
                continue
            if self.log_file == self._file and self.log_pos <= self._pos:
                held = []
                continue
            break
        file, pos = self.log_file, self.log_pos
        for header, body, self.log_file, self.log_pos in held:
            yield header, body
        self.log_file, self.log_pos = file, pos
        yield from events

    def _scanned(self, connection: Any, trailer: int) -> Iterator[tuple[ev.EventHeader, bytes]]:
        """The events of the dump, split natively from chunks of the socket's bytes."""
        extension = native.module()
        scan, scan_eof, scan_error, scan_large = (
            extension.scan_packets,
            extension.SCAN_EOF,
            extension.SCAN_ERROR,
            extension.SCAN_LARGE,
        )
        read1, read = connection._rfile.read1, connection._rfile.read
        buffer, offset = b"", 0
        while True:
            events, offset, stop = scan(buffer, offset, trailer, ev.EventHeader)
            last = _last_transaction_end(events)
            self.drained = last is None
            for header, body in events:
                if header is last:
                    self.drained = True
                if header.type == ev.ROTATE:
                    self.log_file, self.log_pos = ev.rotate_event(body)
                elif header.log_pos and header.type not in _HEARTBEATS:
                    self.log_pos = header.log_pos
                yield header, body
            if stop == scan_eof:
                return
            if stop == scan_error:
                pymysql.err.raise_mysql_exception(buffer[offset + 4 :])
            buffer = buffer[offset:]
            offset = 0
            if stop == scan_large:
                # A payload of 16 MiB or more, continued over several packets (a rows event
                # that large): joined and split in Python, as ``_packets`` does.
                payload, buffer = _joined_payload(buffer, read)
                if payload[:1] == b"\x00":
                    header = ev.read_header(payload, 1)
                    if header.log_pos:
                        self.log_pos = header.log_pos
                    yield header, payload[1 + ev.HEADER_LENGTH : len(payload) - trailer]
                continue
            buffer += _next_chunk(buffer, read, read1)

    def close(self) -> None:
        """Safe from another thread: a shutdown wakes a reader blocked on the socket."""
        connection = self._connection
        sock = getattr(connection, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._library is not None:
            self._library.close()
        elif connection is not None:
            with contextlib.suppress(pymysql.MySQLError, OSError):
                connection.close()


# A heartbeat's log_pos is where the server stands, not an event handed out.
_HEARTBEATS = (ev.HEARTBEAT, mev.HEARTBEAT_V2)
_MAX_PACKET = 0xFFFFFF
_LOST = 2013  # CR_SERVER_LOST


def _last_transaction_end(events: list[tuple[ev.EventHeader, bytes]]) -> ev.EventHeader | None:
    """The header of the last event that ends a transaction (XID, or a query other than
    BEGIN: ``collector.work`` ends a transaction there), if any."""
    for header, body in reversed(events):
        if header.type == ev.XID:
            return header
        if header.type == ev.QUERY and _ends_transaction(body):
            return header
    return None


def _ends_transaction(query: bytes) -> bool:
    # Unreadable: not counted as an end (work is then handed over at an earlier end, never
    # held across a read); collector.work reports the malformed event in order.
    try:
        return ev.query_event(query).query.strip().upper() not in TRANSACTION_STARTS
    except (IndexError, struct.error, ContractError):
        return False


def _next_chunk(buffer: bytes, read: Any, read1: Any) -> bytes:
    """The rest of the packet ``buffer`` begins, at once when its length is known and large;
    else what the socket has (up to ``_CHUNK`` bytes)."""
    missing = 0
    if len(buffer) >= 4:
        missing = 4 + int.from_bytes(buffer[:3], "little") - len(buffer)
    if missing > _CHUNK:
        return _read_some(read, missing)
    return _read_some(read1, _CHUNK)


def _joined_payload(buffer: bytes, read: Any) -> tuple[bytes, bytes]:
    """A payload continued over packets of 16 MiB - 1 bytes, from ``buffer`` then the socket:
    (the payload, the bytes after it)."""
    parts = []
    while True:
        while len(buffer) < 4:
            buffer += _read_some(read, 4 - len(buffer))
        length = int.from_bytes(buffer[:3], "little")
        while len(buffer) < 4 + length:
            buffer += _read_some(read, 4 + length - len(buffer))
        parts.append(buffer[4 : 4 + length])
        buffer = buffer[4 + length :]
        if length != _MAX_PACKET:
            return b"".join(parts), buffer


def _read_some(read: Any, size: int) -> bytes:
    try:
        chunk: bytes = read(size)
    except OSError as exc:
        raise pymysql.err.OperationalError(_LOST, f"lost the binlog connection ({exc})") from None
    if not chunk:
        raise pymysql.err.OperationalError(_LOST, "the server closed the binlog connection")
    return chunk


def _packets(connection: Any) -> Iterator[bytes]:
    """The dump's packets, read straight from pymysql's buffered socket file: its own packet
    reader builds an object per packet, which costs more than decoding a small event.
    Yields event packets (OK marker first); returns at EOF; raises pymysql's errors."""
    read = connection._rfile.read
    while True:
        try:
            header = read(4)
            length = int.from_bytes(header[:3], "little")
            payload = read(length)
            while length == _MAX_PACKET:  # a payload of 16 MiB or more continues
                header = read(4)
                length = int.from_bytes(header[:3], "little")
                payload += read(length)
        except OSError as exc:
            raise pymysql.err.OperationalError(
                _LOST, f"lost the binlog connection ({exc})"
            ) from None
        if len(header) < 4 or len(payload) < length:
            raise pymysql.err.OperationalError(_LOST, "the server closed the binlog connection")
        marker = payload[0]
        if marker == 0x00:
            yield payload
        elif marker == 0xFF:
            pymysql.err.raise_mysql_exception(payload)
        elif marker == 0xFE and length < 9:
            return


def mysql_executed_at(connection: Any, file: str, pos: int) -> str | None:
    """The GTID set a MySQL server had executed at ``file``:``pos`` (``collector.mysql_executed``),
    read through a dump of that file from its start on ``connection``, which is then opened
    anew for the caller's further queries. None when ``pos`` is not a transaction boundary of
    ``file``. Raises pymysql's errors (a purged file: the server's error 1236)."""
    server = ServerVersion.of(connection)
    # A server id of its own: a dump under the collector's id would make the server drop the
    # collector's running dump (one replica per id).
    server_id = (1 << 31) + secrets.randbelow(1 << 31)
    checksum = start_dump(connection, server, server_id, "", file, 4, None)
    trailer = ev.CHECKSUM_LENGTH if checksum else 0
    raw = (
        (ev.read_header(data, 1), data[1 + ev.HEADER_LENGTH : len(data) - trailer])
        for data in _packets(connection)
    )
    try:
        return executed_at(mev.expanded(raw), pos)
    finally:
        # The server keeps streaming the dump: this connection can carry nothing else.
        connection.close()
        connection.connect()
