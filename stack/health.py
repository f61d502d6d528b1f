"""Health checks and first-start provisioning, each speaking the service's own protocol."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from cdc_platform.config import PostgresSettings
from simple_binlog.errors import CdcMirrorError

log = logging.getLogger(__name__)


def mariadb_answers(socket_path: Path, os_user: str) -> bool:
    import pymysql  # noqa: PLC0415 - keep 'stack status' light when unused

    if not socket_path.exists():
        return False
    try:
        connection = pymysql.connect(unix_socket=str(socket_path), user=os_user, connect_timeout=2)
    except pymysql.MySQLError:
        return False
    with connection, connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return bool(cursor.fetchone() == (1,))


def mariadb_provision(
    socket_path: Path,
    os_user: str,
    replication_user: str,
    replication_password: str,
    admin_user: str,
    admin_password: str,
) -> None:
    """The collector's user (replication + SELECT) and an admin user for workloads and tests."""
    import pymysql  # noqa: PLC0415

    connection = pymysql.connect(unix_socket=str(socket_path), user=os_user, autocommit=True)
    with connection, connection.cursor() as cursor:
        for host in ("127.0.0.1", "localhost"):
            cursor.execute(
                "CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s",
                (replication_user, host, replication_password),
            )
            cursor.execute(
                "ALTER USER %s@%s IDENTIFIED BY %s", (replication_user, host, replication_password)
            )
            # REPLICATION CLIENT is BINLOG MONITOR on MariaDB 10.5+; PROCESS lets history
            # replay see the server's load; SELECT reads schemas and replays rows.
            cursor.execute(
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, PROCESS ON *.* TO %s@%s",
                (replication_user, host),
            )
            cursor.execute(
                "CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s",
                (admin_user, host, admin_password),
            )
            cursor.execute("ALTER USER %s@%s IDENTIFIED BY %s", (admin_user, host, admin_password))
            cursor.execute(
                "GRANT ALL PRIVILEGES ON *.* TO %s@%s WITH GRANT OPTION", (admin_user, host)
            )


def postgres_answers(settings: PostgresSettings, database: str) -> bool:
    from cdc_platform import warehouse  # noqa: PLC0415 - keep 'stack status' light when unused

    return warehouse.answers(settings, database)


def postgres_provision(settings: PostgresSettings) -> None:
    """The warehouse database and the Hive metastore database, owned by the stack's role."""
    from cdc_platform import warehouse  # noqa: PLC0415

    with (
        warehouse.warehouse_errors("the stack's creation of its databases"),
        warehouse.connect(
            settings, database="postgres", autocommit=True, connect_timeout_s=2
        ) as conn,
    ):
        existing = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
        for database in (settings.warehouse_db, settings.metastore_db):
            if database not in existing:
                conn.execute(f'CREATE DATABASE "{database}" OWNER "{settings.user}"')


# Tables of the metastore schema that a first, partial initialisation would lack.
_METASTORE_TABLES = ("DBS", "TBLS", "PARTITIONS", "TBL_PRIVS", "PART_COL_STATS")


def metastore_ready(settings: PostgresSettings) -> bool:
    """The whole Hive metastore schema exists and its table of databases holds 'default'."""
    from cdc_platform import warehouse  # noqa: PLC0415

    try:
        with (
            warehouse.warehouse_errors("the stack's check of the metastore"),
            warehouse.connect(
                settings, database=settings.metastore_db, autocommit=True, connect_timeout_s=2
            ) as conn,
        ):
            for table in _METASTORE_TABLES:
                found = conn.execute("SELECT to_regclass(%s)", (f'"{table}"',)).fetchone()
                if found is None or found[0] is None:
                    return False
            row = conn.execute(
                'SELECT count(*) FROM "DBS" WHERE "NAME" = %s', ("default",)
            ).fetchone()
            return row is not None and row[0] == 1
    except CdcMirrorError:
        return False


def redis_answers(port: int) -> bool:
    from cdc_platform import redis_store  # noqa: PLC0415

    return redis_store.answers("127.0.0.1", port)


def zookeeper_answers(port: int) -> bool:
    """'srvr' reports a mode only when the server serves requests ('ruok' says 'imok' even
    while a failed start left the server not running)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"srvr")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
    except OSError:
        return False
    return b"Mode: " in reply


def kafka_answers(bootstrap_servers: str) -> bool:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from cdc_platform.kafka import kafka_errors  # noqa: PLC0415

    host, _, port = bootstrap_servers.split(",", maxsplit=1)[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            pass
    except OSError:
        return False
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        with kafka_errors(f"asking {bootstrap_servers} for its brokers"):
            metadata = admin.list_topics(timeout=3)
    except CdcMirrorError:
        return False
    return bool(metadata.brokers)
