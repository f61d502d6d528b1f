"""Lake writer throughput against a plain Spark Kafka → Parquet stream, in the same run.

    .venv/bin/python -m bench.stream_writer_bench [--messages 5000000] [--tables 200]
        [--hot-factor 50] [--target-file-mb 64] [--max-offsets-per-trigger 1000000]
        [--no-steady-state] [--noop] [--latency-seconds 60] [--profile] [--json PATH]

Produces N SimpleBinlog messages across T tables (one table ``hot-factor`` × hotter than each
of the others) into a fresh topic, then, in one Spark session:

* baseline: ``readStream.format("kafka")`` → the same JSON parse → ``writeStream.parquet``
  with no partitioning logic (``trigger(availableNow=True)``);
* measured: the stream writer (routing, ``dt``, file plan, staging, manifest, renames, Hive
  partitions, readiness state) over the same topic with ``availableNow``, twice: a first run
  that creates the tables, then (``--no-steady-state`` skips it) a second writer on a fresh
  checkpoint into the existing tables, told the partitions the first registered (as its state
  tells a restarted writer): the steady state, on which the issue's targets are judged.

All in one session with the writer's settings (the java.nio local filesystem of
``stream_writer.localfs``), so the baseline gets them too. The baseline parses with Spark's
``from_json``, the plain way; the writer with its jar's one-pass parse (``--noop`` prints what
each parse costs alone). First it prints the cost of
creating a file through Hadoop's local filesystems and the java.nio ones.

Prints rows/s of both, the ratio, the machine, and the file-size check: files of the hot
table, and every file against the target (above 2× or below 1/20 of it, not counting the last
file of a table's partition in a batch). The issue's size is 5,000,000 messages.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Producer

from bench.figures import Figure, write_figures
from bench.machine import describe as describe_machine
from cdc_platform.config import Settings, load_settings
from cdc_platform.kafka import ensure_topic, producer_config
from cdc_platform.spark import build_session
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


def run_baseline(spark, settings: Settings, topic: str, out: Path, max_offsets: int) -> tuple[float, int]:
    from pyspark.sql import functions as F

    from stream_writer.transform import MESSAGE_SCHEMA

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
              .option("kafka.isolation.level", "read_committed")
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(max_offsets)))
    parsed = reader.load().select(
        F.from_json(F.col("value").cast("string"), MESSAGE_SCHEMA).alias("m"),
        "topic", "partition", "offset", "timestamp",
    ).select("m.*", "topic", "partition", "offset", "timestamp")
    started = time.monotonic()
    query = (parsed.writeStream.format("parquet").option("path", str(out / "data"))
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.monotonic() - started
    print_progress("baseline", query)
    rows = spark.read.parquet(str(out / "data")).count()
    return seconds, rows


def run_writer(spark, settings: Settings, topic: str, name: str,
               registered: dict[str, set[str]] | None = None) -> tuple[float, object]:
    """``registered``: partitions to tell the writer's catalog about, as a writer's state does
    after a restart (the steady state: no metastore call for what exists)."""
    from stream_writer.job import KafkaLatestOffsets, plan_run, start_query
    from stream_writer.metrics import WriterMetrics
    from stream_writer.writer import BatchWriter

    run = plan_run(settings, [], [topic], name)
    latest = KafkaLatestOffsets(settings, name)
    writer = BatchWriter(spark, settings.stream_writer, run.paths,
                         settings.shard_rules, latest, WriterMetrics(name))
    if registered:
        writer.catalog.remember(registered)
    started = time.monotonic()
    query = start_query(spark, settings, run, writer, available_now=True)
    query.awaitTermination()
    writer.close()  # the last batch's publication
    seconds = time.monotonic() - started
    latest.close()
    print_progress("stream writer", query)
    return seconds, writer


def file_report(lake: Path, database: str, target_bytes: int, hot_table: str) -> dict:
    from stream_writer.layout import FileName

    root = lake / f"{database}.db"
    files = [p for p in root.glob("*/dt=*/*.parquet")]
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for path in files:
        name = FileName.parse(path.name)
        key = (path.parent.parent.name, path.parent.name, name.batch_id, name.partition)
        groups.setdefault(key, []).append((name.index, path.stat().st_size))
    too_big = too_small = small_last = 0
    for members in groups.values():
        members.sort()
        for index, size in members:
            last = index == members[-1][0]
            if size > 2 * target_bytes:
                too_big += 1
            elif size < target_bytes / 20:
                if last:
                    small_last += 1
                else:
                    too_small += 1
    sizes = sorted(p.stat().st_size for p in files)
    hot = [p.stat().st_size for p in files if p.parent.parent.name == hot_table]
    return {
        "files": len(files), "groups (table×dt×partition×batch)": len(groups),
        "above 2× target": too_big, "below 1/20 target (not last of group)": too_small,
        "below 1/20 target, last (often only) file of its group": small_last,
        "min/median/max MB": (round(sizes[0] / 2**20, 2), round(sizes[len(sizes) // 2] / 2**20, 2),
                              round(sizes[-1] / 2**20, 2)) if sizes else None,
        f"hot table {hot_table} files": len(hot),
        "hot MB (min/max)": (round(min(hot) / 2**20, 2), round(max(hot) / 2**20, 2)) if hot else None,
    }


def measure_latency(spark, settings: Settings, rate: int, seconds: int) -> Figure:
    """Kafka → queryable delay at ``rate`` msg/s with the configured (default) trigger.

    A message is queryable when its batch is published (files renamed into place, new
    partitions in the metastore); delay = that moment − the message's Kafka timestamp.
    """
    import json
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
    published_ms: dict[int, int] = {}
    writer = BatchWriter(spark, settings.stream_writer, run.paths,
                         settings.shard_rules, latest, WriterMetrics(name),
                         on_published=lambda m: published_ms.setdefault(m.batch_id, int(time.time() * 1000)))
    query = start_query(spark, settings, run, writer, available_now=False)
    producer = Producer({**producer_config(settings.kafka, "bench-sw-lat"), "linger.ms": 5})
    total = rate * seconds
    started = time.monotonic()
    for i in range(total):
        document = {"version": 1, "binlogOffset": 1_800_000_000_000_000 + i,
                    "executeTime": int(time.time() * 1000), "eventType": "INSERT",
                    "schemaName": f"lat_{i % 20:02d}", "tableName": "orders", "source": "BINLOG",
                    "primaryKeys": ["id"], "columnTypes": {"id": "bigint(20)"}, "content": {"id": i}}
        producer.produce(topic, key=f"lat_{i % 20:02d}.orders".encode(), value=orjson.dumps(document))
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
        with writer._lock:  # the writer's own state, read between batches
            state = writer.state
        written = sum(p.next_offset for p in state.partitions.values())
        if written >= total:  # non-transactional: offsets == messages
            done.set()
        else:
            query.awaitTermination(1)
    query.stop()
    writer.close()
    latest.close()
    committed = {}
    for path in (run.paths.checkpoint_dir / "cdc_batches").glob("*.json"):
        manifest = json.loads(path.read_text())
        for item in manifest["files"]:
            committed[item["final"].rsplit("/", 1)[-1]] = published_ms[manifest["batchId"]]
    times = spark.createDataFrame(list(committed.items()), "file string, committedMs long")
    rows = (spark.read.parquet(*[str(p) for p in (settings.lake_dir / f"{settings.stream_writer.database}.db").glob("lat_orders")])
            .withColumn("file", F.element_at(F.split(F.input_file_name(), "/"), -1)))
    delays = rows.join(F.broadcast(times), "file").select(
        ((F.col("committedMs") - F.unix_millis(F.col("kafkaTimestamp"))) / 1000).alias("delay"))
    p50, p99 = delays.select(F.percentile_approx("delay", [0.5, 0.99])).first()[0]
    delete_topic(settings, topic)
    print(f"Kafka → queryable delay at {rate:,} msg/s, trigger {settings.stream_writer.trigger_interval_s:.0f} s: "
          f"p50 {p50:.1f} s, p99 {p99:.1f} s over {delays.count():,} rows", flush=True)
    return Figure("stream_writer.latency", f"Kafka → queryable at {rate:,} msg/s, trigger "
                  f"{settings.stream_writer.trigger_interval_s:.0f} s", p99 * 1000, "ms",
                  higher_is_better=False, extra={"p50": p50 * 1000, "p99": p99 * 1000})


def file_create_cost(spark, work: Path, files: int = 200) -> None:
    """Milliseconds to create one file in a directory of its own, through Hadoop's local
    filesystems with and without the java.nio permissions (``stream_writer.localfs``)."""
    jvm = spark._jvm
    for impl in ("org.apache.hadoop.fs.LocalFileSystem", localfs.HADOOP_RAW_LOCAL_FS,
                 localfs.NIO_LOCAL_FS, localfs.NIO_RAW_LOCAL_FS):
        conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        conf.set("fs.file.impl", impl)
        conf.set("fs.file.impl.disable.cache", "true")
        root = jvm.org.apache.hadoop.fs.Path((work / "filecost" / impl).as_uri())
        fs = root.getFileSystem(conf)
        started = time.perf_counter()
        for i in range(files):
            fs.create(jvm.org.apache.hadoop.fs.Path(root, f"d{i}/f{i}.parquet")).close()
        seconds = time.perf_counter() - started
        print(f"file create (+ its directory) through {impl.rsplit('.', 1)[-1]}: "
              f"{seconds / files * 1000:.1f} ms a file", flush=True)


def count_lake_rows(spark, database: str) -> int:
    total = 0
    for table in spark.sql(f"SHOW TABLES IN {database}").collect():
        name = f"{database}.{table['tableName']}"
        spark.catalog.refreshTable(name)  # the session caches a table's file listing
        total += spark.table(name).count()
    return total


def throughput(spark, settings: Settings, args, topic: str, work: Path, database: str) -> list[Figure]:
    events = work / "eventlog"
    file_create_cost(spark, work)
    if args.noop:
        for parse in ("none", "from_json", "jar"):
            run_noop(spark, settings, topic, work / f"noop-{parse}", args.max_offsets_per_trigger,
                     parse)
    since = int(time.time() * 1000)
    base_s, base_rows = run_baseline(spark, settings, topic, work / "baseline",
                                     args.max_offsets_per_trigger)
    print(f"baseline (plain writeStream parquet): {base_rows:,} rows in {base_s:.1f} s = "
          f"{base_rows / base_s:,.0f} rows/s", flush=True)
    if args.profile:
        print_stages(events, since, "baseline")
    since = int(time.time() * 1000)
    ours_s, first_writer = run_writer(spark, settings, topic, f"bench-{uuid.uuid4().hex[:6]}")
    total = count_lake_rows(spark, database)
    print(f"stream writer, first run (creates the {args.tables} tables): {total:,} rows in "
          f"{ours_s:.1f} s = {total / ours_s:,.0f} rows/s", flush=True)
    if args.profile:
        print_stages(events, since, "stream writer")
    print(f"ratio stream writer (first run) / baseline: {(total / ours_s) / (base_rows / base_s):.2f}")
    report = file_report(settings.lake_dir, database, int(args.target_file_mb * 2**20),
                         "shop000_orders")
    for key, value in report.items():
        print(f"  {key}: {value}")
    assert total == args.messages, f"{total} rows in the lake for {args.messages} messages"
    figures = [Figure("stream_writer.throughput_first_run", f"{total:,} messages over {args.tables} "
                      f"tables (one {args.hot_factor}× hotter), tables created by the run",
                      total / ours_s, "rows/s", base_rows / base_s,
                      "plain Spark Kafka → Parquet writeStream",
                      extra={"files": report["files"], "files above 2× target": report["above 2× target"],
                             "files below 1/20 target (not last)":
                                 report["below 1/20 target (not last of group)"]})]
    if args.steady_state:
        # A second writer (fresh checkpoint) over the same topic into the same tables, which
        # now exist with their partitions, told what the first one registered (as a writer's
        # state tells it after a restart): the metastore work of a table's lifetime is done,
        # as for a writer that has run for a while. Its rows are copies of the first run's.
        since = int(time.time() * 1000)
        steady_s, _writer = run_writer(spark, settings, topic, f"bench-{uuid.uuid4().hex[:6]}",
                                       registered=first_writer.state.table_days)
        steady_total = count_lake_rows(spark, database) - total
        print(f"stream writer, steady state (tables exist): {steady_total:,} rows in "
              f"{steady_s:.1f} s = {steady_total / steady_s:,.0f} rows/s", flush=True)
        if args.profile:
            print_stages(events, since, "stream writer (steady state)")
        print(f"ratio stream writer (steady state) / baseline: "
              f"{(steady_total / steady_s) / (base_rows / base_s):.2f}")
        assert steady_total == args.messages, f"{steady_total} rows for {args.messages} messages"
        figures.append(Figure("stream_writer.throughput", f"{steady_total:,} messages over "
                              f"{args.tables} tables (one {args.hot_factor}× hotter), tables exist",
                              steady_total / steady_s, "rows/s", base_rows / base_s,
                              "plain Spark Kafka → Parquet writeStream"))
    return figures


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="stream writer vs plain Spark Kafka → Parquet")
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
                        help="after the first run (which creates the tables), a second writer over "
                             "the same topic into the existing tables")
    parser.add_argument("--noop", action="store_true",
                        help="first measure Kafka → noop sink: no parse, from_json, the writer jar's parse")
    parser.add_argument("--profile", action="store_true",
                        help="Spark event log on: print the Spark stages of each run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH (for bench.report)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("stream_writer").setLevel(logging.INFO)

    work = Path(tempfile.mkdtemp(prefix="bench-sw-"))
    database = f"bench_sw_{uuid.uuid4().hex[:6]}"
    os.environ["CDC_MIRROR_SPARK__LAKE_DIR"] = str(work / "lake")
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
            topic = f"cdc.bench.sw_{uuid.uuid4().hex[:8]}"
            ensure_topic(settings.kafka, topic, partitions=args.partitions)
            print(f"producing {args.messages:,} messages over {args.tables} tables "
                  f"(one {args.hot_factor}× hotter), {args.partitions} partitions …", flush=True)
            seconds = produce(settings, topic, args.messages, args.tables, args.hot_factor)
            print(f"produced in {seconds:.1f} s ({args.messages / seconds:,.0f} msg/s)", flush=True)
        conf = {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "3g"}
        if args.profile:
            (work / "eventlog").mkdir(parents=True, exist_ok=True)
            conf |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(work / "eventlog"),
                     "spark.eventLog.compress": "false"}
        # The writer's session settings (java.nio local filesystem), so the baseline gets them too.
        conf |= localfs.session_conf_for(settings.stack.home.resolve() / "jars" / "spark")
        spark = build_session(settings, "bench-stream-writer", conf)
        figures: list[Figure] = []
        if topic is not None:
            figures += throughput(spark, settings, args, topic, work, database)
        if args.latency_seconds:
            figures.append(measure_latency(spark, settings, args.latency_rate, args.latency_seconds))
        write_figures(args.json, "stream_writer", figures)
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if topic is not None:
            delete_topic(settings, topic)


if __name__ == "__main__":
    main()
