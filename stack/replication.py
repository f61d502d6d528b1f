"""The failover pair: two MariaDB servers beside the stack's own, a primary and its replica.

``mariadb-primary`` (port 23307, server id 11) and ``mariadb-replica`` (23308, server id 12)
are opt-in services (``stack.services``); the tests that kill a primary and promote its
replica start them by name. The replica follows the primary by GTID
(``MASTER_USE_GTID=slave_pos``) with ``log_slave_updates``, so its binlog carries the
primary's transactions under the primary's GTIDs, server id and event times: a collector can
resume on it by GTID after a failover.

``reset_pair`` brings the pair back to a fresh primary → replica topology whatever a test
left (a killed primary, a promoted replica): databases the tests made are dropped on both
servers, both binlogs are reset, and the replica follows the primary again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from pydantic import SecretStr

from cdc_platform.config import Settings
from simple_binlog.errors import StackError

log = logging.getLogger(__name__)

PRIMARY_PORT = 23307
REPLICA_PORT = 23308
PRIMARY_SERVER_ID = 11
REPLICA_SERVER_ID = 12
# Databases of the tests (dropped by reset_pair): every other database is left alone.
TEST_DATABASE_PREFIX = "fo_"
_SYSTEM = {"mysql", "information_schema", "performance_schema", "sys"}


class _Admin(Protocol):
    """What the pair's setup needs of the stack's settings (``StackSettings``)."""

    @property
    def admin_user(self) -> str: ...
    @property
    def admin_password(self) -> SecretStr: ...


def _root(socket: Path, os_user: str) -> Any:
    import pymysql  # noqa: PLC0415 - keep 'stack status' light when unused

    return pymysql.connect(unix_socket=str(socket), user=os_user, autocommit=True)


def follow(replica_socket: Path, os_user: str, stack: _Admin) -> None:
    """Make the replica follow the primary by GTID, unless it already replicates (idempotent:
    a replica configured earlier is only started)."""
    with _root(replica_socket, os_user) as connection, connection.cursor() as cursor:
        cursor.execute("SHOW SLAVE STATUS")
        if cursor.fetchone() is not None:
            cursor.execute("START SLAVE")
            return
        cursor.execute(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, MASTER_USER = %s, "
            "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
            (PRIMARY_PORT, stack.admin_user, stack.admin_password.get_secret_value()),
        )
        cursor.execute("START SLAVE")


def reset_pair(primary_socket: Path, replica_socket: Path, os_user: str, settings: Settings) -> str:
    """A fresh primary → replica pair (both servers running). Returns the primary's GTID
    position once the replica has caught up (the users are replicated by then)."""
    stack, instance = settings.stack, settings.instances[0]
    with _root(replica_socket, os_user) as connection, connection.cursor() as cursor:
        cursor.execute("STOP SLAVE")
        cursor.execute("RESET SLAVE ALL")
        _forget(cursor)
        cursor.execute("SET GLOBAL gtid_slave_pos = ''")
        cursor.execute("SET GLOBAL read_only = 1")
    with _root(primary_socket, os_user) as connection, connection.cursor() as cursor:
        cursor.execute("STOP ALL SLAVES")
        cursor.execute("RESET SLAVE ALL")
        _forget(cursor)
        cursor.execute("SET GLOBAL read_only = 0")
    from stack import health  # noqa: PLC0415 - the users, now binlogged for the replica

    # The collector's user and the admin, as on the stack's MariaDB.
    health.mariadb_provision(
        primary_socket,
        os_user,
        replication_user=instance.user,
        replication_password=instance.password.get_secret_value(),
        admin_user=stack.admin_user,
        admin_password=stack.admin_password.get_secret_value(),
    )
    follow(replica_socket, os_user, stack)
    with _root(primary_socket, os_user) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT @@gtid_binlog_pos")
        position = str(cursor.fetchone()[0])
    wait_caught_up(replica_socket, os_user, position)
    return position


def wait_caught_up(
    replica_socket: Path, os_user: str, position: str, timeout_s: float = 30
) -> None:
    """Until the replica has applied the primary's ``position``."""
    with _root(replica_socket, os_user) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout_s))
        if cursor.fetchone()[0] != 0:
            cursor.execute("SHOW SLAVE STATUS")
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description or ()]
            status = dict(zip(names, row, strict=True)) if row else {}
            raise StackError(
                f"mariadb-replica did not reach GTID {position} within {timeout_s:.0f} s "
                f"(IO: {status.get('Last_IO_Error') or '-'}; "
                f"SQL: {status.get('Last_SQL_Error') or '-'})."
            )


def promote(replica_socket: Path, os_user: str) -> None:
    """The replica becomes a primary: replication stopped and forgotten, writes allowed."""
    with _root(replica_socket, os_user) as connection, connection.cursor() as cursor:
        cursor.execute("STOP SLAVE")
        cursor.execute("RESET SLAVE ALL")
        cursor.execute("SET GLOBAL read_only = 0")


def _forget(cursor: Any) -> None:
    """Drop the tests' databases (not binlogged) and reset the binlog and GTID state."""
    cursor.execute("SET SESSION sql_log_bin = 0")
    cursor.execute("SHOW DATABASES")
    for (name,) in cursor.fetchall():
        if name.startswith(TEST_DATABASE_PREFIX) and name not in _SYSTEM:
            cursor.execute(f"DROP DATABASE `{name}`")
    cursor.execute("RESET MASTER")
