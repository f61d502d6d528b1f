"""The merge job: ``cdc-mirror merge --table T --dt D`` or ``--all``; one Spark session.

For one table and day ``dt``:

1. wait (bounded: ``--wait-ready-s`` / ``merge.wait_ready_s``) until the stream writer's
   committed progress (``cdc_platform.lake``: its row of ``_cdc_writer_progress``) names
   ``dt`` a ready day; fail with one sentence otherwise;
2. late events: if the writer has since counted late rows for ``dt−1`` beyond what the merge
   of ``dt−1`` saw, ``dt−1`` is merged again first (its raw partition holds them now);
3. read ``dt`` of the raw Iceberg table (``lake.ods_binlog_source.<table>``);
4. live MySQL schema of all shards (``cdc_platform.mysql_schema``), key (``tables[].key``
   or MySQL's), schema plan (``merge.schema``);
5. flatten ``content`` into typed columns; the archive-delete rule (``merge.archive``);
6. (changes ∪ snapshot ``dt−1`` as INSERTs) → latest row per key by binlogOffset → DELETEs
   dropped → partition ``dt`` of ``<merge.database>.<table>``, published atomically
   (``merge.snapshot``); a re-run overwrites the same partition atomically;
7. record the merge (``<lake>/_merge/<table>/<dt>.json``) and, with a check column, check
   the snapshot against MySQL (``<dt>.check.json``).

With no previous snapshot at all, the day's changes (the replayed MOCK rows among them) form
the first snapshot. A missing ``dt−1`` when older snapshots exist is an error: merging over
the gap would lose the changes of the missing day.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, load_snapshot, snapshot_from_settings
from cdc_platform.iceberg import LakeCatalog, storage_for
from cdc_platform.lake import WriterProgress, default_writer_name, raw_rows, read_writer_progress
from cdc_platform.mysql_schema import LiveSchema, LiveTables
from merge import records
from merge.archive import ArchiveDecision, ArchiveOverride, decide, time_column
from merge.check import CheckResult, check_days, compare, counts_at_cut
from merge.schema import OFFSET_COLUMN, SHARD_COLUMN, SchemaPlan, choose_key, plan_schema
from merge.snapshot import SnapshotStore
from merge.transform import (
    ChangeSummary,
    KeySpan,
    align,
    changed_keys,
    drop_archived,
    files_holding,
    flatten,
    in_key_ranges,
    key_span,
    latest,
    latest_in_key_ranges,
    summarize_changes,
)
from merge.types import SchemaChangeError
from simple_binlog.errors import CdcMirrorError, ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Layout:
    rows: DataFrame
    carried: list[Path]  # files of the previous version kept as they are
    mode: str  # first | full | incremental
    cached: list[DataFrame] = field(default_factory=list)  # unpersisted after the publish
    carried_rows: int = 0  # rows in the carried files


# Files beyond twice the ideal count (plus this) make the next merge a full one (compaction).
_COMPACTION_SLACK = 4


def _data_files(version: Path) -> list[Path]:
    """A version directory's data files (Spark's ``_SUCCESS`` and ``.crc`` files are not)."""
    return sorted(
        path
        for path in version.iterdir()
        if path.is_file() and not path.name.startswith(("_", "."))
    )


def _local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(unquote(parsed.path))


class MergeError(CdcMirrorError):
    """A merge of one table and day failed; the previous snapshot state is intact."""


class NotReadyError(MergeError):
    """The stream writer has not marked the day ready within the wait."""


@dataclass(frozen=True, slots=True)
class MergeRequest:
    table: str
    dt: date
    override: ArchiveOverride = ArchiveOverride.NONE
    wait_ready_s: float | None = None  # None: merge.wait_ready_s
    # Operator override: merge a day the stream writer has not declared ready (an intraday
    # preview, or a writer that cannot declare it). Recorded in the merge record; the day's
    # rows still on their way are missing until the day is merged again once ready.
    skip_readiness: bool = False


@dataclass(slots=True)
class MergeResult:
    table: str
    dt: date
    run_id: str
    rows: int
    changes: int
    location: str
    archive: ArchiveDecision
    schema: SchemaPlan
    seconds: float
    late_rows_seen: int
    remerged: list[str] = field(default_factory=list)
    files_carried: int = 0
    files: int = 0  # data files of the published version (carried ones included)
    mode: str = "full"
    check: CheckResult | None = None
    readiness: str = "ready"  # or "skipped by operator"

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "dt": self.dt.isoformat(),
            "runId": self.run_id,
            "rows": self.rows,
            "changes": self.changes,
            "location": self.location,
            "archive": self.archive.to_json(),
            "schema": self.schema.describe(),
            "key": self.schema.key,
            "seconds": round(self.seconds, 3),
            "lateRowsSeen": self.late_rows_seen,
            "remerged": self.remerged,
            "mode": self.mode,
            "filesCarried": self.files_carried,
            "files": self.files,
            "checkOk": None if self.check is None else self.check.ok,
            "readiness": self.readiness,
        }


def writer_name(settings: Settings, instances: Iterable[str] | None = None) -> str:
    """The stream writer merge waits for: the one named ``merge.writer``, else the configured
    writer, else the writer of all ``instances`` (default: the settings')."""
    return (
        settings.merge.writer
        or settings.stream_writer.name
        or default_writer_name(
            instances if instances is not None else (i.name for i in settings.instances)
        )
    )


def wait_ready(
    progress: Callable[[], WriterProgress | None],
    writer: str,
    dt: date,
    wait_s: float,
    poll_s: float,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], object] | None = None,
) -> dict[str, Any]:
    """What the writer's committed progress says of ``dt`` once it is ready, asking
    ``progress`` at most ``wait_s`` long; NotReadyError otherwise."""
    pause = pause or threading.Event().wait
    deadline = clock() + wait_s
    while True:
        current = progress()
        record = current.ready_record(dt.isoformat()) if current is not None else None
        if record is not None:
            return record
        remaining = deadline - clock()
        if remaining <= 0:
            known = (
                "it has committed no progress"
                if current is None
                else "latest ready days: " + (", ".join(current.ready_days[-3:]) or "none")
            )
            raise NotReadyError(
                f"the stream writer {writer!r} has not marked {dt} ready after {wait_s:g} s "
                f"({known}); wait for it or raise --wait-ready-s."
            )
        pause(min(poll_s, remaining))


