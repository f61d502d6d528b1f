"""The snapshot tables: one Iceberg v2 table per logical table, ``<catalog>.<merge.database>.
<table>`` (``cdc_platform.lake_snapshots`` names them for readers), whose current state is the
newest merged day and whose every merged day is an Iceberg tag ``dt-YYYY-MM-DD``.

Storage grows with the change, not with days × table size: a day's merge is one ``MERGE
INTO`` of the day's changes (latest change per key) into the table, so a tag shares every
file it did not change with the day before. With ``merge.write_mode`` = ``merge-on-read``
(the default) the merge writes only the changed rows and delete files naming the replaced
ones; ``copy-on-write`` rewrites the files that hold a changed key.

Layout, chosen so a merge reads and writes little:

* partitioned by ``bucket(merge.buckets, <first key column>)`` and sorted by the key
  (``WRITE ORDERED BY``), files of about ``merge.file_size_mb`` cut by key range: the MERGE's
  join reads the key columns of the buckets and key ranges the changes fall in (the ON
  condition carries the changed keys' range, which prunes files by their key statistics);
* columns: the data columns, then ``_binlog_offset`` (the change each row reflects: a change
  applies only when it is newer) and ``_shard``; columns added later follow.

Publishing a day:

* the usual case (merging ``dt`` over ``dt−1``, the table's current state being ``dt−1``'s
  tag or a compaction of it): one MERGE commit on the table's main branch, then the tag;
* a re-merge (the day again, or an older day whose late rows arrived): the MERGE goes to a
  private branch created at ``dt−1``'s tag; the tag ``dt`` is then moved to it, and main
  too when ``dt`` is the newest day. Readers never see a half-applied day: each step is one
  atomic Iceberg commit, and a merge killed before the tag leaves the tag where it was.

Schema evolution (``merge.schema``): added columns are ``ADD COLUMNS``; a widened type is
``ALTER COLUMN … TYPE`` when Iceberg can promote it in place (int → bigint, float → double,
a decimal's precision); other widenings (a decimal's scale, to decimal(20,0), date →
timestamp, to string) are a one-off rewrite of the column (rename, add, fill, drop). Older
tags keep their own schema: ``VERSION AS OF`` reads a day as it was merged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdc_platform.config import Settings
from cdc_platform.hive_metastore import METADATA_LOCATION
from cdc_platform.iceberg import LakeCatalog, stamp, storage_for
from cdc_platform.lake import (
    VIEW_COLUMNS_PROPERTY,
    MetastoreClients,
    if_table_exists,
    replace_view_text,
    view_session_properties,
)
from cdc_platform.lake_snapshots import (
    DAYS_DATABASE_SUFFIX,
    FACTS_PREFIX,
    HOURS_DATABASE_SUFFIX,
    day_tag,
    snapshot_table,
    tag_day,
    tag_hour,
)
from merge.hours import Hour
from merge.schema import META_COLUMNS, OFFSET_COLUMN, SchemaPlan
from merge.transform import EVENT_COLUMN
from simple_binlog.errors import CdcMirrorError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
# Key types whose values become SQL literals for the range condition of the MERGE.
_RANGE_TYPES = ("int", "bigint", "string", "date")
# A merge-on-read MERGE of at most this many changes sends its rows to the writers by bucket
# (Iceberg's distribution mode ``hash``) instead of by key range: the range exchange samples
# its input first (a Spark job of its own, a large part of a small day's merge), and so few
# rows make at most a file per bucket either way. (Mode ``none`` saves the shuffle too, but
# writes a file per bucket for every task of the join: three times the files in the bench.)
SMALL_MERGE_CHANGES = 100_000
_DISTRIBUTION_MODE = "spark.sql.iceberg.distribution-mode"
# With so few rows, Spark's adaptive execution coalesces that exchange into ONE partition (its
# floor is 1 MB a partition): one task then writes every bucket's data and delete files one
# after another, each close a storage round trip (on HDFS most of the task is waiting:
# bench/results/2026-11-27-merge-hdfs-reask-s20). A lower floor lets the exchange split into
# about as many partitions as the session has cores, so the files are written in parallel.
_MIN_PARTITION_SIZE = "spark.sql.adaptive.coalescePartitions.minPartitionSize"
SMALL_MERGE_MIN_PARTITION = "64k"
# Parquet row groups of this size (Iceberg's default: 128 MB, i.e. one per data file): a
# MERGE's scan of the table skips each row group whose key statistics lie outside the changed
# keys' range, so with several row groups per file it reads the part of a file that holds the
# range, not the whole file (recent keys lie in every bucket's newest file).
ROW_GROUP_BYTES = 4 * 1024 * 1024


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"{_ident(name)} {kind}" for name, kind in columns)


def facts_property(tag: str) -> str:
    """Pure: the table property holding the merge facts of ``tag``."""
    return FACTS_PREFIX + tag


def promotable(old: str, new: str) -> bool:
    """Pure: whether Iceberg changes a column from ``old`` to ``new`` in place (its type
    promotion rules: int → bigint, float → double, decimal(p,s) → decimal(p2,s), p2 > p)."""
    if (old, new) in (("int", "bigint"), ("float", "double")):
        return True
    before, after = _DECIMAL.match(old), _DECIMAL.match(new)
    return bool(before and after and before[2] == after[2] and int(after[1]) >= int(before[1]))


def sql_literal(value: Any, hive: str) -> str | None:
    """Pure: ``value`` as a Spark SQL literal of the key type ``hive``, None when the type has
    no literal form here (the MERGE then goes without the key-range condition)."""
    if value is None:
        return None
    if hive in ("int", "bigint") and isinstance(value, int):
        return str(value)
    if hive == "string" and isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if hive == "date" and isinstance(value, date):
        return f"DATE'{value.isoformat()}'"
    if _DECIMAL.match(hive) and isinstance(value, Decimal):
        return f"CAST('{value}' AS {hive})"
    return None


def snapshot_columns(plan: SchemaPlan) -> list[str]:
    """Pure: the snapshot table's columns in ``plan``: the data columns, then bookkeeping."""
    return [*(name for name, _ in plan.columns), *(name for name, _ in META_COLUMNS)]


