"""A STAND-IN for a MySQL replication source, for tests only: not a MySQL server.

No MySQL server can be installed where these tests run, so the collector's MySQL network path
(handshake, the queries it sends at connect, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID /
COM_BINLOG_DUMP, heartbeats) is exercised against this: a small threaded socket server that
speaks just enough of the client/server protocol (handshake v10 with mysql_native_password,
classic result sets) and serves the events of one recorded binlog file
(../shared/fixtures/mysql-binlogs/) as a dump stream, as a MySQL source would:

- a fake ROTATE, the file's FORMAT_DESCRIPTION and PREVIOUS_GTIDS, then its events (checksums
  as recorded; the replica must have asked for them with ``SET @master_binlog_checksum``);
- COM_BINLOG_DUMP_GTID: transactions whose GTID is in the replica's set are left out (a
  heartbeat then says how far the source skipped, as MySQL's Binlog_sender does), and a set
  that lacks part of the file's PREVIOUS_GTIDS is refused with error 1236 (purged);
- COM_BINLOG_DUMP: from the byte position asked for;
- at the end of the file, a HEARTBEAT (or HEARTBEAT_V2 when the dump flags ask for it) every
  ``@master_heartbeat_period``, or EOF with BINLOG_DUMP_NON_BLOCK;
- information_schema.COLUMNS answered from the file's table maps (names ``@1``… where the map
  has none, the table map's type spelling); STATISTICS empty.

What it does not do: TLS, caching_sha2_password, prepared statements, several binlog files,
binlogs growing while served. ``dumps`` records each dump request, for tests to check.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import socketserver
import struct
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import binlog_events as ev
from collector import mysql_dump, mysql_gtid
from collector import mysql_events as mev
from collector.binlog_types import column_type

_CAPABILITIES = (
    0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000 | 0x100000 | 0x200000
)
_VAR_STRING = 0xFD
_ARTIFICIAL = 0x20


@dataclass
class RecordedEvent:
    offset: int
    raw: bytes  # header, body and checksum as in the file
    header: ev.EventHeader


@dataclass
class Recording:
    """One binlog file's events, and what a server that wrote it would say about itself."""

    name: str
    events: list[RecordedEvent]
    version: str
    checksum: bool
    previous: mysql_gtid.GtidSet
    executed: mysql_gtid.GtidSet
    tables: dict[tuple[str, str], list[tuple[str, str]]]  # (schema, table) → (name, type)

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = path.read_bytes()
        events, offset = [], 4
        while offset + ev.HEADER_LENGTH <= len(data):
            header = ev.read_header(data, offset)
            events.append(RecordedEvent(offset, data[offset : offset + header.size], header))
            offset += header.size
        fde = mev.format_description(events[0].raw[ev.HEADER_LENGTH :])
        trailer = 4 if fde.checksum else 0
        previous = mysql_gtid.GtidSet()
        executed = mysql_gtid.GtidSet()
        tables: dict[tuple[str, str], list[tuple[str, str]]] = {}
        bodies = ((e.header, e.raw[ev.HEADER_LENGTH : len(e.raw) - trailer]) for e in events)
        for header, body in mev.expanded(bodies):  # table maps inside compressed transactions
            if header.type == mev.PREVIOUS_GTIDS:
                previous = mysql_gtid.decode(body)
                executed = mysql_gtid.GtidSet.parse(str(previous))
            elif header.type in (mev.GTID, mev.GTID_TAGGED):
                executed = executed.add(mysql_gtid.Gtid.parse(mev.gtid_text(header.type, body)))
            elif header.type == ev.TABLE_MAP:
                table_map = ev.table_map_event(body)
                tables[(table_map.schema, table_map.table)] = [
                    (column.name or f"@{column.index + 1}", column_type(column))
                    for column in table_map.columns
                ]
        return cls(path.name, events, fde.server_version, fde.checksum, previous, executed, tables)

    @property
    def end(self) -> int:
        last = self.events[-1]
        return last.offset + last.header.size

    def gtid_of(self, event: RecordedEvent) -> mysql_gtid.Gtid | None:
        if event.header.type not in (mev.GTID, mev.GTID_TAGGED):
            return None
        body = event.raw[ev.HEADER_LENGTH : len(event.raw) - (4 if self.checksum else 0)]
        return mysql_gtid.Gtid.parse(mev.gtid_text(event.header.type, body))


@dataclass
class DumpRequest:
    command: int
    flags: int
    server_id: int
    gtids: str | None = None  # COM_BINLOG_DUMP_GTID
    file: str | None = None  # COM_BINLOG_DUMP
    pos: int = 0
    heartbeat_ns: int = 0


