"""The source side: a logical table's shards on MySQL/MariaDB, hashed in SQL.

Every read is one statement over the UNION ALL of the shards, so nothing but counts, sums,
keys and (for the few differing keys) the rows' canonical texts leaves the server. A chunk's
digest is one statement (one snapshot); ``position`` is the server's binlog position read
after it (MariaDB ``@@gtid_binlog_pos``, MySQL ``@@gtid_executed``), which the snapshot does
not pass.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pymysql

from cdc_platform import mysql_source
from cdc_platform.config import TableMirror
from cdc_platform.load_guard import LoadSample
from cdc_platform.mysql_source import SourceAccess
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.routing import ShardRouter
from simple_binlog.values import ColumnType, Kind
from validation.canonical import MYSQL, ChunkDigest, mysql_chunk_sums, mysql_hash_value
from validation.plan import Chunk, Key
from validation.table import TableShape, read_table_shape

log = logging.getLogger(__name__)

_ALL_ROWS = 2**64 - 1  # MySQL's "no limit"


def key_order(name: str, column: ColumnType) -> str:
    """A key column as MySQL orders it for validation (text: by its UTF-8 bytes)."""
    quoted = MYSQL.quote(name)
    if column.kind is Kind.TEXT:
        return f"CAST(CONVERT({quoted} USING utf8mb4) AS BINARY)"
    return quoted


def key_range(shape: TableShape, chunk: Chunk, order: Any = key_order) -> tuple[str, list[Any]]:
    """``WHERE`` text and parameters of a chunk (row comparison for a composite key)."""
    columns = [order(name, column) for name, column in zip(shape.key, shape.key_types, strict=True)]
    tuple_sql = columns[0] if len(columns) == 1 else f"({', '.join(columns)})"
    marks = "%s" if len(columns) == 1 else f"({', '.join(['%s'] * len(columns))})"
    parts: list[str] = []
    params: list[Any] = []
    if chunk.lo is not None:
        parts.append(f"{tuple_sql} > {marks}")
        params += list(chunk.lo)
    if chunk.hi is not None:
        parts.append(f"{tuple_sql} <= {marks}")
        params += list(chunk.hi)
    return (" AND ".join(parts) or "TRUE"), params


def keys_in(shape: TableShape, keys: Sequence[Key], quote: Any) -> tuple[str, list[Any]]:
    columns = [quote(name) for name in shape.key]
    if len(columns) == 1:
        return f"{columns[0]} IN ({', '.join(['%s'] * len(keys))})", [k[0] for k in keys]
    one = f"({', '.join(['%s'] * len(columns))})"
    params = [value for key in keys for value in key]
    return f"({', '.join(columns)}) IN ({', '.join([one] * len(keys))})", params


class MySqlSide:
    """The source: ``shape``'s shards on one MySQL instance."""

    name = "mysql"

    def __init__(self, instance: SourceAccess, shape: TableShape | None = None) -> None:
        self.shape = shape if shape is not None else TableShape("", (), (), ())
        self.position: str = ""
        self.queries = 0
        self._instance = instance
        try:
            self._conn = mysql_source.connect(
                instance, autocommit=True, read_timeout=600, init_command="SET time_zone = '+00:00'"
            )
            with self._conn.cursor() as cursor:
                cursor.execute("SELECT VERSION()")
                version = str(cursor.fetchone()[0])
        except pymysql.MySQLError as exc:
            raise self._unavailable(exc) from None
        mariadb = "mariadb" in version.lower()
        self._position_sql = "SELECT @@gtid_binlog_pos" if mariadb else "SELECT @@gtid_executed"

    def read_shape(self, router: ShardRouter, mirror: TableMirror) -> TableShape:
        """The table's shape (``read_table_shape``); it becomes this side's."""
        try:
            with self._conn.cursor() as cursor:
                self.shape = read_table_shape(cursor, router, mirror)
        except pymysql.MySQLError as exc:
            raise self._unavailable(exc) from None
        return self.shape

    def _unavailable(self, exc: pymysql.MySQLError) -> ServiceUnavailableError:
        where = (
            f"MySQL instance {self._instance.name!r} at {self._instance.host}:{self._instance.port}"
        )
        return ServiceUnavailableError(f"{where} failed ({exc.args[-1] if exc.args else exc}).")

    def close(self) -> None:
        self._conn.close()

    def current_position(self) -> str:
        """The server's binlog position now (MariaDB ``@@gtid_binlog_pos``, MySQL
        ``@@gtid_executed``)."""
        return str(self._query(self._position_sql)[0][0] or "")

    def load(self) -> LoadSample:
        """The server's load for the load guard (``Threads_running``)."""
        rows = self._query("SHOW GLOBAL STATUS LIKE 'Threads_running'")
        return LoadSample(int(rows[0][1]) if rows else 0)

    def rows_read(self) -> int:
        """The rows and index entries this session has read (its ``Handler_read_*``)."""
        rows = self._query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        return sum(int(value) for _, value in rows)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.queries += 1
        try:
            with self._conn.cursor() as cursor:
                # No parameters: no %-formatting either (LIKE 'Handler_read%').
                cursor.execute(sql, list(params) if params else None)
                return list(cursor.fetchall())
        except pymysql.MySQLError as exc:
            raise self._unavailable(exc) from None

    def _row_hash(self, db: str, table: str) -> str:
        shape = self.shape
        pieces = [MYSQL.piece(n, shape.column_type(n)) for n in shape.compared_columns]
        return MYSQL.row_hash(MYSQL.shard_piece(f"{db}.{table}"), pieces)

    def _union(
        self, select: str, where: str, params: list[Any], tail: str = ""
    ) -> tuple[str, list[Any]]:
        parts, all_params = [], []
        for db, table in self.shape.shards:
            source = f"{MYSQL.quote(db)}.{MYSQL.quote(table)}"
            columns = select.format(hash=self._row_hash(db, table))
            parts.append(f"(SELECT {columns} FROM {source} WHERE {where}{tail})")  # noqa: S608
            all_params += params
        return " UNION ALL ".join(parts), all_params

    def digest(self, chunk: Chunk) -> ChunkDigest:
        where, params = key_range(self.shape, chunk)
        # Each shard summed on its own, each row's md5 read once and nothing materialised
        # (a UNION ALL of the rows' hashes was: that temporary table cost as much as the md5).
        if len(self.shape.shards) == 1:
            sql, all_params = self._union(mysql_chunk_sums("{hash}"), where, params)
        else:
            value = mysql_hash_value("{hash}")
            union, all_params = self._union(f"COUNT(*) AS c, SUM({value}) AS s", where, params)
            sql = f"SELECT SUM(c), SUM(s) FROM ({union}) AS shards_"  # noqa: S608
        # One read: the statement sees one snapshot, at or before the position read after
        # it, and the watermark taken after the window makes the target apply at least that
        # far (a commit on any table moves the position, so reading again until it stood
        # still read busy servers' chunks several times over).
        count, total = self._query(sql, all_params)[0]
        self.position = self.current_position()
        return ChunkDigest.of(count, total)

    def _key_select(self) -> str:
        return ", ".join(MYSQL.quote(n) for n in self.shape.key)

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        wanted = count // 2
        if wanted < 1:
            return None
        shape = self.shape
        where, params = key_range(shape, chunk)
        order = ", ".join(key_order(n, c) for n, c in zip(shape.key, shape.key_types, strict=True))
        if len(shape.shards) == 1:
            # One shard: the key's index read up to the key wanted, no union to materialise.
            db, table = shape.shards[0]
            rows = self._query(
                f"SELECT {self._key_select()} FROM {MYSQL.quote(db)}.{MYSQL.quote(table)} "  # noqa: S608
                f"WHERE {where} ORDER BY {order} LIMIT 1 OFFSET {wanted - 1}",
                params,
            )
            return tuple(rows[0]) if rows else None
        union, all_params = self._union(
            self._key_select(), where, params, f" ORDER BY {order} LIMIT {wanted}"
        )
        rows = self._query(
            f"SELECT * FROM ({union}) AS keys_ ORDER BY {order} LIMIT 1 OFFSET {wanted - 1}",  # noqa: S608
            all_params,
        )
        return tuple(rows[0]) if rows else None

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        where, params = key_range(self.shape, chunk)
        union, all_params = self._union(f"{self._key_select()}, {{hash}}", where, params)
        return self._hashes(union, all_params)

    def _hashes(self, sql: str, params: list[Any]) -> dict[Key, str]:
        width = len(self.shape.key)
        return {tuple(row[:width]): str(row[width]) for row in self._query(sql, params)}

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        if not keys:
            return {}
        where, params = keys_in(self.shape, keys, MYSQL.quote)
        union, all_params = self._union(f"{self._key_select()}, {{hash}}", where, params)
        return self._hashes(union, all_params)

    def rows(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        """The canonical text of every compared column of ``keys``, and ``_shard``."""
        if not keys:
            return {}
        shape = self.shape
        names = shape.compared_columns
        where, params = keys_in(shape, keys, MYSQL.quote)
        found: dict[Key, dict[str, Any]] = {}
        for db, table in shape.shards:
            texts = ", ".join(MYSQL.shown(n, shape.column_type(n)) for n in names)
            sql = (
                f"SELECT {self._key_select()}, {texts} FROM {MYSQL.quote(db)}.{MYSQL.quote(table)} "  # noqa: S608
                f"WHERE {where}"
            )
            width = len(shape.key)
            for row in self._query(sql, params):
                found[tuple(row[:width])] = {
                    "_shard": f"{db}.{table}",
                    **dict(zip(names, row[width:], strict=True)),
                }
        return found