def merge_statement(
    target: str,
    plan: SchemaPlan,
    view: str,
    span: tuple[Any, Any] | None,
    null_keys: bool = True,
) -> str:
    """Pure: the MERGE of the day's changes (``view``) into ``target``: a change applies only
    when it is newer than the row it replaces (MOCK rows of the history read can be older
    than the snapshot's). ``span``: the changed keys' range of the first key column.

    Keys match NULL-safely (``<=>``) when a change may have a NULL in a key column
    (``null_keys``); otherwise by ``=``: the same match then (a NULL key of the table equals
    no change's key either way), and Spark joins on the changes as their latest-per-key
    window partitioned them instead of shuffling them again by the NULL-safe form."""
    columns = snapshot_columns(plan)
    equal = "<=>" if null_keys else "="
    on = " AND ".join(f"t.{_ident(k)} {equal} s.{_ident(k)}" for k in plan.key)
    first = plan.key[0]
    if span is not None:
        low, high = (sql_literal(v, plan.types[first]) for v in span)
        if low is not None and high is not None:
            # Target-only: pushed into the scan of the table, which skips every file
            # whose key statistics lie outside the changed keys' range (and the NULL
            # keys, which only a NULL-safe match can reach).
            column = f"t.{_ident(first)}"
            nulls = f" OR {column} IS NULL" if null_keys else ""
            on += f" AND ({column} BETWEEN {low} AND {high}{nulls})"
    newer = f"s.{OFFSET_COLUMN} > t.{OFFSET_COLUMN}"
    assignments = ", ".join(f"t.{_ident(c)} = s.{_ident(c)}" for c in columns)
    names = ", ".join(_ident(c) for c in columns)
    values = ", ".join(f"s.{_ident(c)}" for c in columns)
    return (
        f"MERGE INTO {target} t USING {view} s ON {on} "  # noqa: S608 - quoted names
        f"WHEN MATCHED AND {newer} AND s.{EVENT_COLUMN} = 'DELETE' THEN DELETE "
        f"WHEN MATCHED AND {newer} THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND s.{EVENT_COLUMN} <> 'DELETE' THEN INSERT ({names}) "
        f"VALUES ({values})"
    )


@dataclass(frozen=True, slots=True)
class TableState:
    """What a merge needs to know of a snapshot table before it writes."""

    current: int | None  # main's snapshot id (None: nothing committed yet)
    days: dict[date, int]  # merged day → its tag's snapshot id
    hours: dict[Hour, int] = field(default_factory=dict)  # merged hour → its tag's snapshot


@dataclass(frozen=True, slots=True)
class Published:
    """A day written: the snapshot its tag names and what the commit summary says of it."""

    snapshot_id: int
    rows: int
    files: int
    files_kept: int  # data files of the day before still referenced, unchanged
    # first | merge | re-merge | unchanged (an hour without changes) | empty (none yet)
    mode: str


class MergeConflictError(CdcMirrorError):
    """A re-merge cannot be written over the schema the table has now."""


