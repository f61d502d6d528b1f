"""Lake writer throughput against plain Spark Structured Streaming appending the same topic
to one Iceberg table on the same storage, in the same run.

    .venv/bin/python -m bench.stream_writer_bench [--messages 5000000] [--tables 200]
        [--hot-factor 50] [--target-file-mb 64] [--max-offsets-per-trigger 1000000]
        [--storage local|s3|hdfs] [--no-steady-state] [--noop] [--latency-seconds 60]
        [--no-writer-warm-up] [--profile] [--json PATH]

Produces N SimpleBinlog messages across T tables (one table ``hot-factor`` × hotter than each
of the others) into a fresh topic, then, in one Spark session with the lake's Iceberg catalog
on the chosen storage (``--storage``: the local folder, the stack's HDFS or SeaweedFS S3):

* baseline: ``readStream.format("kafka")`` → the same JSON parse → ``writeStream`` appending
  to ONE Iceberg table (``toTable``, ``trigger(availableNow=True)``): Spark's own exactly-once
  sink, with no routing;
* measured: the stream writer (routing, ``dt``, one Iceberg commit per batch of the raw
  layer's one table for all logical tables, their views, the
  progress commit, readiness) over the same topic with ``availableNow``, twice: a first run
  that meets the tables first (their views), then (``--no-steady-state`` skips it) a second writer (another
  name, so its own progress) into the existing tables: the steady state, on which the issue's
  targets are judged.

A first baseline run, not counted, warms the JVM up; likewise a first writer run, not counted
(``--no-writer-warm-up`` skips it), over the same topic (as the baseline's warm-up) into a
database of its own: the measured first run still meets a new raw table and new views, without
the cost of loading and compiling the writer's own code, which a process pays once. (A warm-up
of a tenth of the messages left the JIT compiling the writer's paths of 1M-row batches through
the measured first run: 59 s of compiler threads in its 82 s at 5M, against 17 s in the steady
run's 56 s; writer-progress-s18.) The baseline runs again after the
writer's runs (into a second table): on a shared machine
the load drifts within a run, so each figure's baseline is the mean of the two rates (both
kept in the figure's extras). Figures of the local lake are ``stream_writer.throughput`` and
``stream_writer.throughput_first_run``; on S3 and HDFS the keys end in ``_s3`` / ``_hdfs``
(``bench.report`` runs local and S3: components ``stream_writer`` and ``stream_writer_s3``).

Prints rows/s of both, the ratio, the machine, the writer's peak memory (the JVM's and
Python's resident sets over the whole run) and the data files of the writer's tables against
the target size (Iceberg's ``files`` metadata table), and the writer's log of each batch on
stdout (its phases: data files, raw commit, progress commit).
The issue's size is 5,000,000 messages.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Producer

from bench import storages
from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, load_settings
from cdc_platform.iceberg import LakeCatalog, lake_session
from cdc_platform.kafka import ensure_topic, producer_config
from cdc_platform.lake import LOGICAL_TABLE_COLUMN, RAW_TABLE
from stream_writer import localfs


def produce(settings: Settings, topic: str, messages: int, tables: int, hot: int) -> float:
    """Weighted round robin: table 0 gets ``hot`` messages for each one of the others."""
    weights = [hot] + [1] * (tables - 1)
    cycle = [t for t, w in enumerate(weights) for _ in range(w)]
    start_ms = 1_709_251_200_000
    producer = Producer({**producer_config(settings.kafka, "bench-sw"), "linger.ms": 50})
    started = time.monotonic()
    for i in range(messages):
        table = cycle[i % len(cycle)]
        document = {
            "version": 1, "binlogOffset": 1_709_251_200_000_000 + i,
            "executeTime": start_ms + i * 10, "eventType": "INSERT",
            "schemaName": f"shop{table:03d}", "tableName": "orders", "source": "BINLOG",
            "primaryKeys": ["id"],
            "columnTypes": {"id": "bigint(20)", "user_id": "int(11)", "amount": "decimal(12,2)",
                            "status": "varchar(16)", "note": "varchar(64)"},
            "content": {"id": i, "user_id": i % 100_000, "amount": f"{i % 10_000}.{i % 100:02d}",
                        "status": "PAID", "note": f"order {i} of table {table}"},
            "position": {"serverId": 1, "file": "mariadb-bin.000001", "pos": 4 + i, "rowIndex": 0,
                         "gtid": f"0-1-{i}"},
        }
        while True:
            try:
                producer.produce(topic, key=f"shop{table:03d}.orders".encode(),
                                 value=orjson.dumps(document))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return time.monotonic() - started


def delete_topic(settings: Settings, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    from cdc_platform.kafka import admin_config
    AdminClient(admin_config(settings.kafka)).delete_topics([topic], operation_timeout=30)


def print_progress(label: str, query) -> None:
    """Each micro-batch's rows and phase durations (StreamingQueryProgress.durationMs)."""
    for progress in query.recentProgress:
        rows = progress["numInputRows"]
        if not rows:
            continue
        phases = progress["durationMs"]
        total = phases.get("triggerExecution", 0)
        detail = ", ".join(f"{k} {v / 1000:.1f}" for k, v in sorted(phases.items())
                           if k != "triggerExecution" and v >= 50)
        print(f"  {label} batch {progress['batchId']}: {rows:,} rows in {total / 1000:.1f} s "
              f"= {rows / max(total, 1) * 1000:,.0f} rows/s ({detail})", flush=True)


