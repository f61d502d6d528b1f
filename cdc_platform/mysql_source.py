"""Connections to the MySQL/MariaDB sources: every one is opened with ``connect_settings``.

The collector, its bounded reads, the history replay, the row check, the mirror backend and
the web admin's schema reader all reach a source with its stored password. That password
goes only to an authentication that does not reveal it: when a server asks for it in
cleartext (``mysql_clear_password``, or MariaDB's ``dialog`` used by PAM) on a connection
without TLS, the connection is refused before the password is sent, unless the instance
says ``allow_cleartext_password``. The same holds for RSA full authentication
(``caching_sha2_password`` when the server wants more than the scramble, and
``sha256_password``): pymysql would ask the server for its RSA public key and encrypt the
password with whatever key came back, so a server someone redirected the instance to
would decrypt it. Without TLS that is refused too, unless the instance pins the real
server's key (``server_public_key``: PEM text or a file), which is then the only key the
password is encrypted with. ``caching_sha2_password``'s fast path (a scramble) stays
allowed. A server someone redirected the instance to learns nothing. On TLS (or a local
Unix socket) pymysql answers as it always does.

The rule rides on pymysql's ``auth_plugin_map``, so python-mysql-replication, which opens its
own connections from the settings it is given, is covered by passing it the same settings.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Protocol

import pymysql
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import SecretStr
from pymysql import _auth
from pymysql.err import OperationalError

from simple_binlog.errors import ConfigError

# Authentication plugins that send the password as it is.
CLEARTEXT_PLUGINS = ("mysql_clear_password", "dialog")
# Authentication plugins that may encrypt the password with a server's RSA public key.
RSA_PLUGINS = ("caching_sha2_password", "sha256_password")
CONNECT_TIMEOUT_S = 10


class CleartextPasswordRefusedError(ConfigError):
    """A source asked for the password in cleartext, or encrypted with a key of its own
    choosing, without TLS; it was not sent (fatal)."""


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


def _roundtrip(conn: Any, data: bytes) -> Any:
    conn.write_packet(data)
    packet = conn._read_packet()
    packet.check_error()
    return packet


class _RsaGuard:
    """pymysql's handler for ``caching_sha2_password`` and ``sha256_password``: the
    password only over TLS or a socket, or encrypted with the instance's pinned key; never
    with a key the server sends."""

    def __init__(self, where: str, plugin: str, pinned_key: bytes | None, connection: Any):
        self._where = where
        self._plugin = plugin
        self._pinned_key = pinned_key
        self._connection = connection

    def authenticate(self, packet: Any) -> Any:
        conn = self._connection
        if conn._secure or not conn.password:  # TLS or a socket; or nothing to reveal
            conn.server_public_key = self._pinned_key
            return conn._process_auth(self._plugin.encode(), packet)
        if packet.is_auth_switch_request():
            salt = packet.read_all()
            conn.salt = salt[:-1] if salt.endswith(b"\0") else salt
            if self._plugin == "caching_sha2_password":  # the fast path: a scramble
                packet = _roundtrip(conn, _auth.scramble_caching_sha2(conn.password, conn.salt))
        if self._plugin == "caching_sha2_password":
            if not packet.is_extra_auth_data():
                raise OperationalError(f"caching sha2: unknown packet {packet._data[:1]!r}")
            packet.advance(1)
            result = packet.read_uint8()
            if result == 3:  # the scramble was enough
                packet = conn._read_packet()
                packet.check_error()
                return packet
            if result != 4:
                raise OperationalError(f"caching sha2: unknown result {result}")
        # Full authentication: the password itself, RSA-encrypted. A key the server sent
        # (sha256_password's answer to pymysql's request) is ignored.
        if self._pinned_key is None:
            raise CleartextPasswordRefusedError(
                f"{self._where} asked for the password encrypted with an RSA key it would "
                f"send itself (authentication plugin '{self._plugin}', full authentication) "
                "on a connection without TLS, so it was not sent; connect over TLS, or set "
                "server_public_key on the instance to the real server's public key (PEM "
                "text or a file), or, only if that server is really the instance and the "
                "network is trusted, set allow_cleartext_password: true."
            )
        encrypted = _auth.sha2_rsa_encrypt(conn.password, conn.salt, self._pinned_key)
        return _roundtrip(conn, encrypted)


def pinned_public_key(source: Any) -> bytes | None:
    """The instance's ``server_public_key`` as PEM bytes (read from its file if it is a
    path), or None when it pins none."""
    value = (getattr(source, "server_public_key", "") or "").strip()
    if not value:
        return None
    where = f"the server_public_key of MySQL instance {source.name!r}"
    if value.startswith("-----BEGIN"):
        pem = value.encode()
    else:
        try:
            pem = Path(value).expanduser().read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"{where} names the file {value!r}, which cannot be read ({exc.strerror})."
            ) from None
    try:
        load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise ConfigError(f"{where} is not a PEM public key.") from None
    return pem


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
    pinned_key = pinned_public_key(source)
    where = f"MySQL instance {source.name!r} at {settings['host']}:{settings['port']}"
    handlers: dict[str, Any] = {}
    if not source.allow_cleartext_password:
        handlers.update(
            (plugin, functools.partial(_CleartextGuard, where, plugin))
            for plugin in CLEARTEXT_PLUGINS
        )
    if pinned_key is not None or not source.allow_cleartext_password:
        handlers.update(
            (plugin, functools.partial(_RsaGuard, where, plugin, pinned_key))
            for plugin in RSA_PLUGINS
        )
    if pinned_key is not None:
        settings["server_public_key"] = pinned_key
    if handlers:
        settings["auth_plugin_map"] = handlers
    return settings


def connect(source: SourceAccess, **options: Any) -> pymysql.connections.Connection[Any]:
    """A connection to ``source`` (see ``connect_settings``).

    Raises pymysql's errors as they are (each caller says what failed in its own words), and
    CleartextPasswordRefusedError when the server wants the password in cleartext, or
    encrypted with a key it sends, without TLS.
    """
    return pymysql.connect(**connect_settings(source, **options))


# -- positions as the servers print them ---------------------------------------------------------
# A MySQL GTID set (``@@gtid_executed``: ``uuid:1-5:7,uuid:tag:1-3``) or a MariaDB GTID list
# (``@@gtid_binlog_pos``: ``domain-server-seq,…``), read as text: the collector's preflight
# compares the server's with its resume position, validation the collector's published one
# with the source's. (The collector's typed, canonical GtidSet for the replication protocol
# is ``collector.mysql_gtid``.)

GtidSet = dict[str, list[tuple[int, int]]]
"""A MySQL GTID set: source (``uuid`` or ``uuid:tag``) → inclusive intervals."""


def gtid_set(text: str) -> GtidSet:
    """A MySQL GTID set (``uuid:1-5:7,uuid:tag:1-3``) as source (``uuid`` or ``uuid:tag``)
    → inclusive intervals."""
    intervals: GtidSet = {}
    for part in filter(None, (p.strip() for p in text.replace("\n", "").split(","))):
        uuid, *rest = part.split(":")
        key = uuid.lower()
        for item in rest:
            if item and not item[0].isdigit():
                key = f"{uuid.lower()}:{item.lower()}"  # a tag: the intervals after it are its
                continue
            first, _, last = item.partition("-")
            intervals.setdefault(key, []).append((int(first), int(last or first)))
    return intervals


def covers(outer: GtidSet, inner: GtidSet) -> bool:
    """Whether every GTID of ``inner`` is in ``outer``."""
    for key, ranges in inner.items():
        merged = _merged(outer.get(key, []))
        for first, last in ranges:
            if not any(a <= first and last <= b for a, b in merged):
                return False
    return True


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def mariadb_domains(text: str) -> dict[int, tuple[str, int]]:
    """domain → (the GTID, its sequence) of a MariaDB GTID list (brackets allowed, as
    ``Gtid_list`` events print it); the highest sequence per domain (a binlog state holds one
    entry per domain and server). ValueError when ``text`` is not such a list."""
    domains: dict[int, tuple[str, int]] = {}
    for entry in filter(None, (e.strip() for e in text.strip("[] ").split(","))):
        pieces = entry.split("-")
        if len(pieces) != 3 or not all(piece.isdigit() for piece in pieces):
            raise ValueError(f"{entry!r} is not a MariaDB GTID (domain-server-sequence).")
        domain, seq = int(pieces[0]), int(pieces[2])
        if domain not in domains or domains[domain][1] < seq:
            domains[domain] = (entry, seq)
    return domains


def position_covers(published: str, wanted: str) -> bool:
    """Whether the position ``published`` includes every transaction of the position
    ``wanted``: both MariaDB GTID lists (per domain, a sequence at least as high) or both
    MySQL GTID sets. An empty ``wanted`` is covered by anything."""
    if not wanted.strip():
        return True
    try:
        mine = mariadb_domains(wanted)
    except ValueError:
        return covers(gtid_set(published), gtid_set(wanted))
    try:
        theirs = mariadb_domains(published)
    except ValueError:
        return False
    return all(domain in theirs and theirs[domain][1] >= seq for domain, (_, seq) in mine.items())