def _state_of(java: Any | None) -> TableState:
    """From a loaded table (None: no table), no further load: main's snapshot and the day and
    hour tags."""
    if java is None:
        return TableState(None, {})
    current = java.currentSnapshot()
    days: dict[date, int] = {}
    hours: dict[Hour, int] = {}
    refs = java.refs()
    for name in list(refs.keySet()):
        ref = refs.get(name)
        if not ref.isTag():
            continue
        day = tag_day(str(name))
        hour = tag_hour(str(name))
        if day is not None:
            days[day] = int(ref.snapshotId())
        elif hour is not None:
            hours[Hour(*hour)] = int(ref.snapshotId())
    return TableState(None if current is None else int(current.snapshotId()), days, hours)


# A view's branches: per tag its constant columns (name, text), and per tag its snapshot id.
_Tags = tuple[dict[str, tuple[tuple[str, str], ...]], dict[str, int]]
# How often a view is stored before giving up while its table keeps changing under it (a
# merge's own refresh takes two: see ``_refresh_tags_view``).
_VIEW_REFRESH_ATTEMPTS = 5


def _day_branches(state: TableState) -> _Tags:
    """Every tagged day as a ``dt`` (the dt view)."""
    tags: dict[str, tuple[tuple[str, str], ...]] = {
        day_tag(day): (("dt", day.isoformat()),) for day in state.days
    }
    return tags, {day_tag(day): sid for day, sid in state.days.items()}


def _hour_branches(state: TableState) -> _Tags:
    """Every tagged hour as a ``dt`` and ``hr`` (the hour view)."""
    tags: dict[str, tuple[tuple[str, str], ...]] = {
        hour.tag: (("dt", hour.day.isoformat()), ("hr", f"{hour.index:02d}"))
        for hour in state.hours
    }
    return tags, {hour.tag: sid for hour, sid in state.hours.items()}


def _current_of(java: Any) -> int:
    current = java.currentSnapshot()
    assert current is not None, "a committed snapshot table has a current snapshot"
    return int(current.snapshotId())


def _published_of(java: Any, snapshot_id: int, base: int | None, mode: str) -> Published:
    """Rows and files of the new snapshot from its summary (Iceberg's running totals), in the
    table ``java`` holding it (no load)."""
    summary = java.snapshot(snapshot_id).summary()

    def total(key: str) -> int:
        value = summary.get(key)
        return int(value) if value is not None else 0

    rows = total("total-records") - total("total-position-deletes")
    files = total("total-data-files")
    kept = 0
    if base is not None:
        before = java.snapshot(base).summary().get("total-data-files")
        kept = max(0, min(files, int(before or 0)) - total("deleted-data-files"))
    return Published(snapshot_id, rows, files, kept, mode)


