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
comparison and the summing of counts are pure functions of ``cdc_platform.mysql_schema``
(which reads the schema and counts for every component), tested without services.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, snapshot_from_settings
from cdc_platform.mysql_schema import (
    COUNT_DAYS,
    LiveSchema,
    LiveTables,
)
from cdc_platform.warehouse import sql, warehouse_errors
from mirror.warehouse import connect_warehouse
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.naming import topic_name

__all__ = ["MirrorBackend", "mirror_router"]

log = logging.getLogger(__name__)


class MirrorBackend:
    def __init__(self, settings: Settings, config: ConfigSnapshot | None = None) -> None:
        """``config``: the instances (connection with password, shard rules) and table
        mirrors, as read from the configuration store (default: those of ``settings``);
        ``settings``: the connections and names of the rest (warehouse, Kafka, lake, Redis)."""
        self._settings = settings
        self._config = config or snapshot_from_settings(settings)
        self._tables = LiveTables(self._config)

    # -- MySQL --------------------------------------------------------------------------------
    def live_schema(self, name: str) -> LiveSchema:
        """The live schema of table mirror ``name`` over all its shards
        (``cdc_platform.mysql_schema``: one key rule for every component)."""
        return self._tables.live_schema(name)

    # -- daily counts -------------------------------------------------------------------------
    def refresh_daily_counts(self, name: str, today: dt.date | None = None) -> dict[dt.date, int]:
        """Count rows per day by the check column across all shards and cache the result."""
        mirror = self._config.table(name)
        if mirror.check_column is None:
            raise ConfigError(f"table mirror {name!r} has no check_column to count by.")
        today = today or dt.datetime.now(dt.UTC).date()
        totals = self._tables.count_per_day(name, mirror.check_column, today)
        self._store_counts(name, totals)
        log.info("daily counts of %s refreshed", name)
        return totals

    def _counts_table(self) -> sql.Composed:
        return sql.SQL("{}").format(
            sql.Identifier(self._settings.mirror.warehouse_schema, "_daily_counts")
        )

    def _store_counts(self, name: str, totals: dict[dt.date, int]) -> None:
        schema = sql.Identifier(self._settings.mirror.warehouse_schema)
        with (
            warehouse_errors(f"storing the daily counts of {name}"),
            connect_warehouse(self._settings.postgres) as conn,
            conn.transaction(),
        ):
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
        with (
            warehouse_errors(f"the read of the daily counts of {name}"),
            connect_warehouse(self._settings.postgres) as conn,
        ):
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
