"""``cdc-mirror sql-server``: Spark's Thrift server (HiveServer2 protocol) over the lake.

Downstream users query the Hive snapshots and the raw change layer the way they query Hive:
with a HiveServer2 client (beeline, PyHive, JDBC ``jdbc:hive2://host:port/default``). The
server runs in a Spark session built like every other job of cdc-mirror
(``cdc_platform.iceberg.lake_session``): the same metastore, lake catalog and jars, so it
sees each commit as soon as the stream writer or the merge makes it. A day's snapshot is
``lake.ods_snapshot.<table> VERSION AS OF 'dt-<day>'``, or ``ods_snapshot_dt.<table>``
``WHERE dt = '<day>'`` (``cdc_platform.lake_snapshots``).

Who gets in: it listens on loopback by default, where it checks no login. It refuses to
listen on any other address unless logins are checked: one user and password
(``sql_server.user`` / ``sql_server.password``, HiveServer2 ``CUSTOM`` authentication by
``io.cdcmirror.hive.SqlServerAuthenticator`` against a salted PBKDF2 hash) or the directory's
users (``sql_server.ldap_url``, HiveServer2 ``LDAP``).

What they can do: read the catalog's tables, nothing else of the host. Its sessions run with
``spark.sql.runSQLOnFiles=false`` and the ``io.cdcmirror.spark.SqlLockdown`` extension, which
refuses reflection (``reflect``, ``java_method``, ``try_reflect``, every Hive function: UDF,
UDAF, UDTF), reads by path, ``TRANSFORM ... USING``, every command but SHOW, DESCRIBE, EXPLAIN,
USE, SET and temporary views, ``RESET``, and SET of any key but a few harmless ones
(``SqlLockdown.SETTABLE``: time zone, ANSI mode, shuffle partitions, adaptive execution). The
settings a client sends when it connects (``jdbc:hive2://...?key=value``, ``#var=value``) reach
the session without a SET, so the extension refuses every statement of a session whose
settings differ from the server's outside that list, and ``SqlLockdown.guardSystemProperties``
refuses the JVM system properties a client would set when it connects (``set:system:``),
which the login checks read. ``cdc-mirror sql`` is not locked down: whoever runs it already
runs code on the host.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from cdc_platform.config import Settings, SqlServerSettings
from cdc_platform.hosts import is_loopback
from simple_binlog.errors import CdcMirrorError, ConfigError

log = logging.getLogger(__name__)

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
LOCKDOWN_EXTENSION = "io.cdcmirror.spark.SqlLockdown"
AUTHENTICATOR = "io.cdcmirror.hive.SqlServerAuthenticator"
PASSWORD_ITERATIONS = 100_000  # PBKDF2-HMAC-SHA256, each login: about 50 ms of one core


@dataclass(frozen=True)
class PasswordHash:
    """What the server keeps of the password (base64 salt and digest)."""

    iterations: int
    salt: str
    digest: str


def hash_password(password: SecretStr) -> PasswordHash:
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac(
        "sha256", password.get_secret_value().encode(), salt, PASSWORD_ITERATIONS
    )
    return PasswordHash(
        PASSWORD_ITERATIONS, base64.b64encode(salt).decode(), base64.b64encode(digest).decode()
    )


def check_bind(host: str, auth: SqlServerSettings) -> None:
    """Pure: refuse an address other machines reach when no login is checked."""
    if not auth.authenticates and not is_loopback(host):
        raise ConfigError(
            f"the SQL server would listen on {host!r}, which other machines can reach, "
            "without checking logins; set sql_server.user and sql_server.password (the "
            "password best through CDC_MIRROR_SQL_SERVER__PASSWORD) or sql_server.ldap_url "
            "in the configuration, or listen on 127.0.0.1."
        )


def _authentication(auth: SqlServerSettings) -> str:
    if auth.user is not None:
        return "CUSTOM"
    return "LDAP" if auth.ldap_url is not None else "NONE"


def thrift_conf(host: str, port: int, auth: SqlServerSettings) -> dict[str, str]:
    """Pure: the Spark settings of the HiveServer2 endpoint and of the sessions it serves."""
    return {
        # HiveServer2 reads its settings from the session's Hadoop configuration.
        "spark.hadoop.hive.server2.thrift.bind.host": host,
        "spark.hadoop.hive.server2.thrift.port": str(port),
        "spark.hadoop.hive.server2.transport.mode": "binary",
        "spark.hadoop.hive.server2.authentication": _authentication(auth),
        # Queries run as the server's user: there is no Hadoop cluster to impersonate on.
        "spark.hadoop.hive.server2.enable.doAs": "false",
        "spark.ui.showConsoleProgress": "false",
        # No `SELECT * FROM text.`/etc/passwd``; the extension refuses the rest (reflection,
        # reads by path, shell transforms, commands that are not read-only) whatever is SET.
        "spark.sql.runSQLOnFiles": "false",
        "spark.sql.extensions": LOCKDOWN_EXTENSION,
    }


def hive_auth_properties(auth: SqlServerSettings) -> dict[str, str]:
    """Pure: what HiveServer2's login checks read as JVM system properties.

    They build their own ``HiveConf()`` for each login, which sees system properties and not
    the session's settings. No secret is among them.
    """
    if auth.user is not None:
        return {"hive.server2.custom.authentication.class": AUTHENTICATOR}
    if auth.ldap_url is not None:
        found = {"hive.server2.authentication.ldap.url": auth.ldap_url}
        if auth.ldap_base_dn is not None:
            found["hive.server2.authentication.ldap.baseDN"] = auth.ldap_base_dn
        return found
    return {}


def _install_authentication(jvm: Any, auth: SqlServerSettings) -> None:
    """Hand the login check its settings, and the password's hash, through py4j only."""
    for key, value in hive_auth_properties(auth).items():
        jvm.java.lang.System.setProperty(key, value)
    if auth.user is not None and auth.password is not None:
        hashed = hash_password(auth.password)
        authenticator = getattr(jvm, AUTHENTICATOR)
        authenticator.configure(auth.user, hashed.iterations, hashed.salt, hashed.digest)


