"""A MariaDB binlog dump as raw events: (header, body) pairs, with the reader's position.

python-mysql-replication opens the connection and speaks the replication protocol (checksum
negotiation, heartbeat period, replica registration, the GTID dump command); from there on
this module reads the packets itself and hands out the event bytes, which
``collector.binlog_events`` and ``collector.row_decoder`` decode (see there for why).
The library is pinned (pyproject.toml): the two private members used here are its stream
connection and its checksum flag.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pymysql

from collector import binlog_events as ev
from simple_binlog.config import MySQLInstance


class BinlogStream:
    """Events after a GTID position, blocking for new ones; heartbeats while idle."""

    def __init__(
        self,
        instance: MySQLInstance,
        server_id: int,
        gtid: str,
        heartbeat_s: float | None = None,
    ) -> None:
        from pymysqlreplication import BinLogStreamReader  # noqa: PLC0415

        self._library = BinLogStreamReader(
            connection_settings={
                "host": instance.host,
                "port": instance.port,
                "user": instance.user,
                "password": instance.password.get_secret_value(),
                "connect_timeout": 10,
            },
            server_id=server_id,
            auto_position=gtid,
            # Blocking: MariaDB resets a non-blocking GTID dump part-way through an active
            # binlog (seen on 10.11); bounded readers stop at a known position themselves.
            blocking=True,
            slave_heartbeat=heartbeat_s,
            is_mariadb=True,
            enable_logging=False,  # its parameter dump (INFO) is noise in our logs
        )
        # The server sends a heartbeat every ``heartbeat_s`` while idle: silence for much
        # longer means it is gone without closing the connection (a dead host, a cut
        # network); the read then fails and the caller reconnects.
        self._silence_limit = heartbeat_s * 5 + 5 if heartbeat_s else None
        self.log_file = ""
        self.log_pos = 0

    def __iter__(self) -> Iterator[tuple[ev.EventHeader, bytes]]:
        library: Any = self._library
        library._BinLogStreamReader__connect_to_stream()
        if self._silence_limit is not None:
            library._stream_connection._sock.settimeout(self._silence_limit)
        trailer = ev.CHECKSUM_LENGTH if library._BinLogStreamReader__use_checksum else 0
        for data in _packets(library._stream_connection):
            header = ev.read_header(data, 1)
            body = data[1 + ev.HEADER_LENGTH : len(data) - trailer]
            if header.type == ev.ROTATE:
                self.log_file, self.log_pos = ev.rotate_event(body)
            elif header.log_pos and header.type != ev.HEARTBEAT:
                self.log_pos = header.log_pos
            yield header, body

    def close(self) -> None:
        """Safe from another thread: a shutdown wakes a reader blocked on the socket."""
        connection = getattr(self._library, "_stream_connection", None)
        sock = getattr(connection, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._library.close()


_MAX_PACKET = 0xFFFFFF
_LOST = 2013  # CR_SERVER_LOST


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
