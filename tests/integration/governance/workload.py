"""A sharded MariaDB table changed by a randomized workload that plants sensitive values.

``gv<tag>_00..01.users_00..01`` = the logical table ``gv<tag>_users``. Every INSERT and
UPDATE writes freshly generated valid values (phone, e-mail, ID number, card, IP address)
into their columns and near-misses (failed checksum, wrong length, longer digit runs) into
``note``. The workload keeps every planted value, every near-miss, the live rows, and the
detections the collector must count: one per value in each published row image, a
before-image value equal to the after-image's counted once.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cdc_platform.config import Settings
from tests.integration.mariadb_admin import admin_connection as admin
from tests.unit.governance.planted import VALID, near_misses

SHARDS = 2
DDL = """CREATE TABLE `{db}`.`{table}` (
  id BIGINT NOT NULL PRIMARY KEY,
  phone VARCHAR(32) NULL,
  email VARCHAR(96) NULL,
  id_no CHAR(18) NULL,
  card VARCHAR(32) NULL,
  ip VARCHAR(45) NULL,
  note VARCHAR(255) NULL,
  amount DECIMAL(10,2) NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)"""
# Column → the detector its planted values belong to (ip: ipv4 or ipv6).
PLANTED_COLUMNS = {
    "phone": "cn_mobile",
    "email": "email",
    "id_no": "prc_id",
    "card": "bank_card",
    "ip": "ip",
}
POLICIES = [
    {"column": "phone", "action": "mask"},
    {"column": "email", "action": "hash"},
    {"column": "id_no", "action": "drop"},
    {"column": "card", "action": "mask"},
    {"column": "ip", "action": "mask"},
    # note: pass — it only ever holds near-misses, which must come through unchanged.
]
SALT = "governance-test-salt-0123"


@dataclass
class PlantedTable:
    settings: Settings
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    rng: random.Random = field(default_factory=lambda: random.Random(20261122))
    planted: set[str] = field(default_factory=set)
    misses: set[str] = field(default_factory=set)
    live: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    detections: Counter[tuple[str, str]] = field(default_factory=Counter)
    changes: int = 0
    _next_id: int = 1

    @property
    def prefix(self) -> str:
        return f"gv{self.tag}"

    @property
    def logical(self) -> str:
        return f"{self.prefix}_users"

    def shards(self) -> list[tuple[str, str]]:
        return [(f"{self.prefix}_{n:02d}", f"users_{n:02d}") for n in range(SHARDS)]

    def policies(self) -> list[dict[str, str]]:
        return [{"table": self.logical, **policy} for policy in POLICIES]

    def create(self) -> None:
        with admin(self.settings) as conn, conn.cursor() as cursor:
            for db, table in self.shards():
                cursor.execute(f"CREATE DATABASE `{db}`")
                cursor.execute(DDL.format(db=db, table=table))

    def drop(self) -> None:
        with admin(self.settings) as conn, conn.cursor() as cursor:
            for db, _ in self.shards():
                cursor.execute(f"DROP DATABASE IF EXISTS `{db}`")

    def _values(self) -> dict[str, Any]:
        rng = self.rng
        ip_kind = rng.choice(("ipv4", "ipv6"))
        row: dict[str, Any] = {
            "phone": VALID["cn_mobile"](rng),
            "email": VALID["email"](rng),
            "id_no": VALID["prc_id"](rng),
            "card": VALID["bank_card"](rng),
            "ip": VALID[ip_kind](rng),
        }
        self.planted.update(row.values())
        row["_ip_kind"] = ip_kind
        misses = rng.sample(near_misses(rng), 3)
        self.misses.update(misses)
        row["note"] = " ".join(misses)
        row["amount"] = f"{rng.randrange(100000) / 100:.2f}"
        return row

    def _count(self, row: dict[str, Any], before: dict[str, Any] | None = None) -> None:
        for column, detector in PLANTED_COLUMNS.items():
            name = row["_ip_kind"] if detector == "ip" else detector
            self.detections[(column, name)] += 1
            if before is not None and before[column] != row[column]:
                old = before["_ip_kind"] if detector == "ip" else detector
                self.detections[(column, old)] += 1

    def run(self, steps: int) -> None:
        """``steps`` autocommitted changes: inserts, updates of every column, deletes."""
        columns = ["phone", "email", "id_no", "card", "ip", "note", "amount"]
        with admin(self.settings) as conn, conn.cursor() as cursor:
            for _ in range(steps):
                db, table = self.rng.choice(self.shards())
                keys = [k for k in self.live if k[:2] == (db, table)]
                action = self.rng.random()
                if action < 0.5 or len(keys) < 3:
                    row = self._values()
                    row_id = self._next_id
                    self._next_id += 1
                    cursor.execute(
                        f"INSERT INTO `{db}`.`{table}` (id, {', '.join(columns)}) "
                        f"VALUES (%s{', %s' * len(columns)})",
                        (row_id, *(row[c] for c in columns)),
                    )
                    self.live[(db, table, row_id)] = row
                    self._count(row)
                elif action < 0.85:
                    key = self.rng.choice(keys)
                    before = self.live[key]
                    row = self._values()
                    cursor.execute(
                        f"UPDATE `{db}`.`{table}` SET {', '.join(f'{c} = %s' for c in columns)} "
                        "WHERE id = %s",
                        (*(row[c] for c in columns), key[2]),
                    )
                    self.live[key] = row
                    self._count(row, before)
                else:
                    key = self.rng.choice(keys)
                    cursor.execute(f"DELETE FROM `{db}`.`{table}` WHERE id = %s", (key[2],))
                    self._count(self.live.pop(key))
                self.changes += 1

    def leaks(self, text: str) -> list[str]:
        """Planted values found in ``text`` (an e-mail is looked for by its local part too)."""
        return [value for value in self.planted if value in text]
