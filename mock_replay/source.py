"""The MySQL side of a replay: finding the tables, reading chunks, and watching the load.

Every connection sets ``time_zone = '+00:00'`` so TIMESTAMP values arrive in UTC, as the
binlog carries them. Each chunk is one SELECT inside its own consistent-snapshot, read-only
transaction. pymysql errors are translated here into one sentence.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pymysql
import pymysql.converters
import pymysql.cursors
from pymysql.constants import FIELD_TYPE

from cdc_platform import mysql_source
from cdc_platform.load_guard import LoadSample
from cdc_platform.mysql_schema import MissingTableError, read_table_shape
from mock_replay.errors import ReplayError
from mock_replay.plan import TableShape
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.routing import ShardRouter

log = logging.getLogger(__name__)


_TABLES = """
SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0)
FROM information_schema.TABLES
WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA LIKE %s AND TABLE_NAME LIKE %s
  AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
ORDER BY TABLE_SCHEMA, TABLE_NAME
"""


def _text_conversions() -> dict[int | type[Any], Callable[[Any], str] | Callable[[str], Any]]:
    """pymysql's conversions, but DECIMAL and DATE/DATETIME/TIMESTAMP stay the server's text,
    which is the contract's wire form already (``plan.TEXT_IS_WIRE``)."""
    conversions: dict[int | type[Any], Callable[[Any], str] | Callable[[str], Any]] = dict(
        pymysql.converters.conversions
    )
    for field_type in (
        FIELD_TYPE.DECIMAL,
        FIELD_TYPE.NEWDECIMAL,
        FIELD_TYPE.DATE,
        FIELD_TYPE.NEWDATE,
        FIELD_TYPE.DATETIME,
        FIELD_TYPE.TIMESTAMP,
    ):
        conversions[field_type] = str
    return conversions


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching names that start with ``prefix`` literally."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def parse_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:3306
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"the replica {text[:80]!r} is not in the form HOST:PORT.")
    return host, int(port)


class MySQLSource:
    """One connection to the instance (or the replica named for the run)."""

    def __init__(self, instance: mysql_source.SourceAccess, replica: str | None = None) -> None:
        self._instance = instance
        self._replica = replica
        self._host, self._port = (
            parse_host_port(replica) if replica else (instance.host, instance.port)
        )
        self._connection: pymysql.connections.Connection[Any] | None = None

    @property
    def where(self) -> str:
        via = f" (replica {self._host}:{self._port})" if self._replica else ""
        return f"MySQL instance {self._instance.name!r}{via}"

    def _connect(self) -> pymysql.connections.Connection[Any]:
        if self._connection is None:
            try:
                self._connection = mysql_source.connect(
                    self._instance,
                    host=self._host,
                    port=self._port,
                    autocommit=True,
                    # UTC: TIMESTAMPs as the binlog carries them. A batch of server-built rows
                    # may be as long as a packet may be.
                    init_command="SET time_zone = '+00:00', "
                    "group_concat_max_len = @@max_allowed_packet",
                    charset="utf8mb4",
                    conv=_text_conversions(),
                )
            except pymysql.MySQLError as exc:
                raise self._translate(exc, "connecting") from None
        return self._connection

    def _translate(self, exc: pymysql.MySQLError, doing: str) -> CdcMirrorError:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        detail = exc.args[-1] if exc.args else exc
        if code in (1044, 1045):
            return ConfigError(
                f"{self.where} refused user {self._instance.user!r} ({detail}); check the user "
                "and password in the config."
            )
        if isinstance(exc, pymysql.OperationalError) and (code is None or code >= 2000):
            self.close()
            return ServiceUnavailableError(
                f"{self.where} cannot be reached while {doing} ({detail})."
            )
        return ReplayError(f"{self.where} refused the replay's query while {doing} ({detail}).")

    def _query(self, sql: str, params: Sequence[object] = (), doing: str = "reading") -> list[Any]:
        connection = self._connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, tuple(params))
                return list(cursor.fetchall())
        except pymysql.MySQLError as exc:
            raise self._translate(exc, doing) from None

    def discover(self, router: ShardRouter, db_prefix: str, table_prefix: str) -> list[TableShape]:
        """Every physical table of the logical table ``db_prefix``/``table_prefix``, with its
        columns and key. Tables the shard rules map elsewhere are not part of it."""
        found = self._query(
            _TABLES, (like_prefix(db_prefix), like_prefix(table_prefix)), "finding the tables"
        )
        shapes = []
        for schema, table, estimated in found:
            try:
                logical = router.route(str(schema), str(table))
            except ConfigError:
                continue  # no rule maps it: not a shard of any logical table
            if (logical.db_prefix.lower(), logical.table_prefix.lower()) != (
                db_prefix.lower(),
                table_prefix.lower(),
            ):
                continue  # e.g. orderinfo_ext_00 when replaying orderinfo
            shapes.append(self.shape(str(schema), str(table), int(estimated)))
        return shapes

    def shape(self, schema: str, table: str, estimated_rows: int = 0) -> TableShape:
        """The table's columns and key (``cdc_platform.mysql_schema``, the key rule every
        component uses)."""
        connection = self._connect()
        try:
            with connection.cursor() as cursor:
                found = read_table_shape(cursor, schema, table)
        except pymysql.MySQLError as exc:
            raise self._translate(exc, f"reading the shape of {schema}.{table}") from None
        except MissingTableError:
            raise ReplayError(f"table {schema}.{table} does not exist on {self.where}.") from None
        return TableShape(schema, table, found.columns, found.key, estimated_rows)

    def read_chunk(self, sql: str, params: Sequence[object], table: str) -> list[tuple[Any, ...]]:
        """One chunk, read in a consistent snapshot of its own (read-only, so the server
        keeps no undo for it beyond the statement)."""
        connection = self._connect()
        doing = f"reading a chunk of {table}"
        try:
            with connection.cursor(pymysql.cursors.SSCursor) as cursor:
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                cursor.execute(sql, tuple(params))
                rows = list(cursor.fetchall())
            connection.commit()
        except pymysql.MySQLError as exc:
            raise self._translate(exc, doing) from None
        return rows

    def load(self) -> LoadSample:
        rows = self._query("SHOW GLOBAL STATUS LIKE 'Threads_running'", (), "checking the load")
        threads = int(rows[0][1]) if rows else 0
        lag: int | None = None
        if self._replica:
            lag = self.replica_lag()
        return LoadSample(threads, lag)

    def replica_lag(self) -> int:
        connection = self._connect()
        try:
            with connection.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute("SHOW SLAVE STATUS")
                status = cursor.fetchone()
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in (1227, 1142):  # the privilege is missing
                raise ConfigError(
                    f"user {self._instance.user!r} may not read the replication status of "
                    f"{self._host}:{self._port}, which the replay watches for lag; grant it "
                    "SLAVE MONITOR (or REPLICATION CLIENT)."
                ) from None
            raise self._translate(exc, "checking the replica's lag") from None
        if not status:
            raise ReplayError(
                f"{self._host}:{self._port} is not a replica (SHOW SLAVE STATUS is empty); "
                "leave out --replica to read the instance itself."
            )
        lag = status.get("Seconds_Behind_Master")
        return -1 if lag is None else int(lag)

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(pymysql.MySQLError):  # already gone: nothing to release
                self._connection.close()
            self._connection = None
