"""The failover pair as the tests use it: the stack's ``mariadb-primary`` and
``mariadb-replica`` (``stack.replication``), reset to a fresh pair for each test."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import pymysql

from cdc_platform.config import MySQLInstance, Settings
from collector.reader import ServerPosition, server_position
from stack import replication
from stack.manager import LocalStack
from stack.services import MariaDB, _os_user


@dataclass
class FailoverPair:
    settings: Settings
    stack: LocalStack

    def service(self, name: str) -> MariaDB:
        found = next(s for s in self.stack.services if s.name == name)
        assert isinstance(found, MariaDB)
        return found

    @property
    def primary(self) -> MariaDB:
        return self.service("mariadb-primary")

    @property
    def replica(self) -> MariaDB:
        return self.service("mariadb-replica")

    def reset(self) -> str:
        """Both servers up (a killed primary restarted), the replica following the primary."""
        self.stack.up(["mariadb-primary", "mariadb-replica"])
        return replication.reset_pair(
            self.primary.socket,
            self.replica.socket,
            _os_user(),
            self.settings,
        )

    def instance(self, port: int, name: str = "local") -> MySQLInstance:
        """The collector's instance (the stack's user ``cdc``) on one of the pair."""
        return self.settings.instances[0].model_copy(update={"port": port, "name": name})

    def admin(self, port: int = replication.PRIMARY_PORT) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=port,
            user=self.settings.stack.admin_user,
            password=self.settings.stack.admin_password.get_secret_value(),
            autocommit=True,
        )

    def position(self, port: int = replication.PRIMARY_PORT) -> ServerPosition:
        with self.admin(port) as connection, connection.cursor() as cursor:
            return server_position(cursor)

    def kill_primary(self) -> None:
        """kill -9 of the primary's mariadbd: no shutdown, no last words to the replica."""
        pid = self.primary.pid_file.read()
        assert pid is not None, "the primary is not running"
        os.kill(pid, signal.SIGKILL)

    def replica_applied_all(self, timeout_s: float = 30) -> str:
        """Once the replica has applied every event it received: its GTID position."""
        with self.admin(replication.REPLICA_PORT) as connection, connection.cursor() as cursor:
            cursor.execute("SHOW SLAVE STATUS")
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description or ()]
            received = dict(zip(names, row, strict=True))["Gtid_IO_Pos"] if row else ""
            cursor.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (received, timeout_s))
            assert cursor.fetchone()[0] == 0, f"the replica did not apply {received}"
            cursor.execute("SELECT @@gtid_binlog_pos")
            return str(cursor.fetchone()[0])

    def replica_has_all_of_primary(self, timeout_s: float = 30) -> None:
        """Wait until the replica has applied every transaction in the primary's binlog."""
        primary = self.position(replication.PRIMARY_PORT).gtid
        with self.admin(replication.REPLICA_PORT) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (primary, timeout_s))
            assert cursor.fetchone()[0] == 0, f"the replica did not reach {primary}"

    def promote_replica(self) -> None:
        replication.promote(self.replica.socket, _os_user())