class SnapshotStore:
    """The snapshot tables of ``settings.merge.database`` in the lake's Iceberg catalog."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.config = settings.merge
        self.database = settings.merge.database
        self.lake = LakeCatalog(spark, storage_for(settings), settings.lake.catalog)
        self._metastore_clients = MetastoreClients(spark)  # the view refresh's
        # The view refresh's session properties, made again when the session's SQL settings,
        # catalog or namespace change (_view_session).
        self._view_session: tuple[str, dict[str, str]] | None = None

    def name(self, table: str) -> str:
        return snapshot_table(self.settings, table)

    def _plain(self, table: str) -> str:
        """``catalog.database.table`` unquoted (Iceberg's procedures and Java API)."""
        return f"{self.settings.lake.catalog}.{self.database}.{table}"

    def java_table(self, table: str) -> Any:
        """The table's Iceberg Java object, loaded fresh."""
        return self._java(table)

    def _java(self, table: str) -> Any:
        jvm: Any = self.spark.sparkContext._jvm
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self._plain(table)
        )

    # -- catalog ----------------------------------------------------------------------------
    def ensure_database(self) -> None:
        """The namespace in the lake, and the Hive databases of the dt and hour views."""
        self.lake.create_namespace(self.database)
        for suffix in (DAYS_DATABASE_SUFFIX, HOURS_DATABASE_SUFFIX):
            self.spark.sql(
                f"CREATE DATABASE IF NOT EXISTS spark_catalog.{_ident(self.database + suffix)}"
            )

    def exists(self, table: str) -> bool:
        return bool(self.spark.catalog.tableExists(self._plain(table)))

    def _loaded(self, table: str) -> Any | None:
        """The table's Iceberg Java object loaded fresh, or None when there is none: one
        catalog load, where ``exists`` then ``_java`` are two (each a metastore call and a read
        of the table's metadata file, a GET on S3 or HDFS: a merge's fixed cost)."""
        return if_table_exists(lambda: self._java(table))

    def data_columns(self, table: str) -> list[tuple[str, str]] | None:
        """The table's data columns (name, Spark type) without bookkeeping, or None."""
        return self.loaded_columns_and_state(table)[0]

    def state(self, table: str) -> TableState:
        """Main's snapshot and the day tags, from the table's metadata (no Spark job)."""
        return _state_of(self._loaded(table))

    def loaded_columns_and_state(
        self, table: str
    ) -> tuple[list[tuple[str, str]] | None, TableState, Any | None]:
        """``data_columns``, ``state`` and the table's Iceberg Java object they were read from
        (None: no table), from one catalog load (``publish`` takes it on)."""
        java = self._loaded(table)
        if java is None:
            return None, _state_of(None), None
        meta = {name for name, _ in META_COLUMNS}
        columns = [
            (name, kind) for name, kind, _ in self._spark_columns(java.schema()) if name not in meta
        ]
        return columns, _state_of(java), java

    def only_compacted_since(
        self, table: str, base: int, current: int, java: Any | None = None
    ) -> bool:
        """Whether ``current`` descends from ``base`` through commits that changed no row
        (``replace``: compaction), so a MERGE on main applies to ``base``'s rows. ``java``:
        the table as loaded for ``current`` (None: loaded here)."""
        java = self._java(table) if java is None else java
        snapshot_id: int | None = current
        while snapshot_id is not None and snapshot_id != base:
            snapshot = java.snapshot(snapshot_id)
            if snapshot is None or str(snapshot.operation()) != "replace":
                return False
            parent = snapshot.parentId()
            snapshot_id = None if parent is None else int(parent)
        return snapshot_id == base

    # -- schema -----------------------------------------------------------------------------
    def evolve(self, table: str, plan: SchemaPlan, exists: bool) -> bool:
        """Create the table or bring it to ``plan``'s columns; True when a column had to be
        rewritten (a commit that changed the table's rows: see the module)."""
        name = self.name(table)
        if not exists:
            self._create(table, plan)
            return False
        if plan.added:
            added = [(n, t) for n, t in plan.columns if n in plan.added]
            self.spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({_ddl(added)})")
            log.info("snapshot table %s: added %s", table, ", ".join(plan.added))
        rewritten = False
        for column, (old, new) in plan.widened.items():
            if promotable(old, new):
                self.spark.sql(f"ALTER TABLE {name} ALTER COLUMN {_ident(column)} TYPE {new}")
            else:
                self._rewrite_column(table, column, new)
                rewritten = True
            log.info("snapshot table %s: %s widened from %s to %s", table, column, old, new)
        return rewritten

    def _create(self, table: str, plan: SchemaPlan) -> None:
        config = self.config
        columns = [*plan.columns, *META_COLUMNS]
        key = plan.key
        types = plan.types
        size = str(config.file_size_mb * 1024 * 1024)
        mode = config.write_mode
        properties = {
            **stamp(),  # the layout version, checked before every merge (IncompatibleTableError)
            "write.format.default": config.file_format,
            "write.merge.mode": mode,
            "write.update.mode": mode,
            "write.delete.mode": mode,
            # Rows go to writers by key range (within each bucket) and files are cut at the
            # target size: a day's changes land in few files, and the key statistics of
            # each file let a MERGE skip the files outside the changed keys' range.
            "write.distribution-mode": "range",
            "write.merge.distribution-mode": "range",
            "write.target-file-size-bytes": size,
            "write.spark.advisory-partition-size-bytes": size,
            "write.parquet.row-group-size-bytes": str(ROW_GROUP_BYTES),
        }
        # Iceberg buckets every type but floating point.
        bucketed = types[key[0]] not in ("float", "double")
        partitioned = f" PARTITIONED BY (bucket({config.buckets}, {_ident(key[0])}))"
        listed = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.name(table)} ({_ddl(columns)}) USING iceberg"
            f"{partitioned if bucketed else ''} TBLPROPERTIES ({listed})"
        )
        ordered = ", ".join(_ident(k) for k in key)
        self.spark.sql(f"ALTER TABLE {self.name(table)} WRITE ORDERED BY {ordered}")

    def _rewrite_column(self, table: str, column: str, new: str) -> None:
        """A widening Iceberg cannot make in place: the column moves aside, a new one of the
        wide type is filled from it, and the old one is dropped (older tags keep it)."""
        name = self.name(table)
        aside = f"{column}__before_{uuid.uuid4().hex[:6]}"
        self.spark.sql(f"ALTER TABLE {name} RENAME COLUMN {_ident(column)} TO {_ident(aside)}")
        added = f"{_ident(column)} {new} AFTER {_ident(aside)}"
        self.spark.sql(f"ALTER TABLE {name} ADD COLUMN {added}")
        self.spark.sql(f"UPDATE {name} SET {_ident(column)} = CAST({_ident(aside)} AS {new})")  # noqa: S608 - quoted names
        self.spark.sql(f"ALTER TABLE {name} DROP COLUMN {_ident(aside)}")

    # -- data -------------------------------------------------------------------------------
    def read(self, table: str, day: date, hour: Hour | None = None) -> DataFrame:
        """The snapshot of ``day`` (its tag), or of ``hour``."""
        tag = day_tag(day) if hour is None else hour.tag
        return self.spark.sql(f"SELECT * FROM {self.name(table)} VERSION AS OF '{tag}'")  # noqa: S608 - quoted names

    def publish(
        self,
        table: str,
        day: date,
        changes: DataFrame,
        plan: SchemaPlan,
        base: int | None,
        state: TableState,
        span: tuple[Any, Any] | None,
        hour: Hour | None = None,
        newest: bool | None = None,
        empty: bool = False,
        facts: Mapping[str, Any] | None = None,
        null_keys: bool = True,
        change_count: int | None = None,
        loaded: Any | None = None,
    ) -> Published:
        """Apply ``changes`` (the latest change per key, DELETEs included, with
        ``_event_type``) to the snapshot ``base`` (None: none, the changes are the first
        snapshot) and tag the result ``dt-<day>`` (``hr-<day>-<HH>`` for an ``hour``); main
        moves to it when it is the newest merged state (``newest``, default: ``day`` is the
        newest merged day). ``span``: the lowest and highest changed value of the first key
        column (None: unknown), to prune the files the MERGE reads. ``empty``: there are no
        changes (an hour without any): the tag names ``base`` itself, nothing is written.
        ``facts``: what the next merge needs to know of this one, stored with the tag in the
        same commit (``merge_facts``). ``null_keys``: whether a change may have a NULL in a key
        column (False: the MERGE matches keys by plain equality, which lets Spark join on
        the partitioning of the changes' latest-per-key window, one shuffle fewer).
        ``change_count``: how many changes there are (None: unknown), which decides how the
        MERGE's rows are distributed to the writers (``SMALL_MERGE_CHANGES``). ``loaded``: the
        table as loaded for ``state`` (None: loaded here when needed).

        The table is loaded once after the write: the tag's commit, the view and the summary
        read it from there (each load is a metastore call and a read of the metadata file)."""
        if empty and base is None and state.current is None:
            # An hour without changes before the table's first snapshot: nothing to tag yet.
            return Published(0, 0, 0, 0, "empty")
        name = self.name(table)
        view = f"cdc_merge_changes_{uuid.uuid4().hex[:8]}"
        changes.createOrReplaceTempView(view)
        if newest is None:
            newest = not state.days or day >= max(state.days)
        try:
            if empty and base is not None:
                published, mode = base, "unchanged"
                if (
                    newest
                    and state.current is not None
                    and self.only_compacted_since(table, base, state.current, loaded)
                ):
                    published = state.current  # the same rows, compacted
            elif base is None and state.current is None:
                # The very first snapshot of the table.
                self.spark.sql(f"INSERT INTO {name} {self._inserts(plan, view)}")
                published, mode = None, "first"  # main's new snapshot, read below
            elif (
                base is not None
                and newest
                and state.current is not None
                and self.only_compacted_since(table, base, state.current, loaded)
            ):
                with self._distribution(change_count):
                    self.spark.sql(merge_statement(name, plan, view, span, null_keys))
                published, mode = None, "merge"  # main's new snapshot, read below
            else:
                # A MERGE only when there is a base (none: an INSERT of every row).
                with self._distribution(None if base is None else change_count):
                    published = self._on_branch(table, plan, view, base, span, null_keys)
                mode = "first" if base is None else "re-merge"
        finally:
            self.spark.catalog.dropTempView(view)
        after = self._java(table)
        main = _current_of(after)
        if published is None:
            published = main
        tag = day_tag(day) if hour is None else hour.tag
        # The tags and snapshots as committed (main as before the call below).
        tagged = self._tag(table, tag, published, facts, after)
        if newest and main != published:
            self.spark.sql(
                f"CALL {_ident(self.settings.lake.catalog)}.system.set_current_snapshot("
                f"table => '{self.database}.{table}', snapshot_id => {published})"
            )
        if hour is None:
            self.refresh_days_view(table, tagged)
        else:
            self.refresh_hours_view(table, tagged)
        return _published_of(tagged, published, base, mode)

    def tag_day(
        self, table: str, day: date, snapshot_id: int, facts: Mapping[str, Any] | None = None
    ) -> None:
        """Tag ``snapshot_id`` as ``day``'s snapshot (the day's last hour: the day cut), with
        ``facts``, and rewrite the dt view; one Iceberg commit."""
        self.refresh_days_view(table, self._tag(table, day_tag(day), snapshot_id, facts))

    def _tag(
        self,
        table: str,
        tag: str,
        snapshot_id: int,
        facts: Mapping[str, Any] | None,
        java: Any | None = None,
    ) -> Any:
        """Create or move ``tag`` to ``snapshot_id`` and store ``facts`` under it, in one
        Iceberg commit (a transaction of the ref and the table property), so a reader never
        sees a tag with another merge's facts; the facts of tags dropped since (``cdc-mirror
        maintain``) are removed in the same commit. ``java``: the table freshly loaded (None:
        loaded here; a commit over a newer state is applied to it by Iceberg's retry).
        Returns the table as committed (Iceberg's transaction table: no load)."""
        java = self._java(table) if java is None else java
        refs = java.refs()
        transaction = java.newTransaction()
        manage = transaction.manageSnapshots()
        if refs.containsKey(tag):
            manage.replaceTag(tag, snapshot_id)
        else:
            manage.createTag(tag, snapshot_id)
        manage.commit()
        properties = transaction.updateProperties()
        if facts is not None:
            properties.set(facts_property(tag), json.dumps(dict(facts), sort_keys=True))
        else:
            properties.remove(facts_property(tag))
        for key in list(java.properties().keySet()):
            name = str(key)
            dropped = name.startswith(FACTS_PREFIX) and not refs.containsKey(
                name[len(FACTS_PREFIX) :]
            )
            if dropped and name != facts_property(tag):
                properties.remove(name)
        properties.commit()
        transaction.commitTransaction()
        return transaction.table()

    def add_facts(self, table: str, tag: str, facts: Mapping[str, Any]) -> None:
        """Add ``facts`` to those stored with ``tag`` (the check after the merge: one commit
        of the table property; Iceberg retries it over a concurrent commit). Nothing when the
        tag is gone."""
        java = self._java(table)
        if not java.refs().containsKey(tag):
            return
        text = java.properties().get(facts_property(tag))
        stored: dict[str, Any] = {} if text is None else json.loads(str(text))
        document = json.dumps({**stored, **facts}, sort_keys=True)
        java.updateProperties().set(facts_property(tag), document).commit()

    def merge_facts(self, table: str, tag: str, java: Any | None = None) -> dict[str, Any]:
        """The facts the merge that set ``tag`` stored with it (empty: none, or no table).
        ``java``: the table as loaded (None: loaded here)."""
        java = self._loaded(table) if java is None else java
        if java is None:
            return {}
        text = java.properties().get(facts_property(tag))
        if text is None:
            return {}
        document: dict[str, Any] = json.loads(str(text))
        return document

    def _on_branch(
        self,
        table: str,
        plan: SchemaPlan,
        view: str,
        base: int | None,
        span: tuple[Any, Any] | None,
        null_keys: bool = True,
    ) -> int:
        """The day written on a private branch (see the module); its head snapshot."""
        name = self.name(table)
        branch = f"cdc_merge_{uuid.uuid4().hex[:10]}"
        start = base if base is not None else self._current(table)
        self.spark.sql(f"ALTER TABLE {name} CREATE BRANCH {_ident(branch)} AS OF VERSION {start}")
        target = f"{name}.{_ident('branch_' + branch)}"
        try:
            if base is None:
                # A first snapshot over a table with later days: nothing of theirs is kept.
                self.spark.sql(f"DELETE FROM {target}")  # noqa: S608 - quoted names
                self.spark.sql(f"INSERT INTO {target} {self._inserts(plan, view)}")
            else:
                self.spark.sql(merge_statement(target, plan, view, span, null_keys))
            head = self._java(table).refs().get(branch).snapshotId()
            return int(head)
        finally:
            self.spark.sql(f"ALTER TABLE {name} DROP BRANCH IF EXISTS {_ident(branch)}")

    def _current(self, table: str) -> int:
        return _current_of(self._java(table))

    def _inserts(self, plan: SchemaPlan, view: str) -> str:
        listed = ", ".join(_ident(c) for c in snapshot_columns(plan))
        return f"SELECT {listed} FROM {view} WHERE {EVENT_COLUMN} <> 'DELETE'"  # noqa: S608 - quoted names

    @contextmanager
    def _distribution(self, change_count: int | None) -> Iterator[None]:
        """Within: a merge-on-read MERGE of few changes distributes its rows by bucket, not by
        the table's key range (``SMALL_MERGE_CHANGES``), to as many writing tasks as the
        session has cores (``SMALL_MERGE_MIN_PARTITION``); the session's settings are put back
        after."""
        small = change_count is not None and change_count <= SMALL_MERGE_CHANGES
        if not small or self.config.write_mode != "merge-on-read":
            yield
            return
        conf = self.spark.conf
        settings = {_DISTRIBUTION_MODE: "hash", _MIN_PARTITION_SIZE: SMALL_MERGE_MIN_PARTITION}
        before = {key: conf.get(key, None) for key in settings}
        for key, value in settings.items():
            conf.set(key, value)
        try:
            yield
        finally:
            for key, previous in before.items():
                if previous is None:
                    conf.unset(key)
                else:
                    conf.set(key, previous)

    # -- the dt layout ----------------------------------------------------------------------
    def refresh_days_view(self, table: str, java: Any | None = None) -> None:
        """``<database>_dt.<table>``: every tagged day as a ``dt`` of one view, in the
        table's current columns (a day merged before a column existed reads it as NULL).
        ``java``: the table as just loaded or committed (None: loaded here)."""
        self._refresh_tags_view(table, self.database + DAYS_DATABASE_SUFFIX, _day_branches, java)

    def refresh_hours_view(self, table: str, java: Any | None = None) -> None:
        """``<database>_hr.<table>``: every tagged hour as a ``dt`` and ``hr`` (``'00'`` …)
        of one view, like the dt view."""
        self._refresh_tags_view(table, self.database + HOURS_DATABASE_SUFFIX, _hour_branches, java)

    def _refresh_tags_view(
        self,
        table: str,
        view_database: str,
        tags_of: Callable[[TableState], _Tags],
        java: Any | None,
    ) -> None:
        """The view of the tags ``tags_of`` picks from the table's state (``_refresh_view``),
        made again from the table as it is whenever the table changed while it was made.

        Why: two processes refresh the view: a merge after tagging its day or hour, and
        ``cdc-mirror maintain`` after dropping expired tags. Each builds the view from the
        table as it loaded it, and the last store wins: a store built before the other's
        commit would name a dropped tag (every reader of the view fails) or miss a new day
        (its rows missing from the view) until the next refresh. So after storing, the
        catalog's ``metadata_location`` is compared with the one ``java`` was read from; if
        they differ, the table is loaded again and the view made from it (one metastore read
        and no write when it is the same). The last store is then always checked after every
        commit that preceded the other refresh, so it is built from a table holding them all.
        A merge's own tag commit makes one such round: a committed transaction's table does
        not know its new metadata file."""
        java = self._loaded(table) if java is None else java
        for _ in range(_VIEW_REFRESH_ATTEMPTS):
            tags, snapshot_ids = tags_of(_state_of(java))
            self._refresh_view(table, view_database, tags, snapshot_ids, java)
            if java is None or self._unchanged_since(table, java):
                return
            java = self._loaded(table)
        raise CdcMirrorError(
            f"the view {view_database}.{table} was not refreshed: its table changed each of the "
            f"{_VIEW_REFRESH_ATTEMPTS} times the view was stored; run the merge or "
            "`cdc-mirror maintain` again once the other has finished."
        )

    def _unchanged_since(self, table: str, java: Any) -> bool:
        """Whether the catalog still points at the metadata file ``java`` was read from
        (False when ``java`` does not know it: a committed transaction's table)."""
        loaded_from = java.operations().current().metadataFileLocation()
        if loaded_from is None:
            return False
        record = self._metastore().getTable(self.database.lower(), table.lower())
        parameters = record.getParameters()
        stored = None if parameters is None else parameters.get(METADATA_LOCATION)
        return bool(stored == loaded_from)

    def _refresh_view(
        self,
        table: str,
        view_database: str,
        tags: Mapping[str, tuple[tuple[str, str], ...]],
        snapshot_ids: Mapping[str, int],
        java: Any,
    ) -> None:
        """The view ``view_database.table``: one ``UNION ALL`` branch per tag (with its
        constant columns ``tags[tag]``, name and text), each a ``VERSION AS OF`` read in the
        table's current columns; ``java``: the table loaded (its schemas are read from it).

        While the view's output columns stay the same (the digest ``view_mark`` stored with
        it: a new day or hour, a tag dropped), only its stored text is changed, by one
        metastore call (``replace_view_text``), or nothing when it is the same: ``CREATE OR
        REPLACE VIEW`` would analyse the query, loading the table once per tag, and drop the
        view for a moment. Other columns (a column added or widened, a view made by an
        earlier version): ``CREATE OR REPLACE VIEW``, which stores the digest."""
        view = f"{_ident(view_database)}.{_ident(table)}"
        if not tags:
            self.spark.sql(f"DROP VIEW IF EXISTS spark_catalog.{view}")
            return
        columns = self._spark_columns(java.schema())
        present_by_schema: dict[int, frozenset[str]] = {}
        branches = []
        for tag in sorted(tags):
            schema_id = int(java.snapshot(snapshot_ids[tag]).schemaId())
            if schema_id not in present_by_schema:
                schema = java.schemas().get(schema_id)
                present_by_schema[schema_id] = frozenset(
                    str(f.name()) for f in (schema.columns() if schema is not None else [])
                )
            branches.append((tag, tags[tag], present_by_schema[schema_id]))
        query = view_query(self.name(table), [(c, kind) for c, kind, _ in columns], branches)
        mark = view_mark(view_columns(columns, branches))
        session = self._session_view_properties()
        if replace_view_text(self._metastore(), view_database, table, query, mark, session):
            return
        self.spark.sql(
            f"CREATE OR REPLACE VIEW spark_catalog.{view} "
            f"TBLPROPERTIES ('{VIEW_COLUMNS_PROPERTY}' = '{mark}') AS {query}"
        )

    def _session_view_properties(self) -> dict[str, str]:
        """``view_session_properties``, taken again only when what Spark takes them from
        changed: the session's SQL settings, catalog and namespace (three calls, where the
        temporary view it makes costs ~0.1 s a refresh)."""
        session = self.spark._jsparkSession
        key = "\n".join(
            str(part)
            for part in (
                session.sessionState().conf().getAllConfs().toString(),
                self.spark.catalog.currentCatalog(),
                self.spark.catalog.currentDatabase(),
            )
        )
        if self._view_session is None or self._view_session[0] != key:
            self._view_session = (key, view_session_properties(self.spark))
        return dict(self._view_session[1])

    def _spark_columns(self, schema: Any) -> list[tuple[str, str, bool]]:
        """Iceberg's Java ``schema`` as Spark reads the table: (name, Spark type, nullable)
        per column, converted by Iceberg's own ``SparkSchemaUtil`` (what ``spark.table``
        gives, without loading the table again)."""
        from pyspark.sql.types import StructType  # noqa: PLC0415

        jvm: Any = self.spark.sparkContext._jvm
        converted = jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(schema)
        struct = StructType.fromJson(json.loads(str(converted.json())))
        return [(f.name, f.dataType.simpleString(), f.nullable) for f in struct.fields]

    def _metastore(self) -> Any:
        """This thread's Hive metastore client."""
        return self._metastore_clients.get()

    def close(self) -> None:
        """Close the metastore clients the view refresh made, on every thread (the owner's
        stop: a merge run's or maintenance's end); the store may be used again after."""
        self._metastore_clients.close()


