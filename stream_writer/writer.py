"""One micro-batch into the lake, exactly once for every reader of the Hive tables.

Spark's ``foreachBatch`` calls ``BatchWriter(batch, batch_id)``. Spark records a batch's
Kafka offset range in its checkpoint *before* running it and marks it done *after* this call
returns, so after ``kill -9`` the restarted query runs the last unfinished batch again, with
the same id and the same offsets. The writer makes that repetition harmless:

1. **Stage.** The batch is parsed, routed and written in one pass (``_stage``) under
   ``<lake>/_stream_writer/<writer>/_staging/<batchId>-<attempt>/``, outside every table
   directory; the staged files are described from their Parquet footers to name them
   (``stream_writer.layout``). Nothing a reader can see has changed.
2. **Commit point.** A manifest listing each staged file and its final name is written
   atomically (temporary file, fsync, rename) to ``<checkpoint>/cdc_batches/<batchId>.json``.
3. **Publish.** The files are renamed into ``<lake>/<database>.db/<table>/dt=<day>/`` (a
   rename is atomic: a reader sees a whole file or none), new ``dt`` partitions are added to
   the metastore, and the writer's state (watermarks, ready days, late rows) is replaced
   atomically in ``<checkpoint>/cdc_state.json``, tagged with the batch id. This step runs in
   a thread of its own while Spark stages the next batch (a first batch registering hundreds
   of tables would otherwise hold the stream); batches are published one at a time, in
   order, and the next manifest is written only after the previous batch is published.
   Spark may therefore mark a batch done before it is published: at start the writer
   publishes every manifest newer than its state (``BatchWriter.start``) before any batch.

On a repeated batch id: with a manifest, step 3 is finished (renames skip files already in
place, ``ADD IF NOT EXISTS`` repeats nothing, the state update is skipped if its batch id is
recorded) and the data Spark hands over again is not written; without a manifest, the old
attempt's staging directory is deleted and the batch starts over. Either way each Kafka
message ends up in exactly one file. The file names carry topic, partition and offset range,
so even a reader of the bare directories can detect copies (e.g. from a second writer on a
fresh checkpoint) by overlapping ranges.

Files of one batch become visible one rename at a time (milliseconds apart); a reader may see
part of the newest batch, never a row twice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse
from zoneinfo import ZoneInfo

from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]
from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]
from pyspark import SparkContext
from pyspark.sql import Observation
from pyspark.sql import functions as F

from cdc_platform.config import StreamWriterSettings
from cdc_platform.lake import DEAD_LETTER_TABLE, HiveCatalog, readiness_dir
from simple_binlog.errors import CdcMirrorError
from simple_binlog.routing import ShardRouter, ShardRule
from stream_writer import commit, layout, localfs, transform
from stream_writer.metrics import WriterMetrics
from stream_writer.readiness import UNKNOWN_LAG, BatchProgress, ReadinessRule, WriterState
from stream_writer.routing import WriterRouting

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_SUCCESS = "_SUCCESS"
# The columns of the staged files that name them and advance the watermarks.
_READ_BACK_SCHEMA = "kafkaTopic STRING, kafkaPartition INT, kafkaOffset BIGINT, executeTime BIGINT"
_FOOTER_COLUMNS = ("kafkaTopic", "kafkaPartition", "kafkaOffset", "executeTime")
_FOOTER_SUMMARY = "io.cdcmirror.parquet.FooterSummary"
# How long the observed metrics of a finished write may take to arrive (Spark delivers them
# through its listener bus); past it the batch fails with one sentence instead of hanging.
_OBSERVATION_TIMEOUT_S = 300


@dataclass(frozen=True, slots=True)
class FileSummary:
    """What a staged file's Parquet footer (or its rows, read back) says about it."""

    path: str
    rows: int
    first_topic: str
    last_topic: str
    first_partition: int
    last_partition: int
    min_offset: int
    max_offset: int
    max_event_ms: int | None