def print_stages(event_dir: Path, since_ms: int, label: str) -> None:
    """Spark stages completed after ``since_ms``, from the event log: name, tasks, seconds."""
    import json

    stages = []
    # Spark 4 writes a directory per application (rolling event files inside).
    for log_file in (path for path in event_dir.rglob("*") if path.is_file()):
        with log_file.open() as handle:
            for line in handle:
                if '"SparkListenerStageCompleted"' not in line:
                    continue
                info = json.loads(line)["Stage Info"]
                if info.get("Submission Time", 0) < since_ms:
                    continue
                stages.append((info["Submission Time"], info["Stage Name"], info["Number of Tasks"],
                               (info["Completion Time"] - info["Submission Time"]) / 1000))
    by_name: dict[str, list[float]] = {}
    for _start, name, _tasks, seconds in sorted(stages):
        by_name.setdefault(name.split(" at ")[0] + " at " + name.split(" at ")[-1], []).append(seconds)
    print(f"  {label} Spark stages (name: count, total s, max s):", flush=True)
    for name, times in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"    {name}: {len(times)}, {sum(times):.1f}, {max(times):.1f}", flush=True)


def run_noop(spark, settings: Settings, topic: str, out: Path, max_offsets: int,
             parse: str) -> tuple[float, int]:
    """Spark's Kafka source into the ``noop`` sink, with no parse (``none``), Spark's
    ``from_json`` (as the baseline parses) or the writer jar's parse (``jar``, as the writer
    parses): the most the source, and each parse, can deliver on this machine."""
    from stream_writer.transform import message_column
    from stream_writer.writer import register_jvm_parse

    if parse == "jar" and not register_jvm_parse(spark):
        return 0.0, 0
    frame = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
             .option("kafka.isolation.level", "read_committed")
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(max_offsets)).load())
    if parse != "none":
        frame = frame.select(message_column(parse == "jar").alias("m"),
                             "topic", "partition", "offset", "timestamp"
                             ).select("m.*", "topic", "partition", "offset", "timestamp")
    started = time.monotonic()
    query = (frame.writeStream.format("noop").option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.monotonic() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    label = {"none": "Kafka → noop", "from_json": "Kafka → from_json → noop",
             "jar": "Kafka → writer jar's parse → noop"}[parse]
    print(f"{label}: {rows:,} rows in {seconds:.1f} s = {rows / seconds:,.0f} rows/s", flush=True)
    print_progress(label, query)
    return seconds, rows


def run_baseline(spark, settings: Settings, topic: str, out: Path, max_offsets: int,
                 lake: LakeCatalog, database: str, table_name: str = "kafka_rows",
                 partitioned: str | None = None) -> tuple[float, int, str]:
    """Kafka → from_json → ONE Iceberg table with Spark's streaming Iceberg sink.

    ``partitioned``: None, an unpartitioned table (the issue's baseline), or one of
    ``CEILING_LAYOUTS``: a table partitioned as a raw layer could be (the logical table as the
    default shard rule names the bench's unsharded tables, ``dt`` the day of executeTime):
    the most a one-table writer with that layout can reach. Returns the seconds, the rows and
    the table's name."""
    from pyspark.sql import functions as F

    from stream_writer.transform import MESSAGE_SCHEMA, day_column

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
              .option("kafka.isolation.level", "read_committed")
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(max_offsets)))
    parsed = reader.load().select(
        F.from_json(F.col("value").cast("string"), MESSAGE_SCHEMA).alias("m"),
        "topic", "partition", "offset", "timestamp",
    ).select("m.*", "topic", "partition", "offset", "timestamp")
    layout = ""
    properties = "'format-version'='2'"
    if partitioned is not None:
        parsed = parsed.select(
            "*",
            F.lower(F.concat_ws("_", "schemaName", "tableName")).alias("logicalTable"),
            day_column(F.col("executeTime"), settings.stream_writer.time_zone).alias("dt"),
        )
        spec, distribution, _order = CEILING_LAYOUTS[partitioned]
        layout = f" PARTITIONED BY ({spec})"
        if distribution == "none":
            properties += (", 'write.distribution-mode'='none', "
                           "'write.spark.fanout.enabled'='true'")
        properties += (f", 'write.target-file-size-bytes'="
                       f"'{settings.stream_writer.target_file_mb * 2**20:.0f}'")
    table = lake.name(f"{database}_baseline", table_name)
    lake.create_namespace(f"{database}_baseline")
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in parsed.schema.fields)
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg{layout} "
              f"TBLPROPERTIES ({properties})")
    if partitioned is not None and CEILING_LAYOUTS[partitioned][2]:
        # Iceberg's write order: LOCALLY sorts each task's rows (no shuffle) before writing.
        spark.sql(f"ALTER TABLE {table} WRITE LOCALLY ORDERED BY "
                  f"{CEILING_LAYOUTS[partitioned][2]}")
    started = time.monotonic()
    query = (parsed.writeStream.format("iceberg").outputMode("append")
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).toTable(table))
    query.awaitTermination()
    seconds = time.monotonic() - started
    print_progress(f"baseline{'' if partitioned is None else ' partitioned ' + partitioned}",
                   query)
    rows = spark.table(table).count()
    if partitioned is not None:
        files = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
        print(f"  partitioned baseline ({partitioned}): {files:,} data files", flush=True)
    return seconds, rows, table


