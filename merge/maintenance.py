"""``cdc-mirror maintain``: the lake's table maintenance, through Iceberg's Spark procedures.

For every table mirrored to Hive (or those named), in this order:

* **raw layer**, the table's rows of ``<catalog>.<stream_writer.database>._cdc_changes`` (the
  one raw table of every logical table, ``cdc_platform.lake``; the dead letters too): rows of
  days older than the retention deleted (``_expire_raw_days``: a day of the table's bucket
  in which every table is past its retention dropped whole in the metadata, the table's rows
  of other days by ``DELETE``, rewriting the bucket's files without them), the small files of
  the table's bucket compacted to ``maintenance.target_file_mb`` (``rewrite_data_files``
  with ``where``: the files that may hold its rows; sorted by ``RAW_COMPACTION_ORDER``);
* **snapshot** ``<catalog>.<merge.database>.<table>``: day tags older than the retention
  dropped (``ALTER TABLE … DROP TAG``) and the dt view rewritten without them, small files
  compacted to ``merge.file_size_mb`` (the size merge writes) and the deletes merge-on-read
  leaves folded into a data file once they make half of its rows (``rewrite_data_files``,
  ``delete-ratio-threshold`` ``FOLD_DELETES_RATIO``: a retained day tag keeps the file it
  replaced, so folding every delete would copy about the whole table each run); then the
  position delete files where it pays only (``delete_files_to_rewrite``: a data file's two
  or more, one naming a data file main no longer holds) rewritten into one per data file,
  without the entries naming rewritten files (Iceberg's position-delete rewrite, on those
  files only): a run over an unchanged table rewrites nothing;
* the snapshot tables and, once per run after the tables, the raw table: snapshots no branch
  or tag needs expired once older than ``maintenance.expire_after_hours``
  (``expire_snapshots``, the newest ``retain_snapshots`` of main always kept, and on a
  snapshot table main's lineage back to the newest day's tag: tagged days stay readable, and
  the next merge can tell that main holds the newest day; on the raw table main's lineage
  back to the oldest raw snapshot the merge facts of the newest tags of ANY table mirrored
  to Hive name, named in the run or not: the next merge searches the commits since for late
  rows, whatever the time between merges; and back to each writer's newest raw commit its
  progress row has not caught up with: a writer that crashed between its two commits resumes
  from that commit, however long it stays down), and files of the table's folder no snapshot
  references removed once older than ``maintenance.orphan_after_hours``
  (``remove_orphan_files``: what a killed writer or merge left behind);
* once per run, last, the writers' progress table ``_cdc_writer_progress`` (a commit per
  writer and batch): its snapshots expired and orphan files removed by the same rules (no
  reader needs any snapshot but the current one: the writers' rows are read from it). Its
  metadata files are bounded by the table itself (Iceberg deletes the oldest after each
  commit: ``cdc_platform.lake.PROGRESS_TABLE_PROPERTIES``).

Retention (days): ``tables[].retention.snapshot_days`` / ``raw_days``, else
``maintenance.snapshot_days`` / ``raw_days``; "older than N days" counts from ``today``: the
day ``today − N`` is kept, the one before is not.

Safe while the stream writer and merge run: every step is one Iceberg commit validated
against the commits made meanwhile (optimistic concurrency). Appends never conflict with a
compaction; a compaction that lost a race with a merge's deletes fails for that file group and
is reported (the next run compacts it), and a merge that lost to a compaction starts again
(``merge.job``). Nothing here lists or deletes files itself.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, load_snapshot
from cdc_platform.iceberg import LakeCatalog, storage_for
from cdc_platform.lake import (
    DAY_COLUMN,
    DEAD_LETTER_TABLE,
    LOGICAL_TABLE_COLUMN,
    PROGRESS_TABLE,
    RAW_COMPACTION_ORDER,
    RAW_TABLE,
    commits_ahead_of_progress,
    raw_table_condition,
    read_all_writer_progress,
)
from cdc_platform.lake_snapshots import day_tag
from cdc_platform.spark import spark_error_sentence
from merge.hours import expired_hours
from merge.snapshot import SnapshotStore
from simple_binlog.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Step:
    """One maintenance step of one table: what it did, or why it failed."""

    table: str  # catalog.database.table
    action: str  # expire days | compact | expire snapshots | remove orphans | drop tags
    detail: str
    seconds: float
    error: str | None = None


@dataclass(slots=True)
class MaintenanceReport:
    steps: list[Step] = field(default_factory=list)

    @property
    def failed(self) -> list[Step]:
        return [step for step in self.steps if step.error is not None]


def expired_days(days: list[date], today: date, keep_days: int) -> list[date]:
    """Pure: the days older than ``keep_days`` before ``today`` (``today − keep_days`` is
    kept)."""
    cutoff = today - timedelta(days=keep_days)
    return sorted(day for day in days if day < cutoff)


def lineage_to(
    current: int | None, parent_of: Callable[[int], int | None], wanted: set[int]
) -> int:
    """Pure: how many snapshots of main's lineage, from ``current`` back, reach the oldest of
    ``wanted`` found on it (it included; ``parent_of``: a snapshot's parent, None at the
    first or where the lineage is cut); 0 when none of ``wanted`` is on it."""
    snapshot_id, count, reach = current, 0, 0
    seen: set[int] = set()
    while snapshot_id is not None and snapshot_id not in seen:
        seen.add(snapshot_id)
        count += 1
        if snapshot_id in wanted:
            reach = count
        snapshot_id = parent_of(snapshot_id)
    return reach


# A snapshot's data file is rewritten without its deleted rows once this share r of its rows
# is deleted: the copies retained day tags keep are at most (1 − r)/r × the deleted rows (as
# many at 0.5), and a read skips at most this share of a file's rows.
FOLD_DELETES_RATIO = 0.5


@dataclass(frozen=True, slots=True)
class LiveDeleteFile:
    """A position delete file main references: its path, its partition's values and the one
    data file it names (None when it names several: written with partition granularity)."""

    path: str
    partition: tuple[Any, ...]  # its partition spec's id, then the partition's values
    data_file: str | None


def delete_files_to_rewrite(
    delete_files: Sequence[LiveDeleteFile], data_files: set[str]
) -> list[LiveDeleteFile]:
    """Pure: the position delete files a rewrite pays for, given main's live delete files
    and the paths of its live data files: those of a data file named by two delete files or
    more (a read applies each; one after the rewrite), one naming a data file main no longer
    holds (folded or compacted: its positions still count in total-position-deletes, so the
    snapshot's running row total would be short), and every one of a partition where one
    names several data files (it may name a gone one, and any data file of its partition
    another delete file names). Any other is its data file's only delete file: a rewrite
    would copy it, and every retained day tag would keep the copy beside the original."""
    named = Counter(f.data_file for f in delete_files if f.data_file is not None)
    mixed = {f.partition for f in delete_files if f.data_file is None}
    return [
        f
        for f in delete_files
        if f.partition in mixed or f.data_file not in data_files or named[f.data_file] > 1
    ]


# A position delete file's column of data file paths (Iceberg's MetadataColumns.DELETE_FILE_PATH):
# its lower and upper bounds are equal, the path, when the file names one data file (format
# v2 keeps no referenced_data_file for it; v3's deletion vectors do).
_DELETE_FILE_PATH_ID = 2147483546


def read_live_delete_files(spark: SparkSession, name: str) -> list[LiveDeleteFile]:
    """The position delete files main of table ``name`` references (``delete_files``)."""
    deletes = spark.table(f"{name}.delete_files").where("content = 1")
    partitioned = "partition" in deletes.columns
    lower = f"lower_bounds[{_DELETE_FILE_PATH_ID}]"
    upper = f"upper_bounds[{_DELETE_FILE_PATH_ID}]"
    one_path = f"CASE WHEN {lower} = {upper} THEN CAST({lower} AS STRING) END"
    rows = deletes.selectExpr(
        "file_path",
        "spec_id",
        "partition" if partitioned else "NULL AS partition",
        f"coalesce(referenced_data_file, {one_path})",
    ).collect()
    # The spec's id with the values: after a partition spec change, equal values of two specs
    # are two partitions (a rewrite's group holds the files of one spec).
    return [
        LiveDeleteFile(row[0], (row[1], *(tuple(row[2]) if partitioned else ())), row[3])
        for row in rows
    ]


def raw_buckets(fields: Iterable[tuple[str, int]]) -> dict[int, int]:
    """Pure: per source field id, the bucket count of a partition spec's ``bucket[N]`` fields
    (``fields``: each field's transform as Iceberg prints it and its source field id)."""
    found = {}
    for transform, source in fields:
        if transform.startswith("bucket[") and transform.endswith("]"):
            found[source] = int(transform[len("bucket[") : -1])
    return found


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Maintainer:
    """Runs the steps of the module for the tables of ``config`` in one Spark session."""

    def __init__(
        self,
        settings: Settings,
        spark: SparkSession,
        config: ConfigSnapshot,
        progress: Callable[[Step], None] | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.spark = spark
        self.config = config
        self.catalog = settings.lake.catalog
        self.snapshots = SnapshotStore(spark, settings)
        self._progress = progress or (lambda step: None)
        self._now = now or (lambda: datetime.now(UTC))
        storage = storage_for(settings)
        self._s3 = storage.location.kind == "s3"
        # The writers' progress rows (the raw table's expiry keeps what a restart needs).
        self.raw_lake = LakeCatalog(spark, storage, self.catalog)

    def close(self) -> None:
        """Close what the run opened beside the Spark session (the view refresh's metastore
        clients); the caller stops the session."""
        self.snapshots.close()

    def tables(self, names: list[str] | None) -> list[TableMirror]:
        mirrors = [t for t in self.config.tables_for("hive")]
        if not names:
            return mirrors
        return [self.config.table(name) for name in names]

    def run(self, names: list[str] | None = None) -> MaintenanceReport:
        report = MaintenanceReport()
        mirrors = self.tables(names)
        if not mirrors:
            raise ConfigError("no configured table is mirrored to Hive (tables: in the config).")
        raw_db = self.settings.stream_writer.database
        # Before any step: a location that cannot be written, or a table written by an
        # incompatible version (or not by cdc-mirror), stops the run, in one sentence naming
        # it and the cause, with nothing changed.
        self.raw_lake.storage.check(self.spark)
        mirrored = [mirror.name for mirror in mirrors]
        self.snapshots.lake.check_compatible(raw_db, [RAW_TABLE, PROGRESS_TABLE])
        self.snapshots.lake.check_compatible(self.settings.merge.database, mirrored)
        raw_exists = self._exists(raw_db, RAW_TABLE)
        for mirror in mirrors:
            if raw_exists:
                self._raw(report, raw_db, mirror.name)
            snapshot_days = (
                mirror.retention.snapshot_days or self.settings.maintenance.snapshot_days
            )
            hourly_days = mirror.retention.hourly_days or self.settings.maintenance.hourly_days
            self._snapshot(report, mirror.name, snapshot_days, hourly_days)
        if raw_exists:
            if names is None:
                self._raw(report, raw_db, DEAD_LETTER_TABLE)
            # The one raw table's snapshots serve every table's merges, named here or not.
            read = set().union(
                *(self._raw_read_by_merges(m.name) for m in self.config.tables_for("hive"))
            )
            self._raw_history(report, raw_db, read)
        if self._exists(raw_db, PROGRESS_TABLE):
            self._progress_history(report, raw_db)
        return report

    # -- the layers -------------------------------------------------------------------------
    def _exists(self, database: str, table: str) -> bool:
        return bool(self.spark.catalog.tableExists(f"{self.catalog}.{database}.{table}"))

    def _raw(self, report: MaintenanceReport, database: str, table: str) -> None:
        """The rows of logical table ``table`` in the raw table: its days past the retention
        deleted, its small files compacted. Steps named ``database.table`` (its view)."""
        qualified = f"{database}.{table}"
        cutoff = self._now().date() - timedelta(days=self._raw_keep_days(table))
        condition = raw_table_condition(table)
        with self._step(report, qualified, "expire days") as detail:
            detail.append(self._expire_raw_days(database, table, cutoff, condition))
        self._compact(
            report,
            database,
            RAW_TABLE,
            self.settings.maintenance.target_file_mb,
            deletes=False,
            where=condition,
            step=qualified,
            sort_order=RAW_COMPACTION_ORDER,
        )

    def _raw_history(self, report: MaintenanceReport, database: str, read: set[int]) -> None:
        """The raw table's snapshots expired and its orphan files removed, once: the raw
        snapshots the next merges search for late rows from (``read``: their incremental read
        walks main's lineage from there to now) and each writer's raw commit its progress has
        not caught up with (``commits_ahead_of_progress``) kept, with every commit since."""
        # The head first: the snapshots listed after it include it (the writer commits
        # meanwhile; a head missing from the list would keep nothing).
        current = self._raw_java(database, RAW_TABLE).currentSnapshot()
        head = None if current is None else int(current.snapshotId())
        # One read of the snapshots' metadata table: the writer commits every batch, so the
        # lineage is thousands of snapshots long (a JVM call per snapshot is not).
        name = self._name(database, RAW_TABLE)
        rows = self.spark.sql(
            f"SELECT snapshot_id, parent_id, committed_at, summary FROM {name}.snapshots"  # noqa: S608 - quoted names
        ).collect()
        parents = {
            int(row["snapshot_id"]): None if row["parent_id"] is None else int(row["parent_id"])
            for row in rows
        }
        newest_first = sorted(rows, key=lambda row: row["committed_at"], reverse=True)
        progress = read_all_writer_progress(self.raw_lake, database)
        wanted = read | commits_ahead_of_progress(
            ((int(row["snapshot_id"]), row["summary"] or {}) for row in newest_first),
            {writer: found.next_offsets for writer, found in progress.items()},
        )
        keep = lineage_to(head, parents.get, wanted) if wanted else 0
        # ``keep`` counts from the head read above; expire_snapshots counts ``retain_last`` from
        # the head when it runs, after commits made meanwhile: bounded by the oldest wanted
        # snapshot's commit time too, so it and every later one stay whatever lands meanwhile.
        kept_since = [
            row["committed_at"] for row in rows if int(row["snapshot_id"]) in wanted and keep
        ]
        since = min(kept_since).astimezone(UTC) if kept_since else None
        self._expire(report, database, RAW_TABLE, keep=keep, keep_since=since)
        self._orphans(report, database, RAW_TABLE)

    def _progress_history(self, report: MaintenanceReport, database: str) -> None:
        """The writers' progress table's snapshots expired and its orphan files removed, once
        (every writer commits a snapshot a batch). Its readers read the rows of the current
        snapshot (``read_all_writer_progress``, validation's ``LakeWatermark``) or its summary
        (``ready_days_from_metastore``), which expiry always keeps; nothing reads an older
        one, so the newest ``retain_snapshots`` are enough."""
        self._expire(report, database, PROGRESS_TABLE)
        self._orphans(report, database, PROGRESS_TABLE)

    def _raw_java(self, database: str, table: str) -> Any:
        """The raw table's Iceberg Java object, loaded fresh."""
        jvm: Any = self.spark.sparkContext._jvm
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, f"{self.catalog}.{database}.{table}"
        )

    def _raw_read_by_merges(self, table: str) -> set[int]:
        """The raw snapshots the merge facts of the snapshot table's two newest day tags and
        two newest hour tags name (``merge.job.merge_facts``): where the next merge of a day
        or hour, or a re-run of the newest, searches the raw commits since for late rows.
        Expiring one would leave that merge to its fallback (a read of every retained raw
        day); empty when nothing was merged."""
        if not self._exists(self.settings.merge.database, table):
            return set()
        state = self.snapshots.state(table)
        tags = [day_tag(day) for day in sorted(state.days)[-2:]]
        tags += [hour.tag for hour in sorted(state.hours)[-2:]]
        found: set[int] = set()
        for tag in tags:
            seen = self.snapshots.merge_facts(table, tag).get("rawSnapshotId")
            if seen is not None:
                found.add(int(seen))
        return found

    def _snapshot(
        self, report: MaintenanceReport, table: str, keep_days: int, keep_hourly_days: int
    ) -> None:
        database = self.settings.merge.database
        if not self._exists(database, table):
            return
        qualified = f"{database}.{table}"
        with self._step(report, qualified, "drop tags") as detail:
            state = self.snapshots.state(table)
            expired = expired_days(list(state.days), self._now().date(), keep_days)
            name = self._name(database, table)
            for day in expired:
                self.spark.sql(f"ALTER TABLE {name} DROP TAG IF EXISTS `dt-{day.isoformat()}`")
            if expired:
                self.snapshots.refresh_days_view(table)
            kept = len(state.days) - len(expired)
            detail.append(f"{len(expired)} day tags dropped, {kept} kept")
            # Hourly snapshots: hour tags of days past their (shorter) retention.
            hours = expired_hours(list(state.hours), self._now().date(), keep_hourly_days)
            for hour in hours:
                self.spark.sql(f"ALTER TABLE {name} DROP TAG IF EXISTS `{hour.tag}`")
            if hours:
                self.snapshots.refresh_hours_view(table)
            if state.hours:
                kept = len(state.hours) - len(hours)
                detail.append(f"{len(hours)} hour tags dropped, {kept} kept")
        # To the size merge writes (merge.file_size_mb): the key-range files a merge leaves at
        # that size are not small, so only the small files a day's change adds are combined
        # (at maintenance.target_file_mb every snapshot file counted as small, and a partition
        # with a few was rewritten whole, each retained tag keeping the old copy).
        self._compact(report, database, table, self.settings.merge.file_size_mb, deletes=True)
        # Main's commits since the newest day stay: the next merge sees by them that main
        # holds that day's rows (only compactions since) and merges on main.
        keep, since = self._main_since_newest_day(table)
        self._expire(report, database, table, keep=keep, keep_since=since)
        self._orphans(report, database, table)

    def _main_since_newest_day(self, table: str) -> tuple[int, datetime | None]:
        """How many snapshots of main's lineage lead back to the newest day's tag (it
        included) and when that snapshot was committed (a merge may commit while maintain
        runs: ``_expire``); (0, None) when main does not descend from it."""
        state = self.snapshots.state(table)
        if state.current is None or not state.days:
            return 0, None
        newest = state.days[max(state.days)]
        java = self.snapshots.java_table(table)
        snapshot_id: int | None = state.current
        count = 0
        while snapshot_id is not None:
            snapshot = java.snapshot(snapshot_id)
            if snapshot is None:
                return 0, None
            count += 1
            if snapshot_id == newest:
                return count, datetime.fromtimestamp(int(snapshot.timestampMillis()) / 1000, UTC)
            parent = snapshot.parentId()
            snapshot_id = None if parent is None else int(parent)
        return 0, None

    # -- Iceberg's procedures ---------------------------------------------------------------
    def _name(self, database: str, table: str) -> str:
        return ".".join(_ident(part) for part in (self.catalog, database, table))

    def _call(self, procedure: str, arguments: str) -> list[Any]:
        return list(
            self.spark.sql(f"CALL {_ident(self.catalog)}.system.{procedure}({arguments})").collect()
        )

    def _raw_keep_days(self, table: str) -> int:
        """The raw retention of logical table ``table``: its mirror's, else the default (also
        for the dead letters and a table the config does not mirror)."""
        for mirror in self.config.tables:
            if mirror.name == table and mirror.retention.raw_days:
                return mirror.retention.raw_days
        return self.settings.maintenance.raw_days

    def _expire_raw_days(self, database: str, table: str, cutoff: date, condition: str) -> str:
        """Delete the raw rows of logical table ``table`` (``condition``) of the days before
        ``cutoff``; what was done, in words.

        A raw file holds the rows of every table of its bucket (``RAW_TABLE_PARTITIONING``).
        A day of the table's bucket in which every table is past its own retention is dropped
        whole, in the metadata (``_drop_raw_files``); in the other days the table's rows go by
        a copy-on-write DELETE (those files rewritten without them; a merge's incremental read
        takes appends only, so the rewritten rows are not read as new). Without the first, a
        day would be rewritten once per table of its bucket as their retentions pass."""
        name = self._name(database, RAW_TABLE)
        java = self._raw_java(database, RAW_TABLE)
        current = java.currentSnapshot()
        buckets = raw_buckets(
            (str(f.transform()), int(f.sourceId())) for f in java.spec().fields()
        ).get(int(java.schema().findField(LOGICAL_TABLE_COLUMN).fieldId()))
        if current is None or buckets is None:
            # Nothing written yet, or a spec without a bucket of tables (made by another
            # version or evolved by an operator): by the filter alone (with a partition per
            # table, Iceberg drops whole files).
            before = self._rows_of_days_before(name, cutoff, condition)
            if before:
                self.spark.sql(
                    f"DELETE FROM {name} WHERE {condition} AND {DAY_COLUMN} < '{cutoff}'"  # noqa: S608 - quoted names
                )
            return f"{before} rows of days before {cutoff} deleted"
        snapshot = int(current.snapshotId())
        [found] = self.spark.sql(
            f"SELECT {self._bucket_of(buckets, _literal(table))} AS bucket"
        ).collect()
        bucket = int(found["bucket"])
        days = self.spark.sql(
            f"SELECT {DAY_COLUMN} AS day, collect_set({LOGICAL_TABLE_COLUMN}) AS tables, "  # noqa: S608 - quoted names
            f"count_if({condition}) AS mine FROM {name} VERSION AS OF {snapshot} "
            f"WHERE {DAY_COLUMN} < '{cutoff}' "
            f"AND {self._bucket_of(buckets, LOGICAL_TABLE_COLUMN)} = {bucket} "
            f"GROUP BY {DAY_COLUMN}"
        ).collect()
        today = self._now().date()

        def expired(other: str, day: str) -> bool:
            return day < str(today - timedelta(days=self._raw_keep_days(other)))

        mine = {str(row["day"]): int(row["mine"]) for row in days if row["mine"]}
        whole = [
            day
            for day, tables in ((str(row["day"]), row["tables"]) for row in days)
            if day in mine and all(expired(other, day) for other in tables)
        ]
        if whole and not self._drop_raw_files(java, snapshot, whole, buckets, bucket):
            whole = []  # a file of another spec in those days: by the filter below
        rest = sorted(set(mine) - set(whole))
        if rest:
            listed = ", ".join(_literal(day) for day in rest)
            self.spark.sql(
                f"DELETE FROM {name} WHERE {condition} AND {DAY_COLUMN} IN ({listed})"  # noqa: S608 - quoted names
            )
        dropped = f" ({len(whole)} days of its bucket dropped whole)" if whole else ""
        return f"{sum(mine.values())} rows of days before {cutoff} deleted{dropped}"

    def _drop_raw_files(
        self, java: Any, snapshot: int, days: Sequence[str], buckets: int, bucket: int
    ) -> bool:
        """Remove from the raw table, in one metadata commit, the data files of ``days`` in
        bucket ``bucket`` (of ``buckets``) of the logical tables, as of ``snapshot``: the files
        listed then, not a filter, so that a file a writer adds meanwhile (a late row) stays,
        and the commit fails when one of them is gone meanwhile (compacted: the next run
        deletes again).
        False, with nothing changed, when one of them is of another partition spec (its
        partition is not the bucket's)."""
        jvm: Any = self.spark.sparkContext._jvm
        expressions = jvm.org.apache.iceberg.expressions.Expressions
        listed = jvm.java.util.ArrayList()
        for day in days:
            listed.add(day)
        condition = getattr(expressions, "and")(
            getattr(expressions, "in")(DAY_COLUMN, listed),
            expressions.equal(expressions.bucket(LOGICAL_TABLE_COLUMN, buckets), bucket),
        )
        spec = int(java.spec().specId())
        delete = java.newDelete()
        with closing(java.newScan().useSnapshot(snapshot).filter(condition).planFiles()) as tasks:
            iterator = tasks.iterator()
            while iterator.hasNext():
                data = iterator.next().file()
                if int(data.specId()) != spec:
                    return False
                delete = delete.deleteFile(data)
        delete.validateFilesExist().commit()
        return True

    def _bucket_of(self, buckets: int, value: str) -> str:
        """The SQL of Iceberg's bucket function (``buckets``) of the SQL ``value``."""
        return f"{_ident(self.catalog)}.system.bucket({buckets}, {value})"

    def _rows_of_days_before(self, name: str, cutoff: date, condition: str) -> int:
        """Rows in days before ``cutoff`` matching ``condition``: a count over the files of
        those days Iceberg plans for it (the table's bucket, pruned by their bounds); none once
        the days are expired."""
        rows = self.spark.sql(
            f"SELECT count(*) AS n FROM {name} "  # noqa: S608 - quoted names
            f"WHERE {condition} AND {DAY_COLUMN} < '{cutoff}'"
        ).first()
        return int(rows["n"]) if rows is not None else 0

    def _compact(
        self,
        report: MaintenanceReport,
        database: str,
        table: str,
        target_mb: float,
        deletes: bool,
        where: str | None = None,
        step: str | None = None,
        sort_order: str | None = None,
    ) -> None:
        """Compact ``table`` to files of ``target_mb`` (its rows matching ``where`` only, when
        given; sorted by ``sort_order`` when given, else bin-packed); the step is named
        ``step`` (default ``database.table``)."""
        size = int(target_mb * 1024 * 1024)
        options = {
            "target-file-size-bytes": str(size),
            # Groups that lost a race with a concurrent commit fail alone; the rest commits.
            "partial-progress.enabled": "true",
        }
        if deletes:
            # Only where it pays: a data file is rewritten once FOLD_DELETES_RATIO of its rows
            # are deleted (Iceberg counts the file-scoped delete files Spark writes), so the
            # copies retained tags keep are at most the deleted rows (docs/merge.md "Cost and
            # storage follow the change"). Iceberg's default delete-file-threshold (no limit)
            # stays: rewrite_position_delete_files below leaves one per data file.
            options["delete-ratio-threshold"] = str(FOLD_DELETES_RATIO)
            options["remove-dangling-deletes"] = "true"
        listed = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
        arguments = [f"table => '{database}.{table}'", f"options => map({listed})"]
        if where is not None:
            arguments.append(f"where => {_literal(where)}")
        if sort_order is not None:
            arguments += ["strategy => 'sort'", f"sort_order => {_literal(sort_order)}"]
        with self._step(report, step or f"{database}.{table}", "compact") as detail:
            [row] = self._call("rewrite_data_files", ", ".join(arguments))
            detail.append(
                f"{row['rewritten_data_files_count']} files rewritten into "
                f"{row['added_data_files_count']}"
                + (
                    f", {row['failed_data_files_count']} left for the next run"
                    if row["failed_data_files_count"]
                    else ""
                )
            )
            if deletes:
                detail.append(self._rewrite_position_deletes(database, table))

    def _rewrite_position_deletes(self, database: str, table: str) -> str:
        """The position delete files ``delete_files_to_rewrite`` names rewritten into one per
        data file (file-scoped, Spark's delete granularity: the fold ratio of ``_compact``
        counts them), without the positions of data files main no longer holds: those
        ``_compact`` rewrote leave their delete files behind (Iceberg's dangling-delete
        removal keeps them while older data files of the partition remain), whose positions
        would still count in the snapshot's running row total, total-records −
        total-position-deletes, which the merge's row count and post-merge check read. A
        MERGE already leaves one delete file per data file (it copies the earlier one into
        its new one and drops it), so a data file's only delete file stays as it is: a run
        over an unchanged table rewrites nothing, and no retained tag keeps a copy made for
        nothing. Iceberg's procedure (``rewrite_position_delete_files``) selects whole
        partitions: with ``rewrite-all`` it copied every delete file of a bucket at every
        run, and without it its size rules (``min-input-files`` 5 a bucket) copy a bucket of
        five single delete files and leave a dangling one alone. So its own pieces run here
        on the chosen files: its scan of staged position-delete tasks, the join with the live
        data files and its position-delete rewrite write (``SparkRewritePositionDeleteRunner``),
        and the commit of ``RewritePositionDeletesCommitManager``."""
        name = self._name(database, table)
        live = read_live_delete_files(self.spark, name)
        data_files = self.spark.table(f"{name}.data_files").select("file_path")
        chosen = delete_files_to_rewrite(live, {row[0] for row in data_files.collect()})
        if not chosen:
            return f"0 of {len(live)} delete files rewritten"
        jvm: Any = self.spark.sparkContext._jvm
        iceberg = jvm.org.apache.iceberg
        java = self.snapshots.java_table(table)
        start = int(java.currentSnapshot().snapshotId())
        positions = iceberg.MetadataTableUtils.createMetadataTableInstance(
            java, iceberg.MetadataTableType.POSITION_DELETES
        )
        partition_of = {f.path: f.partition for f in chosen}
        tasks: dict[tuple[Any, ...], list[Any]] = {}
        planned = positions.newBatchScan().ignoreResiduals().planFiles()
        try:
            found = planned.iterator()
            while found.hasNext():
                task = found.next()
                partition = partition_of.get(str(task.file().location()))
                if partition is not None:
                    tasks.setdefault(partition, []).append(task)
        finally:
            planned.close()
        if not tasks:  # removed meanwhile (a concurrent run)
            return f"0 of {len(live)} delete files rewritten"
        rewrite = java.newRewrite().validateFromSnapshot(start)
        added: list[Any] = []
        for group in tasks.values():
            new_files = self._rewrite_delete_group(positions, group, data_files)
            sequence = max(int(task.file().dataSequenceNumber()) for task in group)
            for task in group:
                rewrite.deleteFile(task.file())
            for new_file in new_files:
                rewrite.addFile(new_file, sequence)
            added.extend(new_files)
        try:
            rewrite.commit()
        except Exception as exc:
            # As Iceberg's own rewrite does: files of a commit that surely failed (a
            # CleanableFailure, e.g. a concurrent merge changed these deletes) are deleted
            # now; after any other failure the commit may have landed, they stay (orphan
            # removal takes them if it did not).
            cleanable = _iceberg_class(self.spark, "exceptions.CleanableFailure")
            if cleanable.isInstance(getattr(exc, "java_exception", None)):
                for new_file in added:
                    java.io().deleteFile(new_file.location())
            raise
        rewritten = sum(len(group) for group in tasks.values())
        return f"{rewritten} of {len(live)} delete files rewritten into {len(added)}"

    def _rewrite_delete_group(self, positions: Any, group: list[Any], data_files: Any) -> list[Any]:
        """The position delete files of ``group`` (scan tasks of one partition of the
        table's position_deletes metadata table ``positions``) written again without the
        positions of data files not in ``data_files``: the new delete files, staged, not
        committed (``SparkRewritePositionDeleteRunner.doRewrite``'s steps)."""
        jvm: Any = self.spark.sparkContext._jvm
        spark_iceberg = jvm.org.apache.iceberg.spark
        group_id = str(uuid.uuid4())
        task_list = jvm.java.util.ArrayList()
        for task in group:
            task_list.add(task)
        tables = _table_cache(self.spark)
        tables.add(group_id, positions)
        spark_iceberg.ScanTaskSetManager.get().stageTasks(positions, group_id, task_list)
        try:
            staged = (
                self.spark.read.format("iceberg")
                .option("scan-task-set-id", group_id)
                .option("file-open-cost", "0")
                .load(group_id)
            )
            valid = staged.join(
                data_files, staged["file_path"] == data_files["file_path"], "leftsemi"
            )
            # One writer task per data file's positions: its one delete file.
            (
                valid.repartition("file_path")
                .sortWithinPartitions("file_path", "pos")
                .write.format("iceberg")
                .option("rewritten-file-scan-task-set-id", group_id)
                # One data file's positions a file, whatever the table's granularity says.
                .option("delete-granularity", "file")
                .mode("append")
                .save(group_id)
            )
            return list(
                spark_iceberg.PositionDeletesRewriteCoordinator.get().fetchNewFiles(
                    positions, group_id
                )
            )
        finally:
            tables.remove(group_id)
            spark_iceberg.ScanTaskSetManager.get().removeTasks(positions, group_id)
            spark_iceberg.PositionDeletesRewriteCoordinator.get().clearRewrite(positions, group_id)

    def _expire(
        self,
        report: MaintenanceReport,
        database: str,
        table: str,
        keep: int = 0,
        keep_since: datetime | None = None,
    ) -> None:
        """Expire the snapshots older than ``expire_after_hours`` but the newest ``keep`` (at
        least ``retain_snapshots``) and, given ``keep_since``, any committed since then."""
        config = self.settings.maintenance
        older = self._now() - timedelta(hours=config.expire_after_hours)
        if keep_since is not None:
            # Iceberg expires snapshots strictly older; the literal's seconds round down.
            older = min(older, keep_since)
        retain = max(config.retain_snapshots, keep)
        with self._step(report, f"{database}.{table}", "expire snapshots") as detail:
            [row] = self._call(
                "expire_snapshots",
                f"table => '{database}.{table}', older_than => TIMESTAMP '{_timestamp(older)}', "
                f"retain_last => {retain}",
            )
            files = (
                row["deleted_data_files_count"]
                + row["deleted_position_delete_files_count"]
                + row["deleted_equality_delete_files_count"]
            )
            detail.append(f"{files} data and delete files no snapshot needs removed")

    def _orphans(self, report: MaintenanceReport, database: str, table: str) -> None:
        older = self._now() - timedelta(hours=self.settings.maintenance.orphan_after_hours)
        # Object stores list by prefix (Hadoop's directory listing of S3 is slow and partial).
        prefix = ", prefix_listing => true" if self._s3 else ""
        with self._step(report, f"{database}.{table}", "remove orphans") as detail:
            rows = self._call(
                "remove_orphan_files",
                f"table => '{database}.{table}', older_than => TIMESTAMP '{_timestamp(older)}'"
                f"{prefix}",
            )
            detail.append(f"{len(rows)} orphan files removed")

    @contextmanager
    def _step(self, report: MaintenanceReport, table: str, action: str) -> Iterator[list[str]]:
        """Time one step, record it, tell the caller's progress; a failure is recorded in
        one sentence and the next step goes on."""
        started = time.monotonic()
        detail: list[str] = []
        error: str | None = None
        try:
            yield detail
        except Exception as exc:  # Spark's and Iceberg's errors (py4j): reported, not raised
            from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
            from pyspark.errors import PySparkException  # noqa: PLC0415

            if not isinstance(exc, PySparkException | Py4JError):
                raise
            error = spark_error_sentence(exc)
            log.error("maintenance of %s (%s) failed: %s", table, action, error)
        step = Step(
            f"{self.catalog}.{table}",
            action,
            "; ".join(detail),
            time.monotonic() - started,
            error,
        )
        report.steps.append(step)
        self._progress(step)


def run_maintain_command(
    settings: Settings, tables: list[str], progress: Callable[[Step], None]
) -> MaintenanceReport:
    """``cdc-mirror maintain``: the table mirrors from the configuration store, one Spark
    session with the lake's catalog, ``progress`` told of every step as it ends."""
    from cdc_platform.iceberg import lake_session  # noqa: PLC0415 - starts a JVM

    config = load_snapshot(settings)
    spark = lake_session(settings, "cdc-mirror-maintain")
    try:
        with closing(Maintainer(settings, spark, config, progress)) as maintainer:
            return maintainer.run(tables or None)
    finally:
        spark.stop()


def _iceberg_class(spark: SparkSession, name: str) -> Any:
    """The ``java.lang.Class`` of Iceberg's ``org.apache.iceberg.<name>``, from the loader
    Spark loads the session's jars with."""
    jvm: Any = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    return jvm.java.lang.Class.forName(f"org.apache.iceberg.{name}", True, loader)


def _table_cache(spark: SparkSession) -> Any:
    """Iceberg's ``SparkTableCache.get()``, where ``format("iceberg").load(id)`` finds a table
    by id (by reflection: Py4J cannot pick the static ``get()`` beside ``get(String)``)."""
    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark.sparkContext._jvm
    cache = _iceberg_class(spark, "spark.SparkTableCache")
    get = cache.getMethod("get", gateway.new_array(jvm.java.lang.Class, 0))
    return get.invoke(None, gateway.new_array(jvm.java.lang.Object, 0))


def _literal(text: str) -> str:
    """A Spark SQL string literal of ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _timestamp(moment: datetime) -> str:
    """A Spark TIMESTAMP literal's text in UTC (the sessions' time zone)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
