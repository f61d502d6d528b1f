"""Reading what the mirrors hold, for comparisons with the reference (test helpers)."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg
import redis
from psycopg import sql

from cdc_platform.config import Settings
from mirror.redis_applier import decode_value
from simple_binlog.values import JsonScalar, decode, parse_column_type


def redis_rows(
    settings: Settings, table: str
) -> dict[str, tuple[int, dict[str, JsonScalar] | None]]:
    """key part → (offset, row or None for a tombstone)."""
    client = redis.Redis.from_url(settings.redis.url.get_secret_value())
    prefix = f"{settings.redis.key_prefix}:{table}:"
    found = {}
    for key in client.scan_iter(f"{prefix}*", count=2000):
        raw = client.get(key)
        if raw is None:
            continue
        offset, _, row = decode_value(raw)
        found[key.decode()[len(prefix) :]] = (offset, row)
    client.close()
    return found


def live_redis_rows(settings: Settings, table: str) -> dict[str, dict[str, JsonScalar]]:
    return {k: row for k, (_, row) in redis_rows(settings, table).items() if row is not None}


def pg_connect(settings: Settings) -> psycopg.Connection:
    pg = settings.postgres
    return psycopg.connect(
        host=pg.host,
        port=pg.port,
        user=pg.user,
        password=pg.password.get_secret_value(),
        dbname=pg.warehouse_db,
        autocommit=True,
    )


def pg_rows(settings: Settings, table: str, where: str = "TRUE") -> dict[str, dict[str, Any]]:
    """id (as text) → row with bookkeeping columns, as Python values."""
    with pg_connect(settings) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(
            sql.SQL("SELECT * FROM {} WHERE " + where).format(
                sql.Identifier(settings.mirror.warehouse_schema, table)
            )
        )
        return {str(row["id"]): row for row in cur.fetchall()}


def canonical(column_type: str, value: JsonScalar) -> Any:
    """A wire value as PostgreSQL gives it back (bytes for binaries, Decimal, datetime…)."""
    python = decode(parse_column_type(column_type), value)
    if isinstance(python, int) and "unsigned" in column_type and "bigint" in column_type:
        return Decimal(python)
    if isinstance(python, bytes):
        return python
    if isinstance(python, dt.datetime) and "timestamp" in column_type:
        return python.replace(tzinfo=dt.UTC)
    return python


def as_pg(row: dict[str, JsonScalar], types: dict[str, str]) -> dict[str, Any]:
    return {name: canonical(types[name], value) for name, value in row.items()}


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()
