"""Which server a source is, and MySQL's side of the replication protocol: the dump commands.

The flavour and version come from the server version of the connection's handshake (what
``SELECT VERSION()`` returns): MariaDB names itself (``10.11.6-MariaDB``, or behind the
``5.5.5-`` prefix MariaDB 10 sends older clients), anything else is MySQL.

MariaDB's dump is opened by python-mysql-replication (``collector.binlog_stream``). MySQL's is
opened here, because the library's COM_BINLOG_DUMP_GTID encodes GTID sets without tags (a
MySQL 8.4 server with tagged GTIDs would then resend, or refuse, what was already read),
and it has no position-based start once a GTID set is known. Layouts: MySQL
``sql/rpl_source.cc`` (``com_binlog_dump``, ``com_binlog_dump_gtid``), the GTID set's binary
form in ``collector.mysql_gtid``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Literal

from collector import mysql_gtid

COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
# COM_BINLOG_DUMP_GTID's flags: the GTID set follows (every server reads it anyway); on MySQL
# 8.0.26+ the replica asks for HEARTBEAT_V2 events (8-byte positions) with bit 1.
BINLOG_THROUGH_GTID, USE_HEARTBEAT_EVENT_V2 = 0x04, 0x02
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """A source server's flavour and version, as its handshake says."""

    flavour: Literal["mariadb", "mysql"]
    version: tuple[int, int, int]
    text: str

    @classmethod
    def parse(cls, text: str) -> ServerVersion:
        mariadb = "mariadb" in text.lower()
        if mariadb and text.startswith("5.5.5-"):
            text = text[len("5.5.5-") :]
        match = _VERSION.match(text)
        version = tuple(int(part) for part in match.groups()) if match else (0, 0, 0)
        return cls("mariadb" if mariadb else "mysql", version, text)  # type: ignore[arg-type]

    @classmethod
    def of(cls, connection: Any) -> ServerVersion:
        """The server at the other end of a pymysql connection."""
        return cls.parse(str(connection.get_server_info()))

    @property
    def is_mysql(self) -> bool:
        return self.flavour == "mysql"

    @property
    def status_query(self) -> str:
        """MySQL 8.2 renamed SHOW MASTER STATUS, and 8.4 removed the old name."""
        if self.is_mysql and self.version >= (8, 2, 0):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    @property
    def heartbeat_v2(self) -> bool:
        return self.is_mysql and self.version >= (8, 0, 26)

    def __str__(self) -> str:
        return f"{'MariaDB' if self.flavour == 'mariadb' else 'MySQL'} {self.text}"


def gtid_dump(server_id: int, gtids: mysql_gtid.GtidSet, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP_GTID's payload after the command byte: every transaction not in
    ``gtids``, from the oldest binlog that holds one."""
    encoded = mysql_gtid.encode(gtids)
    return (
        struct.pack("<HII", flags | BINLOG_THROUGH_GTID, server_id, 0)
        + struct.pack("<Q", 4)
        + struct.pack("<I", len(encoded))
        + encoded
    )


def file_dump(server_id: int, file: str, pos: int, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP's payload after the command byte: the events of ``file`` from byte
    ``pos`` on, and of the files after it."""
    return struct.pack("<IHI", pos, flags, server_id) + file.encode()


def register_replica(server_id: int) -> bytes:
    """COM_REGISTER_SLAVE's payload: no host, user, password or port reported."""
    return struct.pack("<IBBBHII", server_id, 0, 0, 0, 0, 0, 0)


def parse_gtid_dump(payload: bytes) -> tuple[int, int, mysql_gtid.GtidSet]:
    """(flags, server id, GTID set) of a COM_BINLOG_DUMP_GTID payload (after the command)."""
    flags, server_id, name_size = struct.unpack_from("<HII", payload, 0)
    offset = 10 + name_size + 8
    (size,) = struct.unpack_from("<I", payload, offset)
    return flags, server_id, mysql_gtid.decode(payload[offset + 4 : offset + 4 + size])


def parse_file_dump(payload: bytes) -> tuple[int, int, str, int]:
    """(flags, server id, file, position) of a COM_BINLOG_DUMP payload (after the command)."""
    pos, flags, server_id = struct.unpack_from("<IHI", payload, 0)
    return flags, server_id, payload[10:].decode(), pos


def start_dump(
    connection: Any,
    server: ServerVersion,
    server_id: int,
    gtid: str,
    file: str,
    pos: int,
    heartbeat_s: float | None,
) -> bool:
    """Ask a MySQL server for its binlog on ``connection``: after the GTID set ``gtid``, or,
    without one (``gtid_mode`` OFF), from ``file`` at ``pos``; an empty position reads from
    the oldest binlog. Returns whether events end with a CRC32. Raises pymysql's errors."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@global.binlog_checksum")
        row = cursor.fetchone()
        checksum = row is not None and str(row[0]).upper() != "NONE"
        if checksum:
            cursor.execute("SET @source_binlog_checksum = @@global.binlog_checksum")
            cursor.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
        if heartbeat_s:
            # Nanoseconds; the server sends a heartbeat after this long without events.
            cursor.execute("SET @master_heartbeat_period = %s", (int(heartbeat_s * 1e9),))
    connection._execute_command(COM_REGISTER_SLAVE, register_replica(server_id))
    connection._read_packet()  # OK, or pymysql raises the server's error
    flags = USE_HEARTBEAT_EVENT_V2 if server.heartbeat_v2 else 0
    if gtid or not file:
        command, payload = (
            COM_BINLOG_DUMP_GTID,
            gtid_dump(server_id, mysql_gtid.GtidSet.parse(gtid), flags),
        )
    else:
        command, payload = COM_BINLOG_DUMP, file_dump(server_id, file, max(pos, 4), flags)
    connection._execute_command(command, payload)
    return checksum


@dataclass(frozen=True, slots=True)
class BinlogStatus:
    file: str
    pos: int
    gtid: str


def binary_log_status(cursor: Any, server: ServerVersion) -> BinlogStatus | None:
    """Where a MySQL server's binlog stands: file, position and ``gtid_executed`` (empty with
    ``gtid_mode`` OFF). None when it has no binary log."""
    cursor.execute(server.status_query)
    row = cursor.fetchone()
    if row is None:
        return None
    cursor.execute("SELECT @@global.gtid_executed")
    executed = cursor.fetchone()
    text = str(executed[0]) if executed and executed[0] else ""
    gtid = str(mysql_gtid.GtidSet.parse(text)) if text else ""
    return BinlogStatus(str(row[0]), int(row[1]), gtid)
