"""One micro-batch into the lake's Iceberg tables, exactly once, on any storage.

Spark's ``foreachBatch`` calls ``BatchWriter(batch, batch_id)``. Correctness comes from the
lake alone (Spark's checkpoint only saves re-reading Kafka): nothing is renamed, no manifest
or state file of our own is written, so it holds on local disk, HDFS and S3 alike.

1. **Transform.** The batch is parsed and routed in one pass (``transform.lake_rows``),
   rows below the writer's committed offsets dropped (a batch Spark replays, or a fresh
   checkpoint started from the lake's offsets). Nothing is cached: one Spark job reads it.
2. **One Iceberg commit per table.** The data files of every existing table the batch touches
   are written by one Spark job (``LakeCatalog.write_files``: per-table Spark writes cost a
   job, an analysis and a table load each, most of a batch over hundreds of tables), whose
   tasks also count every row (groups per table, day and Kafka partition; the source tables
   routed to each): the counts drive the steps below, the batch is not read again to describe
   it. While the lake has no raw table yet, the tables the batch's Kafka keys name are drafted
   before that job (``_draft_tables``: Iceberg create transactions, written like existing
   tables and created with their first commit); other tables the batch brings are created
   after it (Iceberg's catalog API, a few at once) and a second job writes their files.
   Then for each table (the dead-letter table too), one append
   of its files whose snapshot summary records the batch's end offsets
   (``cdc-mirror.kafka-offsets``: every message of every partition below them is in that
   table, if it belongs there) and the writer's name. A
   commit is atomic: a reader sees all of a table's rows of the batch or none; files of a
   batch that never committed are referenced by nothing (orphan-file removal deletes them).
3. **Progress commit.** Then the writer's progress row (``cdc_platform.lake``: offsets,
   watermarks, ready days, late rows) is replaced, one commit of ``_cdc_writer_progress``.
   A day turns ready only there, after the data of the batch that made it ready.

After a crash anywhere in between, the restarted writer reads its progress P (the last
progress commit) and, before its first batch, each existing table's own newest commit N_T.
Rows below P are in every table; a table that committed the interrupted batch has its rows
below N_T too, so only rows at or above max(P, N_T) of each partition are written to it
(the others are counted) until the progress passes N_T: a crash between two tables' commits
of one batch neither loses nor duplicates a row, even when the batches after the restart are
cut differently (a fresh checkpoint). A table whose rows are all below its N_T gets no commit.

``CDC_STREAM_WRITER_CRASH_AT`` names a point where the writer kills itself (tests only):
before the first table commit, between two, before the progress commit and after it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

from pyspark.sql import functions as F

from cdc_platform.config import StreamWriterSettings
from cdc_platform.iceberg import (
    METASTORE_CLIENTS,
    WRITER_PROPERTY,
    KafkaOffsets,
    LakeCatalog,
    StagedFiles,
    TableDraft,
)
from cdc_platform.lake import (
    DAY_COLUMN,
    DEAD_LETTER_TABLE,
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
    read_writer_progress,
    table_columns,
)
from simple_binlog.control import is_control
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.routing import ShardRouter, ShardRule
from stream_writer import layout, transform
from stream_writer.metrics import WriterMetrics
from stream_writer.readiness import UNKNOWN_LAG, BatchProgress, ReadinessRule, WriterState
from stream_writer.routing import WriterRouting

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

BATCH_PROPERTY = "cdc-mirror.batch-id"
# Tests only: the writer kills itself (its process group, JVM included) at this point.
CRASH_ENV = "CDC_STREAM_WRITER_CRASH_AT"
CRASH_POINTS = ("before-commit", "between-tables", "before-progress", "after-commit")
# Table commits of one batch that run at once: each is mostly waiting on the storage and the
# metastore (a metadata refresh, manifest and metadata files, an alter_table); as many as
# Iceberg's metastore client pool holds, so none waits for a client.
_COMMIT_THREADS = METASTORE_CLIENTS
# Iceberg table properties of the raw tables. Rows are written by the task that read them
# (no shuffle before the write: ``distribution-mode=none``), each task keeping a file open per
# day it holds (fanout). Nothing filters on the JSON texts and raw bytes: no column metrics.
_NO_METRICS = ("content", "beforeContent", "columnTypes", "position", "raw", "error", "kafkaKey")

# The first struct column of ``LakeCatalog.write_files``'s input (``_write_files``).
_FIRST_LAYOUT = 9


def is_written(table: str) -> bool:
    """Pure: whether rows routed to ``table`` are written to the lake. A leading ``_`` marks
    the writer's own rows (control messages, ``transform``): never written, their
    executeTime still advances the partition's watermark (a heartbeat's promise)."""
    return not table.startswith("_")


def table_properties(target_file_mb: float, columns: Sequence[str]) -> dict[str, str]:
    """Pure: the Iceberg properties of a raw table of ``columns``."""
    return {
        "write.target-file-size-bytes": str(int(target_file_mb * 1024 * 1024)),
        "write.distribution-mode": "none",
        "write.spark.fanout.enabled": "true",
        **{
            f"write.metadata.metrics.column.{column}": "none"
            for column in _NO_METRICS
            if column in columns
        },
    }


def crash_point(env: Mapping[str, str]) -> str | None:
    """The crash point ``CRASH_ENV`` names (tests only); ConfigError for an unknown one."""
    point = env.get(CRASH_ENV) or None
    if point is not None and point not in CRASH_POINTS:
        raise ConfigError(f"{CRASH_ENV}={point!r} is not one of {', '.join(CRASH_POINTS)}.")
    return point


def _kill_myself(point: str) -> None:
    log.warning("%s=%s: the writer kills itself now", CRASH_ENV, point)
    for handler in logging.getLogger().handlers:
        handler.flush()
    # The whole process group when the writer leads one (its JVM is in it), as kill -9 of a
    # supervisor would; otherwise the process alone.
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


class LatestOffsets(Protocol):
    """The next offset a read_committed consumer could read, per partition (the LSO)."""

    def __call__(self, topic: str, partition: int) -> int | None: ...


@dataclass(frozen=True, slots=True)
class WriterPaths:
    """The writer's local working place: Spark's checkpoint (an optimisation: a lost one
    costs re-reading Kafka from the committed offsets, never a row)."""

    lake_dir: Path
    checkpoint_dir: Path
    name: str

    @property
    def status_file(self) -> Path:
        """A copy of the last committed progress for local tools (the demo's wait); written
        after the commit and read by nothing that needs it to be right."""
        return self.checkpoint_dir / "cdc_progress.json"


@dataclass(frozen=True, slots=True)
class _Group:
    """The rows of one table × day × Kafka partition in a batch."""

    table: str
    dt: str
    topic: str
    partition: int
    rows: int
    min_offset: int
    max_offset: int
    max_event_ms: int | None  # newest executeTime of its valid rows


def register_jvm_parse(spark: SparkSession) -> bool:
    """Register the writer jar's JSON parse as ``transform.JVM_PARSE_FUNCTION`` in the
    session; False (Spark's ``from_json`` is used, more slowly) when the jar lacks it."""
    try:
        spark.udf.registerJavaFunction(
            transform.JVM_PARSE_FUNCTION, transform.JVM_PARSE_CLASS, transform.MESSAGE_SCHEMA
        )
    except Exception as exc:  # noqa: BLE001 - a jar built before the class: the slower parse
        log.warning(
            "the writer jar has no %s (%s); parsing with Spark's from_json, more slowly; run "
            "'cdc-mirror stack up' to rebuild it",
            transform.JVM_PARSE_CLASS,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        return False
    return True


def table_floors(
    progress: Mapping[tuple[str, int], int], committed: KafkaOffsets | None
) -> dict[tuple[str, int], int]:
    """Pure: per partition, the first offset a table still needs: its own newest commit's
    offsets where they are beyond the writer's progress (an interrupted batch committed to
    it), the progress elsewhere."""
    floors = dict(progress)
    if committed is not None:
        for key, offset in committed.next_offsets.items():
            if offset > floors.get(key, 0):
                floors[key] = offset
    return floors


def needs_commit(groups: Sequence[_Group], floors: Mapping[tuple[str, int], int]) -> bool:
    """Pure: whether a table's groups hold a row at or above its floors."""
    return any(g.max_offset >= floors.get((g.topic, g.partition), 0) for g in groups)


class BatchWriter:
    def __init__(
        self,
        spark: SparkSession,
        config: StreamWriterSettings,
        paths: WriterPaths,
        lake: LakeCatalog,
        rules: Sequence[ShardRule],
        latest_offsets: LatestOffsets,
        metrics: WriterMetrics,
        clock: Callable[[], float] = time.time,
        routing: WriterRouting | None = None,
        reconfigure: Callable[[], WriterRouting | None] | None = None,
        crash_at: str | None = None,
    ) -> None:
        """``routing``: the topics read and each one's shard rules (default: ``rules`` for
        all); ``reconfigure`` is asked for a new one at the start of every batch (None:
        unchanged) — see ``_take_routing``. ``crash_at``: see the module (tests only)."""
        self.spark = spark
        self.config = config
        self.paths = paths
        self.lake = lake
        self.database = config.database
        self.routing = routing or WriterRouting(version=0, topics=(), default=tuple(rules))
        self._reconfigure = reconfigure
        self._routers: dict[str, ShardRouter] = {}
        # (topic, schemaName, tableName) → logical table, for the physical tables seen so far.
        self._routes: dict[tuple[str, str, str], str] = {}
        # Held for a whole batch: ``halt`` waits for the batch in progress, then refuses more.
        self._gate = threading.Lock()
        self._halted = False
        self.latest_offsets = latest_offsets
        self.metrics = metrics
        metrics.config_version.set(self.routing.version)
        self.clock = clock
        self.zone = ZoneInfo(config.time_zone)
        self.rule = ReadinessRule(
            zone=self.zone,
            lateness_budget_ms=int(config.lateness_budget_s * 1000),
            pipeline_delay_ms=int(
                (config.collector_delay_s + config.kafka_delay_s + config.writer_delay_s) * 1000
            ),
        )
        self._crash_at = crash_at
        # The writer jar's JSON parse (transform.message_column), several times faster.
        self._jvm_parse = register_jvm_parse(spark)
        # Guards the state: ``check_readiness`` runs in the job's thread, batches in Spark's.
        self._lock = threading.Lock()
        self._started = False
        self._tables: set[str] = set()
        self.state = WriterState()
        # Each existing table's newest own commit, read when this process first touches the
        # table: a crash may have left it ahead of the progress (see the module). Dropped once
        # the progress has passed it.
        self._ahead: dict[str, KafkaOffsets] = {}
        self._checked: set[str] = set()

    # -- start ------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the database and the progress table, and read the committed progress;
        idempotent, also run by the first batch."""
        with self._lock:
            if self._started:
                return
            # A stack jar without the one-job write stops the writer before it reads.
            self.lake.check_batch_write()
            ensure_progress_table(self.lake, self.database)
            self._tables = self.lake.table_names(self.database)
            # Before anything is read: a table written by an incompatible version (or not by
            # cdc-mirror) stops the writer here, in one sentence naming it and the cause.
            self.lake.check_compatible(self.database, self._tables)
            progress = read_writer_progress(self.lake, self.database, self.paths.name)
            self.state = (
                WriterState.from_json(progress.state) if progress is not None else WriterState()
            )
            self.metrics.observe_state(self.state)
            self._started = True
            log.info(
                "stream writer %s resumes from %s",
                self.paths.name,
                _offsets_text(self.state.next_offsets()) or "the start of its topics",
            )

    def starting_offsets(self, partitions: Mapping[str, Sequence[int]]) -> str:
        """Spark's ``startingOffsets`` for a new checkpoint: the committed offsets of each
        partition of ``partitions`` (topic → partitions), the earliest (-2) elsewhere."""
        self.start()
        committed = self.state.next_offsets()
        return json.dumps(
            {
                topic: {str(p): committed.get((topic, p), -2) for p in sorted(numbers)}
                for topic, numbers in sorted(partitions.items())
            },
            sort_keys=True,
        )

    def _crash(self, point: str) -> None:
        if self._crash_at == point:
            _kill_myself(point)

    # -- foreachBatch -----------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self._gate:
            if self._halted:
                raise CdcMirrorError(
                    f"batch {batch_id} refused: the query is stopping to read other topics; "
                    "it runs again from the checkpoint."
                )
            self._take_routing()
            self.start()
            self._write_batch(batch, batch_id)

    def _write_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        end_offsets = read_batch_end_offsets(self.paths.checkpoint_dir, batch_id)
        committed = self.state.next_offsets()
        rows = transform.lake_rows(
            batch,
            self.config.time_zone,
            self.routing.default,
            self._routes,
            self._jvm_parse,
            self.routing.by_topic,
        )
        fresh = transform.at_or_after(committed)
        if fresh is not None:
            rows = rows.where(fresh)
        phases: dict[str, float] = {}
        drafts: dict[str, TableDraft] = {}
        try:
            drafts = self._before_pass(batch, phases)
            phases["own commits"] = time.monotonic() - started
            began = time.monotonic()
            # One pass writes the files of the existing and drafted tables and counts the
            # whole batch.
            staged, counts = self._write_files(
                rows, sorted(self._writable() | drafts.keys()), committed
            )
            groups, physical = _groups(counts)
            phases["data files"] = time.monotonic() - began
            self._check_routes(physical)
            by_table: dict[str, list[_Group]] = defaultdict(list)
            for group in groups:
                by_table[group.table].append(group)
            plans = self._plans(batch_id, by_table, committed)
            new_tables = [t for t in plans if t not in self._tables and t not in drafts]
            stages = [staged]
            if new_tables:
                # Tables that neither existed nor were drafted (their rows' Kafka keys did not
                # name them): created now, and a second pass writes their files (it reads the
                # batch again; only batches that bring such tables pay it).
                began = time.monotonic()
                self._create_tables(new_tables)
                phases["new tables"] = time.monotonic() - began
                began = time.monotonic()
                stages.append(self._write_files(rows, new_tables, committed)[0])
                phases["new tables' files"] = time.monotonic() - began
            if DEAD_LETTER_TABLE in by_table:
                self._log_samples(rows)
            self._crash("before-commit")
            offsets = KafkaOffsets({**committed, **end_offsets})
            commits = self._commit_tables(batch_id, plans, stages, offsets, phases, drafts)
        finally:
            for table, draft in drafts.items():
                if table not in self._tables:  # not created: no rows, or the batch failed
                    draft.discard()
        self._crash("before-progress")
        began = time.monotonic()
        late, ready = self._commit_progress(batch_id, groups, end_offsets)
        phases["progress commit"] = time.monotonic() - began
        self._crash("after-commit")
        self._observe(batch_id, groups, late, ready, commits, phases, time.monotonic() - started)

    def _before_pass(self, batch: DataFrame, phases: dict[str, float]) -> dict[str, TableDraft]:
        """Existing tables' newest own commits (after a restart: every table's; rows below
        them are counted, not written: ``_write_files``) and, while the lake has no raw table
        yet (a first run: every table of the batch is new), drafts of the tables the batch
        brings (``_draft_tables``), made while the own commits are read. Once tables exist a
        batch rarely brings one, and learning its tables would cost every batch a read of
        its keys: a new table then costs its batch a second pass instead."""
        unchecked = sorted(t for t in self._tables if t not in self._checked and is_written(t))
        if self._writable() - {DEAD_LETTER_TABLE}:
            self._read_own_commits(unchecked)
            return {}
        with ThreadPoolExecutor(1, thread_name_prefix="cdc-offsets") as side:
            reading = side.submit(self._read_own_commits, unchecked)
            drafts = self._draft_tables(batch, phases)
            reading.result()
        return drafts

    def _writable(self) -> set[str]:
        """The existing tables a batch's rows may be written to."""
        return {t for t in self._tables if is_written(t)}

    def _write_files(
        self,
        rows: DataFrame,
        tables: Sequence[str],
        committed: Mapping[tuple[str, int], int],
    ) -> tuple[StagedFiles, dict[str, Any]]:
        """Write the data files of ``tables`` (rows at or above each one's floors: see
        ``table_floors``) without committing, and count ``rows`` (each row once, written or
        not), in one Spark job (``LakeCatalog.write_files``). Each column layout has a struct
        column of its own (the raw tables share one, the dead-letter table has its own).

        Rows are not filtered by table here: Spark pushes a filter on ``_table`` below the
        projection that computes it, inlining the expression, so every row would be parsed
        and routed twice (the second job of a first batch over 200 tables took several
        times the first); the job passes over rows of other tables itself."""
        layouts: dict[tuple[tuple[str, str], ...], int] = {}
        layout_of: dict[str, int] = {}
        for table in sorted({*tables, DEAD_LETTER_TABLE}):
            layout_of[table] = layouts.setdefault(
                table_columns(table), _FIRST_LAYOUT + len(layouts)
            )
        # Rows below a table's own newest commit (a crash between two tables' commits) are
        # counted, not written.
        write: Column = F.lit(True)
        for table in reversed(sorted(set(tables) & set(self._ahead))):
            above = transform.at_or_after(table_floors(committed, self._ahead[table]))
            if above is not None:
                write = F.when(F.col("_table") == table, above).otherwise(write)
        valid = F.col("error").isNull()
        routed = valid & ~F.col("_table").startswith("_")
        structs = [
            F.struct(
                *[
                    (F.col("_dt") if name == DAY_COLUMN else F.col(name)).cast(kind).alias(name)
                    for name, kind in columns
                ]
            ).alias(f"_layout{index}")
            for columns, index in layouts.items()
        ]
        frame = rows.select(
            F.col("_table"),
            write.alias("_write"),
            F.col("_dt"),
            F.col("kafkaTopic"),
            F.col("kafkaPartition").cast("int"),
            F.col("kafkaOffset").cast("long"),
            F.when(valid, F.col("executeTime")).cast("long").alias("_eventMs"),
            F.when(routed, F.col("schemaName")).alias("_sourceSchema"),
            F.when(routed, F.col("tableName")).alias("_sourceTable"),
            *structs,
        )
        staged = self.lake.write_files(frame, self.database, list(tables), layout_of)
        return staged, staged.counts()

    def _plans(
        self,
        batch_id: int,
        by_table: Mapping[str, Sequence[_Group]],
        committed: dict[tuple[str, int], int],
    ) -> list[str]:
        """The tables of the batch that get a commit: every written table with a row at or
        above its floors."""
        plans = []
        for table in sorted(t for t in by_table if is_written(t)):
            if table in self._ahead:
                floors = table_floors(committed, self._ahead[table])
                if floors == committed:
                    del self._ahead[table]  # the progress has passed it
                elif not needs_commit(by_table[table], floors):
                    log.info("batch %d: %s holds these rows already", batch_id, table)
                    continue
            plans.append(table)
        return plans

    def _commit_tables(
        self,
        batch_id: int,
        plans: Sequence[str],
        stages: Sequence[StagedFiles],
        offsets: KafkaOffsets,
        phases: dict[str, float],
        drafts: Mapping[str, TableDraft],
    ) -> int:
        """One Iceberg commit per planned table (a few at once); a drafted table is created
        with it, in one metastore operation. Returns how many."""
        if not plans:
            return 0
        began = time.monotonic()
        staged_of: dict[str, StagedFiles] = {}
        for staged in stages:
            for table in staged.tables:
                staged_of.setdefault(table, staged)
        missing = [table for table in plans if table not in staged_of]
        if missing:  # a planned table has rows to write: its files must be there
            raise CdcMirrorError(
                f"batch {batch_id}: no data files were written for {', '.join(missing)}."
            )
        properties = {WRITER_PROPERTY: self.paths.name, BATCH_PROPERTY: str(batch_id)}

        def commit(table: str) -> None:
            staged_of[table].commit(table, offsets, properties)
            if table in drafts:
                drafts[table].create()

        # Commits of different tables are independent and mostly wait on the storage and the
        # metastore: a few at once.
        with ThreadPoolExecutor(_COMMIT_THREADS, thread_name_prefix="cdc-commit") as pool:
            futures = {pool.submit(commit, table): table for table in plans}
            for done, future in enumerate(as_completed(futures), start=1):
                future.result()
                if futures[future] in drafts:
                    self._tables.add(futures[future])
                    # New since ``start``: no commit of this writer can be in it yet.
                    self._checked.add(futures[future])
                if done < len(futures):
                    self._crash("between-tables")
        phases["table commits"] = time.monotonic() - began
        return len(plans)

    def _read_own_commits(self, tables: Sequence[str]) -> None:
        """The newest own commit of each of ``tables`` (existing ones this process has not
        touched yet), into ``_ahead``; a few at once: after a restart, every table's. Read
        from the tables as ``start`` loaded them (``check_compatible``), not loaded again:
        only this writer makes its own commits, and it has made none since ``start``."""

        def read(table: str) -> KafkaOffsets | None:
            return self.lake.committed_offsets(
                self.database, table, writer=self.paths.name, fresh=False
            )

        with ThreadPoolExecutor(_COMMIT_THREADS, thread_name_prefix="cdc-offsets") as pool:
            for table, future in [(table, pool.submit(read, table)) for table in tables]:
                mine = future.result()
                if mine is not None:
                    self._ahead[table] = mine
                self._checked.add(table)

    def _draft_tables(self, batch: DataFrame, phases: dict[str, float]) -> dict[str, TableDraft]:
        """Drafts (``LakeCatalog.draft_table``) of the tables the batch brings, so that its one
        pass writes their files too and each is created with its first commit. The tables are
        learnt from the Kafka keys (``partition_key``: ``schema.table``; one small job, no
        parse): a guess, never trusted for a row: a drafted table without rows is never
        created, and a table the keys missed is created after the pass as before."""
        began = time.monotonic()
        found = batch.groupBy().agg(F.collect_set(F.struct("topic", "key"))).first()
        sources = [(str(item[0]), item[1]) for item in (found[0] if found is not None else [])]
        tables = sorted(
            table
            for table in keyed_tables(sources, self._route_quietly)
            if table not in self._tables and is_written(table)
        )
        phases["batch's tables"] = time.monotonic() - began
        if not tables:
            return {}
        began = time.monotonic()

        def draft(table: str) -> TableDraft | None:
            return self.lake.draft_table(self.database, table, **self._table_spec(table))

        drafts: dict[str, TableDraft] = {}
        with ThreadPoolExecutor(_COMMIT_THREADS, thread_name_prefix="cdc-draft") as pool:
            for table, future in [(table, pool.submit(draft, table)) for table in tables]:
                drafted = future.result()
                if drafted is not None:  # None: created meanwhile by another process
                    drafts[table] = drafted
        phases["drafts"] = time.monotonic() - began
        return drafts

    def _table_spec(self, table: str) -> dict[str, Any]:
        """A raw table's columns, partitioning and properties, as it is drafted or created."""
        columns = table_columns(table)
        return {
            "columns": columns,
            "partitioned_by": DAY_COLUMN,
            "properties": table_properties(
                self.config.target_file_mb, [name for name, _ in columns]
            ),
        }

    def _route_quietly(self, topic: str, schema_name: str, table_name: str) -> str | None:
        """The logical table of a source table, None if the shard rules route it nowhere."""
        try:
            return layout.logical_table(self._router(topic), schema_name, table_name)
        except CdcMirrorError:
            return None

    def _create_tables(self, tables: Sequence[str]) -> None:
        """Create the new ``tables`` through Iceberg's catalog API, a few at once (each is a
        metastore round of its own; a SQL statement each cost several times more)."""
        if not tables:
            return

        def create(table: str) -> None:
            self.lake.create_table_directly(self.database, table, **self._table_spec(table))

        with ThreadPoolExecutor(_COMMIT_THREADS, thread_name_prefix="cdc-create") as pool:
            for table, future in [(table, pool.submit(create, table)) for table in tables]:
                future.result()
                self._tables.add(table)
                # New since ``start``: no commit of this writer can be in it yet.
                self._checked.add(table)

    def _commit_progress(
        self, batch_id: int, groups: list[_Group], end_offsets: dict[tuple[str, int], int]
    ) -> tuple[dict[str, dict[str, int]], list[str]]:
        """Advance the state by the batch and commit it (one commit of the progress table);
        returns the batch's late rows and the days it made ready."""
        max_event: dict[tuple[str, int], int] = {}
        rows_by_table_day: dict[tuple[str, str], int] = defaultdict(int)
        for group in groups:
            if group.table == DEAD_LETTER_TABLE:
                continue
            if is_written(group.table):
                rows_by_table_day[(group.table, group.dt)] += group.rows
            if group.max_event_ms is not None:
                key = (group.topic, group.partition)
                max_event[key] = max(max_event.get(key, group.max_event_ms), group.max_event_ms)
        progress = []
        for (topic, partition), next_offset in sorted(end_offsets.items()):
            latest = self.latest_offsets(topic, partition)
            progress.append(
                BatchProgress(
                    topic=topic,
                    partition=partition,
                    next_offset=next_offset,
                    lag=UNKNOWN_LAG if latest is None else max(0, latest - next_offset),
                    max_event_ms=max_event.get((topic, partition)),
                )
            )
        with self._lock:
            state = WriterState.from_json(self.state.to_json())
            late = state.count_late(dict(rows_by_table_day))
            state.advance(progress)
            for table, dt in rows_by_table_day:
                state.table_days.setdefault(table, set()).add(dt)
            ready = state.newly_ready(self.rule, int(self.clock() * 1000))
            state.ready_days.update(ready)
            state.last_batch = batch_id
            self._save(state, batch_id)
        return late, ready

    def _save(self, state: WriterState, batch_id: int) -> None:
        """Commit ``state`` as the writer's progress row (the caller holds the lock)."""
        document = state.to_json()
        commit_writer_progress(
            self.lake,
            self.database,
            WriterProgress(self.paths.name, batch_id, int(self.clock() * 1000), document),
            KafkaOffsets(state.next_offsets()),
            {BATCH_PROPERTY: str(batch_id)},
        )
        self.state = state
        self.metrics.observe_state(state)
        # For local tools only, after the commit; a failure here loses nothing.
        with contextlib.suppress(OSError):
            self.paths.status_file.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.paths.status_file.with_suffix(".tmp")
            temporary.write_text(json.dumps(document, sort_keys=True))
            temporary.replace(self.paths.status_file)

    def check_readiness(self) -> list[str]:
        """Commit days that turned ready while no batch ran (the clock part of the rule)."""
        self.start()
        with self._lock:
            ready = self.state.newly_ready(self.rule, int(self.clock() * 1000))
            if ready:
                state = WriterState.from_json(self.state.to_json())
                state.ready_days.update(ready)
                self._save(state, state.last_batch)
                self._mark_ready(ready)
            return ready

    def _mark_ready(self, days: list[str]) -> None:
        for dt in days:
            self.metrics.ready_days.labels(self.paths.name).inc()
            log.info("day %s is ready", dt)

    # -- configuration ----------------------------------------------------------------------

    def _take_routing(self) -> None:
        """Between batches (before this one is written): put a new routing in force. Changed
        shard rules route this batch on (the physical tables routed so far are routed again);
        new topics are only read once the job restarts the query (``wanted_topics``)."""
        fresh = self._reconfigure() if self._reconfigure is not None else None
        if fresh is None:
            return
        old, self.routing = self.routing, fresh
        self.metrics.config_version.set(fresh.version)
        if not old.same_rules(fresh):
            self._routers.clear()
            self._routes.clear()
            log.info(
                "config version %d: shard rules changed; in force from this batch", fresh.version
            )
        added = sorted(set(fresh.topics) - set(old.topics))
        if added:
            log.info(
                "config version %d: new topics %s; read once the query restarts",
                fresh.version,
                ", ".join(added),
            )

    def take_routing_between_batches(self) -> None:
        """``_take_routing`` while no batch runs (none may come on a quiet stream, and a new
        topic must still be read); a batch in progress takes it itself when it starts."""
        if self._gate.acquire(blocking=False):
            try:
                if not self._halted:
                    self._take_routing()
            finally:
                self._gate.release()

    @property
    def wanted_topics(self) -> tuple[str, ...]:
        """The topics the routing in force reads (the job restarts the query on a change)."""
        return self.routing.topics

    def halt(self) -> None:
        """Wait for the batch in progress, then refuse every batch until ``resume``: the job
        stops its query between batches (a refused batch runs again from the checkpoint)."""
        with self._gate:
            self._halted = True

    def resume(self) -> None:
        with self._gate:
            self._halted = False

    @property
    def halted(self) -> bool:
        return self._halted

    def _router(self, topic: str) -> ShardRouter:
        if topic not in self._routers:
            self._routers[topic] = ShardRouter(list(self.routing.rules_for(topic)))
        return self._routers[topic]

    def _check_routes(self, physical: dict[str, set[tuple[str, str, str]]]) -> None:
        """Spark routed with Java regexes; the contract's router is Python's. They must agree.
        Checked routes are looked up by later batches instead of matching regexes."""
        for table, physicals in physical.items():
            for topic, schema_name, table_name in physicals:
                expected = layout.logical_table(self._router(topic), schema_name, table_name)
                if expected != table:
                    raise CdcMirrorError(
                        f"shard rules route {schema_name}.{table_name} to {expected!r} in Python "
                        f"but to {table!r} in Spark (Java regex); simplify the rule's pattern."
                    )
        for table, physicals in physical.items():
            for item in physicals:
                self._routes[item] = table

    def _log_samples(self, rows: DataFrame) -> None:
        samples = self.config.dead_letter_log_samples
        if samples == 0:
            return
        for row in (
            rows.where(F.col("_table") == DEAD_LETTER_TABLE)
            .select("kafkaTopic", "kafkaPartition", "kafkaOffset", "error")
            .limit(samples)
            .collect()
        ):
            log.warning(
                "dead letter %s[%d]@%d: %s",
                row["kafkaTopic"],
                row["kafkaPartition"],
                row["kafkaOffset"],
                row["error"],
            )

    def _observe(
        self,
        batch_id: int,
        groups: list[_Group],
        late: dict[str, dict[str, int]],
        ready: list[str],
        commits: int,
        phases: dict[str, float],
        seconds: float,
    ) -> None:
        writer = self.paths.name
        rows = dead = 0
        for group in groups:
            if group.table == DEAD_LETTER_TABLE:
                dead += group.rows
            elif is_written(group.table):
                self.metrics.rows.labels(writer, group.table).inc(group.rows)
                rows += group.rows
        if dead:
            self.metrics.dead_letters.labels(writer).inc(dead)
        for dt, tables in late.items():
            for table, count in tables.items():
                self.metrics.late_rows.labels(writer, table).inc(count)
                log.warning("%d late rows for %s on ready day %s", count, table, dt)
        self._mark_ready(ready)
        self.metrics.batch_seconds.labels(writer).observe(seconds)
        self.metrics.rows_per_second.labels(writer).set(rows / seconds if seconds > 0 else 0)
        log.info(
            "batch %d: %d rows, %d dead letters, %d table commits, %.1f s (%s)%s",
            batch_id,
            rows,
            dead,
            commits,
            seconds,
            ", ".join(f"{phase} {spent:.1f} s" for phase, spent in phases.items()),
            f", ready: {', '.join(ready)}" if ready else "",
        )


def _groups(
    counts: Mapping[str, Any],
) -> tuple[list[_Group], dict[str, set[tuple[str, str, str]]]]:
    """Pure: the batch's groups and, per table, the source tables (topic, schema, table)
    routed to it, from ``StagedFiles.counts``."""
    groups = [
        _Group(
            table=table,
            dt=dt,
            topic=topic,
            partition=int(partition),
            rows=int(rows),
            min_offset=int(min_offset),
            max_offset=int(max_offset),
            max_event_ms=None if max_event is None else int(max_event),
        )
        for table, dt, topic, partition, rows, min_offset, max_offset, max_event in counts["groups"]
    ]
    physical: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for table, topic, schema_name, table_name in counts["sources"]:
        physical[table].add((topic, schema_name, table_name))
    return groups, dict(physical)


def keyed_tables(
    keys: Iterable[tuple[str, bytes | None]],
    route: Callable[[str, str, str], str | None],
) -> set[str]:
    """Pure: the logical tables the Kafka keys (topic, key) of a batch name, by ``route``
    (topic, schema, table → logical table, None for none). A row's key is its physical
    table's ``partition_key`` (``schema.table``); control messages and keys of another form
    name none."""
    tables = set()
    for topic, key in keys:
        if key is None or is_control(key):
            continue
        try:
            text = bytes(key).decode()
        except UnicodeDecodeError:
            continue
        schema_name, dot, table_name = text.partition(".")
        if not dot or not schema_name or not table_name:
            continue
        logical = route(topic, schema_name, table_name)
        if logical is not None:
            tables.add(logical)
    return tables


def _offsets_text(offsets: Mapping[tuple[str, int], int]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items()))


def read_batch_end_offsets(checkpoint_dir: Path, batch_id: int) -> dict[tuple[str, int], int]:
    """The batch's end offsets (exclusive) from Spark's offset log, per topic partition.

    Spark writes ``<checkpoint>/offsets/<batchId>`` before running the batch: a version line,
    the batch metadata, then one JSON line per source (``{"topic": {"0": 42, ...}}``).
    """
    path = checkpoint_dir / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
        offsets: dict[str, dict[str, int]] = json.loads(lines[2])
    except (OSError, IndexError, ValueError) as exc:
        raise CdcMirrorError(
            f"Spark's offset log {path} cannot be read ({exc}); is the checkpoint intact?"
        ) from None
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }
