"""Reading a bounded range of a MariaDB/MySQL row binlog as SimpleBinlog messages.

The range starts after a GTID position (what MariaDB's binlog dump understands; it ignores a
file + position sent by python-mysql-replication) and ends at a known (file, position) that
the server has already written: python-mysql-replication does not stop at the end of the
binlog by itself, so the reader stops there. Every event is read, not only rows events,
because the end position usually falls on a commit event.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql

from cdc_platform import mysql_source
from cdc_platform.config import MySQLInstance
from collector import binlog_events as ev
from collector.binlog_stream import BinlogStream, mysql_executed_at
from collector.decoding import EventContext, TableSchema, build_messages
from collector.mysql_dump import ServerVersion, binary_log_status
from collector.row_decoder import TableDecoders
from collector.schema import BinlogTableSchemas, load_table_schema
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from simple_binlog.message import EventType, SimpleBinlog
from simple_binlog.offsets import OffsetGenerator

log = logging.getLogger(__name__)

_ONE_OFF_SERVER_IDS = random.Random()  # noqa: S311 - ids for one-off reads, not secrets


@dataclass(frozen=True, slots=True, order=True)
class ServerPosition:
    """Where the server's binlog stands: file and position, and the GTID position."""

    file: str
    pos: int
    gtid: str


def connect(instance: MySQLInstance, **options: Any) -> pymysql.connections.Connection:
    try:
        return mysql_source.connect(instance, **options)
    except pymysql.MySQLError as exc:
        if exc.args and exc.args[0] in (1044, 1045):
            raise ConfigError(
                f"MySQL instance {instance.name!r} refused user {instance.user!r} "
                f"({exc.args[-1]}); check the user and password in the config."
            ) from None
        raise ServiceUnavailableError(
            f"MySQL instance {instance.name!r} at {instance.host}:{instance.port} cannot be "
            f"reached ({exc.args[-1]})."
        ) from None


def server_position(cursor: Any) -> ServerPosition:
    """The server's binlog file and position, and its GTID position of exactly that file and
    position (empty for a MySQL server with ``gtid_mode`` OFF).

    On MySQL the set is computed from the file's own events (``collector.mysql_executed``):
    ``gtid_executed`` is read at another moment than the position, as on MariaDB below.

    On MariaDB the GTID position is ``BINLOG_GTID_POS(file, pos)``, not ``@@gtid_binlog_pos``:
    read in a statement of its own, the variable can already include a transaction committed
    after ``SHOW MASTER STATUS``, past (file, pos). A reader that stops at (file, pos) and then
    resumes after that GTID position (``read_range``) would skip the transaction for good."""
    server = ServerVersion.of(cursor.connection)
    if server.is_mysql:
        status = binary_log_status(cursor, server)
        if status is None:
            raise ServiceUnavailableError("the MySQL server has no binary log enabled (log_bin).")
        if not status.gtid:  # gtid_mode OFF: read by file and position alone
            return ServerPosition(status.file, status.pos, "")
        executed = mysql_executed_at(cursor.connection, status.file, status.pos)
        if executed is None:
            raise ServiceUnavailableError(
                f"the MySQL server's binlog end {status.file}:{status.pos} is not a transaction "
                "boundary of that file as its dump shows it."
            )
        return ServerPosition(status.file, status.pos, executed)
    for _attempt in range(3):
        cursor.execute("SHOW MASTER STATUS")
        row = cursor.fetchone()
        if row is None:
            raise ServiceUnavailableError("the MySQL server has no binary log enabled (log_bin).")
        file, pos = str(row[0]), int(row[1])
        cursor.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        gtid = cursor.fetchone()[0]
        # NULL only if the file went away in between (purged right after a rotation): again.
        if gtid is not None:
            return ServerPosition(file, pos, str(gtid))
    raise ServiceUnavailableError(
        f"the MariaDB server did not translate its binlog end {file}:{pos} to a GTID position "
        "(BINLOG_GTID_POS returned NULL three times)."
    )


def _events(
    stream: BinlogStream, instance: MySQLInstance
) -> Iterator[tuple[ev.EventHeader, bytes]]:
    try:
        yield from stream
    except pymysql.MySQLError as exc:
        raise ServiceUnavailableError(
            f"the binlog stream of MySQL instance {instance.name!r} broke ({exc.args[-1]})."
        ) from None


class SchemaCache:
    """Table schemas read from information_schema once per table.

    Known limit: a DDL between the event and the lookup would show the newer schema; the
    collector's schema tracking handles DDL in the middle of the stream.
    """

    def __init__(self, instance: MySQLInstance) -> None:
        self._instance = instance
        self._schemas: dict[tuple[str, str], TableSchema] = {}

    def clear(self) -> None:
        self._schemas.clear()

    def get(self, schema: str, table: str) -> TableSchema:
        key = (schema, table)
        if key not in self._schemas:
            with connect(self._instance) as connection, connection.cursor() as cursor:
                self._schemas[key] = load_table_schema(cursor, schema, table)
        return self._schemas[key]


def read_range(
    instance: MySQLInstance,
    start_gtid: str,
    stop: ServerPosition,
    offsets: OffsetGenerator,
    only_schemas: list[str] | None = None,
    schemas: SchemaCache | None = None,
    native: bool = True,
) -> Iterator[SimpleBinlog]:
    """Every row change after ``start_gtid`` up to ``stop``, in binlog order, decoded like
    the collector decodes (``collector.row_decoder``; ``native=False``: its Python reference).

    Uses a replica server id of its own (the server drops an older connection with the same
    id), so a bounded read never disturbs a running collector.
    """
    lookup = schemas or SchemaCache(instance)
    decoders = TableDecoders(
        BinlogTableSchemas(lookup.get),
        lambda schema, _table: only_schemas is None or schema in only_schemas,
        native=native,
    )
    stream = BinlogStream(
        instance, _ONE_OFF_SERVER_IDS.randrange(2_000_000_000, 2_100_000_000), start_gtid
    )
    gtid: str | None = None
    try:
        for header, body in _events(stream, instance):
            here = (stream.log_file, stream.log_pos)
            if here > (stop.file, stop.pos):
                break
            if header.type == ev.MARIADB_GTID:
                gtid = ev.mariadb_gtid(body, header.server_id)
            elif header.type == ev.TABLE_MAP:
                decoders.on_table_map(body)
            elif header.type in ev.ROWS_EVENTS:
                decoder = decoders.for_rows(body)
                if decoder is not None:
                    context = EventContext(
                        header.server_id, stream.log_file, stream.log_pos, header.timestamp, gtid
                    )
                    event_type = EventType(ev.ROWS_EVENTS[header.type])
                    images = decoder.rows(body, header.type)
                    yield from build_messages(
                        event_type, images, decoder.schema, context, offsets, native=native
                    )
            if here >= (stop.file, stop.pos):
                break
    finally:
        stream.close()
