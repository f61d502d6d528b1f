"""An in-memory mirror: the reference semantics every real applier must match.

Rows of all shards of a logical table land in one table keyed by the primary key; a change
applies only if its binlogOffset is greater than the one stored for the key, and a DELETE
leaves a tombstone carrying its offset, so replaying older events is a no-op. Real code,
used by the demo, by tests and as the fake of the Redis / warehouse appliers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simple_binlog.message import EventType, SimpleBinlog
from simple_binlog.routing import ShardRouter
from simple_binlog.values import JsonScalar

RowKey = tuple[JsonScalar, ...]


@dataclass
class _Entry:
    offset: int
    row: dict[str, JsonScalar] | None  # None: deleted (a tombstone)


@dataclass
class InMemoryMirror:
    router: ShardRouter
    tables: dict[str, dict[RowKey, _Entry]] = field(default_factory=dict)
    applied: int = 0
    stale: int = 0

    def apply(self, message: SimpleBinlog) -> bool:
        """Apply one change; False if it was older than what the mirror holds (stale)."""
        logical = self.router.route(message.schema_name, message.table_name).name
        table = self.tables.setdefault(logical, {})
        key = message.primary_key_values()
        if message.event_type is EventType.UPDATE and message.before_content is not None:
            old_key = tuple(message.before_content[name] for name in message.primary_keys)
            if old_key != key:
                # A key change is a delete of the old key and an insert of the new one.
                self._put(table, old_key, message.binlog_offset, None)
        row = None if message.event_type is EventType.DELETE else dict(message.content)
        return self._put(table, key, message.binlog_offset, row)

    def _put(
        self,
        table: dict[RowKey, _Entry],
        key: RowKey,
        offset: int,
        row: dict[str, JsonScalar] | None,
    ) -> bool:
        current = table.get(key)
        if current is not None and current.offset >= offset:
            self.stale += 1
            return False
        table[key] = _Entry(offset, row)
        self.applied += 1
        return True

    def rows(self, logical_table: str) -> dict[RowKey, dict[str, JsonScalar]]:
        """The live rows of a logical table (tombstones left out)."""
        return {
            key: entry.row
            for key, entry in self.tables.get(logical_table, {}).items()
            if entry.row is not None
        }