# A branch of a dt or hour view: its tag, its constant columns (name, text) and the columns
# the tag's schema has.
ViewBranch = tuple[str, tuple[tuple[str, str], ...], frozenset[str]]


def view_query(table: str, columns: list[tuple[str, str]], branches: list[ViewBranch]) -> str:
    """Pure: the query of a dt or hour view of the snapshot table ``table`` (quoted): per
    branch, in order, its tag read ``VERSION AS OF`` in ``columns`` (name, Spark type; NULL
    where the tag's schema lacks the column), then its constant columns."""
    selects = []
    for tag, constants, present in branches:
        selected = ", ".join(
            (
                f"CAST({_ident(c)} AS {kind}) AS {_ident(c)}"
                if c in present
                else f"CAST(NULL AS {kind}) AS {_ident(c)}"
            )
            for c, kind in columns
        )
        fixed = ", ".join(f"'{value}' AS {name}" for name, value in constants)
        selects.append(
            f"SELECT {selected}, {fixed} FROM {table} "  # noqa: S608 - quoted names
            f"VERSION AS OF '{tag}'"
        )
    return " UNION ALL ".join(selects)


def view_columns(
    columns: list[tuple[str, str, bool]], branches: list[ViewBranch]
) -> list[tuple[str, str, bool]]:
    """Pure: the output columns (name, Spark type, nullable) of ``view_query``: the table's
    columns (nullable too where a branch's tag lacks the column: NULL there), then the
    constant columns (text, never NULL)."""
    lacking = {c for c, _, _ in columns if any(c not in present for _, _, present in branches)}
    constants = [name for name, _ in branches[0][1]] if branches else []
    return [
        *((c, kind, nullable or c in lacking) for c, kind, nullable in columns),
        *((name, "string", False) for name in constants),
    ]


def view_mark(columns: list[tuple[str, str, bool]]) -> str:
    """Pure: the digest of a view's output columns stored with it (``VIEW_COLUMNS_PROPERTY``)."""
    text = json.dumps([[name, kind, nullable] for name, kind, nullable in columns])
    return hashlib.sha256(text.encode()).hexdigest()[:32]