def late_rows(progress: WriterProgress | None, dt: str, table: str) -> int:
    """Rows of ``table`` the stream writer wrote for ``dt`` after marking it ready."""
    return 0 if progress is None else progress.late_rows(dt, table)


def _spark_sentence(exc: BaseException) -> str:
    text = str(getattr(exc, "desc", None) or exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:400]


class Merger:
    """Merges days of configured tables into their snapshots, in one Spark session."""

    def __init__(
        self,
        settings: Settings,
        spark: SparkSession,
        live_schema: Callable[[str], LiveSchema] | None = None,
        daily_counts: Callable[[str, date], dict[date, int]] | None = None,
        config: ConfigSnapshot | None = None,
    ) -> None:
        """``config``: the instances and table mirrors, read from the configuration store at
        start (default: those of ``settings``); ``live_schema`` and ``daily_counts``
        (default: read from MySQL now, ``cdc_platform.mysql_schema.LiveTables``)."""
        self.settings = settings
        self.config = config or snapshot_from_settings(settings)
        self.spark = spark
        self.lake = settings.lake_dir
        self.store = SnapshotStore(
            spark, settings.merge.database, self.lake, settings.merge.file_format
        )
        self.writer = writer_name(settings, (i.name for i in self.config.instances))
        # The raw layer and the writer's progress, Iceberg tables of the lake's catalog.
        self.raw_lake = LakeCatalog(spark, storage_for(settings), settings.lake.catalog)
        tables = LiveTables(self.config)
        self._live_schema = live_schema or tables.live_schema
        self._daily_counts = daily_counts or self._mysql_counts(tables)
        self._database_ready = False

    def _mysql_counts(self, tables: LiveTables) -> Callable[[str, date], dict[date, int]]:
        def counts(name: str, today: date) -> dict[date, int]:
            column = self.config.table(name).check_column
            if column is None:
                raise ConfigError(f"table mirror {name!r} has no check_column to count by.")
            return tables.count_per_day(name, column, today)

        return counts

    # -- entry points -----------------------------------------------------------------------
    def merge(self, request: MergeRequest) -> MergeResult:
        """Merge one table and day; MergeError (or another CdcMirrorError) with one sentence."""
        try:
            return self._merge(request, allow_remerge=True)
        except CdcMirrorError:
            raise
        except Exception as exc:
            # Spark and metastore failures (Py4J, AnalysisException, ANSI cast errors) reach
            # the user as one sentence; the snapshot is untouched until the publish commits.
            from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
            from pyspark.errors import PySparkException  # noqa: PLC0415

            if isinstance(exc, PySparkException | Py4JError):
                raise MergeError(
                    f"merging {request.table} for {request.dt} failed in Spark: "
                    f"{_spark_sentence(exc)}"
                ) from exc
            raise

    # -- one merge --------------------------------------------------------------------------
    def _merge(self, request: MergeRequest, allow_remerge: bool) -> MergeResult:
        started = time.monotonic()
        mirror = self.config.table(request.table)
        if "hive" not in mirror.targets:
            raise ConfigError(f"table {mirror.name!r} is not mirrored to Hive (targets).")
        dt = request.dt.isoformat()
        wait_s = (
            request.wait_ready_s
            if request.wait_ready_s is not None
            else self.settings.merge.wait_ready_s
        )
        if request.skip_readiness:
            log.warning(
                "merging %s %s without waiting for readiness (operator override): changes of "
                "the day still on their way are not in this snapshot",
                mirror.name,
                dt,
            )
        else:
            wait_ready(
                self.writer_progress,
                self.writer,
                request.dt,
                wait_s,
                self.settings.merge.ready_poll_s,
            )
        self._ensure_database()
        remerged = self._remerge_late_day(request, mirror) if allow_remerge else []
        late_seen = late_rows(self.writer_progress(), dt, mirror.name)

        live = self._live_schema(mirror.name)
        if not live.shards_agree:
            log.warning(
                "shards of %s differ (%s); using %s's schema",
                mirror.name,
                "; ".join(live.differences[:5]),
                live.shards[0],
            )
        key = choose_key(mirror.name, mirror.key, live.key)
        existing = self.store.data_columns(mirror.name)
        plan = plan_schema(mirror.name, existing, live.columns, key)
        days = self.store.partitions(mirror.name) if existing is not None else []
        previous = self._previous_snapshot(mirror.name, request.dt, days)

        raw = self._load_raw(mirror.name, dt)
        changes = flatten(raw, plan).persist()
        try:
            summary, decision = self._archive_decision(mirror, plan, request, raw, changes)
            applied = changes
            span: KeySpan | None = summary.keys
            if decision.archiving and decision.time_column and decision.cutoff:
                applied = drop_archived(changes, decision.time_column, decision.cutoff)
                span = None  # the summary's span includes the ignored DELETEs' keys
            self.store.evolve(mirror.name, plan, exists=existing is not None)
            run_id = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
            layout = self._snapshot_rows(
                mirror.name, request.dt, plan, previous, applied, summary.count, span
            )
            try:
                location = self.store.publish(
                    mirror.name, dt, run_id, layout.rows, layout.carried, replace=dt in days
                )
                row_count = layout.carried_rows + self._rows_in_new_files(location, layout)
                file_count = len(_data_files(location))
            finally:
                for frame in layout.cached:
                    frame.unpersist()
        finally:
            changes.unpersist()
        change_count = summary.count
        result = MergeResult(
            table=mirror.name,
            dt=request.dt,
            run_id=run_id,
            rows=row_count,
            changes=change_count,
            location=str(location),
            archive=decision,
            schema=plan,
            seconds=time.monotonic() - started,
            late_rows_seen=late_seen,
            remerged=remerged,
            files_carried=len(layout.carried),
            files=file_count,
            mode=layout.mode,
            readiness="skipped by operator" if request.skip_readiness else "ready",
        )
        records.write_json(records.merge_record_path(self.lake, mirror.name, dt), result.to_json())
        log.info(
            "merged %s %s: %d changes → %d rows in %.1f s (archive: %s)",
            mirror.name,
            dt,
            change_count,
            row_count,
            result.seconds,
            decision.reason,
        )
        if self.settings.merge.check and mirror.check_column:
            result.check = self.check(mirror, request.dt)
            records.write_json(
                records.merge_record_path(self.lake, mirror.name, dt), result.to_json()
            )
        return result

    def _rows_in_new_files(self, version: Path, layout: _Layout) -> int:
        """Rows of the files this merge wrote (the carried files are counted already)."""
        carried = {path.name for path in layout.carried}
        written = [path for path in _data_files(version) if path.name not in carried]
        return sum(self.store.file_rows(written).values())

    def _snapshot_rows(
        self,
        table: str,
        dt: date,
        plan: SchemaPlan,
        previous: DataFrame | None,
        changes: DataFrame,
        change_count: int,
        span: KeySpan | None,
    ) -> _Layout:
        """The rows to write for snapshot ``dt`` and the previous files carried forward.

        *full*: (changes ∪ previous snapshot) → latest per key, every row rewritten (first
        snapshot, schema changes, or more changed keys than ``max_incremental_keys``).
        *incremental*: the changed keys are broadcast (never a shuffle of the snapshot);
        yesterday's files holding none of them are carried forward unchanged (hard-linked
        into the new version: the old version may be removed later, the link keeps the
        data). Of the files holding one, the rows of unchanged keys are rewritten as read,
        and only the changed keys (with their previous rows) go through the latest-per-key
        window into new files cut by key range. Cost follows the change: 10,000 changed keys
        clustered in a few key ranges rewrite those few files, not the table. Keys scattered
        over more than ``max_touched_fraction`` of the files make a full merge (cheaper
        then, measured by ``bench/merge_bench.py --pattern random``). Every day adds a few
        files of changed rows; past twice the ideal file count a full merge compacts them.
        """
        config = self.settings.merge
        key = plan.key
        columns = [*[f"`{name}`" for name, _ in plan.columns], OFFSET_COLUMN, SHARD_COLUMN]
        if previous is None:
            files = math.ceil(change_count / config.rows_per_file)
            rows = latest_in_key_ranges(changes, key, files).select(*columns)
            return _Layout(rows, [], "first")
        before = (dt - timedelta(days=1)).isoformat()
        location = self.store.partition_location(table, before)
        keys = changed_keys(changes, key)
        if config.incremental and span is None:
            span = key_span(keys, key)
        key_count = span.count if span is not None else 0
        if (
            not config.incremental
            or plan.changed
            or location is None
            or key_count > config.max_incremental_keys
        ):
            files = math.ceil((previous.count() + change_count) / config.rows_per_file)
            return _Layout(self._full(changes, previous, plan, files), [], "full")
        fmt = config.file_format
        version = self.spark.read.format(fmt).load(location)
        data_files = _data_files(Path(location))
        file_rows = self.store.file_rows(data_files)
        total_rows = sum(file_rows.values())
        ideal_files = max(1, math.ceil(total_rows / config.rows_per_file))
        if len(data_files) > 2 * ideal_files + _COMPACTION_SLACK:
            # Each incremental day adds small files of changed rows; past twice the ideal
            # count a full merge compacts them back into key ranges.
            files = math.ceil((total_rows + key_count) / config.rows_per_file)
            return _Layout(self._full(changes, previous, plan, files), [], "full (compaction)")
        keys = F.broadcast(keys)
        touched = {_local_path(uri) for uri in files_holding(version, keys, key, span)}
        carried = [p for p in data_files if p not in touched]
        if len(touched) > config.max_touched_fraction * len(data_files):
            # Scattered changes: splitting most files into kept and changed rows costs more
            # than one window over everything.
            files = math.ceil((total_rows + key_count) / config.rows_per_file)
            full = self._full(changes, previous, plan, files)
            return _Layout(full, [], "full (most files touched)")
        if touched:
            # The version's schema is known: no second footer read to infer it.
            reread = (
                self.spark.read.format(fmt)
                .schema(version.schema)
                .load([str(p) for p in sorted(touched)])
            )
            # Rows of touched files whose key did not change are written as they are read
            # (no shuffle); only the changed keys go through the latest-per-key window.
            kept = align(reread.join(keys, on=key, how="left_anti"), plan).select(*columns)
            before_change = align(reread.join(keys, on=key, how="left_semi"), plan)
            merged = changes.unionByName(before_change)
        else:
            kept = None
            merged = changes
        # Cached: cutting by key range samples the rows first, and the write reads them again.
        changed_rows = latest(merged, key).select(*columns).persist()
        changed_files = max(1, math.ceil(key_count / config.rows_per_file))
        rows = in_key_ranges(changed_rows, key, changed_files)
        if kept is not None:
            rows = kept.unionByName(rows)
        log.info(
            "%s %s: %d changed keys in %d of %d files; %d carried forward",
            table,
            dt,
            key_count,
            len(touched),
            len(data_files),
            len(carried),
        )
        carried_rows = sum(file_rows.get(path, 0) for path in carried)
        return _Layout(rows, carried, "incremental", [changed_rows], carried_rows)

    @staticmethod
    def _full(changes: DataFrame, previous: DataFrame, plan: SchemaPlan, files: int) -> DataFrame:
        """Every row: (changes ∪ previous as INSERTs) → latest per key, in key-range files."""
        merged = changes.unionByName(align(previous, plan))
        columns = [*[f"`{name}`" for name, _ in plan.columns], OFFSET_COLUMN, SHARD_COLUMN]
        return latest_in_key_ranges(merged, plan.key, files).select(*columns)

    def _ensure_database(self) -> None:
        if not self._database_ready:
            self.store.ensure_database()
            self._database_ready = True

    def _remerge_late_day(self, request: MergeRequest, mirror: TableMirror) -> list[str]:
        """Merge ``dt−1`` again when late rows arrived for it after its merge (see module doc)."""
        before = (request.dt - timedelta(days=1)).isoformat()
        record = records.read_json(records.merge_record_path(self.lake, mirror.name, before))
        if record is None:
            return []
        late_now = late_rows(self.writer_progress(), before, mirror.name)
        if late_now <= int(record.get("lateRowsSeen", 0)):
            return []
        log.warning(
            "%s: %d late rows arrived for %s after its merge; merging %s again first",
            mirror.name,
            late_now - int(record.get("lateRowsSeen", 0)),
            before,
            before,
        )
        self._merge(
            MergeRequest(mirror.name, request.dt - timedelta(days=1), request.override, 0),
            allow_remerge=False,
        )
        return [before]

    def _previous_snapshot(self, table: str, dt: date, partitions: list[str]) -> DataFrame | None:
        before = (dt - timedelta(days=1)).isoformat()
        if before in partitions:
            return self.store.read(table, before)
        earlier = [p for p in partitions if p < dt.isoformat()]
        if earlier:
            raise MergeError(
                f"the snapshot of {table} for {before} is missing (the latest before "
                f"{dt} is {earlier[-1]}); merge {before} first, or the changes of the "
                "missing days would be lost."
            )
        log.info("%s has no snapshot before %s: the day's changes form the first one", table, dt)
        return None

    def _changes_after(
        self, mirror: TableMirror, dt: date
    ) -> list[tuple[str, date | None, date | None, int]]:
        """The collected changes the lake holds after ``dt``, counted by event type and the days
        of their check column before and after (for ``counts_at_cut``)."""
        assert mirror.check_column is not None
        raw = self._raw(mirror.name, f"dt > '{dt.isoformat()}'")
        path = "$['" + mirror.check_column.replace("\\", "\\\\").replace("'", "\\'") + "']"

        def day_of(image: str) -> Column:
            # A value that is NULL or not a date-like text has no day (try_cast: never an error).
            return F.substring(F.get_json_object(F.col(image), path), 1, 10).try_cast("date")

        rows = (
            raw.where(F.col("source") == "BINLOG")
            .groupBy(
                F.col("eventType"),
                day_of("content").alias("day"),
                day_of("beforeContent").alias("before_day"),
            )
            .count()
            .collect()
        )
        return [(r["eventType"], r["day"], r["before_day"], int(r["count"])) for r in rows]

    def writer_progress(self) -> WriterProgress | None:
        """The stream writer's committed progress (read fresh from the lake)."""
        return read_writer_progress(
            self.raw_lake, self.settings.stream_writer.database, self.writer
        )

    def _raw(self, table: str, where: str) -> DataFrame:
        """Rows of the raw Iceberg table matching ``where`` (none, when the writer has not
        created the table): only committed rows, whatever the storage."""
        return raw_rows(self.raw_lake, self.settings.stream_writer.database, table, where)

    def _load_raw(self, table: str, dt: str) -> DataFrame:
        """``dt`` of the raw table (partition pruning on ``dt``)."""
        return self._raw(table, f"dt = '{dt}'")

    def _archive_decision(
        self,
        mirror: TableMirror,
        plan: SchemaPlan,
        request: MergeRequest,
        raw: DataFrame,
        changes: DataFrame,
    ) -> tuple[ChangeSummary, ArchiveDecision]:
        """The day's changes summarized and the archive rule's decision on their DELETEs."""
        column = time_column(mirror)
        if column is not None and column not in plan.types:
            raise ConfigError(
                f"the archive rule's time column {column!r} is not a column of {mirror.name}."
            )
        rule = mirror.archive_delete
        from merge.archive import cutoff_day  # noqa: PLC0415

        cutoff = cutoff_day(rule, request.dt) if column else None
        summary = summarize_changes(raw, changes, plan.key, column, cutoff)
        decision = decide(rule, column, request.dt, summary.deletes, request.override)
        if decision.archiving:
            log.warning(
                "%s %s: ignoring %d archiving DELETEs (%s)",
                mirror.name,
                request.dt,
                decision.ignored_deletes,
                decision.reason,
            )
        return summary, decision

    # -- check ------------------------------------------------------------------------------
    def check(self, mirror: TableMirror, dt: date) -> CheckResult:
        """Counts per day of the snapshot ``dt`` against MySQL; stored for the web admin."""
        assert mirror.check_column is not None
        days = check_days(dt)
        snapshot = self.store.read(mirror.name, dt.isoformat())
        column = F.to_date(F.col(f"`{mirror.check_column}`"))
        counted = (
            snapshot.where(column.between(F.lit(days[0]), F.lit(days[-1])))
            .groupBy(column.alias("day"))
            .count()
            .collect()
        )
        snapshot_counts = {row["day"]: int(row["count"]) for row in counted}
        mysql_now = self._daily_counts(mirror.name, dt + timedelta(days=1))
        mysql_counts = counts_at_cut(mysql_now, self._changes_after(mirror, dt))
        previous = records.read_json(
            records.check_record_path(self.lake, mirror.name, (dt - timedelta(days=1)).isoformat())
        )
        result = compare(dt, snapshot_counts, mysql_counts, previous)
        records.write_json(
            records.check_record_path(self.lake, mirror.name, dt.isoformat()),
            {"table": mirror.name, "dt": dt.isoformat(), **result.to_json()},
        )
        if not result.ok:
            log.warning(
                "check of %s %s: mismatched days %s%s",
                mirror.name,
                dt,
                ", ".join(d.isoformat() for d in result.mismatches) or "none",
                "; counts stopped moving while MySQL's did" if result.stalled else "",
            )
        return result


@dataclass(frozen=True, slots=True)
class TableOutcome:
    table: str
    result: MergeResult | None
    error: str | None


def merge_tables(merger: Merger, requests: list[MergeRequest]) -> list[TableOutcome]:
    """Merge several tables; a failing table is reported and the others go on."""
    outcomes = []
    for request in requests:
        try:
            outcomes.append(TableOutcome(request.table, merger.merge(request), None))
        except (CdcMirrorError, SchemaChangeError) as exc:
            log.error("merge of %s for %s failed: %s", request.table, request.dt, exc)
            outcomes.append(TableOutcome(request.table, None, str(exc)))
    return outcomes


def build_merger(settings: Settings, config: ConfigSnapshot | None = None) -> Merger:
    """A Merger in a Spark session of its own; ``config`` (default: loaded from the
    configuration store) names the table mirrors."""
    from cdc_platform.iceberg import lake_session  # noqa: PLC0415

    if config is None:
        config = load_snapshot(settings)
    spark = lake_session(settings, "cdc-mirror-merge")
    return Merger(settings, spark, config=config)
