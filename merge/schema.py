"""Schema evolution of a snapshot table: previous snapshot schema + live MySQL schema → plan.

Pure logic. The rule, chosen so that a downstream query that worked yesterday works today:

* **added** MySQL column: appended to the snapshot table (``ALTER TABLE … ADD COLUMNS``);
  rows carried over from older snapshots read NULL;
* **widened** type: the snapshot column takes a type holding old and new values
  (``merge.types.widen``); a narrowing change keeps the wider type;
* **dropped** MySQL column: kept in the snapshot, in place. Rows carried over keep their
  values, rows changed after the drop carry NULL (their messages no longer have it);
* **renamed** column: MySQL's information_schema cannot tell a rename from a drop and an
  add, so it is one: the old name is kept (as dropped), the new one is added;
* a type change no snapshot type holds without loss stops this table with SchemaChangeError
  (the other tables of ``merge --all`` go on).

Column order: the previous snapshot's columns in their order, then new columns in MySQL's
order; the bookkeeping columns (``_binlog_offset``, ``_shard``) follow the first day's
columns (``ADD COLUMNS`` appends after them). Files and tables are matched by column name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from merge.types import hive_type, widen
from simple_binlog.errors import ConfigError

# Bookkeeping columns of every snapshot row: the binlogOffset of the change it reflects (a
# later merge compares against it) and the shard (``schema.table``) it lives in.
OFFSET_COLUMN = "_binlog_offset"
SHARD_COLUMN = "_shard"
META_COLUMNS: tuple[tuple[str, str], ...] = ((OFFSET_COLUMN, "bigint"), (SHARD_COLUMN, "string"))


@dataclass(frozen=True, slots=True)
class SchemaPlan:
    """The snapshot's data columns after this merge, and what changed to get there."""

    columns: list[tuple[str, str]]  # (name, hive type), data columns in table order
    key: list[str]
    added: list[str] = field(default_factory=list)
    widened: dict[str, tuple[str, str]] = field(default_factory=dict)  # name → (old, new)
    dropped_kept: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.widened)

    @property
    def types(self) -> dict[str, str]:
        return dict(self.columns)

    def describe(self) -> dict[str, object]:
        return {
            "added": self.added,
            "widened": {name: {"from": a, "to": b} for name, (a, b) in self.widened.items()},
            "droppedKept": self.dropped_kept,
        }


def choose_key(table: str, configured: list[str] | None, mysql_key: list[str]) -> list[str]:
    """The snapshot key: ``tables[].key`` if configured, else MySQL's primary key."""
    key = list(configured or mysql_key)
    if not key:
        raise ConfigError(
            f"table {table!r} has no key: its MySQL tables have no primary key and "
            "tables[].key is not configured; set the key columns of the snapshot."
        )
    return key


def plan_schema(
    table: str,
    previous: list[tuple[str, str]] | None,
    live: dict[str, str],
    key: list[str],
) -> SchemaPlan:
    """Plan the snapshot schema. ``previous``: the snapshot table's data columns (None when the
    table does not exist yet); ``live``: MySQL column → COLUMN_TYPE in table order."""
    if not live:
        raise ConfigError(f"MySQL reports no columns for the logical table {table!r}.")
    missing_key = [name for name in key if name not in live]
    if missing_key:
        raise ConfigError(
            f"the key of table {table!r} names columns MySQL does not have: "
            f"{', '.join(missing_key)}."
        )
    reserved = [name for name in live if name in dict(META_COLUMNS)]
    if reserved:
        raise ConfigError(
            f"table {table!r} has columns named like the merge's bookkeeping columns: "
            f"{', '.join(reserved)}."
        )
    live_types = {name.lower(): (name, hive_type(spec)) for name, spec in live.items()}
    if previous is None:
        return SchemaPlan(columns=[hv for hv in live_types.values()], key=key)
    columns: list[tuple[str, str]] = []
    widened: dict[str, tuple[str, str]] = {}
    dropped: list[str] = []
    # Hive column names are case-insensitive (the metastore lowercases them).
    seen = set()
    for name, old_type in previous:
        seen.add(name.lower())
        current = live_types.get(name.lower())
        if current is None:
            dropped.append(name)
            columns.append((name, old_type))
            continue
        new_type = widen(name, old_type, current[1])
        if new_type != old_type:
            widened[name] = (old_type, new_type)
        columns.append((name, new_type))
    added = [live_name for lower, (live_name, _) in live_types.items() if lower not in seen]
    columns += [live_types[name.lower()] for name in added]
    return SchemaPlan(columns=columns, key=key, added=added, widened=widened, dropped_kept=dropped)
