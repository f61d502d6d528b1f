"""One micro-batch into the lake's one raw Iceberg table, exactly once, on any storage.

Spark's ``foreachBatch`` calls ``BatchWriter(batch, batch_id)``. Correctness comes from the
lake alone (Spark's checkpoint only saves re-reading Kafka): nothing is renamed, no manifest
or state file of our own is written, so it holds on local disk, HDFS and S3 alike.

1. **Transform.** The batch is parsed and routed in one pass (``transform.lake_rows``),
   rows below the writer's committed offsets dropped (a batch Spark replays, or a fresh
   checkpoint started from the lake's offsets). Nothing is cached: one Spark job reads it.
2. **One Iceberg commit.** Every logical table's rows (and the dead letters) go to ONE table,
   ``_cdc_changes`` (``cdc_platform.lake.RAW_TABLE``), partitioned by ``dt`` and a bucket
   of ``logicalTable``. One Spark job writes its data files and counts every row
   (``LakeCatalog.write_files``: groups per logical table, day and Kafka partition; the source
   tables routed to each): the counts drive the steps below, the batch is not read again to
   describe it. Then ONE append of those files whose snapshot summary records the batch's end
   offsets (``cdc-mirror.kafka-offsets``: every message of every partition below them is in
   the table, if it belongs there), the writer's name and the batch id. A commit is atomic: a
   reader sees all of the batch's rows or none; files of a batch that never committed are
   referenced by nothing (orphan-file removal deletes them). A commit costs the same whatever
   the number of logical tables: a batch over 200 tables was 200 commits before.
3. **Progress commit.** Then the writer's progress row (``cdc_platform.lake``: offsets,
   watermarks, ready days, late rows) is replaced, one commit of ``_cdc_writer_progress``.
   A day turns ready only there, after the data of the batch that made it ready.
4. **Views.** A logical table seen for the first time gets its view, ``<database>.<table>``
   in Spark's session catalog (``cdc_platform.lake.RawViews``: the first by ``CREATE VIEW``,
   the next ones as copies of its metastore record, one metastore call each, four at once),
   started as soon as the data files are written (beside the commits: a view of rows not yet
   committed shows nothing more than the lake holds), by a thread of its own: downstream SQL
   reads a table per logical table as before.

After a crash between the two commits, the restarted writer resumes from the newer of its
progress P and the raw table's newest commit carrying its own name, N: rows below N are in
the raw table already, so rows below max(P, N) of each partition are counted (the state
learns their days and watermarks) but not written until the progress passes N: neither a
row lost nor one written twice, even when the batches after the restart are cut differently
(a fresh checkpoint). A batch whose rows are all below N makes no raw commit.

``CDC_STREAM_WRITER_CRASH_AT`` names a point where the writer kills itself (tests only):
before the raw commit, inside it (the writer jar: its manifests written, before the table's
metadata swap), before the progress commit (after the raw one) and after it.
``CDC_STREAM_WRITER_FAIL_AT`` names a commit that fails (tests only): the raw commit or the
progress commit of the first batch that makes one fails inside Iceberg's commit, in the
writer jar (``FaultPoint.java``: its manifests written, the metadata file cannot be), as a
storage failure there does. A failed commit is not retried here: the error leaves the batch
function as one sentence naming the batch, the commit and the JVM's cause, Spark records no
commit of the batch in its checkpoint and the query stops, and the writer with it ("the
stream writer's query failed: …"). The table keeps its previous snapshot; the restarted
writer runs the batch again from the checkpoint and completes it from the lake's offsets, as
after a kill at the same point. Retrying in the process would gain nothing a supervisor's
restart does not. What the failed commit wrote (data files, manifests) is referenced by no
snapshot: ``cdc-mirror maintain``'s orphan removal deletes it.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

from pyspark.sql import functions as F

from cdc_platform.config import StreamWriterSettings
from cdc_platform.iceberg import WRITER_PROPERTY, KafkaOffsets, LakeCatalog
from cdc_platform.lake import (
    DAY_COLUMN,
    DEAD_LETTER_COLUMNS,
    DEAD_LETTER_TABLE,
    LOGICAL_TABLE_COLUMN,
    PROGRESS_TABLE,
    RAW_TABLE,
    RAW_TABLE_COLUMNS,
    RawViews,
    WriterProgress,
    commit_writer_progress,
    ensure_progress_table,
    ensure_raw_table,
    read_writer_progress,
)
from cdc_platform.lake_location import scrub
from cdc_platform.spark import spark_error_sentence
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
# "during-commit" is the writer jar's (CrashPoint.java): inside the raw commit, its manifests
# written, before the table's metadata swap.
CRASH_POINTS = ("before-commit", "during-commit", "before-progress", "after-commit")
JVM_CRASH_POINT = "during-commit"
# The JVM system property naming the process (or -group) the jar kills at JVM_CRASH_POINT.
CRASH_TARGET_PROPERTY = "cdc.stream-writer.crash-target"
# Tests only: this commit fails inside Iceberg's commit, once per process: the writer jar's
# (FaultPoint.java) reads it from the environment the JVM inherits; ``fault_point`` checks it.
FAULT_ENV = "CDC_STREAM_WRITER_FAIL_AT"
FAULT_POINTS = ("raw-commit", "progress-commit")
# The struct column of ``LakeCatalog.write_files``'s input holding a raw row (``_write_files``).
_RAW_LAYOUT = 9
# ``write_files`` counts rows per (table, day, …) of its input; the writer names the raw table
# as the table of every row it writes, and ``<logical table>/<dt>`` as the day, so the counts
# come per logical table and day (a logical table is [a-z0-9_], never holds a '/').
_KEY_SEPARATOR = "/"
# Columns of the raw table a dead letter leaves null (they came from a message that broke the
# contract; its raw bytes are kept).
_DEAD_LETTER_KEPT = {name for name, _ in DEAD_LETTER_COLUMNS} | {LOGICAL_TABLE_COLUMN, DAY_COLUMN}


def is_written(table: str) -> bool:
    """Pure: whether rows routed to ``table`` are written to the lake. A leading ``_`` marks
    the writer's own rows (control messages, ``transform``): never written, their
    executeTime still advances the partition's watermark (a heartbeat's promise)."""
    return not table.startswith("_")


def crash_point(env: Mapping[str, str]) -> str | None:
    """The crash point ``CRASH_ENV`` names (tests only); ConfigError for an unknown one."""
    return _test_point(env, CRASH_ENV, CRASH_POINTS)


def fault_point(env: Mapping[str, str]) -> str | None:
    """The failing commit ``FAULT_ENV`` names (tests only); ConfigError for an unknown one."""
    return _test_point(env, FAULT_ENV, FAULT_POINTS)


def _test_point(env: Mapping[str, str], name: str, points: Sequence[str]) -> str | None:
    point = env.get(name) or None
    if point is not None and point not in points:
        raise ConfigError(f"{name}={point!r} is not one of {', '.join(points)}.")
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


@contextlib.contextmanager
def jvm_commit_errors(
    commit: str, batch_id: int, lake_uri: str, secrets: tuple[str, ...]
) -> Iterator[None]:
    """A JVM error of batch ``batch_id``'s ``commit`` (the writer jar's, through py4j) as one
    sentence naming the batch, the commit, the lake and the JVM's cause, ``secrets`` removed:
    raised through Spark as it is, py4j's traceback would be what the operator reads first.
    Its traceback is logged at debug level. Python's own errors pass as they are."""
    try:
        yield
    except Exception as exc:
        if getattr(exc, "java_exception", None) is None:
            raise
        log.debug("batch %d's %s failed", batch_id, commit, exc_info=True)
        cause = scrub(spark_error_sentence(exc), secrets)
        raise CdcMirrorError(
            f"batch {batch_id}'s {commit} to the lake at {lake_uri} failed: {cause}"
        ) from None


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
    """Pure: per partition, the first offset the raw table still needs: the writer's own
    newest raw commit's offsets where they are beyond its progress (a crash between the raw
    commit and the progress commit), the progress elsewhere."""
    floors = dict(progress)
    if committed is not None:
        for key, offset in committed.next_offsets.items():
            if offset > floors.get(key, 0):
                floors[key] = offset
    return floors


