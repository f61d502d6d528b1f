"""Connections to the stack's first MariaDB instance as its admin user, for test set-ups."""

from __future__ import annotations

from typing import Any

import pymysql

from cdc_platform.config import Settings

# Temporal values read and written as UTC, whatever the server's zone (as the collector reads).
UTC_SESSION = "SET time_zone = '+00:00'"


def admin_connection(settings: Settings, **options: Any) -> pymysql.connections.Connection:
    """An autocommit connection to the stack's first MariaDB instance as its admin user."""
    return pymysql.connect(
        host="127.0.0.1",
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=True,
        **options,
    )


def utc_admin_connection(settings: Settings) -> pymysql.connections.Connection:
    """``admin_connection`` with the session's time zone UTC."""
    return admin_connection(settings, init_command=UTC_SESSION)
