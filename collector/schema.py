"""Table schemas from information_schema: column order, COLUMN_TYPE spellings, the key."""

from __future__ import annotations

from typing import Any

from collector.decoding import TableSchema
from simple_binlog.errors import ContractError

_COLUMNS = """
SELECT COLUMN_NAME, COLUMN_TYPE
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
ORDER BY ORDINAL_POSITION
"""
_KEYS = """
SELECT INDEX_NAME, COLUMN_NAME, NON_UNIQUE, NULLABLE
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX
"""


def _key_columns(rows: list[tuple[Any, ...]]) -> tuple[str, ...]:
    """The primary key, else the first unique key whose columns are all NOT NULL."""
    indexes: dict[str, list[tuple[str, bool, bool]]] = {}
    for index_name, column, non_unique, nullable in rows:
        indexes.setdefault(index_name, []).append(
            (column, bool(int(non_unique)), nullable == "YES")
        )
    if "PRIMARY" in indexes:
        return tuple(column for column, _, _ in indexes["PRIMARY"])
    for columns in indexes.values():
        if not any(non_unique or nullable for _, non_unique, nullable in columns):
            return tuple(column for column, _, _ in columns)
    return ()


def load_table_schema(cursor: Any, schema: str, table: str) -> TableSchema:
    """Read one table's schema with a DB-API cursor. A table without a usable key gets an
    empty key here; components that need one refuse it by name."""
    cursor.execute(_COLUMNS, (schema, table))
    columns = cursor.fetchall()
    if not columns:
        raise ContractError(f"table {schema}.{table} does not exist or has no columns.")
    cursor.execute(_KEYS, (schema, table))
    return TableSchema(
        schema=schema,
        table=table,
        column_types={str(name): str(spec) for name, spec in columns},
        primary_keys=_key_columns(list(cursor.fetchall())),
    )
