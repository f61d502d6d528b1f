"""Pure planning: SimpleBinlog messages → row changes of logical tables → one change per key.

No I/O here. ``ChangeRouter`` decides, from the ``tables:`` configuration, whether a message
concerns a target at all (a table that is not configured, or not for this target, is skipped
by configuration and counted, never an error), names its logical table through the shard
rules, keeps the source shard (``schema.table``) and extracts the key: ``TableMirror.key`` if
configured, else the message's ``primaryKeys``. An UPDATE that changes the key becomes a
delete of the old key and a write of the new one, both at the message's offset, exactly as
``mirror.memory.InMemoryMirror`` does.

``latest_per_key`` reduces a batch to the change with the highest binlogOffset per key. That is
what the version guard would keep anyway (a change applies only if its offset is greater than
the stored one), so appliers send each key once per batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cdc_platform.config import MirrorTarget, TableMirror
from cdc_platform.config_store import ConfigSnapshot
from simple_binlog.errors import ConfigError, ContractError
from simple_binlog.message import EventType, SimpleBinlog
from simple_binlog.routing import ShardRouter, ShardRule
from simple_binlog.values import JsonScalar

RowKey = tuple[JsonScalar, ...]


@dataclass(frozen=True, slots=True)
class RowChange:
    """One change of one key of a logical table.

    ``row`` is the after-image of a write, or the before-image of a delete (``deleted``), so
    a soft-deleting warehouse can keep the last values. ``shard`` is ``schema.table``.
    """

    table: str
    key: RowKey
    offset: int
    deleted: bool
    row: Mapping[str, JsonScalar]
    column_types: Mapping[str, str]
    key_columns: tuple[str, ...]
    shard: str
    execute_time_ms: int


@dataclass(frozen=True, slots=True)
class Routed:
    """What ``ChangeRouter.route`` made of one message: its changes, or why there are none."""

    changes: tuple[RowChange, ...]
    skipped: bool = False  # not configured for this target (by configuration, counted)


_SKIPPED = Routed((), skipped=True)
# What a physical table's messages become: (logical table, configured key or None, shard).
_Target = tuple[str, tuple[str, ...] | None, str]


class ChangeRouter:
    """Messages of one or more instances → row changes of the logical tables for ``target``."""

    def __init__(
        self,
        tables: Sequence[TableMirror],
        router: ShardRouter,
        target: MirrorTarget,
        routers: Mapping[str, ShardRouter] | None = None,
    ) -> None:
        """``routers``: an instance's own shard rules (the web admin keeps them per
        instance); ``router`` serves the instances without."""
        self._tables = {(t.instance, t.name): t for t in tables if target in t.targets}
        self._router = router
        self._routers = dict(routers or {})
        self._cache: dict[tuple[str, str, str], TableMirror | None] = {}
        self._targets: dict[tuple[str, str, str], _Target | None] = {}

    def table_for(self, instance: str, schema: str, table: str) -> TableMirror | None:
        cache_key = (instance, schema, table)
        if cache_key not in self._cache:
            try:
                logical = self._routers.get(instance, self._router).route(schema, table).name
            except ConfigError:
                # No shard rule names it, so no table mirror can be configured for it.
                self._cache[cache_key] = None
            else:
                self._cache[cache_key] = self._tables.get((instance, logical))
        return self._cache[cache_key]

    def route(self, instance: str, message: SimpleBinlog) -> Routed:
        """Raises ContractError when a configured table's message cannot be keyed."""
        target = self._target_of(instance, message.schema_name, message.table_name)
        if target is None:
            return _SKIPPED
        table, configured_key, shard = target
        key_columns = configured_key or message.primary_keys
        if not key_columns:
            raise ContractError(f"{shard} has no primary key; set 'key' of table mirror {table!r}.")
        key = _key_of(message.content, key_columns, shard, "content")
        offset, types, executed = message.binlog_offset, message.column_types, message.execute_time
        change = RowChange(
            table,
            key,
            offset,
            message.event_type is EventType.DELETE,
            message.content,
            types,
            key_columns,
            shard,
            executed,
        )
        if message.event_type is EventType.UPDATE and message.before_content is not None:
            old_key = _key_of(message.before_content, key_columns, shard, "beforeContent")
            if old_key != key:
                # A key change is a delete of the old key and a write of the new one.
                old = RowChange(
                    table,
                    old_key,
                    offset,
                    True,
                    message.before_content,
                    types,
                    key_columns,
                    shard,
                    executed,
                )
                return Routed((old, change))
        return Routed((change,))

    def _target_of(self, instance: str, schema: str, table: str) -> _Target | None:
        """(logical table, configured key or None, shard name) of a physical table, or None
        if it is not mirrored to this target; cached, as it runs for every message."""
        cache_key = (instance, schema, table)
        if cache_key in self._targets:
            return self._targets[cache_key]
        mirror = self.table_for(instance, schema, table)
        found = None
        if mirror is not None:
            found = (mirror.name, tuple(mirror.key) if mirror.key else None, f"{schema}.{table}")
        self._targets[cache_key] = found
        return found