# The raw layouts the ceiling compares (issue 20, item 11): label → (PARTITIONED BY, Iceberg
# distribution mode, write order). ``none`` distribution is what the writer does (fanout
# writers, no shuffle): one open file per partition value a task meets.
CEILING_LAYOUTS: dict[str, tuple[str, str, str]] = {
    "table_dt_fanout": ("logicalTable, dt", "none", ""),  # the raw layer's layout 2
    "table_dt_hash": ("logicalTable, dt", "hash", ""),
    "dt_fanout": ("dt", "none", ""),  # files shared by every table, rows in arrival order
    "dt_sorted": ("dt", "none", "logicalTable"),  # shared files, each sorted by table
    "dt_bucket8_fanout": ("bucket(8, logicalTable), dt", "none", ""),  # layout 3
    "dt_bucket16_fanout": ("bucket(16, logicalTable), dt", "none", ""),
}


def table_read_cost(spark, table: str, logical_table: str) -> dict[str, float]:
    """What merge's filtered read of ONE logical table's day (``logicalTable = x AND dt = d``)
    plans from ``table``: Iceberg's scan planning (partition values, then each file's column
    bounds), the files a Spark read of it opens. Files, bytes and rows planned, against the
    rows of that logical table (rows planned / rows wanted: 1 when no other table's rows are
    read)."""
    jvm = spark.sparkContext._jvm
    day = spark.sql(f"SELECT dt, count(*) AS n FROM {table} WHERE logicalTable = "
                    f"'{logical_table}' GROUP BY dt ORDER BY n DESC LIMIT 1").first()
    java = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    condition = getattr(expressions, "and")(
        expressions.equal("logicalTable", logical_table),
        expressions.equal("dt", str(day["dt"])))
    tasks = java.newScan().filter(condition).planFiles()
    files = size = rows = 0
    try:
        iterator = tasks.iterator()
        while iterator.hasNext():
            data = iterator.next().file()
            files += 1
            size += data.fileSizeInBytes()
            rows += data.recordCount()
    finally:
        tasks.close()
    total = spark.sql(f"SELECT count(*), sum(file_size_in_bytes) FROM {table}.files").first()
    return {"files read": files, "bytes read": size, "rows read": rows,
            "rows wanted": int(day["n"]), "files in table": int(total[0]),
            "bytes in table": int(total[1] or 0)}