@dataclass
class StandinOptions:
    user: str = "cdc"
    password: str = "standin-secret"
    server_id: int = 1
    # Close the first dump's connection after sending this many events (a dropped network).
    drop_after_events: int | None = None
    variables: dict[str, str] = field(default_factory=dict)


class MySQLStandin:
    """Serves ``recording`` on 127.0.0.1 (``port``) until ``close``."""

    def __init__(self, recording: Recording, options: StandinOptions | None = None) -> None:
        self.recording = recording
        self.options = options or StandinOptions()
        self.dumps: list[DumpRequest] = []
        self.heartbeats_sent = 0
        self.stopping = threading.Event()
        standin = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                _Session(standin, self.request).run()

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def variables(self) -> dict[str, str]:
        recording = self.recording
        values = {
            "version": recording.version,
            "server_id": str(self.options.server_id),
            "log_bin": "ON",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_checksum": "CRC32" if recording.checksum else "NONE",
            "gtid_mode": "ON" if str(recording.executed) else "OFF",
            "enforce_gtid_consistency": "ON" if str(recording.executed) else "OFF",
            "gtid_executed": str(recording.executed),
            "gtid_purged": str(recording.previous),
            "server_uuid": "00000000-0000-0000-0000-000000000001",
        }
        values.update(self.options.variables)
        return values

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MySQLStandin:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class _Closed(Exception):
    pass


