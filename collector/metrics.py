"""The collector's Prometheus metrics, one registry per process (tests make their own)."""

from __future__ import annotations

import time
import weakref

from prometheus_client import CollectorRegistry, Counter, Gauge

from cdc_platform.governance_model import DetectionRecord
from collector.position import CollectorPosition
from governance.detectors import DetectorSet


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["instance"]
        self.rows = Counter(
            "cdc_collector_rows",
            "Row changes published, per table.",
            [*labels, "schema", "table"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "cdc_collector_dead_letters",
            "Rows sent to the dead-letter topic.",
            labels,
            registry=self.registry,
        )
        self.schema_changes = Counter(
            "cdc_collector_schema_changes",
            "Table and database DDL published to the schema-change topic.",
            labels,
            registry=self.registry,
        )
        self.errors = Counter(
            "cdc_collector_errors", "Errors by kind.", [*labels, "kind"], registry=self.registry
        )
        self.watermark_heartbeats = Counter(
            "cdc_collector_watermark_heartbeats",
            "Watermark heartbeats published while the source was quiet.",
            labels,
            registry=self.registry,
        )
        self.transactions = Counter(
            "cdc_collector_kafka_transactions",
            "Kafka transactions committed.",
            labels,
            registry=self.registry,
        )
        self.delay = Gauge(
            "cdc_collector_delay_seconds",
            "Now minus the event time of the last MySQL transaction read.",
            labels,
            registry=self.registry,
        )
        self.last_event_time = Gauge(
            "cdc_collector_last_event_timestamp_seconds",
            "Event time of the last MySQL transaction read.",
            labels,
            registry=self.registry,
        )
        self.committed_offset = Gauge(
            "cdc_collector_committed_binlog_offset",
            "binlogOffset of the last row committed to Kafka.",
            labels,
            registry=self.registry,
        )
        self.role = Gauge(
            "cdc_collector_active",
            "1 while this process is the active collector, 0 on standby.",
            labels,
            registry=self.registry,
        )
        self.detections = Counter(
            "cdc_collector_detections",
            "Plaintext detected (values never recorded), per logical table, column, detector.",
            [*labels, "table", "column", "detector"],
            registry=self.registry,
        )
        self.scan_truncated = Counter(
            "cdc_collector_scan_truncated",
            "String values longer than governance.scan_max_chars, scanned for plaintext in "
            "their first scan_max_chars characters only.",
            labels,
            registry=self.registry,
        )
        # How much of each detector set's ``truncated`` is counted already.
        self._truncated_seen: weakref.WeakKeyDictionary[DetectorSet, int] = (
            weakref.WeakKeyDictionary()
        )
        self.governance_version = Gauge(
            "cdc_collector_governance_version",
            "Version of the governance policy set in force.",
            labels,
            registry=self.registry,
        )
        self.config_version = Gauge(
            "cdc_collector_config_version",
            "Version of the web admin's collector config in force (a standby: the newest "
            "received); 0 with collector.config_source 'file'.",
            labels,
            registry=self.registry,
        )
        self.config_reloads = Counter(
            "cdc_collector_config_reloads",
            "New collector configs from the web admin put in force without a restart.",
            labels,
            registry=self.registry,
        )
        self.native_decoder = Gauge(
            "cdc_collector_native_decoder",
            "1 when rows are decoded by the C extension collector._native, 0 in Python.",
            labels,
            registry=self.registry,
        )
        self.unhandled_events = Counter(
            "cdc_collector_unhandled_events",
            "Binlog events of a type the collector does not read, by type number (the types "
            "that hold row changes also stop the collector).",
            [*labels, "type"],
            registry=self.registry,
        )
        self.epoch = Gauge(
            "cdc_collector_epoch",
            "Leader epoch of this process (0 before it first led).",
            labels,
            registry=self.registry,
        )

    def observe_event_time(self, instance: str, event_second: int) -> None:
        self.last_event_time.labels(instance).set(event_second)
        self.delay.labels(instance).set(max(0.0, time.time() - event_second))

    def count_detections(self, records: list[DetectionRecord]) -> None:
        for record in records:
            self.detections.labels(
                record.instance, record.logical_table, record.column, record.detector
            ).inc(record.count)

    def count_truncated(self, instance: str, detectors: DetectorSet | None) -> None:
        """Add the values ``detectors`` truncated since the last call for the same set."""
        if detectors is None:
            return
        seen = self._truncated_seen.get(detectors, 0)
        if detectors.truncated > seen:
            self.scan_truncated.labels(instance).inc(detectors.truncated - seen)
            self._truncated_seen[detectors] = detectors.truncated

    def committed(self, instance: str, position: CollectorPosition) -> None:
        self.transactions.labels(instance).inc()
        self.committed_offset.labels(instance).set(position.offset_state.last_offset)
