"""One micro-batch into the lake, exactly once for every reader of the Hive tables.

Spark's ``foreachBatch`` calls ``BatchWriter(batch, batch_id)``. Spark records a batch's
Kafka offset range in its checkpoint *before* running it and marks it done *after* this call
returns, so after ``kill -9`` the restarted query runs the last unfinished batch again, with
the same id and the same offsets. The writer makes that repetition harmless:

1. **Stage.** The batch is parsed, routed and cut into files (``stream_writer.layout``) and
   written under ``<lake>/_stream_writer/<writer>/_staging/<batchId>-<attempt>/``, outside
   every table directory. Nothing a reader can see has changed.
2. **Commit point.** A manifest listing each staged file and its final name is written
   atomically (temporary file, fsync, rename) to ``<checkpoint>/cdc_batches/<batchId>.json``.
3. **Publish.** The files are renamed into ``<lake>/<database>.db/<table>/dt=<day>/`` (a
   rename is atomic: a reader sees a whole file or none), new ``dt`` partitions are added to
   the metastore, and the writer's state (watermarks, ready days, late rows) is replaced
   atomically in ``<checkpoint>/cdc_state.json``, tagged with the batch id.

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

import logging
import shutil
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from simple_binlog.config import StreamWriterSettings
from simple_binlog.errors import CdcMirrorError, ConfigError
from simple_binlog.routing import ShardRouter
from stream_writer import commit, layout, transform
from stream_writer.catalog import HiveCatalog
from stream_writer.metrics import WriterMetrics
from stream_writer.readiness import UNKNOWN_LAG, BatchProgress, ReadinessRule, WriterState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# Parquet bytes per byte of SimpleBinlog JSON, before a table's own files were measured.
_PARQUET_PER_JSON_BYTE = 0.35
_SUCCESS = "_SUCCESS"


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
        return self.lake_dir / "_ready" / self.name

    @property
    def state_file(self) -> Path:
        return self.checkpoint_dir / commit.STATE_FILE


@dataclass(slots=True)
class _Group:
    rows: int = 0
    min_offset: int = 2**63 - 1
    max_offset: int = -1
    payload_bytes: int = 0

    def add(self, rows: int, lo: int, hi: int, payload: int) -> None:
        self.rows += rows
        self.min_offset = min(self.min_offset, lo)
        self.max_offset = max(self.max_offset, hi)
        self.payload_bytes += payload


@dataclass(slots=True)
class _BatchPlan:
    groups: dict[tuple[str, str, str, int], _Group] = field(default_factory=dict)
    # physical (schema, table) → logical table
    routes: dict[tuple[str, str], str] = field(default_factory=dict)
    route_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    max_event: dict[tuple[str, int], int] = field(default_factory=dict)
    dead_letters: int = 0
    valid_rows: int = 0


class BatchWriter:
    def __init__(
        self,
        spark: SparkSession,
        config: StreamWriterSettings,
        paths: WriterPaths,
        router: ShardRouter,
        latest_offsets: LatestOffsets,
        metrics: WriterMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spark = spark
        self.config = config
        self.paths = paths
        self.router = router
        self.latest_offsets = latest_offsets
        self.metrics = metrics
        self.clock = clock
        self.zone = ZoneInfo(config.time_zone)
        self.rule = ReadinessRule(
            zone=self.zone,
            lateness_budget_ms=int(config.lateness_budget_s * 1000),
            pipeline_delay_ms=int(
                (config.collector_delay_s + config.kafka_delay_s + config.writer_delay_s) * 1000
            ),
        )
        self.catalog = HiveCatalog(spark, config.database, paths.lake_dir)
        self.manifests = commit.ManifestStore(paths.checkpoint_dir)
        self.state = self._load_state()
        self._lock = threading.Lock()
        self._catalog_ready = False

    # -- state ------------------------------------------------------------------------------

    def _load_state(self) -> WriterState:
        if self.paths.state_file.exists():
            return WriterState.from_json(commit.read_json(self.paths.state_file))
        return WriterState()

    # -- foreachBatch -----------------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self._lock:
            started = time.monotonic()
            if not self._catalog_ready:
                self.catalog.ensure_database()
                self._catalog_ready = True
            manifest = self.manifests.load(batch_id)
            if manifest is None:
                commit.discard_staging(self.paths.staging_root, batch_id)
                manifest = self._stage(batch, batch_id)
                self.manifests.save(manifest)
            else:
                log.info("batch %d was committed before a restart; completing it", batch_id)
            self._publish(manifest, time.monotonic() - started)
            commit.discard_staging(self.paths.staging_root, batch_id)
            self.manifests.prune(batch_id)

    def check_readiness(self) -> list[str]:
        """Mark days that turned ready while no batch ran (the clock part of the rule)."""
        with self._lock:
            ready = self.state.newly_ready(self.rule, int(self.clock() * 1000))
            if ready:
                state = WriterState.from_json(self.state.to_json())
                state.ready_days.update(ready)
                self._mark_ready(state, ready)
                state.last_batch = self.state.last_batch
                commit.atomic_write_json(self.paths.state_file, state.to_json())
                self.state = state
            return ready

    # -- stage ------------------------------------------------------------------------------

    def _stage(self, batch: DataFrame, batch_id: int) -> commit.BatchManifest:
        batch_ts = layout.batch_timestamp(datetime.fromtimestamp(self.clock(), UTC))
        full = transform.parse(batch, self.config.time_zone)
        # Cached without the raw bytes: only dead letters need them, and those are parsed
        # again from the batch (Kafka re-reads the same offsets) when a batch has any.
        parsed = full.drop("value", "key").persist()
        try:
            plan = self._plan(transform.group_stats(parsed).collect())
            attempt = f"{batch_id}-{uuid.uuid4().hex[:8]}"
            staging = self.paths.staging_root / attempt
            files: list[commit.CommittedFile] = []
            rows_by_table_day: dict[tuple[str, str], int] = defaultdict(int)
            groups = [
                layout.GroupStats(
                    t, d, topic, p, g.rows, g.min_offset, g.max_offset, g.payload_bytes
                )
                for (t, d, topic, p), g in plan.groups.items()
            ]
            default_per_row = max(
                1.0,
                _PARQUET_PER_JSON_BYTE
                * sum(g.payload_bytes for g in groups)
                / max(1, sum(g.rows for g in groups)),
            )
            file_plan = layout.plan_files(
                groups,
                batch_id,
                batch_ts,
                int(self.config.target_file_mb * 1024 * 1024),
                self.state.bytes_per_row,
                default_per_row,
            )
            valid_groups = [g for g in groups if g.table != layout.DEAD_LETTER_TABLE]
            dead_groups = [g for g in groups if g.table == layout.DEAD_LETTER_TABLE]
            if valid_groups:
                files += self._write_rows(parsed, plan, file_plan, staging / "rows", batch_id)
            if dead_groups:
                files += self._write_dead_letters(full, plan, file_plan, staging / "dead", batch_id)
            for item in files:
                rows_by_table_day[(item.table, item.dt)] += item.rows
            return commit.BatchManifest(
                batch_id=batch_id,
                staging_dir=str(staging.relative_to(self.paths.lake_dir)),
                files=files,
                progress=self._progress(batch_id, plan),
                dead_letters=plan.dead_letters,
                created_ms=int(self.clock() * 1000),
                rows_by_table_day=dict(rows_by_table_day),
            )
        finally:
            parsed.unpersist()

    def _plan(self, stats: list[Any]) -> _BatchPlan:
        plan = _BatchPlan()
        for row in stats:
            topic, partition = row["kafkaTopic"], int(row["kafkaPartition"])
            table: str | None = None
            if row["valid"]:
                physical = (row["schemaName"], row["tableName"])
                table = plan.routes.get(physical)
                if table is None and physical not in plan.route_errors:
                    try:
                        table = layout.logical_table(self.router, *physical)
                        plan.routes[physical] = table
                    except ConfigError as exc:
                        plan.route_errors[physical] = str(exc)
            if table is not None:
                key = (table, row["dt"], topic, partition)
                plan.valid_rows += row["rows"]
                event = row["maxEventMs"]
                previous = plan.max_event.get((topic, partition))
                plan.max_event[(topic, partition)] = (
                    event if previous is None else max(previous, event)
                )
            else:
                key = (layout.DEAD_LETTER_TABLE, row["kafkaDt"], topic, partition)
                plan.dead_letters += row["rows"]
            group = plan.groups.setdefault(key, _Group())
            group.add(row["rows"], row["minOffset"], row["maxOffset"], row["payloadBytes"])
        return plan

    def _assignment(
        self, file_plan: layout.FilePlan, rows: list[tuple[Any, ...]], schema: StructType
    ) -> DataFrame:
        return self.spark.createDataFrame(rows, schema)

    def _split(
        self, file_plan: layout.FilePlan, table: str, dt: str, topic: str, partition: int
    ) -> tuple[int, int, int, int]:
        lo, hi, files = file_plan.splits[(table, dt, topic, partition)]
        base = next(
            f.file_id
            for f in file_plan.files
            if f.table == table
            and f.dt == dt
            and f.name.topic == topic
            and f.name.partition == partition
            and f.name.index == 0
        )
        return lo, hi - lo + 1, files, base

    def _write_rows(
        self,
        parsed: DataFrame,
        plan: _BatchPlan,
        file_plan: layout.FilePlan,
        target: Path,
        batch_id: int,
    ) -> list[commit.CommittedFile]:
        # One assignment row per physical table × dt × partition: the join key of the rows.
        physical_by_table: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for physical, table in plan.routes.items():
            physical_by_table[table].append(physical)
        assignment: list[tuple[Any, ...]] = []
        for table, dt, topic, partition in plan.groups:
            if table == layout.DEAD_LETTER_TABLE:
                continue
            lo, span, files, base = self._split(file_plan, table, dt, topic, partition)
            for schema_name, table_name in physical_by_table[table]:
                assignment.append(
                    (schema_name, table_name, dt, topic, partition, lo, span, files, base)
                )
        schema = StructType(
            [
                StructField("schemaName", StringType()),
                StructField("tableName", StringType()),
                StructField("dt", StringType()),
                StructField("kafkaTopic", StringType()),
                StructField("kafkaPartition", IntegerType()),
                StructField("minOffset", LongType()),
                StructField("span", LongType()),
                StructField("files", LongType()),
                StructField("baseId", LongType()),
            ]
        )
        keys = ["schemaName", "tableName", "dt", "kafkaTopic", "kafkaPartition"]
        rows = transform.with_file_id(
            parsed.where(F.col("error").isNull()),
            self._assignment(file_plan, assignment, schema),
            keys,
        ).select(*[name for name, _ in transform.ROW_COLUMNS], F.col("_f").alias("fileId"))
        return self._write(rows, file_plan, target, plan.valid_rows, batch_id)

    def _write_dead_letters(
        self,
        parsed: DataFrame,
        plan: _BatchPlan,
        file_plan: layout.FilePlan,
        target: Path,
        batch_id: int,
    ) -> list[commit.CommittedFile]:
        dead = parsed.where(F.col("error").isNotNull())
        if plan.route_errors:
            unroutable = self.spark.createDataFrame(
                [(s, t, e) for (s, t), e in plan.route_errors.items()],
                "schemaName string, tableName string, routeError string",
            )
            routed_out = (
                parsed.where(F.col("error").isNull())
                .join(F.broadcast(unroutable), on=["schemaName", "tableName"], how="inner")
                .withColumn("error", F.col("routeError"))
                .drop("routeError")
            )
            dead = dead.unionByName(routed_out)
        assignment = []
        for table, dt, topic, partition in plan.groups:
            if table == layout.DEAD_LETTER_TABLE:
                lo, span, files, base = self._split(file_plan, table, dt, topic, partition)
                assignment.append((dt, topic, partition, lo, span, files, base))
        schema = StructType(
            [
                StructField("kafkaDt", StringType()),
                StructField("kafkaTopic", StringType()),
                StructField("kafkaPartition", IntegerType()),
                StructField("minOffset", LongType()),
                StructField("span", LongType()),
                StructField("files", LongType()),
                StructField("baseId", LongType()),
            ]
        )
        self._log_samples(dead)
        out = transform.with_file_id(
            dead,
            self._assignment(file_plan, assignment, schema),
            ["kafkaDt", "kafkaTopic", "kafkaPartition"],
        ).select(
            "kafkaTopic",
            "kafkaPartition",
            "kafkaOffset",
            "kafkaTimestamp",
            F.col("key").alias("kafkaKey"),
            "error",
            F.col("value").alias("raw"),
            F.col("_f").alias("fileId"),
        )
        return self._write(out, file_plan, target, plan.dead_letters, batch_id)

    def _log_samples(self, dead: DataFrame) -> None:
        samples = self.config.dead_letter_log_samples
        if samples == 0:
            return
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

    def _write(
        self,
        rows: DataFrame,
        file_plan: layout.FilePlan,
        target: Path,
        expected_rows: int,
        batch_id: int,
    ) -> list[commit.CommittedFile]:
        planned = {f.file_id: f for f in file_plan.files}
        # A file's rows come from one Kafka partition, and Spark's Kafka source reads each
        # topic partition in one task: written as they are, each planned file is produced by
        # exactly one task, without a shuffle. Should a file end up in several parts (e.g. a
        # source that splits partitions), the batch is staged again with a shuffle by file id.
        rows.write.partitionBy("fileId").parquet(str(target))
        if self._split_files(target):
            log.info("batch %d: files split across tasks; staging again with a shuffle", batch_id)
            shutil.rmtree(target)
            tasks = max(1, min(len(planned), self.spark.sparkContext.defaultParallelism * 2))
            rows.repartition(tasks, "fileId").write.partitionBy("fileId").parquet(str(target))
        counted = {
            int(r["fileId"]): int(r["count"])
            for r in self.spark.read.parquet(str(target)).groupBy("fileId").count().collect()
        }
        if sum(counted.values()) != expected_rows:
            raise CdcMirrorError(
                f"batch {batch_id} staged {sum(counted.values())} rows but {expected_rows} "
                "were planned; the batch is not committed and will be retried."
            )
        written: list[commit.CommittedFile] = []
        for file_id, count in sorted(counted.items()):
            parts = sorted((target / f"fileId={file_id}").glob("part-*.parquet"))
            if len(parts) != 1:
                raise CdcMirrorError(
                    f"batch {batch_id} staged {len(parts)} Parquet files for file {file_id}, "
                    "expected one; the batch is not committed and will be retried."
                )
            spec = planned[file_id]
            written.append(
                commit.CommittedFile(
                    staged=str(parts[0].relative_to(self.paths.lake_dir)),
                    final=str(
                        (self.catalog.root / spec.relative_path).relative_to(self.paths.lake_dir)
                    ),
                    table=spec.table,
                    dt=spec.dt,
                    rows=count,
                    size=parts[0].stat().st_size,
                )
            )
        return written

    @staticmethod
    def _split_files(target: Path) -> bool:
        return any(
            len(list(directory.glob("part-*.parquet"))) > 1 for directory in target.glob("fileId=*")
        )

    def _progress(self, batch_id: int, plan: _BatchPlan) -> list[BatchProgress]:
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
                    max_event_ms=plan.max_event.get((topic, partition)),
                )
            )
        return progress

    # -- publish ----------------------------------------------------------------------------

    def _publish(self, manifest: commit.BatchManifest, seconds: float) -> None:
        commit.complete(manifest, self.paths.lake_dir)
        days_by_table: dict[str, list[str]] = defaultdict(list)
        for table, dt in manifest.rows_by_table_day:
            days_by_table[table].append(dt)
        for table, days in sorted(days_by_table.items()):
            self.catalog.add_partitions(table, days)
        if self.state.last_batch >= manifest.batch_id:
            return  # state, markers and metrics of this batch were done before a restart
        # Work on a copy: markers and records first, the state file last, so a crash in
        # between repeats the same decisions on the replayed batch.
        state = WriterState.from_json(self.state.to_json())
        table_rows = {
            key: rows
            for key, rows in manifest.rows_by_table_day.items()
            if key[0] != layout.DEAD_LETTER_TABLE
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
        self._observe(manifest, late, ready, seconds)

    def _measure_sizes(self, state: WriterState, manifest: commit.BatchManifest) -> None:
        sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for item in manifest.files:
            sizes[item.table][0] += item.size
            sizes[item.table][1] += item.rows
        for table, (size, rows) in sizes.items():
            # Only files of a useful size say much about a table's bytes per row (Parquet
            # has a fixed overhead per file).
            if rows >= 1000:
                measured = size / rows
                previous = state.bytes_per_row.get(table)
                state.bytes_per_row[table] = (
                    measured if previous is None else 0.5 * previous + 0.5 * measured
                )

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
        seconds: float,
    ) -> None:
        writer = self.paths.name
        rows = 0
        for (table, _dt), count in manifest.rows_by_table_day.items():
            if table != layout.DEAD_LETTER_TABLE:
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
            "batch %d: %d rows in %d files, %d dead letters, %.1f s%s",
            manifest.batch_id,
            rows,
            len(manifest.files),
            manifest.dead_letters,
            seconds,
            f", ready: {', '.join(ready)}" if ready else "",
        )


def read_batch_end_offsets(checkpoint_dir: Path, batch_id: int) -> dict[tuple[str, int], int]:
    """The batch's end offsets (exclusive) from Spark's offset log, per topic partition.

    Spark writes ``<checkpoint>/offsets/<batchId>`` before running the batch: a version line,
    the batch metadata, then one JSON line per source (``{"topic": {"0": 42, ...}}``).
    """
    import json  # noqa: PLC0415

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
