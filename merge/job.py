"""The merge job: ``cdc-mirror merge --table T --dt D`` or ``--all``; one Spark session.

For one table and day ``dt``:

1. wait (bounded: ``--wait-ready-s`` / ``merge.wait_ready_s``) until the stream writer's
   committed progress (``cdc_platform.lake``: its row of ``_cdc_writer_progress``) names
   ``dt`` a ready day; fail with one sentence otherwise;
2. read the table's rows of the raw Iceberg table (``lake.ods_binlog_source._cdc_changes``,
   ``logicalTable = '<table>'``: every logical table's changes are in that one table, one
   commit per stream-writer batch), pinned to its current snapshot: partition ``dt``, and,
   when the raw commits since the snapshot the merge of ``dt−1`` read hold rows of the table
   before ``dt`` (late rows, of any earlier day), every change from the earliest of them on
   (``_late_since``: an incremental read of those commits), plus the changes merged before
   that win over one taken now by offset although their time is earlier (``_overtaking``:
   binlog times are not monotonic); for the table's first snapshot, every raw day before
   ``dt`` too (``_first_since``);
3. live MySQL schema of all shards (``cdc_platform.mysql_schema``; with ``config_store.source:
   webui`` read by the web admin, which keeps the MySQL passwords: ``cdc_platform.live_tables``),
   key (``tables[].key`` or MySQL's), schema plan (``merge.schema``);
4. flatten ``content`` into typed columns; the archive-delete rule (``merge.archive``) on the
   day's own changes, and each earlier day's recorded decision on the changes taken again;
5. the latest change per key by binlogOffset, MERGEd into ``dt−1``'s tag and tagged ``dt``
   (``merge.snapshot``); a re-run moves the day's tag atomically;
6. record the merge (``<lake>/_merge/<table>/<dt>.json``) and, with a check column, check
   the snapshot against MySQL (``<dt>.check.json``).

With no previous snapshot at all, every raw change before the day's end (the replayed MOCK
rows among them, whatever day they carry) forms the first snapshot. A missing ``dt−1`` when
older snapshots exist is an error: merging over the gap would lose the changes of the missing
day. A published tag is never changed by a later day's merge: a late row is in the tag of
every day merged after it reached the lake.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, load_snapshot, snapshot_from_settings
from cdc_platform.iceberg import LakeCatalog
from cdc_platform.lake import (
    LOGICAL_TABLE_COLUMN,
    PROGRESS_TABLE,
    RAW_TABLE,
    WriterProgress,
    default_writer_name,
    if_table_exists,
    raw_rows,
    raw_table_condition,
    read_writer_progress,
)
from cdc_platform.lake_snapshots import day_tag
from cdc_platform.live_tables import LiveTableSource, open_live_tables
from cdc_platform.mysql_schema import LiveSchema
from cdc_platform.spark import spark_error_sentence
from merge import records
from merge.archive import ArchiveDecision, ArchiveOverride, decide, recorded_cut, time_column
from merge.check import CheckResult, check_days, check_facts, compare, counts_at_cut
from merge.hours import (
    Hour,
    HourRule,
    day_hours,
    first_from,
    hour_of,
    hours_in_day,
    late_fallback,
    midnight_ms,
    parse_hour,
)
from merge.schema import SchemaPlan, choose_key, plan_schema
from merge.snapshot import MergeConflictError, Published, SnapshotStore, TableState
from merge.transform import (
    ChangeSummary,
    drop_archived,
    flatten,
    latest_change,
    summarize_changes,
    widen_span,
)
from merge.types import SchemaChangeError
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.errors import NotReadyError as DataNotReadyError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)


class MergeError(CdcMirrorError):
    """A merge of one table and day failed; the previous snapshot state is intact."""


class NotReadyError(MergeError, DataNotReadyError):
    """The stream writer has not made the day (or hour) ready within the wait: nothing was
    merged; ``cdc-mirror merge`` exits with ``ExitCode.NOT_READY`` (run again later)."""


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
    # Hourly snapshots (``snapshots: hourly``): merge this hour of ``dt`` (0-based, hours
    # since its midnight); None merges every hour of ``dt`` not merged yet, in order.
    hour: int | None = None
    # With ``hour``: an hour already merged (its hr- tag exists) is reported as such and not
    # merged again (``cdc-mirror merge --hour`` without ``--remerge``: a cheap no-op).
    skip_merged: bool = False


@dataclass(slots=True)
class MergeResult:
    table: str
    dt: date
    rows: int
    changes: int
    location: str  # how to read it: <table> VERSION AS OF 'dt-<day>'
    snapshot_id: int
    archive: ArchiveDecision
    schema: SchemaPlan
    seconds: float
    late_rows_seen: int  # the writer's late rows of the day when merged (audit only)
    files_kept: int = 0  # data files of the day before it still shares, unchanged
    files: int = 0  # data files of the day's snapshot
    mode: str = "merge"  # first | merge | re-merge
    check: CheckResult | None = None
    readiness: str = "ready"  # or "skipped by operator"
    hour: int | None = None  # the hour merged (hourly snapshots)
    # The raw rows merged (late rows: more now), from hour ``from_hour`` of the day to ``hour``.
    raw_rows: int | None = None
    from_hour: int | None = None
    day_closed: bool = False  # the day's tag was set too (the day's last hour)
    # The raw table's snapshot the merge read (an hour: pinned; a day: read before the rows),
    # so the next hour can tell which raw rows arrived after it (late rows).
    raw_snapshot_id: int | None = None
    # An hour whose changes were taken from earlier than its own window, because rows of
    # hours merged before it arrived since (late rows): the hour the changes start in.
    late_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "dt": self.dt.isoformat(),
            "hour": self.hour,
            "rawRows": self.raw_rows,
            "fromHour": self.from_hour,
            "dayClosed": self.day_closed,
            "rawSnapshotId": self.raw_snapshot_id,
            "lateFrom": self.late_from,
            "snapshotId": self.snapshot_id,
            "rows": self.rows,
            "changes": self.changes,
            "location": self.location,
            "archive": self.archive.to_json(),
            "schema": self.schema.describe(),
            "key": self.schema.key,
            "seconds": round(self.seconds, 3),
            "lateRowsSeen": self.late_rows_seen,
            "mode": self.mode,
            "filesKept": self.files_kept,
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


def wait_hour_ready(
    progress: Callable[[], WriterProgress | None],
    writer: str,
    hour: Hour,
    rule: HourRule,
    wait_s: float,
    poll_s: float,
    clock: Callable[[], float] = time.monotonic,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    pause: Callable[[float], object] | None = None,
) -> None:
    """Return once the writer's committed progress makes ``hour`` ready (``merge.hours``),
    asking ``progress`` at most ``wait_s`` long; NotReadyError otherwise."""
    pause = pause or threading.Event().wait
    deadline = clock() + wait_s
    while True:
        current = progress()
        mark = None if current is None else current.state.get("globalWatermarkMs")
        days = set() if current is None else set(current.state.get("readyDays", []))
        if rule.is_ready(hour, mark, now_ms(), days):
            return
        remaining = deadline - clock()
        if remaining <= 0:
            seen = (
                "it has committed no progress"
                if current is None
                else "its watermark: "
                + (
                    "none"
                    if mark is None
                    else datetime.fromtimestamp(int(mark) / 1000, UTC).isoformat()
                )
            )
            raise NotReadyError(
                f"the stream writer {writer!r} has not passed the end of hour {hour.label} "
                f"after {wait_s:g} s ({seen}); wait for it or raise --wait-ready-s."
            )
        pause(min(poll_s, remaining))


def merge_facts(
    raw_snapshot: int | None, decision: ArchiveDecision, provisional: bool = False
) -> dict[str, Any]:
    """Pure: what the next merge decides by, stored with a merge's tag in the lake
    (``SnapshotStore.merge_facts``): the raw snapshot the merge read (late rows are the raw
    commits after it), the DELETEs its archive decision ignored (kept ignored when a later
    merge takes the same changes again), and whether it was merged before the day or hour was
    ready (``--skip-readiness``: provisional; a scheduler on any host reads it with the tags,
    ``cdc_platform.snapshot_tags``, and merges the day again once ready)."""
    return {
        "rawSnapshotId": raw_snapshot,
        "provisional": provisional,
        "readiness": "skipped by operator" if provisional else "ready",
        "archive": {
            "archiving": decision.archiving,
            "timeColumn": decision.time_column,
            "cutoff": decision.cutoff.isoformat() if decision.cutoff else None,
        },
    }


# A condition on the raw table's rows: terms (column, operator, value) joined by AND. The
# same terms are the SQL of a read (``bounds_sql``) and the test, on Iceberg's metadata
# alone, of whether any raw file can hold such a row (``Merger._raw_files_may_hold``).
RawBound = tuple[str, str, str | int]
# The Iceberg expression of each operator a RawBound uses.
_ICEBERG_OPERATORS = {
    "<": "lessThan",
    "<=": "lessThanOrEqual",
    ">": "greaterThan",
    ">=": "greaterThanOrEqual",
    "=": "equal",
}


def bounds_sql(bounds: Iterable[RawBound]) -> str:
    """Pure: ``bounds`` as a Spark SQL condition (text values quoted)."""
    terms = []
    for column, operator, value in bounds:
        if operator not in _ICEBERG_OPERATORS:
            raise ValueError(f"unknown operator {operator!r} of a raw-row bound")
        literal = (
            str(int(value))
            if isinstance(value, int)
            else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        )
        terms.append(f"{column} {operator} {literal}")
    return " AND ".join(terms)


def overtaking_bounds(floor: int, begin: int, last_day: date) -> list[RawBound]:
    """Pure: the raw rows (days up to ``last_day``, ``executeTime`` before ``begin``: merged
    before) whose ``binlogOffset`` is at least ``floor`` (the lowest of the changes a merge
    takes now): changes that win over some of those by offset although their time is earlier
    (``Merger._overtaking``)."""
    return [
        ("dt", "<=", last_day.isoformat()),
        ("executeTime", "<", int(begin)),
        ("binlogOffset", ">=", int(floor)),
    ]


def overtaking_where(floor: int, begin: int, last_day: date) -> str:
    """Pure: ``overtaking_bounds`` as SQL."""
    return bounds_sql(overtaking_bounds(floor, begin, last_day))


# A part of the changes a merge takes again: the label of the merge (day or hour) that took
# it before, that merge's day, and the condition selecting its raw rows.
Segment = tuple[str, date, "Column"]


def stored_or_recorded(stored: dict[str, Any], record: dict[str, Any] | None) -> dict[str, Any]:
    """Pure: the facts a later merge decides by for a tag: those stored with it in the lake,
    else, for a tag set before merges stored them there (a table merged by an earlier
    version), the same facts from that merge's record (``rawSnapshotId``, ``archive``): without
    them an archiving day taken again would have its ignored DELETEs applied."""
    if stored:
        return stored
    if not record:
        return {}
    return {key: record[key] for key in ("rawSnapshotId", "archive") if key in record}


def late_rows(progress: WriterProgress | None, dt: str, table: str) -> int:
    """Rows of ``table`` the stream writer wrote for ``dt`` after marking it ready."""
    return 0 if progress is None else progress.late_rows(dt, table)


# A merge that conflicts with concurrent commits is tried this many times in all.
_CONFLICT_ATTEMPTS = 3
# Iceberg's refusals of a commit whose files changed meanwhile (ValidationException,
# CommitFailedException), as they appear in the error's text.
_CONFLICTS = ("ValidationException", "CommitFailedException", "Found conflicting files")


def _commit_conflict(exc: BaseException) -> bool:
    text = str(exc) + str(getattr(exc, "java_exception", "") or "")
    return any(marker in text for marker in _CONFLICTS)


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
        (default: read from MySQL now, directly or through the web admin by
        ``config_store.source``: ``cdc_platform.live_tables.open_live_tables``)."""
        self.settings = settings
        self.config = config or snapshot_from_settings(settings)
        self.spark = spark
        self.lake = settings.lake_dir
        # The raw layer and the writer's progress, Iceberg tables of the lake's catalog. First
        # of all, a location that cannot be written stops the merge, in one sentence naming
        # it and the cause (not minutes of a storage client's retries into the first read).
        self.raw_lake = LakeCatalog.open(spark, settings, check=True)
        self.store = SnapshotStore(spark, settings)
        self.writer = writer_name(settings, (i.name for i in self.config.instances))
        tables = open_live_tables(settings, self.config)
        self._live_schema = live_schema or tables.live_schema
        self._daily_counts = daily_counts or self._mysql_counts(tables)
        self._database_ready = False
        # Hourly snapshots: hours of the raw layer's days, ready by the writer's own rule.
        writer = settings.stream_writer
        self.zone = ZoneInfo(writer.time_zone)
        self.hour_rule = HourRule(
            self.zone,
            int(writer.lateness_budget_s * 1000),
            int((writer.collector_delay_s + writer.kafka_delay_s + writer.writer_delay_s) * 1000),
        )

    def close(self) -> None:
        """Close what the merges opened beside the Spark session (the view refresh's
        metastore clients); the caller stops the session."""
        self.store.close()

    def _mysql_counts(self, tables: LiveTableSource) -> Callable[[str, date], dict[date, int]]:
        def counts(name: str, today: date) -> dict[date, int]:
            column = self.config.table(name).check_column
            if column is None:
                raise ConfigError(f"table mirror {name!r} has no check_column to count by.")
            return tables.count_per_day(name, column, today)

        return counts

    # -- entry points -----------------------------------------------------------------------
    def merge(self, request: MergeRequest) -> MergeResult:
        """Merge one table and day; MergeError (or another CdcMirrorError) with one sentence.

        A MERGE that lost a race with a concurrent commit of the same files (``cdc-mirror
        maintain`` compacting the snapshot) is refused by Iceberg's validation and leaves
        the table as it was; the merge then starts again from the table's new state."""
        for attempt in range(1, _CONFLICT_ATTEMPTS + 1):
            try:
                return self._merge(request)
            except CdcMirrorError:
                raise
            except Exception as exc:
                # Spark and metastore failures (Py4J, AnalysisException, ANSI cast errors)
                # reach the user as one sentence; the snapshot is untouched until it commits.
                from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
                from pyspark.errors import PySparkException  # noqa: PLC0415

                if not isinstance(exc, PySparkException | Py4JError):
                    raise
                if attempt < _CONFLICT_ATTEMPTS and _commit_conflict(exc):
                    log.warning(
                        "merging %s %s lost a race with a concurrent commit (%s); again",
                        request.table,
                        request.dt,
                        spark_error_sentence(exc),
                    )
                    continue
                raise MergeError(
                    f"merging {request.table} for {request.dt} failed in Spark: "
                    f"{spark_error_sentence(exc)}"
                ) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    # -- one merge --------------------------------------------------------------------------
    def _merge(self, request: MergeRequest) -> MergeResult:
        started = time.monotonic()
        mirror = self.config.table(request.table)
        if "hive" not in mirror.targets:
            raise ConfigError(f"table {mirror.name!r} is not mirrored to Hive (targets).")
        self._check_layouts(mirror.name)
        if request.hour is not None and mirror.snapshots != "hourly":
            raise ConfigError(
                f"table mirror {mirror.name!r} has daily snapshots; set its snapshots: hourly "
                "to merge single hours."
            )
        if mirror.snapshots == "hourly":
            return self._merge_hours(request, mirror)
        dt = request.dt.isoformat()
        wait_s = (
            request.wait_ready_s
            if request.wait_ready_s is not None
            else self.settings.merge.wait_ready_s
        )
        ready: dict[str, Any] | None = None  # what the writer's progress says of the day
        if request.skip_readiness:
            log.warning(
                "merging %s %s without waiting for readiness (operator override): changes of "
                "the day still on their way are not in this snapshot",
                mirror.name,
                dt,
            )
        else:
            ready = wait_ready(
                self.writer_progress,
                self.writer,
                request.dt,
                wait_s,
                self.settings.merge.ready_poll_s,
            )
        self._ensure_database()
        # Read before the raw snapshot is pinned (the writer commits its progress after the
        # rows): the late rows it counts for the day are all in that snapshot (audit only).
        # The progress that made the day ready tells them (a read of the progress table is a
        # Spark job).
        late_seen = (
            late_rows(self.writer_progress(), dt, mirror.name)
            if ready is None
            else int(ready.get("lateRows", {}).get(mirror.name, 0))
        )
        # The day's partition as of the raw table's current snapshot (pinned: the next day
        # takes every commit after it), and from earlier when rows arrived late for days
        # merged before (``_late_since``).
        start = midnight_ms(request.dt, self.zone)
        # One load of the snapshot table for its state and the base's stored facts.
        _, state, loaded = self.store.loaded_columns_and_state(mirror.name)
        base = self._base_snapshot(mirror.name, request.dt, state)
        raw_snapshot = self._raw_snapshot()
        begin, raw, earlier = self._day_changes(mirror.name, request.dt, base, raw_snapshot, loaded)
        summary, decision, plan, published = self._apply(
            mirror,
            request,
            raw,
            lambda state: self._base_snapshot(mirror.name, request.dt, state),
            earlier=earlier,
            raw_snapshot=raw_snapshot,
        )
        change_count = summary.count
        result = MergeResult(
            table=mirror.name,
            dt=request.dt,
            rows=published.rows,
            changes=change_count,
            location=f"{self.store.name(mirror.name)} VERSION AS OF '{day_tag(request.dt)}'",
            snapshot_id=published.snapshot_id,
            archive=decision,
            schema=plan,
            seconds=time.monotonic() - started,
            late_rows_seen=late_seen,
            files_kept=published.files_kept,
            files=published.files,
            mode=published.mode,
            readiness="skipped by operator" if request.skip_readiness else "ready",
            raw_snapshot_id=raw_snapshot,
            late_from=None if base is None or begin >= start else hour_of(begin, self.zone).label,
        )
        records.write_json(records.merge_record_path(self.lake, mirror.name, dt), result.to_json())
        log.info(
            "merged %s %s: %d changes → %d rows in %.1f s (archive: %s)%s",
            mirror.name,
            dt,
            change_count,
            published.rows,
            result.seconds,
            decision.reason,
            f"; late rows: changes from {result.late_from} on" if result.late_from else "",
        )
        if self.settings.merge.check and mirror.check_column:
            result.check = self.check(mirror, request.dt)
            records.write_json(
                records.merge_record_path(self.lake, mirror.name, dt), result.to_json()
            )
        return result

    def _day_changes(
        self,
        table: str,
        day: date,
        base: int | None,
        raw_snapshot: int | None,
        loaded: Any | None = None,
    ) -> tuple[int, DataFrame, tuple[DataFrame, list[Segment]] | None]:
        """Where a day's changes start (epoch ms), the day's own raw rows, and the rows of
        earlier days taken again with them and the segments of the merges that took them
        (None: none): rows late for days merged before (``_late_since``), changes merged
        before that win over a change taken now by offset although their time is earlier
        (``_overtaking``), and, for the table's first snapshot, every older raw day
        (``_first_since``). All read as of the raw table's ``raw_snapshot``. ``loaded``: the
        snapshot table as loaded for ``base`` (its tags' facts are read from it)."""
        dt = day.isoformat()
        start = midnight_ms(day, self.zone)
        before = day - timedelta(days=1)
        if base is None:
            # The first snapshot: every change before the day's end, also those of older
            # days (history replayed with its own executeTimes, days never merged).
            late_since = self._first_since(table, dt, start)
        else:
            late_since = self._late_since(
                table, dt, start, before.isoformat(), raw_snapshot, loaded
            )
        begin = start if late_since is None else min(start, late_since)
        raw = self._raw_at(table, raw_snapshot, f"dt = '{dt}'")
        earlier_rows: DataFrame | None = None
        earlier_days: set[date] = set()
        if begin < start:
            first_day = hour_of(begin, self.zone).day
            earlier_days = {first_day + timedelta(days=n) for n in range((day - first_day).days)}
            earlier_rows = self._raw_at(
                table,
                raw_snapshot,
                f"dt >= '{first_day.isoformat()}' AND dt < '{dt}' AND executeTime >= {begin}",
            )
        if base is not None and raw_snapshot is not None:
            taken = raw if earlier_rows is None else raw.unionByName(earlier_rows)
            lowest = taken.agg(F.min("binlogOffset").alias("floor")).first()
            overtaking = self._overtaking(
                table,
                raw_snapshot,
                None if lowest is None else lowest["floor"],
                begin,
                before,
            )
            if overtaking is not None:
                rows, days, _ = overtaking
                earlier_rows = rows if earlier_rows is None else earlier_rows.unionByName(rows)
                earlier_days |= days
        earlier = None
        if earlier_rows is not None:
            earlier = (
                earlier_rows,
                [
                    (taken_day.isoformat(), taken_day, F.col("dt") == taken_day.isoformat())
                    for taken_day in sorted(earlier_days)
                ],
            )
        return begin, raw, earlier

    def _check_layouts(self, table: str) -> None:
        """Before anything is read or written: the raw table, the writer's progress and the
        snapshot table, where they exist, are of this version's layout (IncompatibleTableError
        in one sentence otherwise)."""
        raw = self.settings.stream_writer.database
        self.raw_lake.check_compatible(raw, (RAW_TABLE, PROGRESS_TABLE))
        self.store.lake.check_compatible(self.store.database, (table,))

    def _apply(
        self,
        mirror: TableMirror,
        request: MergeRequest,
        raw: DataFrame,
        base_of: Callable[[TableState], int | None],
        hour: Hour | None = None,
        earlier: tuple[DataFrame, list[Segment]] | None = None,
        raw_snapshot: int | None = None,
    ) -> tuple[ChangeSummary, ArchiveDecision, SchemaPlan, Published]:
        """The changes of ``raw`` applied to the snapshot ``base_of`` names and published
        (as ``request.dt``'s tag, or ``hour``'s): schema plan, archive rule, MERGE, tag.

        ``earlier`` (a day's merge after late rows): the first day and the raw rows of the
        days before ``dt`` from the earliest late row on. They are taken again with the day's
        changes, so that the latest change per key over the whole span decides; the archive
        rule's decision on ``dt`` applies to ``dt``'s own changes, and each earlier day's
        recorded decision to that day's (a DELETE its merge ignored as archiving stays
        ignored).

        ``raw_snapshot``: the raw table's snapshot ``raw`` was read at, stored with the tag
        (with the archive decision: ``merge_facts``) for the next merge."""
        dt = request.dt.isoformat()
        live = self._live_schema(mirror.name)
        if not live.shards_agree:
            log.warning(
                "shards of %s differ (%s); using %s's schema",
                mirror.name,
                "; ".join(live.differences[:5]),
                live.shards[0],
            )
        key = choose_key(mirror.name, mirror.key, live.key)
        # The table's columns and state, and the table passed on to publish: one load.
        existing, state, loaded = self.store.loaded_columns_and_state(mirror.name)
        plan = plan_schema(mirror.name, existing, live.columns, key)
        base = base_of(state)
        changes = flatten(raw, plan).persist()
        again = None
        try:
            summary, decision = self._archive_decision(mirror, plan, request, raw, changes)
            applied = changes
            if decision.archiving and decision.time_column and decision.cutoff:
                applied = drop_archived(changes, decision.time_column, decision.cutoff)
            if earlier is not None:
                rows, segments = earlier
                again = self._taken_again(mirror.name, plan, rows, segments).persist()
                taken = summarize_changes(rows, again, plan.key, None, None)
                applied = applied.unionByName(again)
                summary = replace(
                    summary,
                    count=summary.count + taken.count,
                    keys=widen_span(summary.keys, taken.keys),
                )
            if self.store.evolve(mirror.name, plan, exists=existing is not None):
                # A column was rewritten on main: main is now the base (widened), and a day
                # older than main cannot be merged over the new column.
                if base is not None and base != state.current:
                    raise MergeConflictError(
                        f"{mirror.name}: {hour.label if hour else dt} cannot be merged again "
                        "after a column type change that rewrote the snapshot; merge the "
                        "newest day instead."
                    )
                _, state, loaded = self.store.loaded_columns_and_state(mirror.name)
                base = state.current
            # The span of every change (ignored archive DELETEs too): a superset of the keys
            # the MERGE applies, so its range condition never misses one.
            keys = summary.keys
            span = (keys.low, keys.high) if keys.count else None
            published = self.store.publish(
                mirror.name,
                request.dt,
                latest_change(applied, plan.key),
                plan,
                base,
                state,
                span,
                hour=hour,
                newest=None if hour is None else self._newest_hour(hour, state),
                empty=hour is not None and summary.count == 0,
                facts=merge_facts(raw_snapshot, decision, request.skip_readiness),
                null_keys=keys.nulls > 0,
                change_count=summary.count,
                loaded=loaded,
            )
        finally:
            changes.unpersist()
            if again is not None:
                again.unpersist()
        return summary, decision, plan, published

    def _taken_again(
        self, table: str, plan: SchemaPlan, earlier: DataFrame, segments: list[Segment]
    ) -> DataFrame:
        """The changes of ``earlier`` (raw rows merged before, taken again) flattened, without
        the DELETEs that the merge which took each ``segment`` (a day's, or an hour's: the label
        of its tag and the condition selecting its rows) ignored as archiving (its recorded
        decision; decided again when none is known)."""
        cuts: list[tuple[Column, str, date]] = []
        state = self.store.state(table)
        tags = {day_tag(d) for d in state.days} | {h.tag for h in state.hours}
        for label, day, where in segments:
            facts = self._merge_facts(table, label)
            if "archive" in facts:
                cut = recorded_cut(facts["archive"])
            elif self._tag_of(label) in tags:
                cut = self._decided_again(table, plan, earlier.where(where), day)
            else:
                # Never merged (before the table's first snapshot): no DELETE was ignored, and
                # ignoring one now could bring back a row the first snapshot did not have.
                cut = None
            if cut is not None and cut[0] in plan.types:
                cuts.append((where, *cut))
                log.info(
                    "%s: changes of %s taken again without the DELETEs its merge ignored as "
                    "archiving (rows older than %s by %s)",
                    table,
                    label,
                    cut[1],
                    cut[0],
                )
        if not cuts:
            return flatten(earlier, plan)
        archived_any = F.lit(False)
        for where, _, _ in cuts:
            archived_any = archived_any | where
        taken = flatten(earlier.where(~archived_any), plan)
        for where, column, cutoff in cuts:
            rows = flatten(earlier.where(where), plan)
            taken = taken.unionByName(drop_archived(rows, column, cutoff))
        return taken

    def _hour_segments(
        self, hour: Hour, begin: int, start: int, state: TableState
    ) -> list[Segment]:
        """The rows between ``begin`` and ``start`` (taken again by ``hour``'s merge) cut by the
        merges that took them: each tagged hour before ``hour`` (a closed day whose hour tags
        were dropped: its day tag) takes the rows up to its end since the tag before."""
        tagged: dict[Hour, str] = {h: h.label for h in state.hours if h < hour}
        for day in state.days:
            last = Hour(day, hours_in_day(day, self.zone) - 1)
            if last < hour and last not in tagged:
                tagged[last] = day.isoformat()
        segments: list[Segment] = []
        previous: int | None = None
        for tagged_hour in sorted(tagged):
            until = tagged_hour.end_ms(self.zone)
            if until > start:
                break
            if until > begin:
                where = F.col("executeTime") < until
                if previous is not None:
                    where = where & (F.col("executeTime") >= previous)
                segments.append((tagged[tagged_hour], tagged_hour.day, where))
            previous = until
        return segments

    def _decided_again(
        self, table: str, plan: SchemaPlan, rows: DataFrame, day: date
    ) -> tuple[str, date] | None:
        """The archive rule decided again on ``day``'s raw ``rows`` taken again, when its
        merge's decision is known neither from its tag nor from its record (a merge by an
        earlier version, on another host): the time column and cut-off of the DELETEs to
        ignore, or None. Without it every DELETE of an archiving day would apply now."""
        mirror = self.config.table(table)
        column = time_column(mirror)
        if column is None or column not in plan.types:
            return None
        from merge.archive import cutoff_day  # noqa: PLC0415

        rule = mirror.archive_delete
        cutoff = cutoff_day(rule, day)
        summary = summarize_changes(rows, flatten(rows, plan), plan.key, column, cutoff)
        decision = decide(rule, column, day, summary.deletes)
        log.warning(
            "%s: the merge of %s stored no archive decision; decided again on its changes "
            "taken again: %s",
            table,
            day,
            decision.reason,
        )
        return (column, cutoff) if decision.archiving else None

    def _tag_of(self, label: str) -> str:
        """The tag of a day (``D``) or an hour (``D``T``HH``) label."""
        return (
            parse_hour(label, self.zone).tag if "T" in label else day_tag(date.fromisoformat(label))
        )

    def _merge_facts(self, table: str, label: str, loaded: Any | None = None) -> dict[str, Any]:
        """What the merge of ``label`` (a day, or an hour ``D``T``HH``) stored with its tag in
        the lake: its raw snapshot and archive decision (empty: none). Read from the lake, not
        from the merge records (local files, audit only), so a merge on any host sees them;
        from its record only for a tag set before merges stored them (``stored_or_recorded``).
        ``loaded``: the table as loaded (None: loaded here)."""
        stored = self.store.merge_facts(table, self._tag_of(label), loaded)
        if stored:
            return stored
        record = records.read_json(records.merge_record_path(self.lake, table, label))
        return stored_or_recorded(stored, record)

    # -- hourly snapshots -------------------------------------------------------------------
    def _merge_hours(self, request: MergeRequest, mirror: TableMirror) -> MergeResult:
        """The hour ``request.hour``, or every hour of ``request.dt`` after its newest merged
        one (the last one again when all are), in order; the result of the last."""
        if request.hour is not None:
            if not 0 <= request.hour < hours_in_day(request.dt, self.zone):
                raise ConfigError(
                    f"{request.dt} has hours 00 to {hours_in_day(request.dt, self.zone) - 1:02d} "
                    f"in {self.zone.key} (got {request.hour:02d})."
                )
            return self._merge_hour(Hour(request.dt, request.hour), request, mirror)
        merged = self.store.state(mirror.name).hours if self.store.exists(mirror.name) else {}
        hours = day_hours(request.dt, self.zone)
        done = [hour for hour in merged if hour.day == request.dt]
        pending = [hour for hour in hours if not done or hour > max(done)] or hours[-1:]
        result: MergeResult | None = None
        for hour in pending:
            result = self._merge_hour(hour, request, mirror)
        assert result is not None
        return result

    def _merge_hour(self, hour: Hour, request: MergeRequest, mirror: TableMirror) -> MergeResult:
        """One hour: its changes (rows of ``dt`` whose executeTime lies in the hour, and the
        rows that arrived late for hours merged before it) merged over the hour before's tag
        and tagged ``hr-…``; the day's tag at its last hour."""
        started = time.monotonic()
        request = MergeRequest(
            request.table,
            hour.day,
            request.override,
            request.wait_ready_s,
            request.skip_readiness,
            hour.index,
        )
        wait_s = (
            request.wait_ready_s
            if request.wait_ready_s is not None
            else self.settings.merge.wait_ready_s
        )
        if request.skip_readiness:
            log.warning(
                "merging %s %s without waiting for readiness (operator override)",
                mirror.name,
                hour.label,
            )
        else:
            wait_hour_ready(
                self.writer_progress,
                self.writer,
                hour,
                self.hour_rule,
                wait_s,
                self.settings.merge.ready_poll_s,
            )
        self._ensure_database()
        # Read before the raw snapshot is pinned (the writer commits its progress after the
        # rows): the late rows it counts for the day are all in that snapshot.
        late_seen = late_rows(self.writer_progress(), hour.day.isoformat(), mirror.name)
        # From the newest merged hour of the day before this one (or midnight) to its end, as
        # the raw table holds it now; from earlier when rows arrived late for hours merged
        # before (``_late_since``).
        base, start, base_record = self._hour_base(mirror.name, hour, self.store.state(mirror.name))
        end = hour.end_ms(self.zone)
        raw_snapshot = self._raw_snapshot()
        if base is None:
            # The first snapshot: every change before the hour's end, also those of older
            # days (history replayed with its own executeTimes, days never merged).
            late_since = self._first_since(mirror.name, hour.label, start)
        else:
            late_since = self._late_since(mirror.name, hour.label, start, base_record, raw_snapshot)
        begin = start if late_since is None else min(start, late_since)
        first_day = hour_of(begin, self.zone).day.isoformat()
        raw = self._raw_at(
            mirror.name,
            raw_snapshot,
            f"dt >= '{first_day}' AND dt <= '{hour.day.isoformat()}' "
            f"AND executeTime >= {begin} AND executeTime < {end}",
        )
        counted = raw.agg(
            F.count(F.lit(1)).alias("n"), F.min("binlogOffset").alias("floor")
        ).first()
        raw_count = 0 if counted is None else int(counted["n"])
        overtaking = None
        if base_record is not None and raw_snapshot is not None and counted is not None:
            overtaking = self._overtaking(
                mirror.name, raw_snapshot, counted["floor"], begin, hour.day
            )
        earlier = None
        if begin < start or overtaking is not None:
            # The rows merged before (by earlier hours' merges) keep their merge's archive
            # decision; the rule decides on the hour's own rows only.
            since = begin if overtaking is None else min(begin, overtaking[2])
            segments = self._hour_segments(hour, since, start, self.store.state(mirror.name))
            rows = raw.where(F.col("executeTime") < start)
            if overtaking is not None:
                rows = rows.unionByName(overtaking[0])
            earlier = (rows, segments)
            raw = raw.where(F.col("executeTime") >= start)
        summary, decision, plan, published = self._apply(
            mirror,
            request,
            raw,
            lambda state: self._hour_base(mirror.name, hour, state)[0],
            hour=hour,
            earlier=earlier,
            raw_snapshot=raw_snapshot,
        )
        result = MergeResult(
            table=mirror.name,
            dt=hour.day,
            rows=published.rows,
            changes=summary.count,
            location=f"{self.store.name(mirror.name)} VERSION AS OF '{hour.tag}'",
            snapshot_id=published.snapshot_id,
            archive=decision,
            schema=plan,
            seconds=time.monotonic() - started,
            late_rows_seen=late_seen,
            files_kept=published.files_kept,
            files=published.files,
            mode=published.mode,
            readiness="skipped by operator" if request.skip_readiness else "ready",
            hour=hour.index,
            raw_rows=raw_count,
            from_hour=hour_of(start, self.zone).index,
            raw_snapshot_id=raw_snapshot,
            late_from=None if base is None or begin == start else hour_of(begin, self.zone).label,
        )
        path = records.merge_record_path(self.lake, mirror.name, hour.label)
        records.write_json(path, result.to_json())
        log.info(
            "merged %s %s: %d changes → %d rows in %.1f s%s",
            mirror.name,
            hour.label,
            summary.count,
            published.rows,
            result.seconds,
            f" (late rows: changes from {result.late_from} on)" if result.late_from else "",
        )
        if published.mode == "empty":  # no snapshot yet: nothing to check or tag
            return result
        if self.settings.merge.check and mirror.check_column:
            result.check = self.check(mirror, hour.day, hour)
            records.write_json(path, result.to_json())
        if hour.is_last(self.zone) and not request.skip_readiness:
            return self._close_day(mirror, result)
        return result

    def _close_day(self, mirror: TableMirror, last: MergeResult) -> MergeResult:
        """The day's tag after its last hour: that hour's snapshot, the day cut. It holds every
        change of the day the lake had committed by then, late rows of earlier hours included
        (``_late_since``); rows late for the day that reach the lake after this are in the tags
        of the hours merged after them (the next day's), not in this one."""
        day = last.dt
        label = Hour(day, last.hour or 0).label
        facts = self.store.merge_facts(mirror.name, Hour(day, last.hour or 0).tag)
        self.store.tag_day(mirror.name, day, last.snapshot_id, facts or None)
        last.day_closed = True
        document = {
            **last.to_json(),
            "location": f"{self.store.name(mirror.name)} VERSION AS OF '{day_tag(day)}'",
        }
        records.write_json(
            records.merge_record_path(self.lake, mirror.name, day.isoformat()), document
        )
        records.write_json(records.merge_record_path(self.lake, mirror.name, label), last.to_json())
        if last.check is not None:  # the last hour's cut is the day's
            check = records.read_json(records.check_record_path(self.lake, mirror.name, label))
            if check is not None:
                records.write_json(
                    records.check_record_path(self.lake, mirror.name, day.isoformat()),
                    {**check, "dt": day.isoformat()},
                )
        return last

    def ready_hours(self, table: str, now_ms: int | None = None) -> list[Hour]:
        """The closed hours of an hourly table ready to merge, in order: those after its newest
        merged hour (or day) up to the first the stream writer's committed progress does not
        make ready (``merge.hours.HourRule``); from the first day the writer has rows of the
        table for when nothing was merged yet. At most a month of hours per call."""
        mirror = self.config.table(table)
        if mirror.snapshots != "hourly":
            raise ConfigError(
                f"table mirror {mirror.name!r} has daily snapshots; --ready-hours merges tables "
                "with snapshots: hourly."
            )
        state = self.store.state(mirror.name)
        merged = [*state.hours, *(day_hours(day, self.zone)[-1] for day in state.days)]
        progress = self.writer_progress()
        if progress is None:
            return []
        if merged:
            after = max(merged)
        else:
            days = progress.state.get("tableDays", {}).get(mirror.name, [])
            if not days:
                return []
            after = Hour(date.fromisoformat(min(days)), 0).previous(self.zone)
        return self.hour_rule.ready_hours(
            after,
            progress.state.get("globalWatermarkMs"),
            int(time.time() * 1000) if now_ms is None else now_ms,
            set(progress.state.get("readyDays", [])),
        )

    def hour_merged(self, request: MergeRequest) -> bool:
        """Whether the hour ``request`` names has its tag already (table metadata only)."""
        name = self.config.table(request.table).name
        if request.hour is None or not self.store.exists(name):
            return False
        return Hour(request.dt, request.hour) in self.store.state(name).hours

    def _hour_base(
        self, table: str, hour: Hour, state: TableState
    ) -> tuple[int | None, int, str | None]:
        """The snapshot an hour's changes apply to, where its changes start, and the label of
        the merge record of that snapshot (None: none): the newest hour tag of the day before
        ``hour`` (hours between without a tag of their own are merged with it), else the day
        before's tag (or its last hour's) from midnight; None from midnight when nothing before
        it was merged (the day's changes so far form the first snapshot). A missing day before
        is refused: its tag would never be set."""
        midnight = midnight_ms(hour.day, self.zone)
        earlier = [h for h in state.hours if h.day == hour.day and h < hour]
        if earlier:
            newest = max(earlier)
            return state.hours[newest], newest.end_ms(self.zone), newest.label
        before = hour.day - timedelta(days=1)
        last = Hour(before, hours_in_day(before, self.zone) - 1)
        if before in state.days:
            return state.days[before], midnight, before.isoformat()
        if last in state.hours:
            return state.hours[last], midnight, last.label
        if any(day < hour.day for day in state.days) or any(h < hour for h in state.hours):
            raise MergeError(
                f"the snapshot of {table} for {before} is missing; merge its last hour "
                f"({last.label}) first, or the changes of the missing hours would be lost."
            )
        log.info("%s has no snapshot before %s: its changes form the first one", table, hour.label)
        return None, midnight, None

    def _late_since(
        self,
        table: str,
        label: str,
        start: int,
        base_record: str | None,
        raw_snapshot: int | None,
        loaded: Any | None = None,
    ) -> int | None:
        """The earliest ``executeTime`` among the raw rows before ``start`` that the merge of
        the base (the day or hour ``base_record``) did not see (committed after its raw
        snapshot: late rows, of any hour or day), or None when there are none. ``label``: the
        day or hour being merged, for the log.

        Those rows are read from the raw commits since (Iceberg's incremental read of the
        appends between two snapshots: cost of the commits since, not of the days before).
        The merge then takes every change from that instant on, not only the late rows: a
        late change older than one merged before (a DELETE of its key) must not win over it,
        and the latest change per key over the whole span decides that.

        When the base's raw snapshot is unknown (its tag was set before merges stored it
        there) or gone (expired: ``cdc-mirror maintain`` keeps the raw snapshots the newest
        tags' facts name, so only for a tag older than those, or facts dropped by hand), the
        changes are taken from the midnight of the oldest day the raw table holds
        (``late_fallback``; logged with the rows read again): taking an older change again
        changes nothing, as the latest change per key decides and the MERGE applies a change
        only over an older one."""
        if base_record is None or raw_snapshot is None:
            return None  # nothing merged before: the changes form the first snapshot
        seen = self._merge_facts(table, base_record, loaded).get("rawSnapshotId")
        if seen is None:
            return self._wide_fallback(
                table,
                label,
                start,
                f"the merge of {base_record} did not store the raw snapshot it read",
            )
        if int(seen) == raw_snapshot:
            return None
        from py4j.protocol import Py4JError  # noqa: PLC0415
        from pyspark.errors import PySparkException  # noqa: PLC0415

        try:
            if not self._raw_files_may_hold(
                table, raw_snapshot, [("executeTime", "<", int(start))], after=int(seen)
            ):
                # No file committed since holds a row before ``start`` (the usual case: told
                # from the files' column statistics, without the Spark job of the read).
                return None
            found = (
                self.spark.read.format("iceberg")
                .option("start-snapshot-id", str(int(seen)))
                .option("end-snapshot-id", str(raw_snapshot))
                .load(self._raw_identifier())
                .where(raw_table_condition(table))
                .where(F.col("executeTime") < start)
                .agg(F.min("executeTime").alias("since"))
                .first()
            )
        except (PySparkException, Py4JError) as exc:
            return self._wide_fallback(
                table,
                label,
                start,
                f"the raw commits since the merge of {base_record} cannot be read "
                f"({spark_error_sentence(exc)})",
            )
        since = None if found is None else found["since"]
        return None if since is None else int(since)

    def _wide_fallback(self, table: str, label: str, start: int, why: str) -> int:
        """Where ``label``'s changes start when the late rows cannot be told apart (``why``):
        the midnight of the oldest day the raw table holds (``late_fallback``), logged with
        the raw rows read again (``_oldest_raw_day``)."""
        oldest_day, rows = self._oldest_raw_day(table, start)
        since = late_fallback(start, self.zone, oldest_day)
        log.warning(
            "%s: %s; %s takes every change from %s on again (about %d raw rows: the days the "
            "raw table retains), so that rows late for any older day are in",
            table,
            why,
            label,
            hour_of(since, self.zone).label,
            rows,
        )
        return since

    def _first_since(self, table: str, label: str, start: int) -> int | None:
        """Where the changes of a table's first snapshot (``label``, whose own changes start at
        ``start``) start: the midnight of the oldest day before ``start`` the raw table holds
        (``first_from``), so the rows of the days before it are in the snapshot (a history
        replayed with its rows' own executeTimes, changes collected before the first merged
        day); None when the raw table holds no older day."""
        if not self._raw_exists():
            return None
        oldest_day, rows = self._oldest_raw_day(table, start)
        since = first_from(start, self.zone, oldest_day)
        if since is not None:
            log.info(
                "%s: the first snapshot (%s) takes every change from %s on (about %d raw rows)",
                table,
                label,
                hour_of(since, self.zone).label,
                rows,
            )
        return since

    def _oldest_raw_day(self, table: str, start: int) -> tuple[date | None, int]:
        """The oldest raw day before ``start`` and the raw rows from it to ``start``'s day: a
        read of two columns of the files of the table's bucket whose bounds may hold it (a
        table is no partition of its own: the partition metadata cannot tell its rows apart;
        only a table's first snapshot and a wide fallback ask)."""
        last_day = hour_of(start - 1, self.zone).day.isoformat()
        name = self.raw_lake.name(self.settings.stream_writer.database, RAW_TABLE)
        row = self.spark.sql(
            "SELECT min(dt) AS oldest, count(*) AS n "  # noqa: S608 - quoted names
            f"FROM {name} WHERE {raw_table_condition(table)} AND dt <= '{last_day}'"
        ).first()
        oldest = None if row is None else row["oldest"]
        oldest_day = None if oldest is None else date.fromisoformat(str(oldest)[:10])
        return oldest_day, 0 if row is None else int(row["n"])

    def _overtaking(
        self, table: str, snapshot: int, floor: int | None, begin: int, last_day: date
    ) -> tuple[DataFrame, set[date], int] | None:
        """The raw rows merged before (``executeTime`` before ``begin``, raw days up to
        ``last_day``) whose ``binlogOffset`` is at least ``floor``, the lowest among the changes
        a merge takes now: their raw days and earliest ``executeTime``; None when there are none.

        Binlog times are not monotonic in offset order (a server's clock stepped back, two
        instances' clocks differ): a DELETE can carry a higher offset than a change taken now
        and an earlier time. Its day's merge removed the key, and the snapshot keeps no trace
        of a removed key, so the older change taken now would bring it back; taken again with
        it, the latest change per key (by offset) decides. The condition on ``binlogOffset``
        lets Iceberg skip every raw file whose offsets all lie below ``floor`` (its column
        statistics): with monotonic clocks, every file of the days merged before."""
        if floor is None:
            return None
        bounds = overtaking_bounds(int(floor), begin, last_day)
        if not self._raw_files_may_hold(table, snapshot, bounds):
            # No raw file can hold such a row (with monotonic clocks, the usual case): told
            # from the files' column statistics, without the Spark job of the read.
            return None
        rows = self._raw_at(table, snapshot, bounds_sql(bounds))
        found = (
            rows.groupBy("dt")
            .agg(F.min("executeTime").alias("since"), F.count(F.lit(1)).alias("n"))
            .collect()
        )
        if not found:
            return None
        since = min(int(row["since"]) for row in found)
        log.info(
            "%s: %d raw rows before %s carry a higher binlogOffset than changes taken now "
            "(binlog times are not monotonic); taken again so that the latest change decides",
            table,
            sum(int(row["n"]) for row in found),
            hour_of(begin, self.zone).label,
        )
        return rows, {date.fromisoformat(str(row["dt"])[:10]) for row in found}, since

    def _raw_files_may_hold(
        self, table: str, snapshot: int, bounds: Iterable[RawBound], after: int | None = None
    ) -> bool:
        """Whether a data file of logical table ``table`` in the raw table as of ``snapshot``
        (of the appends after the snapshot ``after`` only, when given: Iceberg's incremental
        read) may hold a row matching ``bounds``, by Iceberg's metadata alone: the scan
        planning a read of them does (partition values, each file's lower and upper column
        bounds), no Spark job. False proves there is no such row; True only that reading them
        tells."""
        jvm: Any = self.spark.sparkContext._jvm
        java = self._raw_java()
        expressions = jvm.org.apache.iceberg.expressions.Expressions
        condition = expressions.alwaysTrue()
        for column, operator, value in [(LOGICAL_TABLE_COLUMN, "=", table), *bounds]:
            term = getattr(expressions, _ICEBERG_OPERATORS[operator])(column, value)
            condition = getattr(expressions, "and")(condition, term)
        if after is None:
            scan = java.newScan().useSnapshot(snapshot)
        else:
            scan = java.newIncrementalAppendScan().fromSnapshotExclusive(after)
            scan = scan.toSnapshot(snapshot)
        files = scan.filter(condition).planFiles()
        try:
            return bool(files.iterator().hasNext())
        finally:
            files.close()

    def _raw_exists(self) -> bool:
        return RAW_TABLE in self.raw_lake.table_names(self.settings.stream_writer.database)

    @staticmethod
    def _newest_hour(hour: Hour, state: TableState) -> bool:
        """Whether ``hour`` is after every state tagged so far (main then moves to it)."""
        if state.days and max(state.days) >= hour.day:
            return False
        return not state.hours or hour >= max(state.hours)

    def _ensure_database(self) -> None:
        if not self._database_ready:
            self.store.ensure_database()
            self._database_ready = True

    def _base_snapshot(self, table: str, dt: date, state: TableState) -> int | None:
        """The snapshot the day's changes apply to: ``dt−1``'s tag; None when no day before
        ``dt`` was merged (the day's changes form the first snapshot)."""
        before = dt - timedelta(days=1)
        if before in state.days:
            return state.days[before]
        earlier = [day for day in state.days if day < dt]
        if earlier:
            raise MergeError(
                f"the snapshot of {table} for {before} is missing (the latest before "
                f"{dt} is {max(earlier)}); merge {before} first, or the changes of the "
                "missing days would be lost."
            )
        log.info("%s has no snapshot before %s: the day's changes form the first one", table, dt)
        return None

    def _changes_after(
        self, mirror: TableMirror, after: str
    ) -> list[tuple[str, date | None, date | None, int]]:
        """The collected changes the lake holds after the cut (the raw rows matching
        ``after``), counted by event type and the days of their check column before and
        after (for ``counts_at_cut``)."""
        assert mirror.check_column is not None
        raw = self._raw(mirror.name, after)
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

    def _raw_identifier(self) -> str:
        """``catalog.database.table`` of the raw table, unquoted (Iceberg's reader options)."""
        return f"{self.settings.lake.catalog}.{self.settings.stream_writer.database}.{RAW_TABLE}"

    def _raw_snapshot(self) -> int | None:
        """The raw table's current snapshot (None: no table, or no commit yet). Every logical
        table's rows are in that one table, so the snapshot pins all of them. One catalog
        load (no SHOW TABLES first)."""
        java = if_table_exists(self._raw_java)
        current = None if java is None else java.currentSnapshot()
        return None if current is None else int(current.snapshotId())

    def _raw_java(self) -> Any:
        """The raw table's Iceberg Java object, loaded fresh."""
        jvm: Any = self.spark.sparkContext._jvm
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self._raw_identifier()
        )

    def _raw_at(self, table: str, snapshot: int | None, where: str) -> DataFrame:
        """Rows of logical table ``table`` matching ``where`` as of the raw table's
        ``snapshot`` (None: as now)."""
        return raw_rows(self.raw_lake, self.settings.stream_writer.database, table, where, snapshot)

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
    def check(self, mirror: TableMirror, dt: date, hour: Hour | None = None) -> CheckResult:
        """Counts per day of the snapshot ``dt`` (or of ``hour``: at the hour's end) against
        MySQL at the same cut; stored for the web admin."""
        assert mirror.check_column is not None
        days = check_days(dt)
        snapshot = self.store.read(mirror.name, dt, hour)
        column = F.to_date(F.col(f"`{mirror.check_column}`"))
        counted = (
            snapshot.where(column.between(F.lit(days[0]), F.lit(days[-1])))
            .groupBy(column.alias("day"))
            .count()
            .collect()
        )
        snapshot_counts = {row["day"]: int(row["count"]) for row in counted}
        mysql_now = self._daily_counts(mirror.name, dt + timedelta(days=1))
        after = (
            f"dt > '{dt.isoformat()}'"
            if hour is None
            else f"dt >= '{dt.isoformat()}' AND executeTime >= {hour.end_ms(self.zone)}"
        )
        mysql_counts = counts_at_cut(mysql_now, self._changes_after(mirror, after))
        name = dt.isoformat() if hour is None else hour.label
        result = compare(
            dt, snapshot_counts, mysql_counts, self._previous_check(mirror.name, dt, hour)
        )
        self.store.add_facts(
            mirror.name, day_tag(dt) if hour is None else hour.tag, {"check": check_facts(result)}
        )
        records.write_json(
            records.check_record_path(self.lake, mirror.name, name),
            {
                "table": mirror.name,
                "dt": dt.isoformat(),
                "hour": hour and hour.index,
                **result.to_json(),
            },
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

    def _previous_check(self, table: str, dt: date, hour: Hour | None) -> dict[str, Any] | None:
        """The check before the one of ``dt`` (or ``hour``), for the stalled flag: the one
        stored with the previous day's tag (the previous hour's; for a day's first hour, the
        day before's last hour's, or that day's tag once its hour tags were dropped) in the
        lake, like every fact a merge decides by. From its check record on this host only
        for a tag set by an earlier version, without stored facts."""
        if hour is None:
            labels = [(dt - timedelta(days=1)).isoformat()]
        else:
            previous = hour.previous(self.zone)
            labels = [previous.label]
            if previous.is_last(self.zone):
                labels.append(previous.day.isoformat())
        for label in labels:
            facts = self.store.merge_facts(table, self._tag_of(label))
            if facts:
                stored: dict[str, Any] | None = facts.get("check")
                return stored
        return records.read_json(records.check_record_path(self.lake, table, labels[0]))


@dataclass(frozen=True, slots=True)
class TableOutcome:
    table: str
    result: MergeResult | None
    error: str | None
    not_ready: bool = False  # the error: the day or hour is not ready yet (NotReadyError)
    skipped: str | None = None  # why nothing was merged and nothing failed ("already merged")


def merge_tables(merger: Merger, requests: list[MergeRequest]) -> list[TableOutcome]:
    """Merge several tables; a failing table is reported and the others go on."""
    outcomes = []
    for request in requests:
        try:
            if request.skip_merged and merger.hour_merged(request):
                label = Hour(request.dt, request.hour or 0).label
                why = f"{label} already merged (its tag exists); --remerge merges it again"
                log.info("%s: %s", request.table, why)
                outcomes.append(TableOutcome(request.table, None, None, skipped=why))
                continue
            outcomes.append(TableOutcome(request.table, merger.merge(request), None))
        except NotReadyError as exc:
            log.warning("merge of %s for %s waits: %s", request.table, request.dt, exc)
            outcomes.append(TableOutcome(request.table, None, str(exc), not_ready=True))
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