def ceiling(spark, settings: Settings, args, topic: str, work: Path, database: str,
            lake: LakeCatalog) -> list[Figure]:
    """The one-table ceiling: the same sink into one table of each of ``CEILING_LAYOUTS``
    against the unpartitioned baseline, in one run; and for each layout what merge's read of
    one logical table's day plans from it (the hot table and a cold one), against layout 2's
    (logicalTable, dt). The unpartitioned run is repeated between the layouts' runs and each
    layout is compared with the mean of the runs just before and after it: on a shared
    machine the load drifts within minutes (one run's baseline after the layouts came out 4.5x
    slower than the one before them)."""
    run_baseline(spark, settings, topic, work / "baseline-warm-up", args.max_offsets_per_trigger,
                 lake, database, "kafka_rows_warm_up")
    rates: dict[str, float] = {}
    tables: dict[str, str] = {}
    runs: list[tuple[str, str | None]] = [("plain0", None)]
    for index, name in enumerate(CEILING_LAYOUTS, start=1):
        runs += [(name, name), (f"plain{index}", None)]
    for label, partitioned in runs:
        seconds, rows, tables[label] = run_baseline(
            spark, settings, topic, work / f"ceiling-{label}", args.max_offsets_per_trigger,
            lake, database, f"kafka_rows_{label}", partitioned)
        assert rows == args.messages, f"{rows} rows for {args.messages} messages"
        rates[label] = rows / seconds
        print(f"ceiling {label}: {rows:,} rows in {seconds:.1f} s = {rates[label]:,.0f} rows/s",
              flush=True)
    where = storages.storage_label(args.storage)
    figures = []
    # The hot table (table 0) and a cold one (the last): how a merge of either reads.
    probes = {"hot": "shop000_orders", "cold": f"shop{args.tables - 1:03d}_orders"}
    reads = {label: {probe: table_read_cost(spark, tables[label], name)
                     for probe, name in probes.items()}
             for label in CEILING_LAYOUTS}
    layout2 = reads["table_dt_fanout"]
    for index, (label, (spec, distribution, order)) in enumerate(CEILING_LAYOUTS.items(),
                                                                  start=1):
        before, after = rates[f"plain{index - 1}"], rates[f"plain{index}"]
        plain = (before + after) / 2
        print(f"ratio partitioned ({label}) / unpartitioned (mean of {before:,.0f} before and "
              f"{after:,.0f} after): {rates[label] / plain:.2f}", flush=True)
        for probe, cost in reads[label].items():
            print(f"  merge read of the {probe} table's day from {label}: "
                  f"{cost['files read']:.0f} of {cost['files in table']:.0f} files, "
                  f"{cost['bytes read']:,.0f} of {cost['bytes in table']:,.0f} bytes, "
                  f"{cost['rows read']:,.0f} rows for {cost['rows wanted']:,.0f} wanted "
                  f"(layout 2: {layout2[probe]['files read']:.0f} files, "
                  f"{layout2[probe]['bytes read']:,.0f} bytes)", flush=True)
        how = {"none": "no shuffle (fanout)", "hash": "hash distribution"}[distribution]
        sort = f", each task's rows sorted by {order}" if order else ""
        extra = {"baseline before rows/s": before, "baseline after rows/s": after}
        for probe, cost in reads[label].items():
            extra |= {f"{probe} {key}": value for key, value in cost.items()}
        figures.append(Figure(
            figure_key(f"one_table_ceiling_{label}", args.storage),
            f"{args.messages:,} messages over {args.tables} tables into ONE Iceberg table "
            f"partitioned by ({spec}), Spark's sink, {how}{sort}, {where}",
            rates[label], "rows/s", plain,
            f"plain Spark Kafka → Iceberg writeStream (one unpartitioned table), {where}, mean "
            "of the runs just before and after",
            extra=extra))
        if not spec.startswith("logicalTable"):  # layout 2's partitions: its own read
            for probe in probes:
                figures.append(Figure(
                    figure_key(f"one_table_read_{probe}_{label}", args.storage),
                    f"bytes a merge's read of the {probe} table's day plans from the table "
                    f"partitioned by ({spec}){sort}, {where}",
                    reads[label][probe]["bytes read"], "bytes",
                    layout2[probe]["bytes read"],
                    "the same read from the table partitioned by (logicalTable, dt) (layout 2)",
                    higher_is_better=False,
                    extra={**reads[label][probe],
                           "files read (logicalTable, dt)": layout2[probe]["files read"]}))
    return figures


