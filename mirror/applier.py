"""The ``ChangeApplier``: where a batch of row changes lands (Redis, a warehouse, memory).

Lifecycle: construct it (it connects), call ``apply_batch(changes)`` any number of times,
``close()`` at the end. ``apply_batch`` is atomic per target call and idempotent: a change
is applied to a key only if its binlogOffset is greater than the one stored for the key; a
delete leaves a tombstone at its offset, so an older event replayed later is a no-op. That is
what makes "commit Kafka offsets after apply" exactly-once in effect: a batch applied again
after a crash changes nothing. When ``apply_batch`` raises, nothing may be assumed about
which keys were written, and the caller applies the same batch again (safe, see above).

``MemoryApplier`` is the fake: real code with the semantics of
``mirror.memory.InMemoryMirror``, used by unit tests and as the reference in integration tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from cdc_platform.config import TableMirror
from mirror.plan import RowChange, RowKey, latest_per_key
from simple_binlog.values import JsonScalar


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """``applied``: keys written (rows or tombstones); ``stale``: changes the version guard
    rejected because the target held the same or a newer offset; ``superseded``: changes
    dropped inside the batch because the same key had a newer one there."""

    applied: int = 0
    stale: int = 0
    superseded: int = 0

    def __add__(self, other: ApplyResult) -> ApplyResult:
        return ApplyResult(
            self.applied + other.applied,
            self.stale + other.stale,
            self.superseded + other.superseded,
        )


class ChangeApplier(ABC):
    # The table mirrors of this applier's target, by logical name.
    _tables: dict[str, TableMirror]
    # Tables the target cannot follow (a schema change it cannot hold), by logical name, with
    # the sentence that says why: their changes are no longer applied, the other tables'
    # are. The consumer exports them as ``cdc_mirror_table_stopped``.
    stopped: Mapping[str, str] = MappingProxyType({})

    def set_tables(self, tables: Sequence[TableMirror]) -> None:
        """Between batches (never during one): the target's table mirrors from now on. An
        added table is applied from its next change on; a removed one is no longer sent
        here (the router skips it); its data stays where it is."""
        self._tables = {t.name: t for t in tables}

    @abstractmethod
    def apply_batch(self, changes: Iterable[RowChange]) -> ApplyResult:
        """Apply the batch with the version guard; raises ServiceUnavailableError if the
        target cannot be reached (the caller retries the same batch)."""

    @abstractmethod
    def close(self) -> None: ...


@dataclass(slots=True)
class StoredEntry:
    offset: int
    row: dict[str, JsonScalar] | None  # None: a tombstone
    shard: str


class MemoryApplier(ChangeApplier):
    def __init__(self, tables: Sequence[TableMirror] = ()) -> None:
        self.tables: dict[str, dict[RowKey, StoredEntry]] = {}
        self._tables = {t.name: t for t in tables}

    def apply_batch(self, changes: Iterable[RowChange]) -> ApplyResult:
        plan = latest_per_key(changes)
        applied = stale = 0
        for name, latest in plan.tables.items():
            table = self.tables.setdefault(name, {})
            for key, change in latest.items():
                current = table.get(key)
                if current is not None and current.offset >= change.offset:
                    stale += 1
                    continue
                row = None if change.deleted else dict(change.row)
                table[key] = StoredEntry(change.offset, row, change.shard)
                applied += 1
        return ApplyResult(applied, stale, plan.superseded)

    def rows(self, table: str) -> dict[RowKey, dict[str, JsonScalar]]:
        """The live rows of a logical table (tombstones left out)."""
        return {
            key: entry.row
            for key, entry in self.tables.get(table, {}).items()
            if entry.row is not None
        }

    def close(self) -> None:
        pass
