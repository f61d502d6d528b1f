"""A MySQL table's shape and key, read once for every component, with one key rule.

``read_table_shape`` reads one physical table from ``information_schema`` (columns in
order with the server's COLUMN_TYPE text verbatim, and the key); ``LiveTables`` reads a
logical table over all its shards (``read_live_schema``: the first shard's shape, by name,
and how the others differ) and counts its rows per day, over connections opened by
``cdc_platform.mysql_source``. The key rule (``choose_key``) and the shard comparison
(``merge_shard_schemas``) are pure functions.

The key rule, in order:

1. the PRIMARY KEY, in its index order;
2. else the first UNIQUE index, by index name, whose columns are all NOT NULL, in its index
   order;
3. else no key (``()``): each component refuses such a table by name or asks for
   ``tables[].key`` in the configuration.

Why: a UNIQUE index with a NULLable column does not identify a row (it admits any number of
rows with NULL there), so it is never a key. A UNIQUE NOT NULL index does, and it is what
MySQL itself falls back to (InnoDB clusters a table without a primary key by its first
UNIQUE NOT NULL index, and ``COLUMN_KEY`` shows it as ``PRI``), which lets the collector,
the replay and the mirrors work on such tables instead of refusing them. Among several, the
first *by name* rather than MySQL's first *created*: ``information_schema`` does not say in
which order indexes were created, so "by name" is the only choice that every reader, every
shard and every server makes the same way. Debezium keys by the primary key only (a table
without one gets no key unless configured), and python-mysql-replication takes the table
map's primary key; this rule agrees with both wherever a primary key exists, and where none
does it agrees with what the collector and the replay already did.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc_platform import mysql_source
from cdc_platform.config_store import ConfigSnapshot
from simple_binlog.errors import ConfigError, ContractError, ServiceUnavailableError
from simple_binlog.routing import ShardRouter

log = logging.getLogger(__name__)

COUNT_DAYS = 7
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

_COLUMNS = """
SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION
"""
_INDEXES = """
SELECT INDEX_NAME, COLUMN_NAME, NON_UNIQUE, NULLABLE FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY INDEX_NAME, SEQ_IN_INDEX
"""
_TABLES = """
SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES
WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN (%s, %s, %s, %s)
  AND TABLE_SCHEMA LIKE %s AND TABLE_NAME LIKE %s
ORDER BY TABLE_SCHEMA, TABLE_NAME
"""


class MissingTableError(ContractError):
    """The table does not exist (or has no columns) on the source."""


# -- the key rule (pure) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexColumn:
    """One row of ``information_schema.STATISTICS``: a column of an index."""

    index_name: str
    column: str
    non_unique: bool
    nullable: bool


def choose_key(indexes: Iterable[IndexColumn]) -> tuple[str, ...]:
    """The table's key by the module's rule: the PRIMARY KEY, else the first (by name) UNIQUE
    index whose columns are all NOT NULL, else ``()``. ``indexes`` lists each index's
    columns in their order in the index (``SEQ_IN_INDEX``)."""
    by_name: dict[str, list[IndexColumn]] = {}
    for column in indexes:
        by_name.setdefault(column.index_name, []).append(column)
    if "PRIMARY" in by_name:
        return tuple(c.column for c in by_name["PRIMARY"])
    for name in sorted(by_name):
        columns = by_name[name]
        if not any(c.non_unique or c.nullable for c in columns):
            return tuple(c.column for c in columns)
    return ()


# -- one table -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableShape:
    """A physical table: its columns in order with the server's COLUMN_TYPE text, its key."""

    schema: str
    table: str
    columns: dict[str, str]  # name → COLUMN_TYPE verbatim, in ordinal order
    key: tuple[str, ...]  # () when the table has no usable key (see choose_key)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def read_table_shape(cursor: Any, schema: str, table: str) -> TableShape:
    """One table's shape, with a DB-API cursor of a source connection.

    Raises MissingTableError when the table does not exist; pymysql's errors pass through
    (the caller says in its own words what it was doing).
    """
    cursor.execute(_COLUMNS, (schema, table))
    columns = {str(name): str(spec) for name, spec in cursor.fetchall()}
    if not columns:
        raise MissingTableError(f"table {schema}.{table} does not exist or has no columns.")
    cursor.execute(_INDEXES, (schema, table))
    indexes = [
        IndexColumn(str(name), str(column), bool(int(non_unique)), nullable == "YES")
        for name, column, non_unique, nullable in cursor.fetchall()
    ]
    return TableShape(schema, table, columns, choose_key(indexes))


# -- a logical table over its shards ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardSchema:
    shard: str  # schema.table
    columns: dict[str, str]  # name → COLUMN_TYPE, in table order
    key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LiveSchema:
    """A logical table as MySQL has it now: its first shard's (by name) columns and key,
    and whether the other shards agree."""

    table: str
    shards: list[str]
    columns: dict[str, str]
    key: list[str]
    shards_agree: bool
    differences: list[str] = field(default_factory=list)


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching names that start with ``prefix`` literally."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def find_shards(
    cursor: Any, router: ShardRouter, logical: str, db_prefix: str = "", table_prefix: str = ""
) -> list[tuple[str, str]]:
    """The base tables (schema, table) the shard rules route to ``logical``, sorted. The
    prefixes only narrow the search in SQL; the rules decide."""
    cursor.execute(_TABLES, (*SYSTEM_SCHEMAS, like_prefix(db_prefix), like_prefix(table_prefix)))
    shards = []
    for schema, table in cursor.fetchall():
        try:
            routed = router.route(str(schema), str(table)).name
        except ConfigError:
            continue  # a table no shard rule names belongs to no logical table
        if routed == logical:
            shards.append((str(schema), str(table)))
    return sorted(shards)


