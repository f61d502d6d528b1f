"""Where the web admin learns a logical table's live MySQL schema, and the pure check of a
table mirror against it.

``SchemaSource`` is the interface (the mirror backend may serve the same over HTTP later);
``MariaDBSchemaSource`` reads ``information_schema`` of the instance directly (columns and
key by ``cdc_platform.mysql_schema``, the rule every component uses), and
``StaticSchemaSource`` is the in-memory fake for tests of pure logic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

import pymysql

from cdc_platform import mysql_source
from cdc_platform.config import TableMirror
from cdc_platform.mysql_schema import read_table_shape
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from simple_binlog.routing import ShardRouter, ShardRule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceAccess:
    """How to reach one MySQL instance (the password decrypted only for the connection)."""

    name: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    shard_rules: tuple[ShardRule, ...]
    allow_cleartext_password: bool = False
    server_public_key: str = ""  # PEM text or a file path (mysql_source.pinned_public_key)


@dataclass(frozen=True)
class LiveTableSchema:
    """The schema of a logical table as MySQL has it now (taken from its first shard)."""

    logical_name: str
    physical_tables: tuple[str, ...]  # "schema.table", sorted
    columns: dict[str, str]  # name → column type, in table order
    primary_key: tuple[str, ...]  # the key by cdc_platform.mysql_schema's rule; () if none


class SchemaSource(Protocol):
    def live_schema(
        self, instance: InstanceAccess, db_prefix: str, table_prefix: str
    ) -> LiveTableSchema | None:
        """The logical table's schema, or None when no physical table routes to it.

        Raises ServiceUnavailableError when the instance cannot be asked.
        """
        ...


class MariaDBSchemaSource:
    """Reads information_schema of the instance with the instance's own credentials."""

    def __init__(self, connect_timeout_s: float = 5.0) -> None:
        self._timeout = connect_timeout_s

    def live_schema(
        self, instance: InstanceAccess, db_prefix: str, table_prefix: str
    ) -> LiveTableSchema | None:
        wanted = f"{db_prefix}_{table_prefix}".lower()
        router = ShardRouter(list(instance.shard_rules))
        try:
            connection = mysql_source.connect(
                instance,
                connect_timeout=int(max(1, self._timeout)),
                read_timeout=int(max(1, self._timeout)) * 4,
            )
        except pymysql.Error as exc:
            raise ServiceUnavailableError(
                f"MySQL instance {instance.name!r} at {instance.host}:{instance.port} cannot be "
                f"reached to read the live schema: {_reason(exc)}"
            ) from exc
        try:
            with connection.cursor() as cursor:
                # Only the prefix narrows in SQL; the shard rules decide exactly in Python.
                cursor.execute(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_type = 'BASE TABLE' AND table_schema LIKE %s "
                    "AND table_name LIKE %s",
                    (_like_prefix(db_prefix), _like_prefix(table_prefix)),
                )
                physical = sorted(
                    f"{schema}.{table}"
                    for schema, table in cursor.fetchall()
                    if _routes_to(router, schema, table) == wanted
                )
                if not physical:
                    return None
                shape = read_table_shape(cursor, *physical[0].split(".", 1))
        except pymysql.Error as exc:
            raise ServiceUnavailableError(
                f"the live schema of {wanted!r} cannot be read from MySQL instance "
                f"{instance.name!r}: {_reason(exc)}"
            ) from exc
        finally:
            connection.close()
        return LiveTableSchema(wanted, tuple(physical), shape.columns, shape.key)


class StaticSchemaSource:
    """A fixed set of schemas (by logical name); for tests of the validation logic."""

    def __init__(self, schemas: dict[str, LiveTableSchema]) -> None:
        self._schemas = schemas

    def live_schema(
        self, instance: InstanceAccess, db_prefix: str, table_prefix: str
    ) -> LiveTableSchema | None:
        return self._schemas.get(f"{db_prefix}_{table_prefix}".lower())


def mirror_problems(mirror: TableMirror, schema: LiveTableSchema | None) -> list[str]:
    """What is wrong with ``mirror`` given the live schema, as sentences for a person."""
    if schema is None:
        return [
            f"no table of instance {mirror.instance!r} matches database prefix "
            f"{mirror.db_prefix!r} and table prefix {mirror.table_prefix!r}; check the "
            f"prefixes and the instance's shard rules."
        ]
    known = set(schema.columns)
    listing = ", ".join(schema.columns)
    problems: list[str] = []
    key = mirror.key or list(schema.primary_key)
    if not key:
        problems.append(
            f"{schema.physical_tables[0]} has no primary key; name the key columns explicitly."
        )
    missing_key = [c for c in (mirror.key or []) if c not in known]
    if missing_key:
        problems.append(
            f"key column{'s' if len(missing_key) > 1 else ''} {', '.join(missing_key)} "
            f"{'do' if len(missing_key) > 1 else 'does'} not exist in "
            f"{schema.physical_tables[0]} (columns: {listing})."
        )
    for label, column in (
        ("check column", mirror.check_column),
        ("archive-delete time column", mirror.archive_delete.time_column),
    ):
        if column is not None and column not in known:
            problems.append(
                f"{label} {column} does not exist in {schema.physical_tables[0]} "
                f"(columns: {listing})."
            )
    missing_redis = [c for c in (mirror.redis_columns or []) if c not in known]
    if missing_redis:
        problems.append(
            f"Redis projection column{'s' if len(missing_redis) > 1 else ''} "
            f"{', '.join(missing_redis)} not in {schema.physical_tables[0]} (columns: {listing})."
        )
    return problems


def _routes_to(router: ShardRouter, schema: str, table: str) -> str | None:
    try:
        return router.route(schema, table).name
    except ConfigError:  # a table no rule maps to a usable name is simply not this one
        return None


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _reason(exc: pymysql.Error) -> str:
    args = exc.args
    if len(args) >= 2:
        return str(args[1])
    return str(exc) or type(exc).__name__
