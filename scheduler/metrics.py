"""The scheduler's Prometheus metrics, served on ``scheduler.metrics_host:metrics_port`` for
as long as it runs (with ``cdc_component_ready``). The merges it starts keep exporting their
own verdicts (``cdc_merge_*``, ``merge.metrics``); these say what the scheduler sees: who
leads, the backlog, the red days, the days that gave up."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.leader = Gauge(
            "cdc_scheduler_leader", "1 while this scheduler is the active one, else 0.", registry=r
        )
        self.runs = Counter(
            "cdc_scheduler_runs",
            "Runs the scheduler ended, by kind (merge, validation, maintenance) and outcome "
            "(succeeded, mismatch, failed).",
            ["kind", "outcome"],
            registry=r,
        )
        self.days_behind = Gauge(
            "cdc_scheduler_days_behind",
            "Ready days of the table not merged yet (the catch-up backlog).",
            ["table"],
            registry=r,
        )
        self.red_days = Gauge(
            "cdc_scheduler_red_days",
            "Days of the table whose latest merge failed or whose check found a mismatch.",
            ["table"],
            registry=r,
        )
        self.gave_up = Gauge(
            "cdc_scheduler_gave_up",
            "1 when the table's next day failed every attempt and waits for a re-run.",
            ["table"],
            registry=r,
        )
        self.last_tick = Gauge(
            "cdc_scheduler_last_tick_timestamp_seconds",
            "When the active scheduler last looked for work (Unix time).",
            registry=r,
        )
        self.leader.set(0)
