"""Connections to the MySQL/MariaDB sources: every one is opened with ``connect_settings``.

The collector, its bounded reads, the history replay, the row check, the mirror backend and
the web admin's schema reader all reach a source with its stored password. That password
goes only to an authentication that does not reveal it: when a server asks for it in
cleartext (``mysql_clear_password``, or MariaDB's ``dialog`` used by PAM) on a connection
without TLS, the connection is refused before the password is sent, unless the instance
says ``allow_cleartext_password``. A server someone redirected the instance to learns
nothing. On TLS (or a local Unix socket) pymysql answers as it always does.

The rule rides on pymysql's ``auth_plugin_map``, so python-mysql-replication, which opens its
own connections from the settings it is given, is covered by passing it the same settings.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import pymysql
from pydantic import SecretStr

from simple_binlog.errors import ConfigError

# Authentication plugins that send the password as it is.
CLEARTEXT_PLUGINS = ("mysql_clear_password", "dialog")
CONNECT_TIMEOUT_S = 10


class CleartextPasswordRefusedError(ConfigError):
    """A source asked for the password in cleartext without TLS; it was not sent (fatal)."""


class SourceAccess(Protocol):
    """What a connection to a source needs (``cdc_platform.config.MySQLInstance``, or the
    web admin's ``InstanceAccess``)."""

    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def password(self) -> SecretStr | str: ...
    @property
    def allow_cleartext_password(self) -> bool: ...


class _CleartextGuard:
    """pymysql's handler for a cleartext plugin: the password only over TLS or a socket."""

    def __init__(self, where: str, plugin: str, connection: Any) -> None:
        self._where = where
        self._plugin = plugin
        self._connection = connection

    def authenticate(self, packet: Any) -> Any:
        if self._connection._secure:  # TLS, or a local Unix socket
            # pymysql's own answer to the plugin (without a handler: the password).
            return self._connection._process_auth(self._plugin.encode(), packet)
        raise CleartextPasswordRefusedError(
            f"{self._where} asked for the password in cleartext (authentication plugin "
            f"'{self._plugin}') on a connection without TLS, so it was not sent; only if that "
            "server is really the instance and the network is trusted, set "
            "allow_cleartext_password: true on the instance."
        )


def connect_settings(source: SourceAccess, **options: Any) -> dict[str, Any]:
    """pymysql's connection arguments for ``source``; ``options`` add to them or override
    them (e.g. a replica's host and port). A fresh dict each call: callers may change it."""
    password = source.password
    secret = password.get_secret_value() if isinstance(password, SecretStr) else password
    settings: dict[str, Any] = {
        "host": source.host,
        "port": source.port,
        "user": source.user,
        "password": secret,
        "connect_timeout": CONNECT_TIMEOUT_S,
    }
    settings.update(options)
    if not source.allow_cleartext_password:
        where = f"MySQL instance {source.name!r} at {settings['host']}:{settings['port']}"
        settings["auth_plugin_map"] = {
            plugin: functools.partial(_CleartextGuard, where, plugin)
            for plugin in CLEARTEXT_PLUGINS
        }
    return settings


def connect(source: SourceAccess, **options: Any) -> pymysql.connections.Connection[Any]:
    """A connection to ``source`` (see ``connect_settings``).

    Raises pymysql's errors as they are (each caller says what failed in its own words), and
    CleartextPasswordRefusedError when the server wants the password in cleartext.
    """
    return pymysql.connect(**connect_settings(source, **options))
