"""The mirror backend: what the merge check and the web admin ask about a logical table.

HTTP (a FastAPI ``APIRouter`` the web admin mounts, or ``cdc-mirror mirror backend`` alone):

- ``GET  /mirror/tables/{name}/schema``: the live MySQL schema (columns in order with their
  types, the key) read from ``information_schema`` of every shard, with whether all shards
  agree and, if not, how they differ;
- ``GET  /mirror/tables/{name}/daily-counts``: rows per day over the last 7 days by the
  table's ``check_column``, summed over all shards, from the cache in PostgreSQL (table
  ``<mirror.warehouse_schema>._daily_counts``);
- ``POST /mirror/tables/{name}/daily-counts/refresh``: recompute them now; the nightly job
  calls ``MirrorBackend.refresh_daily_counts`` (``cdc-mirror mirror refresh-counts``) for every
  table with a check column, so the check never waits on MySQL;
- ``GET  /mirror/tables/{name}/lineage``: MySQL shards ↔ Kafka topic ↔ Hive raw table ↔
  Hive snapshot ↔ warehouse table ↔ Redis key prefix.

The instances (their connection and shard rules) and the table mirrors come from a
configuration snapshot (``cdc_platform.config_store``); the settings give the rest.
Schemas and counts are read with the instance's own (replication + SELECT) user. The shard
comparison and the summing of counts are pure functions, tested without services.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pymysql
from fastapi import APIRouter, HTTPException
from psycopg import sql

from cdc_platform import mysql_source
from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, snapshot_from_settings
from mirror.warehouse import connect_warehouse
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.naming import topic_name
from simple_binlog.routing import ShardRouter

log = logging.getLogger(__name__)

COUNT_DAYS = 7
_SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


@dataclass(frozen=True, slots=True)
class ShardSchema:
    shard: str  # schema.table
    columns: dict[str, str]  # name → COLUMN_TYPE, in table order
    key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LiveSchema:
    table: str
    shards: list[str]
    columns: dict[str, str]
    key: list[str]
    shards_agree: bool
    differences: list[str] = field(default_factory=list)


def merge_shard_schemas(table: str, shards: Sequence[ShardSchema]) -> LiveSchema:
    """The logical table's schema (the first shard's, by name) and how other shards differ."""
    if not shards:
        raise ConfigError(f"no MySQL table routes to the logical table {table!r}.")
    ordered = sorted(shards, key=lambda s: s.shard)
    reference = ordered[0]
    differences: list[str] = []
    for other in ordered[1:]:
        for name, spec in reference.columns.items():
            if name not in other.columns:
                differences.append(f"{other.shard} lacks column {name}")
            elif other.columns[name] != spec:
                differences.append(
                    f"{other.shard}.{name} is {other.columns[name]}, "
                    f"{reference.shard}.{name} is {spec}"
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
    return LiveSchema(
        table=table,
        shards=[s.shard for s in ordered],
        columns=dict(reference.columns),
        key=list(reference.key),
        shards_agree=not differences,
        differences=differences,
    )


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


class MirrorBackend:
    def __init__(self, settings: Settings, config: ConfigSnapshot | None = None) -> None:
        """``config``: the instances (connection with password, shard rules) and table
        mirrors, as read from the configuration store (default: those of ``settings``);
        ``settings``: the connections and names of the rest (warehouse, Kafka, lake, Redis)."""
        self._settings = settings
        self._config = config or snapshot_from_settings(settings)

    # -- MySQL --------------------------------------------------------------------------------
    def _connect_to(self, mirror: TableMirror) -> AbstractContextManager[Any]:
        return self._mysql(self._config.instance(mirror.instance).login())

    @contextmanager
    def _mysql(self, instance: mysql_source.SourceAccess) -> Iterator[Any]:
        try:
            connection = mysql_source.connect(instance, init_command="SET time_zone = '+00:00'")
        except pymysql.MySQLError as exc:
            raise ServiceUnavailableError(
                f"MySQL instance {instance.name!r} at {instance.host}:{instance.port} cannot "
                f"be reached ({exc.args[-1]})."
            ) from None
        try:
            with connection.cursor() as cursor:
                yield cursor
        except pymysql.MySQLError as exc:
            raise ServiceUnavailableError(
                f"MySQL instance {instance.name!r} refused a query ({exc.args[-1]})."
            ) from None
        finally:
            connection.close()

    def _shards(self, cursor: Any, mirror: TableMirror) -> list[tuple[str, str]]:
        cursor.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN (%s, %s, %s, %s)",
            _SYSTEM_SCHEMAS,
        )
        shards = []
        router = ShardRouter(list(self._config.instance(mirror.instance).shard_rules))
        for schema, table in cursor.fetchall():
            try:
                logical = router.route(str(schema), str(table)).name
            except ConfigError:
                continue  # a table no shard rule names belongs to no logical table
            if logical == mirror.name:
                shards.append((str(schema), str(table)))
        return sorted(shards)

    def live_schema(self, name: str) -> LiveSchema:
        mirror = self._config.table(name)
        with self._connect_to(mirror) as cursor:
            found = []
            for schema, table in self._shards(cursor, mirror):
                cursor.execute(
                    "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                    (schema, table),
                )
                rows = cursor.fetchall()
                found.append(
                    ShardSchema(
                        shard=f"{schema}.{table}",
                        columns={str(n): str(t) for n, t, _ in rows},
                        key=tuple(str(n) for n, _, k in rows if k == "PRI"),
                    )
                )
        return merge_shard_schemas(name, found)

    # -- daily counts -------------------------------------------------------------------------
    def refresh_daily_counts(self, name: str, today: dt.date | None = None) -> dict[dt.date, int]:
        """Count rows per day by the check column across all shards and cache the result."""
        mirror = self._config.table(name)
        if mirror.check_column is None:
            raise ConfigError(f"table mirror {name!r} has no check_column to count by.")
        today = today or dt.datetime.now(dt.UTC).date()
        since = today - dt.timedelta(days=COUNT_DAYS)
        per_shard = []
        with self._connect_to(mirror) as cursor:
            for schema, table in self._shards(cursor, mirror):
                column = mirror.check_column.replace("`", "``")
                cursor.execute(
                    f"SELECT DATE(`{column}`), COUNT(*) FROM `{schema}`.`{table}` "  # noqa: S608 - names from information_schema, quoted
                    f"WHERE `{column}` >= %s AND `{column}` < %s GROUP BY DATE(`{column}`)",
                    (since, today),
                )
                per_shard.append([(day, int(count)) for day, count in cursor.fetchall()])
        totals = sum_daily_counts(per_shard, today)
        self._store_counts(name, totals)
        log.info("daily counts of %s refreshed (%d shards)", name, len(per_shard))
        return totals

    def _counts_table(self) -> sql.Composed:
        return sql.SQL("{}").format(
            sql.Identifier(self._settings.mirror.warehouse_schema, "_daily_counts")
        )

    def _store_counts(self, name: str, totals: dict[dt.date, int]) -> None:
        schema = sql.Identifier(self._settings.mirror.warehouse_schema)
        with connect_warehouse(self._settings.postgres) as conn, conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (logical_table text NOT NULL, day date NOT NULL,"
                    " row_count bigint NOT NULL, computed_at timestamptz NOT NULL DEFAULT now(),"
                    " PRIMARY KEY (logical_table, day))"
                ).format(self._counts_table())
            )
            with conn.cursor() as cursor:
                cursor.executemany(
                    sql.SQL(
                        "INSERT INTO {} (logical_table, day, row_count) VALUES (%s, %s, %s) "
                        "ON CONFLICT (logical_table, day) DO UPDATE SET row_count = "
                        "EXCLUDED.row_count, computed_at = now()"
                    ).format(self._counts_table()),
                    [(name, day, count) for day, count in totals.items()],
                )

    def daily_counts(self, name: str, today: dt.date | None = None) -> list[dict[str, Any]]:
        """The cached counts of the last ``COUNT_DAYS`` days (empty until first refreshed)."""
        self._config.table(name)
        today = today or dt.datetime.now(dt.UTC).date()
        with connect_warehouse(self._settings.postgres) as conn:
            exists = conn.execute(
                "SELECT to_regclass(%s)",
                (f"{self._settings.mirror.warehouse_schema}._daily_counts",),
            ).fetchone()
            if exists is None or exists[0] is None:
                return []
            rows = conn.execute(
                sql.SQL(
                    "SELECT day, row_count, computed_at FROM {} WHERE logical_table = %s "
                    "AND day >= %s AND day < %s ORDER BY day"
                ).format(self._counts_table()),
                (name, today - dt.timedelta(days=COUNT_DAYS), today),
            ).fetchall()
        return [{"day": str(day), "rows": count, "computed_at": str(at)} for day, count, at in rows]

    # -- lineage ------------------------------------------------------------------------------
    def lineage(self, name: str, shards: Sequence[str] | None = None) -> dict[str, Any]:
        mirror = self._config.table(name)
        raw = f"{self._settings.stream_writer.database}.{mirror.name}"
        return {
            "table": mirror.name,
            "mysql": {"instance": mirror.instance, "shards": list(shards or [])},
            "kafka_topic": self._config.instance(mirror.instance).topic
            or topic_name(self._settings.kafka, mirror.instance),
            "hive_raw": raw if "hive" in mirror.targets else None,
            "hive_snapshot": f"{self._settings.merge.database}.{mirror.name}"
            if "hive" in mirror.targets
            else None,
            "warehouse_table": f"{self._settings.postgres.warehouse_db}."
            f"{self._settings.mirror.warehouse_schema}.{mirror.name}"
            if "warehouse" in mirror.targets
            else None,
            "redis_prefix": f"{self._settings.redis.key_prefix}:{mirror.name}:"
            if "redis" in mirror.targets
            else None,
        }


def _http(action: Any) -> Any:
    try:
        return action()
    except ConfigError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    except ServiceUnavailableError as exc:
        raise HTTPException(status_code=503, detail=str(exc)) from None
    except CdcMirrorError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None


def mirror_router(backend: MirrorBackend) -> APIRouter:
    """The backend's HTTP endpoints; ``app.include_router(mirror_router(MirrorBackend(s)))``."""
    router = APIRouter(prefix="/mirror", tags=["mirror backend"])

    @router.get("/tables/{name}/schema")
    def schema(name: str) -> dict[str, Any]:
        return asdict(_http(lambda: backend.live_schema(name)))

    @router.get("/tables/{name}/daily-counts")
    def daily_counts(name: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = _http(lambda: backend.daily_counts(name))
        return result

    @router.post("/tables/{name}/daily-counts/refresh")
    def refresh(name: str) -> dict[str, int]:
        totals: dict[dt.date, int] = _http(lambda: backend.refresh_daily_counts(name))
        return {day.isoformat(): count for day, count in totals.items()}

    @router.get("/tables/{name}/lineage")
    def lineage(name: str) -> dict[str, Any]:
        def build() -> dict[str, Any]:
            try:
                shards = backend.live_schema(name).shards
            except ServiceUnavailableError:
                shards = []  # lineage still answers when MySQL is away
            return backend.lineage(name, shards)

        result: dict[str, Any] = _http(build)
        return result

    return router
