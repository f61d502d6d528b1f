"""The scheduler's Prometheus metrics, served on ``scheduler.metrics_host:metrics_port`` for
as long as it runs (with ``cdc_component_ready``). The merges it starts keep exporting their
own verdicts (``cdc_merge_*``, ``merge.metrics``); these say what the scheduler sees: who
leads, the backlog, the red days, the days that gave up, the same per hour for tables with
hourly snapshots (``cdc_scheduler_*hour*``), and each table's latest validation
per target (``cdc_validation_*``: a validation is a short-lived child process, so the
scheduler that started it exports its outcome)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from cdc_platform.control import ValidationResult


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
        # Tables with hourly snapshots: the hours merged by themselves while their day is not
        # ready yet (scheduler.plan).
        self.hour_runs = Counter(
            "cdc_scheduler_hour_runs",
            "Merges of single hours (tables with hourly snapshots) the scheduler ended, by "
            "outcome (succeeded, mismatch, failed); also counted in cdc_scheduler_runs.",
            ["outcome"],
            registry=r,
        )
        self.hours_behind = Gauge(
            "cdc_scheduler_hours_behind",
            "Closed hours of the table's day in progress not merged yet (hourly snapshots).",
            ["table"],
            registry=r,
        )
        self.red_hours = Gauge(
            "cdc_scheduler_red_hours",
            "Hours of the table whose latest merge failed or whose check found a mismatch "
            "(hourly snapshots).",
            ["table"],
            registry=r,
        )
        self.newest_hour = Gauge(
            "cdc_scheduler_newest_hour_end_timestamp_seconds",
            "The end of the table's newest hour merged by itself (Unix time; hourly snapshots).",
            ["table"],
            registry=r,
        )
        self.last_tick = Gauge(
            "cdc_scheduler_last_tick_timestamp_seconds",
            "When the active scheduler last looked for work (Unix time).",
            registry=r,
        )
        self.validation_mismatched = Gauge(
            "cdc_validation_mismatched_rows",
            "Keys the table's latest validation found missing, extra or different in the "
            "target, after its automatic repair if one ran (0: equal to MySQL).",
            ["table", "target"],
            registry=r,
        )
        self.validation_repaired = Counter(
            "cdc_validation_repaired_keys",
            "Differing keys of the target the scheduler's automatic repairs re-published "
            "through the stream (tables with validation: repair).",
            ["table", "target"],
            registry=r,
        )
        self.validation_repair_skipped = Gauge(
            "cdc_validation_repair_skipped",
            "1 when the table's latest validation found more differing keys than its automatic "
            "repair may re-publish (validation_repair_max_keys), so it only reported them.",
            ["table", "target"],
            registry=r,
        )
        self.validation_rows = Gauge(
            "cdc_validation_rows_compared",
            "Rows the table's latest validation of the target compared.",
            ["table", "target"],
            registry=r,
        )
        self.validation_unreachable = Gauge(
            "cdc_validation_unreachable",
            "1 when the table's latest validation could not reach the target (or MySQL).",
            ["table", "target"],
            registry=r,
        )
        self.validation_last_run = Gauge(
            "cdc_validation_last_run_timestamp_seconds",
            "When the table's latest validation of the target ended (Unix time).",
            ["table", "target"],
            registry=r,
        )
        self.validation_last_equal = Gauge(
            "cdc_validation_last_success_timestamp_seconds",
            "When a validation last found the target equal to MySQL (Unix time).",
            ["table", "target"],
            registry=r,
        )
        self.leader.set(0)

    def validation_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.validation_mismatched,
            self.validation_rows,
            self.validation_unreachable,
            self.validation_last_run,
            self.validation_last_equal,
            self.validation_repair_skipped,
        )

    def validated(self, table: str, results: Sequence[ValidationResult], ended: float) -> None:
        """A validation run of ``table`` ended at ``ended`` with ``results``."""
        for result in results:
            labels = (table, result.target)
            self.validation_last_run.labels(*labels).set(ended)
            self.validation_unreachable.labels(*labels).set(
                1 if result.verdict == "unreachable" else 0
            )
            if result.verdict == "unreachable":
                continue  # no verdict: the mismatch and success figures stay as they were
            # A repaired target counts as it is after the repair: equal when it converged.
            self.validation_mismatched.labels(*labels).set(result.differing_now)
            self.validation_rows.labels(*labels).set(result.rows)
            self.validation_repair_skipped.labels(*labels).set(1 if result.repair_skipped else 0)
            if result.repaired and result.verdict == "differs":
                self.validation_repaired.labels(*labels).inc(result.repaired)
            if result.verdict == "equal" or result.still_differing == 0:
                self.validation_last_equal.labels(*labels).set(ended)