class _Session:
    """One client connection."""

    def __init__(self, standin: MySQLStandin, sock: socket.socket) -> None:
        self._standin = standin
        self._sock = sock
        self._seq = 0
        self._user_vars: dict[str, str] = {}
        self._dumps_before = len(standin.dumps)

    # -- packets -------------------------------------------------------------------------------
    def _read_exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                raise _Closed
            data += chunk
        return data

    def _read(self) -> bytes:
        header = self._read_exact(4)
        self._seq = header[3] + 1
        return self._read_exact(int.from_bytes(header[:3], "little"))

    def _send(self, payload: bytes) -> None:
        self._sock.sendall(len(payload).to_bytes(3, "little") + bytes([self._seq & 0xFF]) + payload)
        self._seq += 1

    def _ok(self) -> None:
        self._send(b"\x00\x00\x00\x02\x00\x00\x00")

    def _error(self, code: int, message: str, state: str = "HY000") -> None:
        self._send(b"\xff" + struct.pack("<H", code) + b"#" + state.encode() + message.encode())

    def _eof(self) -> None:
        self._send(b"\xfe\x00\x00\x02\x00")

    def _result(self, columns: list[str], rows: list[tuple[str | None, ...]]) -> None:
        self._send(_lenenc(len(columns)))
        for name in columns:
            self._send(
                _lenenc_text("def")
                + _lenenc_text("")
                + _lenenc_text("")
                + _lenenc_text("")
                + _lenenc_text(name)
                + _lenenc_text(name)
                + b"\x0c"
                + struct.pack("<HIBHB", 255, 1024, _VAR_STRING, 0, 0)
                + b"\x00\x00"
            )
        self._eof()
        for row in rows:
            self._send(b"".join(b"\xfb" if v is None else _lenenc_text(v) for v in row))
        self._eof()

    # -- the conversation ------------------------------------------------------------------------
    def run(self) -> None:
        try:
            if not self._handshake():
                return
            while not self._standin.stopping.is_set():
                packet = self._read()
                self._seq = 1
                command, payload = packet[0], packet[1:]
                if command == 0x01:  # COM_QUIT
                    return
                if command == 0x03:
                    self._query(payload.decode("utf-8"))
                elif command == 0x0E or command == mysql_dump.COM_REGISTER_SLAVE:  # COM_PING
                    self._ok()
                elif command in (mysql_dump.COM_BINLOG_DUMP_GTID, mysql_dump.COM_BINLOG_DUMP):
                    self._dump(command, payload)
                    return
                else:
                    self._error(1047, f"the stand-in does not know command {command}", "08S01")
        except (_Closed, OSError):
            return
        finally:
            self._sock.close()

    def _handshake(self) -> bool:
        scramble = os.urandom(20).replace(b"\x00", b"\x01")
        options = self._standin.options
        greeting = (
            b"\x0a"
            + self._standin.recording.version.encode()
            + b"-standin\x00"
            + struct.pack("<I", threading.get_ident() & 0xFFFFFFFF)
            + scramble[:8]
            + b"\x00"
            + struct.pack("<H", _CAPABILITIES & 0xFFFF)
            + bytes([255])
            + struct.pack("<H", 2)
            + struct.pack("<H", _CAPABILITIES >> 16)
            + bytes([21])
            + b"\x00" * 10
            + scramble[8:]
            + b"\x00"
            + b"mysql_native_password\x00"
        )
        self._seq = 0
        self._send(greeting)
        response = self._read()
        user, auth = _handshake_response(response)
        if user != options.user or auth != _native_password(options.password, scramble):
            self._error(1045, f"Access denied for user '{user}'@'localhost'", "28000")
            return False
        self._ok()
        return True

    def _query(self, sql: str) -> None:
        text = " ".join(sql.split())
        lower = text.lower()
        variables = self._standin.variables()
        if lower.startswith("set "):
            for name, value in re.findall(r"@(\w+)\s*=\s*([^,]+)", text):
                self._user_vars[name.lower()] = value.strip().strip("'")
            self._ok()
        elif lower in ("show binary log status", "show master status"):
            modern = mysql_dump.ServerVersion.parse(variables["version"]).status_query.lower()
            if lower != modern and mev.version_tuple(variables["version"]) >= (8, 4, 0):
                self._error(1064, "You have an error in your SQL syntax", "42000")
                return
            recording = self._standin.recording
            self._result(
                ["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"],
                [(recording.name, str(recording.end), "", "", variables["gtid_executed"])],
            )
        elif lower == "show binary logs":
            recording = self._standin.recording
            self._result(
                ["Log_name", "File_size", "Encrypted"], [(recording.name, str(recording.end), "No")]
            )
        elif lower.startswith("show global variables"):
            wanted = re.findall(r"'([^']+)'", text)
            rows = [(n, variables[n.lower()]) for n in wanted if n.lower() in variables]
            self._result(["Variable_name", "Value"], rows)
        elif lower == "show grants":
            user = self._standin.options.user
            line = f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `{user}`@`%`"
            self._result([f"Grants for {user}@%"], [(line,)])
        elif lower in ("show replicas", "show slave hosts"):
            self._result(["Server_Id", "Host", "Port", "Source_Id", "Replica_UUID"], [])
        elif "information_schema.columns" in lower:
            found = re.search(r"table_schema = '([^']*)' and table_name = '([^']*)'", lower)
            columns = self._standin.recording.tables.get(found.groups()) if found else None
            self._result(["COLUMN_NAME", "COLUMN_TYPE"], list(columns or []))
        elif "information_schema.statistics" in lower:
            self._result(["INDEX_NAME", "COLUMN_NAME", "NON_UNIQUE", "NULLABLE"], [])
        elif lower.startswith("select "):
            self._select(text[len("select ") :], variables)
        else:
            self._error(1064, f"the stand-in does not answer: {text[:60]}", "42000")

    def _select(self, items: str, variables: dict[str, str]) -> None:
        names, values = [], []
        for item in (part.strip() for part in items.split(",")):
            name = re.sub(r"^@@(global\.|session\.)?", "", item.lower())
            if name in ("version()",):
                value: str | None = variables["version"]
            elif name == "current_user()":
                value = f"{self._standin.options.user}@%"
            elif name == "current_role()":
                value = "NONE"
            elif item.startswith("@@") and name in variables:
                value = variables[name]
            else:
                self._error(1193, f"Unknown system variable '{name}'")
                return
            names.append(item)
            values.append(value)
        self._result(names, [tuple(values)])

    # -- the dump --------------------------------------------------------------------------------
    def _dump(self, command: int, payload: bytes) -> None:
        standin = self._standin
        recording = standin.recording
        heartbeat_ns = int(self._user_vars.get("master_heartbeat_period", "0") or 0)
        if command == mysql_dump.COM_BINLOG_DUMP_GTID:
            flags, server_id, gtids = mysql_dump.parse_gtid_dump(payload)
            request = DumpRequest(command, flags, server_id, gtids=str(gtids))
        else:
            flags, server_id, file, pos = mysql_dump.parse_file_dump(payload)
            request = DumpRequest(command, flags, server_id, file=file, pos=pos)
            gtids = None
        request.heartbeat_ns = heartbeat_ns
        first = not standin.dumps
        standin.dumps.append(request)
        if recording.checksum and "master_binlog_checksum" not in self._user_vars:
            self._error(
                1236,
                "Replica can not handle replication events with the checksum "
                "that source is configured to log",
            )
            return
        if gtids is not None and not recording.previous.issubset(gtids):
            self._error(1236, "Cannot replicate because the source purged required binary logs.")
            return
        start = 4 if gtids is not None else request.pos
        if request.file not in (None, "", recording.name):
            self._error(1236, "Could not find first log file name in binary log index file")
            return
        stream = _DumpStream(self, recording, flags, heartbeat_ns)
        drop = standin.options.drop_after_events if first else None
        stream.run(start, gtids, drop)

    def send_event(self, raw: bytes) -> None:
        self._send(b"\x00" + raw)


