"""The mirror's Prometheus metrics, one registry per process (tests make their own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Freshness: MySQL commit (the event's executeTime) → visible in the target.
_FRESHNESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800)


class MirrorMetrics:
    def __init__(self, target: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.target = target
        self.freshness = Histogram(
            "cdc_mirror_freshness_seconds",
            "Now minus the change's executeTime, when its batch is applied.",
            ["target"],
            buckets=_FRESHNESS_BUCKETS,
            registry=self.registry,
        ).labels(target)
        self.rows = Counter(
            "cdc_mirror_rows",
            "Row changes received for a mirrored table (rate() gives rows/s).",
            ["target", "table"],
            registry=self.registry,
        )
        self.applied = Counter(
            "cdc_mirror_applied_keys",
            "Keys written to the target (rows or tombstones).",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.stale = Counter(
            "cdc_mirror_stale_changes",
            "Changes the version guard rejected: the target held the same or a newer offset.",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.superseded = Counter(
            "cdc_mirror_superseded_changes",
            "Changes not sent because the same key had a newer change in the batch.",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.skipped = Counter(
            "cdc_mirror_skipped_messages",
            "Messages of tables not configured for this target (skipped by configuration).",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.dead_letters = Counter(
            "cdc_mirror_dead_letters",
            "Malformed messages sent to the dead-letter topic.",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.apply_errors = Counter(
            "cdc_mirror_apply_errors",
            "Batches that failed to apply and were retried.",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.apply_seconds = Histogram(
            "cdc_mirror_apply_seconds",
            "Time to apply one batch to the target.",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.config_version = Gauge(
            "cdc_mirror_config_version",
            "The configuration snapshot version in force (cdc_platform.config_store).",
            ["target"],
            registry=self.registry,
        ).labels(target)
        self.table_stopped = Gauge(
            "cdc_mirror_table_stopped",
            "1 for a table the target stopped following (a schema change it cannot hold).",
            ["target", "table"],
            registry=self.registry,
        )
        self.last_applied = Gauge(
            "cdc_mirror_last_applied_timestamp_seconds",
            "executeTime of the newest change of the table applied to the target (now minus "
            "it: the age of the table's last applied change, its freshness).",
            ["target", "table"],
            registry=self.registry,
        )
        self.lag = Gauge(
            "cdc_mirror_consumer_lag",
            "Messages in the partition after the last committed offset.",
            ["target", "topic", "partition"],
            registry=self.registry,
        )
