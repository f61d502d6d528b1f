"""The warehouse side: the logical table in PostgreSQL, hashed in its own SQL.

The table is ``<mirror.warehouse_schema>.<logical table>`` (``simple_binlog.naming``); a row
flagged ``_deleted`` (soft deletes) is not a row; a MySQL column the table lacks (never
written yet) is NULL. The session runs in UTC with ``extra_float_digits = 1`` (shortest
round-trip floats) and DateStyle ISO, and defines the JSON normaliser in its own ``pg_temp`` schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdc_platform import warehouse
from cdc_platform.config import PostgresSettings
from cdc_platform.warehouse import Connection
from simple_binlog.naming import WAREHOUSE_DELETED_COLUMN, WAREHOUSE_SHARD_COLUMN
from simple_binlog.values import ColumnType, Kind
from validation.canonical import PG_JSON_FUNCTIONS, POSTGRES, ChunkDigest, postgres_chunk_sums
from validation.mysql import key_range, keys_in
from validation.plan import Chunk, Key
from validation.table import TableShape


def key_order(name: str, column: ColumnType) -> str:
    quoted = POSTGRES.quote(name)
    return f'{quoted} COLLATE "C"' if column.kind is Kind.TEXT else quoted


def connect(settings: PostgresSettings) -> Connection:
    return warehouse.connect(settings, autocommit=True, application_name="cdc-mirror-validate")


class WarehouseSide:
    name = "warehouse"

    def __init__(self, settings: PostgresSettings, schema: str, shape: TableShape) -> None:
        self.shape = shape
        self.queries = 0
        self._target = f"{POSTGRES.quote(schema)}.{POSTGRES.quote(shape.table)}"
        self._schema = schema
        self._conn = connect(settings)
        self._present: set[str] = set()
        self._query("SET TIME ZONE 'UTC'")
        self._query("SET extra_float_digits = 1")
        self._query("SET DateStyle = 'ISO, YMD'")
        names = shape.compared_columns
        if any(POSTGRES.text("c", shape.column_type(n)).startswith("pg_temp.") for n in names):
            for statement in PG_JSON_FUNCTIONS:
                self._query(statement)

    @property
    def _exists(self) -> bool:
        """Whether the table exists (asked again until it does: the mirror creates it with
        its first change, perhaps while validation runs)."""
        if not self._present:
            self._present = {
                str(row[0])
                for row in self._query(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = %s",
                    (self._schema, self.shape.table),
                )
            }
        return bool(self._present)

    @property
    def _live(self) -> str:
        return (
            f"NOT {WAREHOUSE_DELETED_COLUMN}"
            if WAREHOUSE_DELETED_COLUMN in self._present
            else "TRUE"
        )

    def close(self) -> None:
        self._conn.close()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.queries += 1
        with warehouse.warehouse_errors(f"the read of {self.shape.table}"):
            cursor = self._conn.execute(sql, list(params))
            return list(cursor.fetchall()) if cursor.description else []

    def _column(self, name: str) -> str | None:
        return name if name in self._present else None

    def _row_hash(self) -> str:
        shape = self.shape
        pieces = [
            POSTGRES.piece(self._column(n), shape.column_type(n)) for n in shape.compared_columns
        ]
        shard = POSTGRES.visitor.prefixed(POSTGRES.quote(WAREHOUSE_SHARD_COLUMN))
        return POSTGRES.row_hash(shard, pieces)

    def _key_select(self) -> str:
        return ", ".join(POSTGRES.quote(n) for n in self.shape.key)

    def digest(self, chunk: Chunk) -> ChunkDigest:
        if not self._exists:
            return ChunkDigest(0)
        where, params = key_range(self.shape, chunk, key_order)
        sql = (
            f"SELECT {postgres_chunk_sums(self._row_hash())} FROM {self._target} "  # noqa: S608
            f"WHERE {self._live} AND {where}"
        )
        count, total = self._query(sql, params)[0]
        return ChunkDigest.of(count, total)

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        wanted = count // 2
        if not self._exists or wanted < 1:
            return None
        where, params = key_range(self.shape, chunk, key_order)
        order = ", ".join(
            key_order(n, c) for n, c in zip(self.shape.key, self.shape.key_types, strict=True)
        )
        rows = self._query(
            f"SELECT {self._key_select()} FROM {self._target} WHERE {self._live} AND {where} "  # noqa: S608
            f"ORDER BY {order} LIMIT 1 OFFSET {wanted - 1}",
            params,
        )
        return self._key(rows[0]) if rows else None

    def _key(self, row: Sequence[Any]) -> Key:
        # numeric(20) of a BIGINT UNSIGNED comes back as Decimal: keys compare as MySQL's ints.
        return tuple(
            int(v) if t.kind in (Kind.UINT64, Kind.INT, Kind.YEAR) else v
            for t, v in zip(self.shape.key_types, row, strict=False)
        )

    def _hashes(self, where: str, params: list[Any]) -> dict[Key, str]:
        if not self._exists:
            return {}
        width = len(self.shape.key)
        rows = self._query(
            f"SELECT {self._key_select()}, {self._row_hash()} FROM {self._target} "  # noqa: S608
            f"WHERE {self._live} AND {where}",
            params,
        )
        return {self._key(row[:width]): str(row[width]) for row in rows}

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        return self._hashes(*key_range(self.shape, chunk, key_order))

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        return self._hashes(*keys_in(self.shape, keys, POSTGRES.quote)) if keys else {}

    def rows(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        if not keys or not self._exists:
            return {}
        shape = self.shape
        names = shape.compared_columns
        texts = ", ".join(
            POSTGRES.shown(n, shape.column_type(n)) if n in self._present else "NULL" for n in names
        )
        where, params = keys_in(shape, keys, POSTGRES.quote)
        rows = self._query(
            f"SELECT {self._key_select()}, {POSTGRES.quote(WAREHOUSE_SHARD_COLUMN)}, {texts} "  # noqa: S608
            f"FROM {self._target} WHERE {self._live} AND {where}",
            params,
        )
        width = len(shape.key)
        return {
            self._key(row[:width]): {
                "_shard": row[width],
                **dict(zip(names, row[width + 1 :], strict=True)),
            }
            for row in rows
        }