def parse_footer_summary(text: str) -> list[FileSummary]:
    """Pure: ``FooterSummary.summarise``'s lines (path, rows, then min and max of each of
    ``_FOOTER_COLUMNS``, tab-separated; empty when a column held only nulls)."""
    summaries = []
    for line in text.splitlines():
        if not line:
            continue
        path, rows, t_min, t_max, p_min, p_max, o_min, o_max, _e_min, e_max = line.split("\t")
        summaries.append(
            FileSummary(
                path=path,
                rows=int(rows),
                first_topic=t_min,
                last_topic=t_max,
                first_partition=int(p_min),
                last_partition=int(p_max),
                min_offset=int(o_min),
                max_offset=int(o_max),
                max_event_ms=int(e_max) if e_max else None,
            )
        )
    return summaries


class LatestOffsets(Protocol):
    """The next offset a read_committed consumer could read, per partition (the LSO)."""

    def __call__(self, topic: str, partition: int) -> int | None: ...


@dataclass(frozen=True, slots=True)
class WriterPaths:
    lake_dir: Path
    checkpoint_dir: Path
    name: str

    @property
    def work_dir(self) -> Path:
        return self.lake_dir / "_stream_writer" / self.name

    @property
    def staging_root(self) -> Path:
        return self.work_dir / "_staging"

    @property
    def ready_dir(self) -> Path:
        return readiness_dir(self.lake_dir, self.name)

    @property
    def state_file(self) -> Path:
        return self.checkpoint_dir / commit.STATE_FILE


@dataclass(frozen=True, slots=True)
class _StagedStats:
    """What the staged files of a batch hold, from their Parquet footers (or columns)."""

    files: list[layout.StagedFile]
    # logical table → physical tables (topic, schema, table)
    physical_tables: dict[str, set[tuple[str, str, str]]]
    max_event: dict[tuple[str, int], int]  # (topic, partition) → newest executeTime
    dead_letters: int


def footer_ranges(spark: SparkSession, paths: list[str], columns: Sequence[str]) -> str:
    """``FooterSummary.summarise``'s lines for Parquet files (see ``parse_footer_summary``);
    Py4JError when the writer jar lacks the class (built before it) or a footer lacks a
    column's statistics."""
    gateway = spark.sparkContext._gateway
    jvm = spark.sparkContext._jvm
    assert gateway is not None and jvm is not None  # a classic (non-Connect) session

    def strings(values: Sequence[str]) -> Any:
        array = gateway.new_array(jvm.java.lang.String, len(values))
        for index, value in enumerate(values):
            array[index] = value
        return array

    summary_class = getattr(jvm, _FOOTER_SUMMARY)
    if not isinstance(summary_class, JavaClass):  # py4j's answer for an unknown class
        raise Py4JError(f"the writer jar has no {_FOOTER_SUMMARY} (built before it)")
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    return str(summary_class.summarise(hadoop_conf, strings(paths), strings(columns)))


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


def publication_error(pending: Future[None] | None) -> BaseException | None:
    """The error of a background publication that has finished, or None (none, still
    running, or succeeded)."""
    if pending is None or not pending.done() or pending.cancelled():
        return None
    return pending.exception()