class _DumpStream:
    def __init__(
        self, session: _Session, recording: Recording, flags: int, heartbeat_ns: int
    ) -> None:
        self._session = session
        self._recording = recording
        self._flags = flags
        self._heartbeat_s = heartbeat_ns / 1e9

    def _event(self, kind: int, body: bytes, log_pos: int, flags: int = 0) -> bytes:
        size = ev.HEADER_LENGTH + len(body) + (4 if self._recording.checksum else 0)
        server_id = self._session._standin.options.server_id
        raw = struct.pack("<IBIIIH", 0, kind, server_id, size, log_pos, flags) + body
        if self._recording.checksum:
            raw += struct.pack("<I", zlib.crc32(raw))
        return raw

    def _heartbeat(self, log_pos: int) -> bytes:
        name = self._recording.name.encode()
        if self._flags & mysql_dump.USE_HEARTBEAT_EVENT_V2:
            position = _lenenc(log_pos)
            body = (
                b"\x00"
                + bytes([len(name)])
                + name
                + b"\x01"
                + bytes([len(position)])
                + position
                + b"\x02"
            )
            return self._event(mev.HEARTBEAT_V2, body, 0, _ARTIFICIAL)
        return self._event(ev.HEARTBEAT, name, log_pos, _ARTIFICIAL)

    def run(self, start: int, gtids: mysql_gtid.GtidSet | None, drop_after: int | None) -> None:
        session, recording = self._session, self._recording
        rotate = struct.pack("<Q", start) + recording.name.encode()
        session.send_event(self._event(ev.ROTATE, rotate, 0, _ARTIFICIAL))
        sent, skipping, skipped_to = 0, False, 0
        for event in recording.events:
            kind = event.header.type
            if kind == ev.FORMAT_DESCRIPTION:
                session.send_event(event.raw)
                continue
            if event.offset < start:
                continue
            gtid = recording.gtid_of(event)
            if gtid is not None or kind == mev.ANONYMOUS_GTID:
                skipping = gtids is not None and gtid is not None and gtid in gtids
            if skipping and kind not in (mev.PREVIOUS_GTIDS, ev.ROTATE):
                skipped_to = event.offset + event.header.size
                continue
            if skipped_to:
                session.send_event(self._heartbeat(skipped_to))
                skipped_to = 0
            session.send_event(event.raw)
            sent += 1
            if drop_after is not None and sent >= drop_after:
                session._sock.shutdown(socket.SHUT_RDWR)
                return
        if skipped_to:
            session.send_event(self._heartbeat(skipped_to))
        if self._flags & 0x01:  # BINLOG_DUMP_NON_BLOCK
            session._eof()
            return
        self._idle(recording.end)

    def _idle(self, log_pos: int) -> None:
        """The binlog is read: a heartbeat every period while the replica stays."""
        standin = self._session._standin
        period = self._heartbeat_s or 30.0
        while not standin.stopping.wait(period):
            self._session.send_event(self._heartbeat(log_pos))
            standin.heartbeats_sent += 1


def _lenenc(value: int) -> bytes:
    if value < 251:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + struct.pack("<H", value)
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + struct.pack("<Q", value)


def _lenenc_text(text: str) -> bytes:
    data = text.encode("utf-8")
    return _lenenc(len(data)) + data


def _handshake_response(packet: bytes) -> tuple[str, bytes]:
    """(user, auth response) of a HandshakeResponse41."""
    capabilities = struct.unpack_from("<I", packet, 0)[0]
    offset = 32
    end = packet.index(b"\x00", offset)
    user = packet[offset:end].decode()
    offset = end + 1
    if capabilities & 0x200000:  # CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        length = packet[offset]
        offset += 1
    else:
        length = packet[offset]
        offset += 1
    return user, packet[offset : offset + length]


def _native_password(password: str, scramble: bytes) -> bytes:
    """mysql_native_password: SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password)))."""
    stage1 = hashlib.sha1(password.encode()).digest()
    stage2 = hashlib.sha1(stage1).digest()
    mixed = hashlib.sha1(scramble + stage2).digest()
    return bytes(a ^ b for a, b in zip(stage1, mixed, strict=True))