def merge_shard_schemas(table: str, shards: Sequence[ShardSchema]) -> LiveSchema:
    """The logical table's schema (the first shard's, by name) and how other shards differ."""
    if not shards:
        raise ConfigError(f"no MySQL table routes to the logical table {table!r}.")
    ordered = sorted(shards, key=lambda s: s.shard)
    reference = ordered[0]
    differences: list[str] = []
    for other in ordered[1:]:
        differences += _differences(reference, other)
    return LiveSchema(
        table=table,
        shards=[s.shard for s in ordered],
        columns=dict(reference.columns),
        key=list(reference.key),
        shards_agree=not differences,
        differences=differences,
    )


def _differences(reference: ShardSchema, other: ShardSchema) -> list[str]:
    differences: list[str] = []
    for name, spec in reference.columns.items():
        if name not in other.columns:
            differences.append(f"{other.shard} lacks column {name}")
        elif other.columns[name] != spec:
            differences.append(
                f"{other.shard}.{name} is {other.columns[name]}, {reference.shard}.{name} is {spec}"
            )
    differences += [
        f"{other.shard} has the extra column {name}"
        for name in other.columns
        if name not in reference.columns
    ]
    if other.key != reference.key:
        differences.append(
            f"{other.shard} is keyed by ({', '.join(other.key)}), "
            f"{reference.shard} by ({', '.join(reference.key)})"
        )
    return differences


def read_live_schema(cursor: Any, router: ShardRouter, logical: str) -> LiveSchema:
    """The live schema of ``logical`` over all the shards the rules route to it."""
    found = []
    for schema, table in find_shards(cursor, router, logical):
        shape = read_table_shape(cursor, schema, table)
        found.append(ShardSchema(shape.name, shape.columns, shape.key))
    return merge_shard_schemas(logical, found)


def sum_daily_counts(
    per_shard: Sequence[Sequence[tuple[dt.date, int]]], today: dt.date
) -> dict[dt.date, int]:
    """Counts per day of the ``COUNT_DAYS`` days before ``today``, zeros included."""
    days = [today - dt.timedelta(days=n) for n in range(COUNT_DAYS, 0, -1)]
    totals = dict.fromkeys(days, 0)
    for rows in per_shard:
        for day, count in rows:
            if day in totals:
                totals[day] += count
    return totals


class LiveTables:
    """The logical tables of the configured instances, as MySQL has them now: their live
    schema and their rows per day, read with each instance's own (replication + SELECT) user.
    pymysql's errors become ServiceUnavailableError with one sentence."""

    def __init__(self, config: ConfigSnapshot) -> None:
        self._config = config

    @contextmanager
    def cursor(self, logical: str) -> Iterator[tuple[Any, ShardRouter]]:
        """A cursor on the instance of table mirror ``logical``, and its shard router."""
        instance = self._config.instance(self._config.table(logical).instance)
        router = ShardRouter(list(instance.shard_rules))
        access = instance.login()
        try:
            connection = mysql_source.connect(access, init_command="SET time_zone = '+00:00'")
        except pymysql.MySQLError as exc:
            raise ServiceUnavailableError(
                f"MySQL instance {access.name!r} at {access.host}:{access.port} cannot "
                f"be reached ({exc.args[-1]})."
            ) from None
        try:
            with connection.cursor() as cursor:
                yield cursor, router
        except pymysql.MySQLError as exc:
            raise ServiceUnavailableError(
                f"MySQL instance {access.name!r} refused a query ({exc.args[-1]})."
            ) from None
        finally:
            connection.close()

    def live_schema(self, logical: str) -> LiveSchema:
        with self.cursor(logical) as (cursor, router):
            return read_live_schema(cursor, router, logical)

    def count_per_day(self, logical: str, column: str, today: dt.date) -> dict[dt.date, int]:
        """Rows per day by ``column`` of the ``COUNT_DAYS`` days before ``today``, summed
        over all shards."""
        since = today - dt.timedelta(days=COUNT_DAYS)
        quoted = column.replace("`", "``")
        per_shard = []
        with self.cursor(logical) as (cursor, router):
            for schema, table in find_shards(cursor, router, logical):
                cursor.execute(
                    f"SELECT DATE(`{quoted}`), COUNT(*) FROM `{schema}`.`{table}` "  # noqa: S608 - names from information_schema, quoted
                    f"WHERE `{quoted}` >= %s AND `{quoted}` < %s GROUP BY DATE(`{quoted}`)",
                    (since, today),
                )
                per_shard.append([(day, int(count)) for day, count in cursor.fetchall()])
        log.debug("rows per day of %s counted over %d shards", logical, len(per_shard))
        return sum_daily_counts(per_shard, today)
