"""The stream writer's Prometheus metrics, one registry per writer (tests make their own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from stream_writer.readiness import WriterState


class WriterMetrics:
    def __init__(self, writer: str, registry: CollectorRegistry | None = None) -> None:
        self.writer = writer
        self.registry = registry or CollectorRegistry()
        self.rows = Counter(
            "cdc_stream_writer_rows",
            "Rows written to the lake, per logical table.",
            ["writer", "table"],
            registry=self.registry,
        )
        self.rows_per_second = Gauge(
            "cdc_stream_writer_rows_per_second",
            "Rows written per second of the last batch (rows / batch duration).",
            ["writer"],
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "cdc_stream_writer_batch_seconds",
            "Duration of a micro-batch, from its start to its commit.",
            ["writer"],
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.lag = Gauge(
            "cdc_stream_writer_lag_messages",
            "Messages of a Kafka partition not yet written (at the end of the last batch).",
            ["writer", "topic", "partition"],
            registry=self.registry,
        )
        self.watermark = Gauge(
            "cdc_stream_writer_watermark_seconds",
            "Highest executeTime durably written from a Kafka partition.",
            ["writer", "topic", "partition"],
            registry=self.registry,
        )
        self.global_watermark = Gauge(
            "cdc_stream_writer_global_watermark_seconds",
            "The watermark that decides readiness (minimum over partitions that lag).",
            ["writer"],
            registry=self.registry,
        )
        self.late_rows = Counter(
            "cdc_stream_writer_late_rows",
            "Rows written for a day already declared ready, per table.",
            ["writer", "table"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "cdc_stream_writer_dead_letters",
            "Messages that could not be parsed or routed, written to the dead-letter table.",
            ["writer"],
            registry=self.registry,
        )
        self.ready_days = Counter(
            "cdc_stream_writer_ready_days",
            "Days declared ready.",
            ["writer"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "cdc_stream_writer_query_restarts",
            "Queries started again from the checkpoint because Kafka did not answer.",
            ["writer"],
            registry=self.registry,
        )
        self.config_version = Gauge(
            "cdc_stream_writer_config_version",
            "The configuration snapshot version in force (cdc_platform.config_store).",
            ["writer"],
            registry=self.registry,
        ).labels(writer)

    def observe_state(self, state: WriterState) -> None:
        for progress in state.partitions.values():
            labels = (self.writer, progress.topic, str(progress.partition))
            if progress.lag >= 0:
                self.lag.labels(*labels).set(progress.lag)
            if progress.watermark_ms is not None:
                self.watermark.labels(*labels).set(progress.watermark_ms / 1000)
        mark = state.global_watermark()
        if mark is not None:
            self.global_watermark.labels(self.writer).set(mark / 1000)
