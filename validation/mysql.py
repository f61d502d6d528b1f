"""The source side: a logical table's shards on MySQL/MariaDB, hashed in SQL.

Every read is one statement over the UNION ALL of the shards, so nothing but counts, sums,
keys and (for the few differing keys) the rows' canonical texts leaves the server. A chunk's
digest is read on ``connections`` connections at once: the chunk is cut at middle keys into
that many parts (index reads of keys only; each part at least ``MIN_PART_ROWS``), each part
one statement (one snapshot) on its own connection, and the parts' counts and sums added
(disjoint parts' sums add up to the chunk's digest exactly), so a chunk's hashing uses as
many of the server's cores; ``position`` is the server's binlog position read after all of
them (MariaDB ``@@gtid_binlog_pos``, MySQL ``@@gtid_executed``), which no part's snapshot
passes.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
# A chunk is not cut into parts smaller than this: a cut costs an index read of the keys
# before it, and a small part's statement is mostly its round trip.
MIN_PART_ROWS = 1_000


def part_offsets(rows: int, connections: int, min_part_rows: int = MIN_PART_ROWS) -> list[int]:
    """Where a chunk of ``rows`` rows is cut for ``connections`` parts of about equal rows,
    as row counts after the chunk's start (pure): none when it is one part (one connection,
    or too few rows for two parts of ``min_part_rows``)."""
    parts = min(connections, rows // max(1, min_part_rows))
    if parts < 2:
        return []
    return [rows * number // parts for number in range(1, parts)]


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

    def __init__(
        self, instance: SourceAccess, shape: TableShape | None = None, connections: int = 1
    ) -> None:
        self.shape = shape if shape is not None else TableShape("", (), (), ())
        self.position: str = ""
        self._own_queries = 0
        self._instance = instance
        self._connections = max(1, connections)
        # The other connections' sides (opened at the first chunk cut into parts), each
        # hashing one part at a time in the pool's threads.
        self._helpers: list[MySqlSide] = []
        self._pool: ThreadPoolExecutor | None = None
        # The chunk middle_key cut last, (lo, hi, rows): digest knows its rows when asked next.
        self._last_cut: tuple[Key | None, Key | None, int] = (None, None, 0)
        try:
            self._conn = self._connect()
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

    def _connect(self) -> pymysql.connections.Connection[Any]:
        return mysql_source.connect(
            self._instance,
            autocommit=True,
            read_timeout=600,
            init_command="SET time_zone = '+00:00'",
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for helper in self._helpers:
            helper.close()
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
        """The rows and index entries this side's sessions have read (``Handler_read_*``),
        on every connection."""
        rows = self._query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        return sum(int(value) for _, value in rows) + sum(h.rows_read() for h in self._helpers)

    @property
    def queries(self) -> int:
        """The statements this side sent, on every connection."""
        return self._own_queries + sum(h.queries for h in self._helpers)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._own_queries += 1
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
        """The chunk's digest, its parts hashed on ``connections`` connections at once (see
        the module's docstring); ``position`` read after all of them."""
        parts = self._parts(chunk)
        if len(parts) == 1:
            digest = self._digest(chunk)
        else:
            pool, helpers = self._helpers_for(len(parts) - 1)
            futures = [
                pool.submit(helper._digest, part)
                for helper, part in zip(helpers, parts[1:], strict=True)
            ]
            digest = self._digest(parts[0])
            for future in futures:
                part_digest = future.result()
                digest = ChunkDigest.of(
                    digest.count + part_digest.count, digest.total + part_digest.total
                )
        self.position = self.current_position()
        return digest

    def _parts(self, chunk: Chunk) -> list[Chunk]:
        """``chunk`` cut at middle keys into up to ``connections`` parts (``part_offsets``)
        when its rows are known: the scan cuts a chunk at the n-th key after ``lo`` just
        before it hashes it (``middle_key``)."""
        lo, hi, rows = self._last_cut
        if (chunk.lo, chunk.hi) != (lo, hi):
            return [chunk]
        cuts: list[Key] = []
        for offset in part_offsets(rows, self._connections, MIN_PART_ROWS):
            # The offset-th key after lo: an index read of keys only.
            cut = self._middle_key(chunk, 2 * offset)
            if cut is None or (cuts and cut == cuts[-1]) or cut == chunk.hi:
                break
            cuts.append(cut)
        bounds: list[Key | None] = [chunk.lo, *cuts, chunk.hi]
        return [Chunk(a, b) for a, b in itertools.pairwise(bounds)]

    def _helpers_for(self, count: int) -> tuple[ThreadPoolExecutor, list[MySqlSide]]:
        while len(self._helpers) < count:
            self._helpers.append(MySqlSide(self._instance, self.shape))
        for helper in self._helpers:
            helper.shape = self.shape
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._connections - 1, thread_name_prefix="validate-mysql"
            )
        return self._pool, self._helpers[:count]

    def _digest(self, chunk: Chunk) -> ChunkDigest:
        """One statement's digest of ``chunk`` on this side's own connection."""
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
        return ChunkDigest.of(count, total)

    def _key_select(self) -> str:
        return ", ".join(MYSQL.quote(n) for n in self.shape.key)

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        key = self._middle_key(chunk, count)
        # A chunk (lo, key] of count // 2 rows: digest knows its rows when it is asked next
        # (at the table's end the chunk (lo, None) has at most that many).
        self._last_cut = (chunk.lo, key, count // 2)
        return key

    def _middle_key(self, chunk: Chunk, count: int) -> Key | None:
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