class BatchWriter:
    def __init__(
        self,
        spark: SparkSession,
        config: StreamWriterSettings,
        paths: WriterPaths,
        rules: Sequence[ShardRule],
        latest_offsets: LatestOffsets,
        metrics: WriterMetrics,
        clock: Callable[[], float] = time.time,
        on_published: Callable[[commit.BatchManifest], None] | None = None,
        routing: WriterRouting | None = None,
        reconfigure: Callable[[], WriterRouting | None] | None = None,
    ) -> None:
        """``on_published`` is told of each batch once its rows are queryable in Hive.
        ``routing``: the topics read and each one's shard rules (default: ``rules`` for
        all); ``reconfigure`` is asked for a new one at the start of every batch (None:
        unchanged) — see ``_take_routing``."""
        self.spark = spark
        self.config = config
        self.paths = paths
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
        self.on_published = on_published
        self.zone = ZoneInfo(config.time_zone)
        self.rule = ReadinessRule(
            zone=self.zone,
            lateness_budget_ms=int(config.lateness_budget_s * 1000),
            pipeline_delay_ms=int(
                (config.collector_delay_s + config.kafka_delay_s + config.writer_delay_s) * 1000
            ),
        )
        self.catalog = HiveCatalog(spark, config.database, paths.lake_dir)
        # The staging write's own local filesystem: no checksum files, and no `chmod` child
        # process per file when the session loaded the java.nio one (stream_writer.localfs).
        # The same jar holds FooterSummary: with it, staged files are described from their
        # footers instead of a Spark job reading their columns back.
        self._writer_jar = localfs.nio_in_session(spark.conf.get("spark.hadoop.fs.file.impl", None))
        self._staging_options = {
            **localfs.staging_write_options(self._writer_jar),
            **transform.parquet_column_options(),
        }
        # And the jar's JSON parse (transform.message_column), several times faster than Spark's.
        self._jvm_parse = self._writer_jar and register_jvm_parse(spark)
        self.manifests = commit.ManifestStore(paths.checkpoint_dir)
        self.state = self._load_state()
        self.catalog.remember(self.state.table_days)
        # Guards the state, the catalog and the markers: the publication of a batch runs in a
        # thread of its own, and ``check_readiness`` in the caller's.
        self._lock = threading.Lock()
        self._started = False
        self._publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdc-publish")
        self._pending: Future[None] | None = None

    # -- state ------------------------------------------------------------------------------

    def _load_state(self) -> WriterState:
        if self.paths.state_file.exists():
            return WriterState.from_json(commit.read_json(self.paths.state_file))
        return WriterState()

    # -- foreachBatch -----------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Stage and commit one batch; its publication runs on while Spark reads the next.

        The publication of batch N (renames, metastore, state) overlaps the staging of batch
        N+1 (a Spark job): a first batch creating hundreds of tables in the metastore no
        longer holds the stream up for that long. Batches are still published one at a
        time and in order, and a batch is committed (its manifest) only after the one
        before it is published; ``close`` waits for the last one. Spark may consider a
        batch done before it is published: its manifest is then published by ``start``
        when the writer starts again (``_recover``), before any new batch.
        """
        with self._gate:
            if self._halted:
                raise CdcMirrorError(
                    f"batch {batch_id} refused: the query is stopping to read other topics; "
                    "it runs again from the checkpoint."
                )
            self._take_routing()
            self._write_batch(batch, batch_id)

    def _write_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self.start()
        manifest = self.manifests.load(batch_id)
        phases: dict[str, float] = {}
        if manifest is None:
            commit.discard_attempts(self.paths.staging_root, batch_id)
            manifest = self._stage(batch, batch_id, phases)
            waited = time.monotonic()
            self._wait_published()
            phases["wait for previous"] = time.monotonic() - waited
            self.manifests.save(manifest)
        else:
            log.info("batch %d was committed before a restart; completing it", batch_id)
            self._wait_published()
        staged_s = time.monotonic() - started - phases.get("wait for previous", 0.0)
        self._pending = self._publisher.submit(
            self._publish_batch, manifest, phases, started, staged_s
        )

    # -- configuration ----------------------------------------------------------------------

    def _take_routing(self) -> None:
        """Between batches (before this one is staged): put a new routing in force. Changed
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

    def start(self) -> None:
        """Create the Hive database and publish the batches committed but not published
        before a restart; idempotent, also run by the first batch."""
        if self._started:
            # Without taking the lock: a batch must not wait here for the publication of
            # the one before it (that is what overlapping them is for).
            return
        with self._lock:
            if self._started:
                return
            self.catalog.ensure_database()
            self._recover()
            self._started = True

    def close(self) -> None:
        """Wait for the last batch's publication (raises its error, if any)."""
        self._wait_published()

    def close_quietly(self) -> None:
        """``close`` that logs the publication's error instead of raising it."""
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - reported, and the batch is published on restart
            log.warning("the last batch was not published (%s); a restart publishes it", exc)

    def check_published(self) -> None:
        """Raise the error of a background publication that failed, without waiting for one
        that runs: on a quiet stream no next batch comes to report it, and the batch's rows
        would stay invisible while the job looks healthy. A restart publishes the batch."""
        error = publication_error(self._pending)  # read only: the batch thread owns the slot
        if error is not None:
            self._started = False
            raise CdcMirrorError(
                f"publishing a batch failed ({error}); it is committed and a restart of the "
                "stream writer publishes it."
            )

    def _wait_published(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except BaseException:
            # The batch is committed (its manifest) but not published: whoever goes on in
            # this process (a query restarted in-process) must publish it first.
            self._started = False
            raise

    def _recover(self) -> None:
        """Publish the committed but unpublished batches (the caller holds the lock)."""
        for batch_id in self.manifests.committed_after(self.state.last_batch):
            manifest = self.manifests.load(batch_id)
            if manifest is not None:
                log.info("batch %d was committed before a restart; publishing it", batch_id)
                self._publish_locked(manifest, {}, time.monotonic(), 0.0)

    def _publish_batch(
        self,
        manifest: commit.BatchManifest,
        phases: dict[str, float],
        started: float,
        staged_s: float,
    ) -> None:
        with self._lock:
            self._publish_locked(manifest, phases, started, staged_s)

    def _publish_locked(
        self,
        manifest: commit.BatchManifest,
        phases: dict[str, float],
        started: float,
        staged_s: float,
    ) -> None:
        published = self._publish(manifest, phases)
        if self.on_published is not None:
            self.on_published(manifest)
        if published is not None:
            # The batch's own time: not the wait for the previous batch's publication.
            seconds = time.monotonic() - started - phases.get("wait for previous", 0.0)
            self._observe(manifest, *published, phases, staged_s, seconds)
        commit.discard_staging(self.paths.staging_root, manifest.batch_id)
        self.manifests.prune(manifest.batch_id)

    def check_readiness(self) -> list[str]:
        """Mark days that turned ready while no batch ran (the clock part of the rule)."""
        self.start()
        with self._lock:
            ready = self.state.newly_ready(self.rule, int(self.clock() * 1000))
            if ready:
                state = WriterState.from_json(self.state.to_json())
                state.ready_days.update(ready)
                self._mark_ready(state, ready)
                commit.atomic_write_json(self.paths.state_file, state.to_json())
                self.state = state
            return ready

    # -- stage ------------------------------------------------------------------------------

    def _stage(
        self, batch: DataFrame, batch_id: int, phases: dict[str, float]
    ) -> commit.BatchManifest:
        """Write the batch under a fresh staging directory in one pass and describe it.

        Rows are sorted by (table, day, Kafka offset) within each task; Spark's Kafka source
        reads one topic partition per task, so each (table, day, partition) is written by one
        task, rolling to a new file every ``rows_per_file`` rows: a hot table gets several
        files, a quiet one a single file, and every file holds a contiguous offset range.
        (The sort costs little: measured, a write without it through Spark's concurrent
        output writers, one open file per table and day, was slower with 200 tables.)

        The physical tables of each logical table (for the routing check) are collected while
        the rows are written (``observe``); the staged files' footers then give their
        offsets, rows and newest event (``_summarise``).
        """
        batch_ts = layout.batch_timestamp(datetime.fromtimestamp(self.clock(), UTC))
        staging = self.paths.staging_root / f"{batch_id}-{uuid.uuid4().hex[:8]}"
        target = staging / "rows"
        rows_per_file = layout.rows_per_file(
            int(self.config.target_file_mb * 1024 * 1024),
            self.state.bytes_per_row or layout.DEFAULT_BYTES_PER_ROW,
        )
        began = time.monotonic()
        rows = transform.lake_rows(
            batch,
            self.config.time_zone,
            self.routing.default,
            self._routes,
            self._jvm_parse,
            self.routing.by_topic,
        )
        observation = Observation(f"cdc_stream_writer_{batch_id}_{uuid.uuid4().hex[:8]}")
        observed = rows.observe(
            observation,
            # As JSON text: PySpark hands an observed array back as a bare Java object.
            F.to_json(
                F.collect_set(
                    F.when(
                        F.col("error").isNull(),
                        F.struct("_table", "kafkaTopic", "schemaName", "tableName"),
                    )
                )
            ).alias("physical"),
        )
        (
            observed.sortWithinPartitions("_table", "_dt", "kafkaOffset")
            .write.options(**self._staging_options)
            .option("maxRecordsPerFile", rows_per_file)
            .partitionBy("_table", "_dt")
            .parquet(str(target))
        )
        phases["write"] = time.monotonic() - began
        began = time.monotonic()
        stats = self._staged_stats(target, observation)
        phases["read back"] = time.monotonic() - began
        self._check_routes(stats)
        # Checked: later batches look these physical tables up instead of matching regexes.
        for table, physicals in stats.physical_tables.items():
            for physical in physicals:
                self._routes[physical] = table
        if stats.dead_letters:
            self._log_samples(target)
        named = layout.name_files(stats.files, batch_ts, batch_id)
        files = [
            commit.CommittedFile(
                staged=str(Path(staged.path).relative_to(self.paths.lake_dir)),
                final=str(
                    (self.catalog.root / staged.table / f"dt={staged.dt}" / str(name)).relative_to(
                        self.paths.lake_dir
                    )
                ),
                table=staged.table,
                dt=staged.dt,
                rows=staged.rows,
                size=staged.size,
            )
            for staged, name in named
        ]
        rows_by_table_day: dict[tuple[str, str], int] = defaultdict(int)
        for item in files:
            rows_by_table_day[(item.table, item.dt)] += item.rows
        return commit.BatchManifest(
            batch_id=batch_id,
            staging_dir=str(staging.relative_to(self.paths.lake_dir)),
            files=files,
            progress=self._progress(batch_id, stats.max_event),
            dead_letters=stats.dead_letters,
            created_ms=int(self.clock() * 1000),
            rows_by_table_day=dict(rows_by_table_day),
        )

    def _staged_stats(self, target: Path, observation: Observation) -> _StagedStats:
        # A batch whose offsets hold no committed record (only aborted transactions and their
        # markers, as a broker restart leaves behind) is written as a bare directory with
        # _SUCCESS and no Parquet file: nothing to name then.
        staged = sorted(target.glob("_table=*/_dt=*/*.parquet"))
        if not staged:
            return _StagedStats([], {}, {}, 0)
        physical: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        for item in json.loads(observed_metrics(observation)["physical"]):
            if item["_table"] == transform.CONTROL_TABLE:
                continue  # heartbeats: no physical table
            physical[item["_table"]].add(
                (item["kafkaTopic"], item["schemaName"], item["tableName"])
            )
        files: list[layout.StagedFile] = []
        max_event: dict[tuple[str, int], int] = {}
        dead = 0
        for summary in self._summarise(target, staged):
            path = Path(urlparse(summary.path).path)
            table = path.parent.parent.name.removeprefix("_table=")
            dt = path.parent.name.removeprefix("_dt=")
            if (summary.first_topic, summary.first_partition) != (
                summary.last_topic,
                summary.last_partition,
            ):
                raise CdcMirrorError(
                    f"staged file {path.name} mixes Kafka partitions; Spark's Kafka source "
                    "must read each topic partition in one task (do not set minPartitions)."
                )
            key = (summary.first_topic, summary.first_partition)
            if table == transform.CONTROL_TABLE:
                # Watermark heartbeats: their executeTime is the partition's event time; the
                # file is not published (the staging directory goes with the batch).
                newest = summary.max_event_ms
                if newest is not None:
                    max_event[key] = max(max_event.get(key, newest), newest)
                continue
            files.append(
                layout.StagedFile(
                    path=str(path),
                    table=table,
                    dt=dt,
                    topic=summary.first_topic,
                    partition=summary.first_partition,
                    min_offset=summary.min_offset,
                    max_offset=summary.max_offset,
                    rows=summary.rows,
                    size=path.stat().st_size,
                )
            )
            if table == DEAD_LETTER_TABLE:
                dead += summary.rows
                continue
            if summary.max_event_ms is not None:
                max_event[key] = max(max_event.get(key, summary.max_event_ms), summary.max_event_ms)
        return _StagedStats(files, dict(physical), max_event, dead)

    def _summarise(self, target: Path, staged: list[Path]) -> list[FileSummary]:
        """Rows, offset range and newest event of each staged file.

        Parquet records each row group's row count and every column's minimum and maximum in
        the file's footer, so reading the footers (one JVM call for the batch, a few ms a
        file) answers without reading rows. Without the writer's jar, or should a footer lack
        statistics, Spark reads the four columns back instead (seconds a batch).
        """
        if self._writer_jar:
            try:
                return self._footer_summaries(staged)
            except Py4JError as exc:
                reason = (
                    exc.java_exception.getMessage()
                    if isinstance(exc, Py4JJavaError)
                    else str(exc).splitlines()[0]
                )
                log.warning(
                    "the staged files' footers cannot say what they hold (%s); reading them back",
                    reason,
                )
        return self._read_back(target)

    def _footer_summaries(self, staged: list[Path]) -> list[FileSummary]:
        text = footer_ranges(self.spark, [str(path) for path in staged], _FOOTER_COLUMNS)
        return parse_footer_summary(text)

    def _read_back(self, target: Path) -> list[FileSummary]:
        # Only small columns are read back (Parquet is columnar), with the schema given and
        # the files found by one recursive listing: no schema inference, no partition
        # discovery jobs. Dead-letter rows are in files of their own (``_table=dead_letter``).
        rows = (
            self.spark.read.schema(_READ_BACK_SCHEMA)
            .option("recursiveFileLookup", "true")
            .option("pathGlobFilter", "*.parquet")
            .parquet(str(target))
            .groupBy(F.col("_metadata.file_path").alias("file"))
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.min("kafkaTopic").alias("topic"),
                F.max("kafkaTopic").alias("lastTopic"),
                F.min("kafkaPartition").alias("partition"),
                F.max("kafkaPartition").alias("lastPartition"),
                F.min("kafkaOffset").alias("minOffset"),
                F.max("kafkaOffset").alias("maxOffset"),
                F.max("executeTime").alias("maxEventMs"),
            )
            .collect()
        )
        return [
            FileSummary(
                path=row["file"],
                rows=int(row["rows"]),
                first_topic=row["topic"],
                last_topic=row["lastTopic"],
                first_partition=int(row["partition"]),
                last_partition=int(row["lastPartition"]),
                min_offset=int(row["minOffset"]),
                max_offset=int(row["maxOffset"]),
                max_event_ms=None if row["maxEventMs"] is None else int(row["maxEventMs"]),
            )
            for row in rows
        ]

    def _check_routes(self, stats: _StagedStats) -> None:
        """Spark routed with Java regexes; the contract's router is Python's. They must agree."""
        for table, physicals in stats.physical_tables.items():
            for topic, schema_name, table_name in physicals:
                expected = layout.logical_table(self._router(topic), schema_name, table_name)
                if expected != table:
                    raise CdcMirrorError(
                        f"shard rules route {schema_name}.{table_name} to {expected!r} in Python "
                        f"but to {table!r} in Spark (Java regex); simplify the rule's pattern."
                    )

    def _log_samples(self, target: Path) -> None:
        samples = self.config.dead_letter_log_samples
        if samples == 0:
            return
        dead = self.spark.read.parquet(str(target / f"_table={DEAD_LETTER_TABLE}"))
        for row in (
            dead.select("kafkaTopic", "kafkaPartition", "kafkaOffset", "error")
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

    def _progress(
        self, batch_id: int, max_event: dict[tuple[str, int], int]
    ) -> list[BatchProgress]:
        end_offsets = read_batch_end_offsets(self.paths.checkpoint_dir, batch_id)
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
        return progress

    # -- publish ----------------------------------------------------------------------------

    def _publish(
        self, manifest: commit.BatchManifest, phases: dict[str, float]
    ) -> tuple[dict[str, dict[str, int]], list[str]] | None:
        """Make a committed batch visible; returns its late rows and newly ready days, or
        None when a run before a restart had done all of it."""
        began = time.monotonic()
        commit.complete(manifest, self.paths.lake_dir)
        phases["rename"] = time.monotonic() - began
        days_by_table: dict[str, list[str]] = defaultdict(list)
        for table, dt in manifest.rows_by_table_day:
            days_by_table[table].append(dt)
        began = time.monotonic()
        self.catalog.add_all(days_by_table)
        phases["metastore"] = time.monotonic() - began
        if self.state.last_batch >= manifest.batch_id:
            return None  # state, markers and metrics of this batch were done before a restart
        # Work on a copy: markers and records first, the state file last, so a crash in
        # between repeats the same decisions on the replayed batch.
        state = WriterState.from_json(self.state.to_json())
        table_rows = {
            key: rows
            for key, rows in manifest.rows_by_table_day.items()
            if key[0] != DEAD_LETTER_TABLE
        }
        late = state.count_late(table_rows)
        state.advance(manifest.progress)
        for table, dt in table_rows:
            state.table_days.setdefault(table, set()).add(dt)
        self._measure_sizes(state, manifest)
        ready = state.newly_ready(self.rule, int(self.clock() * 1000))
        state.ready_days.update(ready)
        state.last_batch = manifest.batch_id
        for dt, tables in late.items():
            self._write_late_record(state, dt)
            for table in tables:
                # A table's first rows of a day already ready: its directory gets the marker too.
                self._touch_success(table, dt)
        self._mark_ready(state, ready)
        commit.atomic_write_json(self.paths.state_file, state.to_json())
        self.state = state
        return late, ready

    def _measure_sizes(self, state: WriterState, manifest: commit.BatchManifest) -> None:
        files = [f for f in manifest.files if f.table != DEAD_LETTER_TABLE]
        rows = sum(f.rows for f in files)
        # Parquet has a fixed overhead per file: only a batch of some size says much.
        if rows >= 1000:
            measured = sum(f.size for f in files) / rows
            previous = state.bytes_per_row
            state.bytes_per_row = measured if previous is None else 0.5 * (previous + measured)

    def _touch_success(self, table: str, dt: str) -> None:
        directory = self.catalog.table_dir(table) / f"dt={dt}"
        if directory.is_dir():
            (directory / _SUCCESS).touch()

    def _mark_ready(self, state: WriterState, days: list[str]) -> None:
        for dt in days:
            tables = sorted(t for t, dts in state.table_days.items() if dt in dts)
            for table in tables:
                self._touch_success(table, dt)
            commit.atomic_write_json(
                self.paths.ready_dir / f"{dt}.json",
                {
                    "dt": dt,
                    "writer": self.paths.name,
                    "database": self.config.database,
                    "timeZone": self.config.time_zone,
                    "readyAtMs": int(self.clock() * 1000),
                    "globalWatermarkMs": state.global_watermark(),
                    "tablesWithData": tables,
                    "tablesKnown": sorted(state.table_days),
                },
            )
            self.metrics.ready_days.labels(self.paths.name).inc()
            log.info("day %s is ready (%d tables with data)", dt, len(tables))

    def _write_late_record(self, state: WriterState, dt: str) -> None:
        counts = state.late_rows.get(dt, {})
        commit.atomic_write_json(
            self.paths.ready_dir / f"{dt}_late.json",
            {
                "dt": dt,
                "writer": self.paths.name,
                "lateRows": counts,
                "total": sum(counts.values()),
                "updatedMs": int(self.clock() * 1000),
            },
        )

    def _observe(
        self,
        manifest: commit.BatchManifest,
        late: dict[str, dict[str, int]],
        ready: list[str],
        phases: dict[str, float],
        staged_s: float,
        seconds: float,
    ) -> None:
        writer = self.paths.name
        rows = 0
        for (table, _dt), count in manifest.rows_by_table_day.items():
            if table != DEAD_LETTER_TABLE:
                self.metrics.rows.labels(writer, table).inc(count)
                rows += count
        if manifest.dead_letters:
            self.metrics.dead_letters.labels(writer).inc(manifest.dead_letters)
        for dt, tables in late.items():
            for table, count in tables.items():
                self.metrics.late_rows.labels(writer, table).inc(count)
                log.warning("%d late rows for %s on ready day %s", count, table, dt)
        self.metrics.batch_seconds.labels(writer).observe(seconds)
        self.metrics.rows_per_second.labels(writer).set(rows / seconds if seconds > 0 else 0)
        self.metrics.observe_state(self.state)
        log.info(
            "batch %d: %d rows in %d files, %d dead letters, %.1f s (staged in %.1f s; %s)%s",
            manifest.batch_id,
            rows,
            len(manifest.files),
            manifest.dead_letters,
            seconds,
            staged_s,
            ", ".join(f"{phase} {spent:.1f} s" for phase, spent in phases.items()),
            f", ready: {', '.join(ready)}" if ready else "",
        )


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


def observed_metrics(
    observation: Observation, timeout_s: float = _OBSERVATION_TIMEOUT_S
) -> dict[str, Any]:
    """``Observation.get`` with a deadline (PySpark's waits forever for metrics that Spark's
    listener bus may never deliver)."""
    jvm = SparkContext._jvm
    observed = observation._jo
    assert jvm is not None and observed is not None  # observed by a finished action
    try:
        jvm.scala.concurrent.Await.ready(
            observed.future(), jvm.scala.concurrent.duration.Duration.apply(int(timeout_s), "s")
        )
    except Py4JJavaError:
        raise CdcMirrorError(
            f"Spark did not report the batch's observed metrics within {timeout_s:.0f} s of "
            "its write; the batch is not committed and runs again."
        ) from None
    return observation.get