def _key_of(
    row: Mapping[str, JsonScalar], columns: tuple[str, ...], shard: str, field: str
) -> RowKey:
    try:
        key = tuple(row[name] for name in columns)
    except KeyError as exc:
        raise ContractError(
            f"a message of {shard} lacks the key column {exc.args[0]!r} in '{field}'."
        ) from None
    if None in key:
        raise ContractError(f"a message of {shard} has a NULL key column in '{field}'.")
    return key


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Per logical table, the latest change of each key; ``superseded`` counts the rest."""

    tables: dict[str, dict[RowKey, RowChange]]
    superseded: int

    def __len__(self) -> int:
        return sum(len(changes) for changes in self.tables.values())

    def column_types(self, table: str) -> dict[str, str]:
        """Every column seen in the batch for ``table``; the newest change's type wins."""
        types: dict[str, str] = {}
        for change in sorted(self.tables[table].values(), key=lambda c: c.offset):
            types.update(change.column_types)
        return types


def latest_per_key(changes: Iterable[RowChange]) -> BatchPlan:
    """Keep the highest offset per (table, key); on equal offsets (a duplicate) the first."""
    tables: dict[str, dict[RowKey, RowChange]] = {}
    superseded = 0
    for change in changes:
        table = tables.setdefault(change.table, {})
        current = table.get(change.key)
        if current is None:
            table[change.key] = change
            continue
        superseded += 1
        if change.offset > current.offset:
            table[change.key] = change
    return BatchPlan(tables, superseded)


def project(row: Mapping[str, JsonScalar], columns: Sequence[str] | None) -> dict[str, JsonScalar]:
    """The row restricted to ``columns`` (all when None); a listed column the row lacks (not
    in the source table, or not yet) is left out rather than stored as NULL."""
    if columns is None:
        return dict(row)
    return {name: row[name] for name in columns if name in row}


@dataclass(frozen=True)
class MirrorConfig:
    """What one mirror process runs with under one configuration snapshot."""

    version: int
    tables: tuple[TableMirror, ...]  # the table mirrors of the target
    instances: tuple[str, ...]  # whose topics are read: those with such tables, sorted
    router: ChangeRouter


def mirror_config(
    snapshot: ConfigSnapshot, target: MirrorTarget, instance: str | None = None
) -> MirrorConfig:
    """The target's tables, instances and router in ``snapshot`` (only ``instance``'s when
    given). Pure."""
    tables = tuple(
        t for t in snapshot.tables_for(target) if instance is None or t.instance == instance
    )
    routers = snapshot.routers()
    default = ShardRouter([ShardRule()])  # for no instance of a valid snapshot
    return MirrorConfig(
        version=snapshot.version,
        tables=tables,
        instances=tuple(sorted({t.instance for t in tables})),
        router=ChangeRouter(tables, default, target, routers),
    )