def run_writer(spark, settings: Settings, topic: str, name: str,
               lake: LakeCatalog, database: str | None = None) -> tuple[float, object]:
    from stream_writer.job import KafkaLatestOffsets, plan_run, start_query
    from stream_writer.metrics import WriterMetrics
    from stream_writer.writer import BatchWriter

    run = plan_run(settings, [], [topic], name)
    latest = KafkaLatestOffsets(settings, name)
    config = settings.stream_writer
    if database is not None:
        config = config.model_copy(update={"database": database})
    writer = BatchWriter(spark, config, run.paths, lake,
                         settings.shard_rules, latest, WriterMetrics(name))
    writer.start()
    started = time.monotonic()
    query = start_query(spark, settings, run, writer, True, latest.partitions)
    query.awaitTermination()
    seconds = time.monotonic() - started
    # The views of new logical tables are made after the commits by a thread of their own:
    # counted in the writer's time (a first run's views are part of creating its tables).
    writer.wait_for_views()
    views_s = time.monotonic() - started - seconds
    print(f"  views made {views_s:.1f} s after the last batch", flush=True)
    seconds += views_s
    latest.close()
    print_progress("stream writer", query)
    return seconds, writer


def file_report(spark, lake: LakeCatalog, database: str, target_bytes: int,
                hot_table: str) -> dict:
    """The data files of the writer's raw table (Iceberg's ``files`` metadata table)."""
    # The column's bounds, not the partition: a file holds the hot table's rows whatever the
    # partitioning (a bucket of tables, or a table of its own).
    bounds = f"readable_metrics.{LOGICAL_TABLE_COLUMN}"
    found = spark.sql(
        f"SELECT {bounds}.lower_bound, {bounds}.upper_bound, file_size_in_bytes "
        f"FROM {lake.name(database, RAW_TABLE)}.files").collect()
    sizes = sorted(int(r[2]) for r in found)
    hot = [int(r[2]) for r in found if r[0] <= hot_table <= r[1]]
    return {
        "files": len(sizes),
        "above 2× target": sum(1 for size in sizes if size > 2 * target_bytes),
        "below 1/20 target": sum(1 for size in sizes if size < target_bytes / 20),
        "min/median/max MB": (round(sizes[0] / 2**20, 2), round(sizes[len(sizes) // 2] / 2**20, 2),
                              round(sizes[-1] / 2**20, 2)) if sizes else None,
        f"hot table {hot_table} files": len(hot),
        "hot MB (min/max)": (round(min(hot) / 2**20, 2), round(max(hot) / 2**20, 2)) if hot else None,
    }


def measure_latency(spark, settings: Settings, lake: LakeCatalog, rate: int,
                    seconds: int) -> Figure:
    """Kafka → queryable delay at ``rate`` msg/s with the configured (default) trigger.

    A row is queryable once the Iceberg commit that added its data file is; delay = that
    commit's time (the ``snapshots`` metadata table) − the message's Kafka timestamp.
    """
    import threading

    from pyspark.sql import functions as F

    from stream_writer.job import KafkaLatestOffsets, plan_run, start_query
    from stream_writer.metrics import WriterMetrics
    from stream_writer.writer import BatchWriter

    topic = f"cdc.bench.swlat_{uuid.uuid4().hex[:8]}"
    ensure_topic(settings.kafka, topic, partitions=6)
    name = f"bench-lat-{uuid.uuid4().hex[:6]}"
    run = plan_run(settings, [], [topic], name)
    latest = KafkaLatestOffsets(settings, name)
    writer = BatchWriter(spark, settings.stream_writer, run.paths, lake,
                         settings.shard_rules, latest, WriterMetrics(name))
    writer.start()
    query = start_query(spark, settings, run, writer, False, latest.partitions)
    producer = Producer({**producer_config(settings.kafka, "bench-sw-lat"), "linger.ms": 5})
    total = rate * seconds
    started = time.monotonic()
    for i in range(total):
        document = {"version": 1, "binlogOffset": 1_800_000_000_000_000 + i,
                    "executeTime": int(time.time() * 1000), "eventType": "INSERT",
                    "schemaName": "lat", "tableName": "orders", "source": "BINLOG",
                    "primaryKeys": ["id"], "columnTypes": {"id": "bigint(20)"}, "content": {"id": i}}
        producer.produce(topic, key=b"lat.orders", value=orjson.dumps(document))
        if i % 500 == 0:
            producer.poll(0)
            ahead = i / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # rate limiting the producer, not synchronisation
    producer.flush(60)
    print(f"latency run: produced {total:,} messages at {total / (time.monotonic() - started):,.0f} msg/s",
          flush=True)
    done = threading.Event()
    deadline = time.monotonic() + 600
    while not done.is_set() and time.monotonic() < deadline:
        written = sum(writer.state.next_offsets().values())
        if written >= total:  # non-transactional: offsets == messages
            done.set()
        else:
            query.awaitTermination(1)
    query.stop()
    latest.close()
    database = settings.stream_writer.database
    table = lake.name(database, RAW_TABLE)
    entries = spark.sql(f"SELECT data_file.file_path AS file, snapshot_id FROM {table}.entries")
    snapshots = spark.sql(f"SELECT snapshot_id, committed_at FROM {table}.snapshots")
    rows = spark.table(table).where(f"{LOGICAL_TABLE_COLUMN} = 'lat_orders'").select(
        "kafkaTimestamp", F.col("_file").alias("file"))
    delays = rows.join(entries, "file").join(snapshots, "snapshot_id").select(
        ((F.unix_millis("committed_at") - F.unix_millis("kafkaTimestamp")) / 1000).alias("delay"))
    p50, p99 = delays.select(F.percentile_approx("delay", [0.5, 0.99])).first()[0]
    delete_topic(settings, topic)
    print(f"Kafka → queryable delay at {rate:,} msg/s, trigger {settings.stream_writer.trigger_interval_s:.0f} s: "
          f"p50 {p50:.1f} s, p99 {p99:.1f} s over {delays.count():,} rows", flush=True)
    return Figure("stream_writer.latency", f"Kafka → queryable at {rate:,} msg/s, trigger "
                  f"{settings.stream_writer.trigger_interval_s:.0f} s", p99 * 1000, "ms",
                  higher_is_better=False, extra={"p50": p50 * 1000, "p99": p99 * 1000})


def count_lake_rows(spark, lake: LakeCatalog, database: str) -> int:
    return spark.table(lake.name(database, RAW_TABLE)).count()


def peak_memory_mb() -> dict[str, float]:
    """Peak resident set of this process (Python) and of its children (the Spark JVM)."""
    import resource

    return {
        "python peak RSS MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "JVM peak RSS MB": _jvm_peak_rss_mb(),
    }


def _jvm_peak_rss_mb() -> float:
    """VmHWM of the Spark JVM (a child of this process, still running)."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(os.getpid()) and "java" in fields.get("Name", ""):
            return int(fields.get("VmHWM", "0 kB").split()[0]) / 1024
    return 0.0


def throughput(spark, settings: Settings, args, topic: str, work: Path, database: str,
               lake: LakeCatalog) -> list[Figure]:
    events = work / "eventlog"
    if args.noop:
        for parse in ("none", "from_json", "jar"):
            run_noop(spark, settings, topic, work / f"noop-{parse}", args.max_offsets_per_trigger,
                     parse)
    # A first, discarded baseline run: the session's first Kafka → Iceberg job pays the JVM's
    # warm-up (class loading, JIT, the Kafka source's first connections), and without it the
    # "before" baseline came out 2-3x slower than the "after" one in the same run.
    warm_s, warm_rows, _ = run_baseline(spark, settings, topic, work / "baseline-warm-up",
                                     args.max_offsets_per_trigger, lake, database,
                                     "kafka_rows_warm_up")
    print(f"baseline warm-up (not counted): {warm_rows:,} rows in {warm_s:.1f} s", flush=True)
    since = int(time.time() * 1000)
    base_s, base_rows, _ = run_baseline(spark, settings, topic, work / "baseline",
                                     args.max_offsets_per_trigger, lake, database)
    print(f"baseline (plain writeStream into one Iceberg table): {base_rows:,} rows in "
          f"{base_s:.1f} s = {base_rows / base_s:,.0f} rows/s", flush=True)
    if args.profile:
        print_stages(events, since, "baseline")
    if args.writer_warm_up:
        # The writer's warm-up, as the baseline had its own: the session's first writer job
        # pays for loading and compiling the writer's own code (its Java batch write, the
        # routing), a cost of starting a process, not of meeting new tables. It writes the
        # same tables' names into a database of its own, so the measured run still meets a
        # new raw table and 200 new views.
        warm_s, _ = run_writer(spark, settings, topic, f"bench-{uuid.uuid4().hex[:6]}",
                               lake, database=f"{database}_warm")
        print(f"stream writer warm-up (not counted; the same messages into "
              f"{database}_warm): {warm_s:.1f} s", flush=True)
    since = int(time.time() * 1000)
    ours_s, _first = run_writer(spark, settings, topic, f"bench-{uuid.uuid4().hex[:6]}", lake)
    total = count_lake_rows(spark, lake, database)
    print(f"stream writer, first run (meets the {args.tables} tables: their views): {total:,} rows in "
          f"{ours_s:.1f} s = {total / ours_s:,.0f} rows/s", flush=True)
    if args.profile:
        print_stages(events, since, "stream writer")
    print(f"ratio stream writer (first run) / baseline: {(total / ours_s) / (base_rows / base_s):.2f}")
    assert total == args.messages, f"{total} rows in the lake for {args.messages} messages"
    where = storages.storage_label(args.storage)
    figures = [Figure(figure_key("throughput_first_run", args.storage), f"{total:,} messages over "
                      f"{args.tables} tables (one {args.hot_factor}× hotter), tables new to the "
                      f"lake (their views made by the run), {where}",
                      total / ours_s, "rows/s", base_rows / base_s,
                      f"plain Spark Kafka → Iceberg writeStream (one table), {where}")]
    if args.steady_state:
        # A second writer (its own name, so its own progress) over the same topic into the
        # same tables, which now exist: a table's creation is done once in its lifetime.
        since = int(time.time() * 1000)
        steady_s, _writer = run_writer(spark, settings, topic, f"bench-{uuid.uuid4().hex[:6]}",
                                       lake)
        steady_total = count_lake_rows(spark, lake, database) - total
        print(f"stream writer, steady state (tables exist): {steady_total:,} rows in "
              f"{steady_s:.1f} s = {steady_total / steady_s:,.0f} rows/s", flush=True)
        if args.profile:
            print_stages(events, since, "stream writer (steady state)")
        print(f"ratio stream writer (steady state) / baseline: "
              f"{(steady_total / steady_s) / (base_rows / base_s):.2f}")
        assert steady_total == args.messages, f"{steady_total} rows for {args.messages} messages"
        figures.append(Figure(figure_key("throughput", args.storage), f"{steady_total:,} "
                              f"messages over {args.tables} tables (one {args.hot_factor}× "
                              f"hotter), tables exist, {where}",
                              steady_total / steady_s, "rows/s", base_rows / base_s,
                              f"plain Spark Kafka → Iceberg writeStream (one table), {where}"))
    # The baseline again after the writer's runs: on a shared machine the load drifts during
    # a run, so the baseline is the mean of its rates before and after (both printed).
    after_s, after_rows, _ = run_baseline(spark, settings, topic, work / "baseline-after",
                                       args.max_offsets_per_trigger, lake, database,
                                       "kafka_rows_after")
    rates = (base_rows / base_s, after_rows / after_s)
    print(f"baseline after the writer: {after_rows:,} rows in {after_s:.1f} s = "
          f"{rates[1]:,.0f} rows/s (before: {rates[0]:,.0f}); baseline used: the mean "
          f"{sum(rates) / 2:,.0f} rows/s", flush=True)
    figures = [
        Figure(f.key, f.label, f.value, f.unit, sum(rates) / 2,
               f"{f.baseline_label}, mean of a run before and one after the writer's",
               extra={**f.extra, "baseline before rows/s": rates[0],
                      "baseline after rows/s": rates[1]})
        for f in figures
    ]
    for f in figures:
        print(f"ratio {f.key} / mean baseline: {f.value / (sum(rates) / 2):.2f}", flush=True)
    report = file_report(spark, lake, database, int(args.target_file_mb * 2**20), "shop000_orders")
    for key, value in report.items():
        print(f"  {key}: {value}")
    memory = peak_memory_mb()
    for key, value in memory.items():
        print(f"  {key}: {value:,.0f}")
    # The read side of the raw table's layout: what a merge's read of the hot table's day and
    # of a cold one's opens (a file holds its bucket's tables), in rows read per row wanted.
    reads = {}
    for probe, name in (("hot", "shop000_orders"), ("cold", f"shop{args.tables - 1:03d}_orders")):
        cost = table_read_cost(spark, lake.name(database, RAW_TABLE), name)
        print(f"  merge read of the {probe} table's day: {cost['files read']:.0f} of "
              f"{cost['files in table']:.0f} files, {cost['rows read']:,.0f} rows read for "
              f"{cost['rows wanted']:,.0f} wanted", flush=True)
        reads |= {f"{probe} read files": cost["files read"],
                  f"{probe} read rows": cost["rows read"],
                  f"{probe} read rows wanted": cost["rows wanted"]}
    # The peak resident sets cover the whole run (first run and steady state alike).
    last = figures[-1]
    figures[-1] = Figure(last.key, last.label, last.value, last.unit, last.baseline,
                         last.baseline_label,
                         extra={**last.extra, "files": report["files"],
                                "files above 2× target": report["above 2× target"], **memory,
                                **reads})
    return figures


def figure_key(name: str, storage: str) -> str:
    return storages.figure_key("stream_writer", name, storage)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="stream writer vs plain Spark Kafka → Iceberg")
    parser.add_argument("--storage", choices=storages.STORAGES, default="local",
                        help="where the lake is: a local folder, the stack's SeaweedFS or HDFS")
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--hot-factor", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--target-file-mb", type=float, default=64.0)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=int, default=0,
                        help="also measure Kafka → queryable delay for this long (0: skip)")
    parser.add_argument("--latency-rate", type=int, default=5_000)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--steady-state", action=argparse.BooleanOptionalAction, default=True,
                        help="after the first run (which meets the tables first), a second writer over "
                             "the same topic into the existing tables")
    parser.add_argument("--noop", action="store_true",
                        help="first measure Kafka → noop sink: no parse, from_json, the writer jar's parse")
    parser.add_argument("--writer-warm-up", action=argparse.BooleanOptionalAction, default=True,
                        help="warm the writer up on the same topic into a database of its own "
                             "before the first run, as the baseline is (not counted)")
    parser.add_argument("--ceiling", action="store_true",
                        help="instead of the writer: the baseline into one table partitioned by "
                             "each of CEILING_LAYOUTS against the unpartitioned one")
    parser.add_argument("--profile", action="store_true",
                        help="Spark event log on: print the Spark stages of each run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    return parser.parse_args()


def make_topic(settings: Settings, args) -> str:
    """The measured topic (the warm-up runs read it too)."""
    topic = f"cdc.bench.sw_{uuid.uuid4().hex[:8]}"
    ensure_topic(settings.kafka, topic, partitions=args.partitions)
    print(f"producing {args.messages:,} messages over {args.tables} tables "
          f"(one {args.hot_factor}× hotter), {args.partitions} partitions …", flush=True)
    seconds = produce(settings, topic, args.messages, args.tables, args.hot_factor)
    print(f"produced in {seconds:.1f} s ({args.messages / seconds:,.0f} msg/s)", flush=True)
    return topic


def main() -> None:
    args = parse_args()
    import logging

    # On stdout, so the writer's per-batch phases (data files, new tables, table commits,
    # progress commit) are in the output bench.report keeps.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s",
                        stream=sys.stdout)
    logging.getLogger("stream_writer").setLevel(logging.INFO)

    work = Path(tempfile.mkdtemp(prefix="bench-sw-"))
    database = f"bench_sw_{uuid.uuid4().hex[:6]}"
    os.environ["CDC_MIRROR_SPARK__LAKE_DIR"] = str(work / "lake")
    os.environ["CDC_MIRROR_LAKE__LOCATION"] = storages.lake_location(args.storage, work, database)
    os.environ["CDC_MIRROR_STREAM_WRITER__DATABASE"] = database
    os.environ["CDC_MIRROR_STREAM_WRITER__TARGET_FILE_MB"] = str(args.target_file_mb)
    os.environ["CDC_MIRROR_STREAM_WRITER__MAX_OFFSETS_PER_TRIGGER"] = str(args.max_offsets_per_trigger)
    os.environ["CDC_MIRROR_STREAM_WRITER__METRICS_PORT"] = "0"
    settings = load_settings()
    print(f"machine: {describe_machine()}")
    topic = None
    spark = None
    try:
        if not args.skip_throughput:
            topic = make_topic(settings, args)
        conf = {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "3g"}
        if args.profile:
            (work / "eventlog").mkdir(parents=True, exist_ok=True)
            conf |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(work / "eventlog"),
                     "spark.eventLog.compress": "false"}
        # The writer's session settings (java.nio local filesystem), so the baseline gets them too.
        conf |= localfs.session_conf_for(settings.stack.home.resolve() / "jars" / "spark")
        spark = lake_session(settings, "bench-stream-writer", conf)
        lake = LakeCatalog.open(spark, settings)
        figures: list[Figure] = []
        if topic is not None and args.ceiling:
            figures += ceiling(spark, settings, args, topic, work, database, lake)
        elif topic is not None:
            figures += throughput(spark, settings, args, topic, work, database, lake)
        if args.latency_seconds:
            figures.append(measure_latency(spark, settings, lake, args.latency_rate,
                                           args.latency_seconds))
        write_figures(args.json, "stream_writer", figures)
        for namespace in (database, f"{database}_baseline", f"{database}_warm"):
            if spark.catalog.databaseExists(f"{lake.catalog}.{namespace}"):
                lake.drop_namespace(namespace)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if topic is not None:
            delete_topic(settings, topic)


if __name__ == "__main__":
    main()
