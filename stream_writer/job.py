"""The stream writer's entry point: ``cdc-mirror stream-writer run`` or
``spark-submit stream_writer/job.py [--instance I …] [--topic T …] [--available-now]``.

Checks that the lake's location can be written (one sentence naming the location and the
cause otherwise, before anything is read), then reads the instances' topics with Spark's Kafka
source (``read_committed``; a new checkpoint starts from the offsets committed in the lake,
the earliest for partitions it has none of; at most ``max_offsets_per_trigger`` messages per
batch) and hands every micro-batch to ``stream_writer.writer.BatchWriter``.

The instances read and each one's shard rules come from the configuration store
(``cdc_platform.config_store``, the config file by default) and follow it without a restart
(``stream_writer.routing``): changed shard rules route the next micro-batch on; an added
instance's topic is read once the query, stopped between two batches, starts again from its
checkpoint (Spark reads a new topic from its start).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigWatch, watch_config
from cdc_platform.iceberg import LakeCatalog, lake_session
from cdc_platform.kafka import consumer_config, high_watermark
from cdc_platform.lake import default_writer_name
from cdc_platform.observability import Probe, serve_observability
from cdc_platform.retry import RetryCancelled, RetryPolicy
from simple_binlog.errors import (
    CdcMirrorError,
    RetriableError,
    ServiceUnavailableError,
    exit_code_for,
)
from simple_binlog.naming import topic_name
from stream_writer import localfs
from stream_writer.metrics import WriterMetrics
from stream_writer.routing import LiveRouting
from stream_writer.writer import BatchWriter, WriterPaths, crash_point, fault_point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Kafka away: the query is started again from its checkpoint, waiting 5 s doubling to 60 s.
_QUERY_RESTARTS = RetryPolicy(first_delay_s=5.0, max_delay_s=60.0)


@dataclass(frozen=True, slots=True)
class WriterRun:
    """What one writer reads and where it keeps its checkpoint; ``live``: its routing as
    the configuration store changes it (its topics at start are ``live.routing.topics``)."""

    name: str
    topics: list[str]
    paths: WriterPaths
    live: LiveRouting | None = None


def plan_run(
    settings: Settings,
    instances: list[str],
    topics: list[str],
    name: str | None,
    live: LiveRouting | None = None,
) -> WriterRun:
    """Topics, writer name and paths from the settings and the command line; with ``live``,
    the instances and topics of its configuration snapshot. Pure but for ``live``."""
    if not topics and live is not None:
        topics = list(live.routing.topics)
        default_name = default_writer_name(live.routing.instances)
    elif not topics:
        chosen = instances or [i.name for i in settings.instances]
        for instance in chosen:
            settings.instance(instance)  # ConfigError for an unknown one
        topics = [topic_name(settings.kafka, i) for i in chosen]
        default_name = default_writer_name(chosen)
    else:
        default_name = "+".join(sorted(topics)).replace(".", "_")
    writer_name = name or settings.stream_writer.name or default_name
    lake = settings.lake_dir
    checkpoint = settings.stream_writer.checkpoint_dir or (
        lake / "_stream_writer" / writer_name / "checkpoint"
    )
    return WriterRun(
        writer_name, topics, WriterPaths(lake, checkpoint.resolve(), writer_name), live
    )


def kafka_options(
    settings: Settings, topics: list[str], starting_offsets: str = "earliest"
) -> dict[str, str]:
    """Pure: the Kafka source options of the stream (``starting_offsets``: Spark's
    ``startingOffsets``, the lake's committed offsets as JSON)."""
    config = settings.stream_writer
    options = {
        "kafka.bootstrap.servers": settings.kafka.bootstrap_servers,
        "kafka.isolation.level": "read_committed",
        "subscribe": ",".join(topics),
        # Only used by a new checkpoint; a restarted one resumes from its offset log (rows
        # below the lake's offsets are dropped by the writer either way).
        "startingOffsets": starting_offsets,
        # Retention deleting unread messages would lose rows: stop instead.
        "failOnDataLoss": "true",
    }
    if config.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
    # Security settings etc. of the shared Kafka config reach Spark's consumer too.
    options.update({f"kafka.{k}": v for k, v in settings.kafka.client_properties.items()})
    return options


class KafkaLatestOffsets:
    """The last stable offset per partition, from a read_committed consumer (for the lag)."""

    def __init__(self, settings: Settings, writer: str) -> None:
        self._consumer = Consumer(
            consumer_config(settings.kafka, f"cdc-stream-writer-{writer}-lag")
        )

    def __call__(self, topic: str, partition: int) -> int | None:
        try:
            return high_watermark(self._consumer, topic, partition, timeout_s=10)
        except CdcMirrorError as exc:
            # The lag only informs readiness and metrics: an unknown lag holds readiness back
            # (the partition counts as lagging) instead of failing a batch already staged.
            log.warning("%s The lag of %s[%d] is unknown this batch.", exc, topic, partition)
            return None

    def partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """The partitions of each topic (for the starting offsets of a new checkpoint)."""
        metadata = self._consumer.list_topics(timeout=10)
        return {
            topic: sorted(metadata.topics[topic].partitions)
            for topic in topics
            if topic in metadata.topics and metadata.topics[topic].partitions
        }

    def close(self) -> None:
        self._consumer.close()


def start_query(
    spark: SparkSession,
    settings: Settings,
    run: WriterRun,
    writer: BatchWriter,
    available_now: bool,
    partitions: Callable[[list[str]], dict[str, list[int]]] | None = None,
) -> Any:
    reader = spark.readStream.format("kafka")
    # The topics of the routing in force: a configuration change may have added some.
    topics = list(writer.wanted_topics) or run.topics
    starting = writer.starting_offsets(partitions(topics)) if partitions is not None else "earliest"
    for key, value in kafka_options(settings, topics, starting).items():
        reader = reader.option(key, value)
    stream = reader.load().writeStream.foreachBatch(writer)
    stream = stream.option("checkpointLocation", str(run.paths.checkpoint_dir))
    stream = stream.queryName(f"cdc_stream_writer_{run.name}".replace("+", "_").replace("-", "_"))
    if available_now:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(
            processingTime=f"{settings.stream_writer.trigger_interval_s} seconds"
        )
    return stream.start()


class QueryProbe:
    """The writer's readiness: its streaming query runs (it is None from the start until the
    first query started, and between a failed query and its restart)."""

    def __init__(self) -> None:
        self.query: Any | None = None  # a pyspark StreamingQuery, or a fake with isActive

    def ready(self) -> Probe:
        query = self.query
        if query is None:
            return Probe(False, "no streaming query runs (starting, or restarting after Kafka)")
        if not query.isActive:
            return Probe(False, "the streaming query has stopped")
        return Probe(True, "the streaming query runs")


def queries_while_topics_change(
    run_query: Callable[[], None], writer: BatchWriter, stop: threading.Event, name: str
) -> None:
    """``run_query`` again each time it stopped for a configuration change that adds topics
    (the writer halted): the new query resumes from the checkpoint, and Spark reads a new
    topic from its start."""
    while True:
        try:
            run_query()
        except CdcMirrorError:
            if not writer.halted:
                raise
            # A batch refused while stopping: it runs again in the new query.
        if stop.is_set() or not writer.halted:
            return
        writer.resume()
        log.info("stream writer %s now reads %s", name, ", ".join(writer.wanted_topics))


def run_stream_writer(
    settings: Settings,
    instances: list[str],
    topics: list[str],
    name: str | None = None,
    metrics_port: int | None = None,
    available_now: bool = False,
) -> None:
    """Run until SIGTERM/SIGINT (or, with ``available_now``, until Kafka is read to its end)."""
    # Tests only: the writer jar fails the commit this names; a misspelt one stops it here.
    fault_point(os.environ)
    proxy_tracebacks_at_debug()
    watch = watch_config(settings)
    try:
        _run_watched(settings, watch, instances, topics, name, metrics_port, available_now)
    finally:
        watch.close()


def _run_watched(
    settings: Settings,
    watch: ConfigWatch,
    instances: list[str],
    topics: list[str],
    name: str | None,
    metrics_port: int | None,
    available_now: bool,
) -> None:
    live = LiveRouting(watch, settings.kafka, instances, topics)
    run = plan_run(settings, instances, topics, name, live)
    port = settings.stream_writer.metrics_port if metrics_port is None else metrics_port
    metrics = WriterMetrics(run.name)
    probe = QueryProbe()
    host = settings.stream_writer.metrics_host
    server = (
        serve_observability(host, port, metrics.registry, "stream_writer", probe.ready)
        if port
        else None
    )
    try:
        _run_writer(settings, run, metrics, probe, available_now)
    finally:
        if server is not None:
            server.close()


def _run_writer(
    settings: Settings,
    run: WriterRun,
    metrics: WriterMetrics,
    probe: QueryProbe,
    available_now: bool,
) -> None:
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info(
        "stream writer %s reads %s into %s",
        run.name,
        ", ".join(run.topics),
        settings.lake_location.uri,
    )
    spark = lake_session(
        settings,
        f"cdc-stream-writer-{run.name}",
        {
            "spark.ui.showConsoleProgress": "false",
            **localfs.session_conf_for(settings.stack.home.resolve() / "jars" / "spark"),
        },
    )
    latest: KafkaLatestOffsets | None = None
    writer: BatchWriter | None = None
    try:
        # Before anything is read: a location that cannot be written stops the writer here,
        # in one sentence naming it and the cause.
        lake = LakeCatalog.open(spark, settings, check=True)
        latest = KafkaLatestOffsets(settings, run.name)
        writer = BatchWriter(
            spark,
            settings.stream_writer,
            run.paths,
            lake,
            settings.shard_rules,
            latest,
            metrics,
            routing=run.live.routing if run.live is not None else None,
            reconfigure=run.live.next if run.live is not None else None,
            crash_at=crash_point(os.environ),
        )
        # The committed progress: where a new checkpoint starts, what readiness knows.
        writer.start()
        poll_s = min(settings.stream_writer.trigger_interval_s, 5.0)

        def run_query() -> None:
            assert writer is not None
            reading = writer.wanted_topics
            assert latest is not None
            query = start_query(spark, settings, run, writer, available_now, latest.partitions)
            probe.query = query
            try:
                while query.isActive and not stop.is_set() and writer.wanted_topics == reading:
                    query.awaitTermination(poll_s)
                    writer.check_readiness()
                    writer.take_routing_between_batches()
                if query.isActive:
                    if writer.wanted_topics != reading:
                        writer.halt()  # between batches; refuses the next one
                    query.stop()
                query.awaitTermination()
            except StreamingQueryException as exc:
                text = str(exc)
                if not kafka_away(text) or stop.is_set():
                    raise CdcMirrorError(
                        f"the stream writer's query failed: {query_failure(text)}"
                    ) from None
                # The failed batch runs again in the new query, from the checkpoint: the
                # BatchWriter completes it from the lake's offsets, as after a restart.
                raise ServiceUnavailableError(
                    f"Kafka did not answer ({query_failure(text)}); the query starts again "
                    "from its checkpoint."
                ) from None
            finally:
                probe.query = None

        def restarting(exc: RetriableError, delay_s: float) -> None:
            log.warning("%s In %.0f s.", exc, delay_s)
            metrics.restarts.labels(run.name).inc()

        with contextlib.suppress(RetryCancelled):
            _QUERY_RESTARTS.call(
                lambda: queries_while_topics_change(run_query, writer, stop, run.name),
                stop=stop,
                on_retry=restarting,
            )
        writer.check_readiness()
    finally:
        if latest is not None:
            latest.close()
        if writer is not None:  # the views of the tables seen last (made by a thread)
            writer.close_views(60)
        spark.stop()


# What py4j logs (at ERROR, with the traceback) for every error the batch function raises into
# the JVM, before the query fails with that same error.
_PY4J_PROXY_ERROR = "There was an exception while executing the Python Proxy"
_PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")


class ProxyTracebackAtDebug(logging.Filter):
    """py4j's record of an error the batch function raised, demoted to DEBUG (shown only when
    its logger is enabled for debug): the writer reports that error once, as the query's
    failure in one sentence ("the stream writer's query failed: …"); a py4j traceback before
    it would be the first thing an operator reads. Every other py4j record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_PY4J_PROXY_ERROR):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def proxy_tracebacks_at_debug() -> None:
    """Install ``ProxyTracebackAtDebug`` on py4j's loggers (once)."""
    for name in _PY4J_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ProxyTracebackAtDebug) for f in logger.filters):
            logger.addFilter(ProxyTracebackAtDebug())


