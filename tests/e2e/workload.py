"""The chaos suite's randomized workload: a sharded schema of its own and a thread writing
inserts, updates (primary-key changes among them), deletes and multi-row transactions.

The thread survives MariaDB restarts: on a connection error it reconnects (bounded backoff)
and reloads the live keys from MySQL, because a transaction whose COMMIT was cut off may or
may not have happened. Row changes are counted as *certain* (committed and acknowledged) or
*uncertain* (the COMMIT's answer was lost), so the raw layer's count can be bounded from both
sides.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql

from cdc_platform.config import Settings

log = logging.getLogger(__name__)

DDL = """CREATE TABLE `{db}`.`{table}` (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  order_no VARCHAR(32) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  note VARCHAR(64) NULL,
  status ENUM('NEW','PAID','SHIPPED','CANCELLED') NOT NULL,
  qty INT UNSIGNED NULL,
  created DATETIME(3) NOT NULL,
  updated TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  payload BLOB NULL,
  ratio DOUBLE NULL
)"""
# Ids near the top of BIGINT UNSIGNED: every store must carry them past int64.
FIRST_ID = 18_446_744_073_708_000_000
STATUSES = ("NEW", "PAID", "SHIPPED", "CANCELLED")
NOTES: tuple[str | None, ...] = (None, "", "x:y", "100%", "note")
# What a server restart raises, depending on where the statement was cut off. Integrity and
# syntax errors are not among them: they would be the workload's own bugs and stop it.
CONNECTION_ERRORS = (
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
    pymysql.err.InternalError,
)


def admin_connection(settings: Settings, autocommit: bool = False) -> Any:
    return pymysql.connect(
        host="127.0.0.1",
        port=settings.instances[0].port,
        user=settings.stack.admin_user,
        password=settings.stack.admin_password.get_secret_value(),
        autocommit=autocommit,
        connect_timeout=5,
        read_timeout=30,
        write_timeout=30,
        init_command="SET time_zone = '+00:00'",
    )


@dataclass(frozen=True)
class ShardedSchema:
    db_prefix: str
    databases: int = 4
    tables: int = 2
    table_prefix: str = "orderinfo"

    @property
    def shards(self) -> list[tuple[str, str]]:
        return [
            (f"{self.db_prefix}_{d:02d}", f"{self.table_prefix}_{t:02d}")
            for d in range(self.databases)
            for t in range(self.tables)
        ]

    def create(self, settings: Settings) -> None:
        with admin_connection(settings, autocommit=True) as conn, conn.cursor() as cursor:
            for db in sorted({db for db, _ in self.shards}):
                cursor.execute(f"CREATE DATABASE `{db}`")
            for db, table in self.shards:
                cursor.execute(DDL.format(db=db, table=table))

    def drop(self, settings: Settings) -> None:
        with admin_connection(settings, autocommit=True) as conn, conn.cursor() as cursor:
            for db in sorted({db for db, _ in self.shards}):
                cursor.execute(f"DROP DATABASE IF EXISTS `{db}`")


@dataclass
class WorkloadStats:
    certain_changes: int = 0
    uncertain_changes: int = 0
    transactions: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)


class Workload(threading.Thread):
    """Writes until ``stop`` is set (at about ``rate`` row changes per second)."""

    def __init__(self, settings: Settings, schema: ShardedSchema, seed: int, rate: float) -> None:
        super().__init__(name="chaos-workload", daemon=True)
        self.settings = settings
        self.schema = schema
        self.rng = random.Random(seed)
        self.rate = rate
        self.stop = threading.Event()
        self.stats = WorkloadStats()
        self.live: dict[tuple[str, str], list[int]] = {shard: [] for shard in schema.shards}
        self.next_id = FIRST_ID
        self.fatal: BaseException | None = None

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        conn: Any = None
        started = time.monotonic()
        try:
            while not self.stop.is_set():
                if conn is None:
                    conn = self._connect()
                    if conn is None:
                        continue
                pending = 0
                try:
                    with conn.cursor() as cursor:
                        for _ in range(self.rng.randrange(1, 8)):
                            pending += self._statement(cursor)
                    try:
                        conn.commit()
                    except CONNECTION_ERRORS:
                        self.stats.uncertain_changes += pending
                        raise
                    self.stats.certain_changes += pending
                    self.stats.transactions += 1
                except CONNECTION_ERRORS as exc:
                    # The server went away (a restart): reconnect, and learn the live keys
                    # again since the last transaction may or may not have committed.
                    self.stats.errors.append(type(exc).__name__)
                    self._close(conn)
                    conn = None
                    self._reload_keys()
                    continue
                # Pace: at most `rate` changes per second on average since the start.
                done = self.stats.certain_changes + self.stats.uncertain_changes
                ahead = done / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    self.stop.wait(min(ahead, 1.0))
        except BaseException as exc:  # the test reports it; a thread cannot raise to it
            self.fatal = exc
            raise
        finally:
            self._close(conn)

    @property
    def changes(self) -> int:
        return self.stats.certain_changes + self.stats.uncertain_changes

    def _connect(self) -> Any:
        try:
            return admin_connection(self.settings)
        except pymysql.err.OperationalError:
            self.stats.reconnects += 1
            self.stop.wait(0.5)
            return None

    @staticmethod
    def _close(conn: Any) -> None:
        if conn is not None:
            with contextlib.suppress(pymysql.err.Error):
                conn.close()

    def _reload_keys(self) -> None:
        deadline = time.monotonic() + 300
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                with admin_connection(self.settings) as conn, conn.cursor() as cursor:
                    for db, table in self.schema.shards:
                        cursor.execute(f"SELECT id FROM `{db}`.`{table}`")
                        self.live[(db, table)] = [int(row[0]) for row in cursor.fetchall()]
                    cursor.execute(
                        "SELECT GREATEST("
                        + ", ".join(
                            f"(SELECT COALESCE(MAX(id), 0) FROM `{db}`.`{table}`)"
                            for db, table in self.schema.shards
                        )
                        + ")"
                    )
                    self.next_id = max(self.next_id, int(cursor.fetchone()[0]))
                self.stats.reconnects += 1
                return
            except CONNECTION_ERRORS:
                self.stop.wait(0.5)

    # -- statements ----------------------------------------------------------------------------
    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _statement(self, cursor: Any) -> int:
        """One statement on a random shard; returns the rows it changed."""
        rng = self.rng
        shard = rng.choice(self.schema.shards)
        db, table = shard
        ids = self.live[shard]
        action = rng.random()
        target = f"`{db}`.`{table}`"
        if action < 0.30 and ids:
            chosen = rng.sample(ids, min(len(ids), rng.choice((1, 1, 1, 3))))
            marks = ", ".join(["%s"] * len(chosen))
            return int(
                cursor.execute(
                    f"UPDATE {target} SET amount = amount + %s, status = %s, note = %s, "
                    f"qty = %s WHERE id IN ({marks})",
                    (
                        Decimal(rng.randrange(1, 1000)) / 100,
                        rng.choice(STATUSES),
                        rng.choice(NOTES),
                        rng.choice((None, rng.randrange(2**32))),
                        *chosen,
                    ),
                )
            )
        if action < 0.42 and ids:
            victim = ids.pop(rng.randrange(len(ids)))
            return int(cursor.execute(f"DELETE FROM {target} WHERE id = %s", (victim,)))
        if action < 0.50 and ids:
            old = ids.pop(rng.randrange(len(ids)))
            new = self._new_id()
            changed = int(cursor.execute(f"UPDATE {target} SET id = %s WHERE id = %s", (new, old)))
            ids.append(new)
            return changed
        rows = rng.choice((1, 1, 1, 2, 5))
        values = []
        for _ in range(rows):
            new = self._new_id()
            ids.append(new)
            values.append(
                (
                    new,
                    f"ORD{new % 10**12:012d}",
                    Decimal(rng.randrange(10**8)) / 100,
                    rng.choice(NOTES),
                    rng.choice(STATUSES),
                    rng.choice((None, 0, rng.randrange(2**32))),
                    rng.randrange(10**5),
                    rng.choice((None, b"", rng.randbytes(rng.randrange(1, 24)))),
                    rng.choice((None, rng.random() * 1000)),
                )
            )
        marks = ", ".join(["(%s, %s, %s, %s, %s, %s, NOW(3) - INTERVAL %s SECOND, %s, %s)"] * rows)
        flat = [part for row in values for part in row]
        return int(
            cursor.execute(
                f"INSERT INTO {target} (id, order_no, amount, note, status, qty, created, "
                f"payload, ratio) VALUES {marks}",
                flat,
            )
        )
