"""Random SimpleBinlog streams for the mirror tests: inserts, updates (some changing the key),
deletes and re-inserts over sharded tables ``shop_00..01.orders_00..01`` → logical table
``shop_orders``; optionally a column ``extra`` appears part-way (schema evolution)."""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field

from cdc_platform.config import TableMirror
from simple_binlog.message import EventType, SimpleBinlog, Source

SHARDS = [(f"shop_{d:02d}", f"orders_{t:02d}") for d in range(2) for t in range(2)]
LOGICAL = "shop_orders"
BASE_TYPES = {
    "id": "bigint(20) unsigned",
    "amount": "decimal(12,2)",
    "note": "varchar(64)",
    "created": "datetime(6)",
    "flag": "tinyint(4)",
    "blob": "blob",
}
EXTRA_TYPES = {**BASE_TYPES, "extra": "int(11)"}


def table_mirror(**overrides: object) -> TableMirror:
    fields: dict[str, object] = {"db_prefix": "shop", "table_prefix": "orders", **overrides}
    return TableMirror(**fields)  # type: ignore[arg-type]


@dataclass
class Workload:
    """Generates messages in binlog order; ``live`` is what MySQL would hold."""

    rng: random.Random
    offset: int = 1_795_333_510_000_001
    live: dict[str, tuple[tuple[str, str], dict[str, object]]] = field(default_factory=dict)
    next_id: int = 1
    evolved: bool = False

    def _types(self) -> dict[str, str]:
        return EXTRA_TYPES if self.evolved else BASE_TYPES

    def _row(self, key: str) -> dict[str, object]:
        rng = self.rng
        row: dict[str, object] = {
            "id": key,
            "amount": f"{rng.randrange(0, 10**6) / 100:.2f}",
            "note": rng.choice([None, "", "gift", "o'clock", "a:b%c"]),
            "created": f"2026-11-{rng.randrange(1, 29):02d} 10:00:00.{rng.randrange(10**6):06d}",
            "flag": rng.randrange(-128, 128),
            "blob": base64.b64encode(rng.randbytes(rng.randrange(0, 6))).decode(),
        }
        if self.evolved:
            row["extra"] = rng.choice([None, rng.randrange(-1000, 1000)])
        return row

    def _message(
        self,
        shard: tuple[str, str],
        event: EventType,
        content: dict[str, object],
        before: dict[str, object] | None = None,
    ) -> SimpleBinlog:
        self.offset += 1
        return SimpleBinlog(
            binlog_offset=self.offset,
            execute_time=self.offset // 10**6 * 1000,
            event_type=event,
            schema_name=shard[0],
            table_name=shard[1],
            source=Source.BINLOG,
            content=content,  # type: ignore[arg-type]
            column_types=self._types(),
            primary_keys=("id",),
            before_content=before,  # type: ignore[arg-type]
        )

    def _fresh_key(self) -> str:
        # Large ids: BIGINT UNSIGNED values beyond int64 travel as strings.
        key = str(18_446_744_073_709_000_000 + self.next_id)
        self.next_id += 1
        return key

    def step(self) -> SimpleBinlog:
        rng = self.rng
        action = rng.random()
        if not self.live or action < 0.3:
            key = self._fresh_key()
            shard = rng.choice(SHARDS)
            row = self._row(key)
            self.live[key] = (shard, row)
            return self._message(shard, EventType.INSERT, row)
        key = rng.choice(list(self.live))
        shard, before = self.live[key]
        if action < 0.75:
            after = self._row(key)
            del self.live[key]
            self.live[key] = (shard, after)
            return self._message(shard, EventType.UPDATE, after, dict(before))
        if action < 0.85:
            new_key = self._fresh_key()
            after = {**self._row(new_key)}
            del self.live[key]
            self.live[new_key] = (shard, after)
            return self._message(shard, EventType.UPDATE, after, dict(before))
        del self.live[key]
        return self._message(shard, EventType.DELETE, dict(before))

    def messages(self, count: int) -> list[SimpleBinlog]:
        return [self.step() for _ in range(count)]

    def evolve(self) -> None:
        """From now on rows carry a new column ``extra`` (an ALTER TABLE … ADD in MySQL)."""
        self.evolved = True


def shuffled_batches(
    messages: list[SimpleBinlog], rng: random.Random, duplicate_share: float = 0.3
) -> list[list[SimpleBinlog]]:
    """The stream out of order, with duplicates, cut in batches of random size."""
    noisy = list(messages) + rng.sample(messages, int(len(messages) * duplicate_share))
    rng.shuffle(noisy)
    batches, start = [], 0
    while start < len(noisy):
        size = rng.randrange(1, 200)
        batches.append(noisy[start : start + size])
        start += size
    return batches
