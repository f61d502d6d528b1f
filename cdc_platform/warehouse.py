"""The PostgreSQL adapter: every connection to the stack's PostgreSQL (the real-time
warehouse, and the Hive metastore's database), and the one place psycopg's errors become the
product's (``simple_binlog.errors``).

``connect`` opens a connection from ``postgres`` settings (the warehouse database unless
another is named). A refused password is a ``ConfigError`` (fix ``postgres.user`` and
``postgres.password``); a server that cannot be reached a ``ServiceUnavailableError`` naming
the database and host:port. ``warehouse_errors(what)`` maps an error met later the same way:
a lost connection or any refusal is a ``ServiceUnavailableError`` (retried by
``cdc_platform.retry``). Messages carry PostgreSQL's reason without the values it quotes
(``reason_without_values``): rows do not belong in logs. Statements are composed with
psycopg's ``sql`` module, re-exported here, so identifiers are always quoted by the driver.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from cdc_platform.config import PostgresSettings
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError

__all__ = [
    "Connection",
    "PostgresError",
    "answers",
    "connect",
    "map_postgres_error",
    "reason_without_values",
    "sql",
    "warehouse_errors",
]

CONNECT_TIMEOUT_S = 10

Connection = psycopg.Connection[tuple[Any, ...]]
PostgresError = psycopg.Error

# SQLSTATE class 28: invalid authorization (28P01: a wrong password).
_AUTHORIZATION_CLASS = "28"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _refused_credentials(exc: psycopg.Error) -> bool:
    # A failed connection carries no SQLSTATE (libpq reports it as text), hence the text too.
    return (exc.sqlstate or "").startswith(_AUTHORIZATION_CLASS) or (
        "password authentication failed" in str(exc)
    )


def connect(
    settings: PostgresSettings,
    *,
    database: str | None = None,
    application_name: str = "cdc-mirror",
    autocommit: bool = False,
    connect_timeout_s: int = CONNECT_TIMEOUT_S,
) -> Connection:
    """A connection to ``database`` (default: ``postgres.warehouse_db``)."""
    dbname = database or settings.warehouse_db
    try:
        return psycopg.connect(
            host=settings.host,
            port=settings.port,
            user=settings.user,
            password=settings.password.get_secret_value(),
            dbname=dbname,
            connect_timeout=connect_timeout_s,
            autocommit=autocommit,
            application_name=application_name,
        )
    except psycopg.Error as exc:
        # from None: psycopg's chain repeats the reason and adds nothing for the user.
        if _refused_credentials(exc):
            raise ConfigError(
                f"PostgreSQL refused user {settings.user!r}; check postgres.user and "
                "postgres.password in the config."
            ) from None
        raise ServiceUnavailableError(
            f"PostgreSQL database {dbname!r} at {settings.host}:{settings.port} "
            f"cannot be reached ({_one_line(exc)})."
        ) from None


def reason_without_values(exc: psycopg.Error) -> str:
    """PostgreSQL's reason, with the offending value cut off and the COPY column named: the
    full message and its detail quote a row's values, which do not belong in logs."""
    reason = re.sub(r': ".*"$', "", exc.diag.message_primary or type(exc).__name__)
    column = re.search(r"COPY \S+, line \d+, column (\S+?):", exc.diag.context or "")
    return f"{reason}, column {column.group(1)}" if column else reason


def map_postgres_error(error: psycopg.Error, what: str) -> CdcMirrorError:
    """The product error for a psycopg error met during ``what`` (a noun phrase: "a
    batch", "the read of orders")."""
    if _refused_credentials(error):
        return ConfigError(f"PostgreSQL refused the user during {what} ({_one_line(error)}).")
    if isinstance(error, psycopg.OperationalError):  # closed, reset, shut down, cancelled
        return ServiceUnavailableError(f"the warehouse connection failed ({_one_line(error)}).")
    return ServiceUnavailableError(
        f"the warehouse refused {what} ({reason_without_values(error)})."
    )


@contextmanager
def warehouse_errors(what: str) -> Iterator[None]:
    """The boundary: a psycopg error inside becomes the product error of ``map_postgres_error``."""
    try:
        yield
    except psycopg.Error as exc:
        raise map_postgres_error(exc, what) from None


def answers(settings: PostgresSettings, database: str) -> bool:
    """Whether ``database`` answers a query (quickly; for health checks)."""
    try:
        with connect(settings, database=database, autocommit=True, connect_timeout_s=2) as conn:
            return bool(conn.execute("SELECT 1").fetchone() == (1,))
    except (CdcMirrorError, psycopg.Error):
        return False