def views_to_make(
    written: AbstractSet[str], made: AbstractSet[str], failed: AbstractSet[str]
) -> list[str]:
    """Pure: the views a batch makes: those of the logical tables it wrote that have none,
    and every one that could not be made before (its table need not be written again)."""
    return sorted((written | failed) - made)


def needs_commit(groups: Sequence[_Group], floors: Mapping[tuple[str, int], int]) -> bool:
    """Pure: whether the groups hold a row at or above the floors."""
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
        if crash_at == JVM_CRASH_POINT:
            # Whom the jar kills there: this process (its group when it leads one), never the
            # JVM's parent, which under spark-submit is the operator's shell or supervisor.
            leader = os.getpgid(0) == os.getpid()
            target = f"-{os.getpid()}" if leader else str(os.getpid())
            jvm: Any = spark.sparkContext._jvm
            jvm.java.lang.System.setProperty(CRASH_TARGET_PROPERTY, target)
        # The writer jar's JSON parse (transform.message_column), several times faster.
        self._jvm_parse = register_jvm_parse(spark)
        # Guards the state: ``check_readiness`` runs in the job's thread, batches in Spark's.
        self._lock = threading.Lock()
        self._started = False
        self.state = WriterState()
        # The writer's own newest raw commit when it is ahead of its progress (a crash between
        # the two commits: see the module); dropped once the progress has passed it.
        self._ahead: KafkaOffsets | None = None
        # The logical tables that have their view (or are having it made, by one thread), and
        # those whose view could not be made: tried again after the next batch, whatever it
        # writes. Both change on that thread too: ``_view_lock``.
        self._views: set[str] = set()
        self._views_failed: set[str] = set()
        self._view_lock = threading.Lock()
        self._view_maker = ThreadPoolExecutor(1, thread_name_prefix="cdc-views")
        self._view_work: Future[None] | None = None
        self._raw_views: RawViews | None = None  # made with the first view

    # -- start ------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the database and the progress table, and read the committed progress;
        idempotent, also run by the first batch."""
        with self._lock:
            if self._started:
                return
            # A stack jar without the one-job write stops the writer before it reads.
            self.lake.check_batch_write()
            # Before anything is read: a table written by an incompatible version (or not by
            # cdc-mirror) stops the writer here, in one sentence naming it and the cause.
            self.lake.check_compatible(self.database, (RAW_TABLE, PROGRESS_TABLE))
            ensure_raw_table(self.lake, self.database, self.config.target_file_mb)
            ensure_progress_table(self.lake, self.database)
            progress = read_writer_progress(self.lake, self.database, self.paths.name)
            self.state = (
                WriterState.from_json(progress.state) if progress is not None else WriterState()
            )
            mine = self.lake.committed_offsets(self.database, RAW_TABLE, writer=self.paths.name)
            if table_floors(self.state.next_offsets(), mine) != self.state.next_offsets():
                self._ahead = mine
                log.info(
                    "stream writer %s: its last raw commit is ahead of its progress (%s); "
                    "rows below it are counted, not written again",
                    self.paths.name,
                    _offsets_text(mine.next_offsets if mine is not None else {}),
                )
            views = self._existing_views()
            with self._view_lock:
                self._views = views
                # A view that failed before a restart: its table is in the progress.
                self._views_failed = {t for t in self.state.table_days if is_written(t)} - views
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

    def _committing(self, commit: str, batch_id: int) -> contextlib.AbstractContextManager[None]:
        return jvm_commit_errors(
            commit, batch_id, self.lake.location.uri, tuple(self.lake.storage.secrets())
        )

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
        floors = table_floors(committed, self._ahead)
        if floors == committed:
            self._ahead = None  # the progress has passed it (or there was none)
        # One pass writes the batch's data files and counts the whole batch.
        staged, counts = self._write_files(rows, committed, floors)
        groups, physical = _groups(counts)
        phases["data files"] = time.monotonic() - started
        self._check_routes(physical)
        written = [g for g in groups if is_written(g.table)]
        # The views of new tables start now, beside the commits: the raw table exists (``start``)
        # and a view over rows not yet committed shows nothing more than the lake holds.
        with self._view_lock:
            missing = views_to_make({g.table for g in written}, self._views, self._views_failed)
        self._make_views(missing)
        if any(g.table == DEAD_LETTER_TABLE for g in groups):
            self._log_samples(rows)
        self._crash("before-commit")
        commits = 0
        if needs_commit(written, floors):
            began = time.monotonic()
            # Where the raw table stands after this commit: the batch's end, or the writer's
            # own earlier commit where that is further (a crash left it ahead of the
            # progress, and a batch after the restart may end below it): never less.
            with self._committing("raw commit", batch_id):
                staged.commit(
                    RAW_TABLE,
                    KafkaOffsets(table_floors({**committed, **end_offsets}, self._ahead)),
                    {WRITER_PROPERTY: self.paths.name, BATCH_PROPERTY: str(batch_id)},
                )
            phases["raw commit"] = time.monotonic() - began
            commits = 1
        elif written:
            log.info("batch %d: the raw table holds these rows already", batch_id)
        self._crash("before-progress")
        began = time.monotonic()
        with self._committing("progress commit", batch_id):
            late, ready = self._commit_progress(batch_id, groups, end_offsets)
        phases["progress commit"] = time.monotonic() - began
        self._crash("after-commit")
        self._observe(batch_id, groups, late, ready, commits, phases, time.monotonic() - started)

    def _write_files(
        self,
        rows: DataFrame,
        committed: Mapping[tuple[str, int], int],
        floors: Mapping[tuple[str, int], int],
    ) -> tuple[Any, dict[str, Any]]:
        """Write the raw table's data files of the batch (rows at or above ``floors``)
        without committing, and count ``rows`` (each row once, written or not) per logical
        table, day and Kafka partition, in one Spark job (``LakeCatalog.write_files``).

        Rows are not filtered here: Spark pushes a filter on ``_table`` below the projection
        that computes it, inlining the expression, so every row would be parsed and routed
        twice; the job passes over the rows it does not write itself."""
        write: Column = F.lit(True)
        if floors != committed:
            above = transform.at_or_after(floors)
            if above is not None:
                write = above
        table = F.col("_table")
        valid = F.col("error").isNull()
        routed = valid & ~table.startswith("_")
        dead = table == DEAD_LETTER_TABLE

        def raw_column(name: str, kind: str) -> Column:
            if name == LOGICAL_TABLE_COLUMN:
                value = table
            elif name == DAY_COLUMN:
                value = F.col("_dt")
            elif name in _DEAD_LETTER_KEPT:
                value = F.col(name)
            else:  # a dead letter keeps its raw bytes, not what was parsed of them
                value = F.when(~dead, F.col(name))
            return value.cast(kind).alias(name)

        frame = rows.select(
            # The raw table is the table of every written row (``_KEY_SEPARATOR``).
            F.when(table.startswith("_"), table).otherwise(F.lit(RAW_TABLE)),
            write.alias("_write"),
            F.concat_ws(_KEY_SEPARATOR, table, F.col("_dt")).alias("_key"),
            F.col("kafkaTopic"),
            F.col("kafkaPartition").cast("int"),
            F.col("kafkaOffset").cast("long"),
            F.when(valid, F.col("executeTime")).cast("long").alias("_eventMs"),
            F.when(routed, F.concat_ws(_KEY_SEPARATOR, table, F.col("schemaName"))).alias(
                "_sourceSchema"
            ),
            F.when(routed, F.col("tableName")).alias("_sourceTable"),
            F.struct(*[raw_column(name, kind) for name, kind in RAW_TABLE_COLUMNS]).alias("_raw"),
        )
        # Each task's rows clustered by logical table and day, so that a file (a day and a
        # bucket of tables: the raw table's partition) holds each table's rows in one run
        # rather than interleaved in arrival order (runs of one table's values compress
        # together). By the key's hash: a sort on one
        # integer is Spark's radix sort, no string compares; two keys sharing a hash only
        # interleave again (what lands where is the same).
        clustered = frame.sortWithinPartitions(F.hash(F.col("_key")))
        staged = self.lake.write_files(
            clustered, self.database, [RAW_TABLE], {RAW_TABLE: _RAW_LAYOUT}
        )
        return staged, staged.counts()

    # -- views ------------------------------------------------------------------------------

    def _existing_views(self) -> set[str]:
        """The logical tables whose view exists (views of the database in Spark's session
        catalog; the lake's Iceberg tables are not views)."""
        rows = self.spark.sql(f"SHOW VIEWS IN spark_catalog.`{self.database}`").collect()
        return {str(row.viewName) for row in rows if not row.isTemporary}

    def _make_views(self, tables: Sequence[str]) -> None:
        """The views of the logical ``tables`` seen for the first time, made by a thread of
        their own beside the batch's commits: a view is a metastore operation a first run
        over hundreds of tables would otherwise wait for. A view that failed is made again
        after a later batch (the error is logged: the batch goes on)."""
        if not tables:
            return
        with self._view_lock:
            self._views.update(tables)
            self._views_failed.difference_update(tables)
        previous = self._view_work
        if self._raw_views is None:
            self._raw_views = RawViews(
                self.spark, self.lake.name(self.database, RAW_TABLE), self.database
            )
        views = self._raw_views

        def make() -> None:
            if previous is not None:
                previous.result()
            for table, exc in views.make_all(tables).items():
                with self._view_lock:
                    self._views.discard(table)
                    self._views_failed.add(table)
                log.warning(
                    "the view %s could not be made (%s); it is tried again after the next batch",
                    f"`{self.database}`.`{table}`",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )

        self._view_work = self._view_maker.submit(make)

    def wait_for_views(self, timeout_s: float | None = None) -> None:
        """Wait (at most ``timeout_s``) until the views of every logical table written so far
        are made; one that failed is logged (``_make_views``), not raised."""
        if self._view_work is None:
            return
        try:
            self._view_work.result(timeout_s)
        except TimeoutError:
            log.warning("the views of the newest tables were not made within %.0f s", timeout_s)

    def close_views(self, timeout_s: float | None = None) -> None:
        """At the writer's stop: ``wait_for_views(timeout_s)``; views not started by then are
        left (after a restart, made once their table is written again), the one being made
        is finished, then the views' threads are stopped and their metastore clients closed
        (``RawViews.close``)."""
        self.wait_for_views(timeout_s)
        self._view_maker.shutdown(wait=True, cancel_futures=True)
        if self._raw_views is not None:
            self._raw_views.close()

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
                # Outside any batch (the job's loop calls this): its failure, too, is the
                # sentence a batch's progress commit gives, not py4j's traceback.
                with self._committing("progress commit", state.last_batch):
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
            "batch %d: %d rows, %d dead letters, %d raw commits, %.1f s (%s)%s",
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
    """Pure: the batch's groups and, per logical table, the source tables (topic, schema,
    table) routed to it, from ``StagedFiles.counts`` of ``BatchWriter._write_files``'s input
    (its day is ``<logical table>/<dt>``, its source schema ``<logical table>/<schema>``)."""
    groups = []
    for _table, key, topic, partition, rows, min_offset, max_offset, max_event in counts["groups"]:
        table, _, dt = str(key).partition(_KEY_SEPARATOR)
        groups.append(
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
        )
    physical: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for _table, topic, keyed_schema, table_name in counts["sources"]:
        table, _, schema_name = str(keyed_schema).partition(_KEY_SEPARATOR)
        physical[table].add((topic, schema_name, table_name))
    return groups, dict(physical)


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