def address_family(host: str) -> socket.AddressFamily:
    """Pure: the socket family of a listening address (IPv6 for ``::1``, ``::``...)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET  # localhost or a name: probed over IPv4, as before


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(address_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"the SQL server cannot listen on {host}:{port} ({exc.strerror}); "
                "pick another --port."
            ) from None


def _listening(host: str, port: int) -> bool:
    with socket.socket(address_family(host), socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0


def run_sql_server(
    settings: Settings, host: str, port: int, started_timeout_s: float = 180.0
) -> None:
    """Serve until SIGTERM/SIGINT."""
    auth = settings.sql_server
    check_bind(host, auth)
    _check_port_free(host, port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    from cdc_platform.iceberg import lake_session  # noqa: PLC0415 - starts a JVM

    # The lake's Iceberg catalog too: the snapshots' day tags (VERSION AS OF) and the raw
    # layer are its tables. Reads need none of Iceberg's SQL extensions (its procedures and
    # DDL), so the lockdown stays the sessions' only extension.
    spark = lake_session(settings, "cdc-mirror-sql-server", thrift_conf(host, port, auth))
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        _install_authentication(jvm, auth)
        # After the login settings are in place: no session may change them (set:system:).
        getattr(jvm, LOCKDOWN_EXTENSION).guardSystemProperties()
        server_class = getattr(jvm, THRIFT_SERVER)
        # startWithSparkSession(session, exitOnError=false): a failure is raised here, not a
        # System.exit of the JVM under Python.
        server = server_class.startWithSparkSession(spark._jsparkSession, False)
        waited = 0.0
        while not _listening(host, port):
            if stop.wait(0.5):
                break
            waited += 0.5
            if waited > started_timeout_s:
                raise CdcMirrorError(
                    f"Spark's Thrift server did not listen on {host}:{port} within "
                    f"{started_timeout_s:.0f} s; see the log above."
                )
        if not stop.is_set():
            log.info(
                "SQL server ready (logins: %s): beeline -u jdbc:hive2://%s:%d/default%s",
                _authentication(auth),
                host,
                port,
                f" -n {auth.user} -p <password>" if auth.user is not None else "",
            )
        stop.wait()
        log.info("stopping the SQL server")
        server.stop()
    finally:
        spark.stop()