# The last line of a Python traceback carried inside the JVM's message ("module.Error: …").
_PYTHON_ERROR = re.compile(r"^(?P<kind>[A-Za-z_][\w.]*(?:Error|Exception)): (?P<text>.+)$")
_JVM_CAUSE = re.compile(r"^Caused by: (?P<kind>[\w.$]+): (?P<text>.+)$")
# Kafka client errors that say the broker is away for a while (a restart, a leader election),
# not that something is wrong with the stream: the query is started again from its checkpoint.
_KAFKA_AWAY = re.compile(
    r"org\.apache\.kafka\.common\.errors\.(?:Timeout|Disconnect|Network|NotLeaderOrFollower|"
    r"LeaderNotAvailable|CoordinatorNotAvailable|CoordinatorLoadInProgress)Exception"
)


def query_failure(text: str) -> str:
    """Pure: the sentence worth showing from a failed query's message.

    Spark wraps an error of the batch function in several JVM layers that quote its Python
    traceback. A Python exception line names the cause (our own one-sentence errors shown
    verbatim); without one, the innermost JVM cause ("Caused by: …") does."""
    lines = [line.strip() for line in text.splitlines()]
    for line in lines:
        match = _PYTHON_ERROR.match(line)
        if match and not match["kind"].startswith(("org.", "java.", "py4j.", "scala.")):
            kind = match["kind"].rsplit(".", 1)[-1]
            if kind in {"CdcMirrorError", "CommitError"}:
                return match["text"]
            return f"{kind}: {match['text']}"
    causes = [m for m in map(_JVM_CAUSE.match, lines) if m is not None]
    if causes:
        return f"{causes[-1]['kind'].rsplit('.', 1)[-1]}: {causes[-1]['text']}"
    return next((line for line in lines if line), "unknown error")


def kafka_away(text: str) -> bool:
    """Pure: whether a failed query failed because Kafka did not answer for a while."""
    return _KAFKA_AWAY.search(text) is not None


def main(argv: list[str] | None = None) -> int:
    from cdc_platform.config import load_settings  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--instance", action="append", default=[])
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--name")
    parser.add_argument("--metrics-port", type=int)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_stream_writer(
            load_settings(args.config),
            args.instance,
            args.topic,
            args.name,
            args.metrics_port,
            args.available_now,
        )
    except CdcMirrorError as exc:
        logging.getLogger(__name__).error("%s", exc)
        return exit_code_for(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
