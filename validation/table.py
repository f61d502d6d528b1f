"""A logical table's shape as validation sees it: shards, columns, key (pure but for
``read_table_shape``, which asks MySQL)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdc_platform.config import TableMirror
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.routing import ShardRouter
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode, encode, parse_column_type
from validation.plan import Key

# Kinds whose order is the same in MySQL, PostgreSQL and Python (text: by its UTF-8 bytes,
# which each engine is told to use), so a key range holds the same keys in every store.
ORDERED_KEY_KINDS = frozenset(
    {
        Kind.INT,
        Kind.UINT64,
        Kind.DECIMAL,
        Kind.DATE,
        Kind.DATETIME,
        Kind.TIMESTAMP,
        Kind.YEAR,
        Kind.BINARY,
        Kind.TEXT,
    }
)


class ValidationError(CdcMirrorError):
    """A table or a store cannot be validated (the sentence says why)."""


@dataclass(frozen=True, slots=True)
class TableShape:
    """MySQL's view of a logical table: its shards, columns (COLUMN_TYPE, in order) and key;
    ``compared``: the columns a target holds and is compared on (None: all), the key's
    always among them; ``unstored_key``: the key columns the target's rows leave out (Redis's
    ``redis_columns`` without them), which it compares from each row's key."""

    table: str
    shards: tuple[tuple[str, str], ...]
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    compared: tuple[str, ...] | None = None
    unstored_key: tuple[str, ...] = ()

    def column_type(self, name: str) -> ColumnType:
        return parse_column_type(dict(self.columns)[name])

    @property
    def compared_columns(self) -> list[str]:
        names = [name for name, _ in self.columns]
        return names if self.compared is None else [n for n in names if n in self.compared]

    @property
    def key_types(self) -> list[ColumnType]:
        return [self.column_type(name) for name in self.key]

    def projected(self, columns: Sequence[str] | None) -> TableShape:
        if columns is None:
            return self
        unknown = [c for c in columns if c not in dict(self.columns)]
        if unknown:
            raise ConfigError(f"column {unknown[0]!r} is not a column of {self.table} in MySQL.")
        # The key is compared whatever the projection: without it, a missing row and an
        # extra one of equal other columns would hash alike and hide each other.
        unstored = tuple(k for k in self.key if k not in columns)
        compared = (*columns, *unstored)
        return TableShape(self.table, self.shards, self.columns, self.key, compared, unstored)

    def key_wire(self, key: Key) -> list[JsonScalar]:
        return [encode(t, v) for t, v in zip(self.key_types, key, strict=True)]

    def key_from_wire(self, wire: Sequence[JsonScalar]) -> Key:
        return tuple(decode(t, v) for t, v in zip(self.key_types, wire, strict=True))


def check_key(shape: TableShape) -> None:
    """Refuse a key validation cannot range over, with the reason."""
    if not shape.key:
        raise ValidationError(
            f"table {shape.table!r} has no key (no primary key in MySQL and no tables[].key in "
            "the config), so its rows cannot be matched: set tables[].key."
        )
    for name in shape.key:
        if name not in dict(shape.columns):
            raise ValidationError(f"key column {name!r} is not a column of {shape.table}.")
        column = shape.column_type(name)
        if column.kind not in ORDERED_KEY_KINDS or (
            column.kind is Kind.TEXT and column.spec.lower().startswith("json")
        ):
            raise ValidationError(
                f"key column {name!r} of {shape.table} is {column.spec}, which the stores do "
                "not order alike, so key ranges cannot be compared."
            )


def routes_to(router: ShardRouter, schema: str, table: str, logical: str) -> bool:
    try:
        return router.route(schema, table).name == logical
    except ConfigError:
        return False


def read_table_shape(cursor: Any, router: ShardRouter, mirror: TableMirror) -> TableShape:
    """The shards of ``mirror`` (the physical tables the shard rules route to it), the first
    shard's columns and the key (``tables[].key``, else MySQL's primary key)."""
    like = mirror.db_prefix.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"
    cursor.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA LIKE %s AND TABLE_TYPE = 'BASE TABLE' "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME",
        (like,),
    )
    shards = tuple(
        (str(schema), str(table))
        for schema, table in cursor.fetchall()
        if routes_to(router, str(schema), str(table), mirror.name)
    )
    if not shards:
        raise ValidationError(f"MySQL has no shard of table {mirror.name!r}.")
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        shards[0],
    )
    found = cursor.fetchall()
    columns = tuple((str(name), str(spec)) for name, spec, _ in found)
    primary = tuple(str(name) for name, _, column_key in found if column_key == "PRI")
    key = tuple(mirror.key) if mirror.key else primary
    shape = TableShape(mirror.name, shards, columns, key)
    check_key(shape)
    return shape
