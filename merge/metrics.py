"""The merge's Prometheus metrics: what the last merge of each table did, and its verdict.

Merge is a batch job, so its metrics are gauges about the last run of each table (a counter
of a process that lives a few minutes would say little), exposed two ways:

- while ``cdc-mirror merge`` runs, on its own /metrics (``merge.metrics_host``/``metrics_port``,
  ``cdc_platform.observability``), for a Prometheus that happens to scrape it then;
- after every table, in ``merge.metrics_textfile`` (default ``<lake>/_merge/cdc_merge.prom``),
  written atomically, for node-exporter's textfile collector (``--collector.textfile.directory``
  pointed at ``<lake>/_merge``): the verdicts stay visible after the process ended, which is
  what an alert on a check mismatch or on a day not merged needs. A run reads the previous
  file first, so tables it did not merge keep their series, and a table whose merge failed
  keeps its last success (only ``cdc_merge_last_run_*`` and ``cdc_merge_last_run_failed``
  change).

A scheduler (issue 22, item 5; not written yet) reuses ``MergeMetrics`` as it is: it records
each run's ``TableOutcome`` and serves the same registry for as long as it lives.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from cdc_platform.observability import write_textfile

TEXTFILE_NAME = "cdc_merge.prom"


@dataclass(frozen=True, slots=True)
class TableRun:
    """The last merge of one table: its figures (of the last success) and its verdict."""

    last_run_s: float  # when the last merge ended, failed or not (Unix time)
    failed: bool
    last_success_s: float | None = None
    dt: date | None = None  # the day the last successful merge merged
    rows: int | None = None
    changes: int | None = None
    files: int | None = None
    seconds: float | None = None
    check_ok: bool | None = None  # None: not checked
    mismatched_days: int | None = None


# Metric name, help text, and how to read it from a TableRun (None: no sample).
_GAUGES: dict[str, str] = {
    "cdc_merge_rows": "Rows in the snapshot the table's last successful merge wrote.",
    "cdc_merge_changes": "Change rows the table's last successful merge read from the lake.",
    "cdc_merge_files": "Data files of the snapshot version the last merge published.",
    "cdc_merge_duration_seconds": "How long the table's last successful merge took.",
    "cdc_merge_day_timestamp_seconds": "Midnight (UTC) of the day the last merge merged.",
    "cdc_merge_check_ok": "The check against MySQL of the day merged last (label dt): "
    "1 counts match, 0 mismatch (the day is red). Absent: not checked.",
    "cdc_merge_check_mismatched_days": "Days of the check window whose counts differ "
    "from MySQL's, at the table's last merge.",
    "cdc_merge_last_success_timestamp_seconds": "When the table's last successful merge "
    "ended (Unix time).",
    "cdc_merge_last_run_timestamp_seconds": "When the table's last merge ended, failed or not.",
    "cdc_merge_last_run_failed": "1 when the table's last merge failed (no snapshot written).",
}


def _midnight(day: date) -> float:
    return float(calendar.timegm(day.timetuple()))


def _samples(run: TableRun) -> dict[str, float | None]:
    def number(value: float | bool | None) -> float | None:
        return None if value is None else float(value)

    return {
        "cdc_merge_rows": number(run.rows),
        "cdc_merge_changes": number(run.changes),
        "cdc_merge_files": number(run.files),
        "cdc_merge_duration_seconds": number(run.seconds),
        "cdc_merge_day_timestamp_seconds": None if run.dt is None else _midnight(run.dt),
        "cdc_merge_check_ok": number(run.check_ok),
        "cdc_merge_check_mismatched_days": number(run.mismatched_days),
        "cdc_merge_last_success_timestamp_seconds": number(run.last_success_s),
        "cdc_merge_last_run_timestamp_seconds": run.last_run_s,
        "cdc_merge_last_run_failed": float(run.failed),
    }


class MergeMetrics(Collector):
    """Every table's last merge, as gauges; registered in ``registry`` (tests pass their own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.tables: dict[str, TableRun] = {}
        self.registry.register(self)

    # -- recording --------------------------------------------------------------------------
    def succeeded(
        self,
        table: str,
        dt: date,
        rows: int,
        changes: int,
        files: int,
        seconds: float,
        check_ok: bool | None,
        mismatched_days: int | None,
        now: float,
    ) -> None:
        self.tables[table] = TableRun(
            last_run_s=now,
            failed=False,
            last_success_s=now,
            dt=dt,
            rows=rows,
            changes=changes,
            files=files,
            seconds=seconds,
            check_ok=check_ok,
            mismatched_days=mismatched_days,
        )

    def failed(self, table: str, now: float) -> None:
        """A failed merge: the last success's figures stay, the run is marked failed."""
        previous = self.tables.get(table)
        if previous is None:
            self.tables[table] = TableRun(last_run_s=now, failed=True)
        else:
            self.tables[table] = replace(previous, last_run_s=now, failed=True)

    # -- the textfile -----------------------------------------------------------------------
    def restore(self, text: str) -> None:
        """Take the tables of an earlier run's textfile (``load`` reads it from disk)."""
        found: dict[str, dict[str, tuple[float, dict[str, str]]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                table = sample.labels.get("table")
                if table is not None and sample.name in _GAUGES:
                    found.setdefault(table, {})[sample.name] = (sample.value, sample.labels)
        for table, values in found.items():
            if table not in self.tables and "cdc_merge_last_run_timestamp_seconds" in values:
                self.tables[table] = _table_run(values)

    def load(self, path: Path) -> None:
        if path.is_file():
            self.restore(path.read_text())

    def write(self, path: Path) -> None:
        write_textfile(path, self.registry)

    # -- prometheus_client's Collector --------------------------------------------------------
    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        yield from self._families()

    def _families(self) -> Iterator[GaugeMetricFamily]:
        for name, text in _GAUGES.items():
            labels = ["table", "dt"] if name == "cdc_merge_check_ok" else ["table"]
            family = GaugeMetricFamily(name, text, labels=labels)
            for table, run in sorted(self.tables.items()):
                value = _samples(run)[name]
                if value is None:
                    continue
                if name == "cdc_merge_check_ok":
                    day = run.dt.isoformat() if run.dt is not None else ""
                    family.add_metric([table, day], value)
                else:
                    family.add_metric([table], value)
            yield family


def _table_run(values: dict[str, tuple[float, dict[str, str]]]) -> TableRun:
    def get(name: str) -> float | None:
        found = values.get(name)
        return None if found is None else found[0]

    def whole(name: str) -> int | None:
        value = get(name)
        return None if value is None else int(value)

    check = values.get("cdc_merge_check_ok")
    day = check[1].get("dt") if check is not None else None
    midnight = get("cdc_merge_day_timestamp_seconds")
    dt = date.fromisoformat(day) if day else None
    if dt is None and midnight is not None:
        dt = datetime.fromtimestamp(midnight, UTC).date()
    check_ok = get("cdc_merge_check_ok")
    return TableRun(
        last_run_s=get("cdc_merge_last_run_timestamp_seconds") or 0.0,
        failed=bool(get("cdc_merge_last_run_failed")),
        last_success_s=get("cdc_merge_last_success_timestamp_seconds"),
        dt=dt,
        rows=whole("cdc_merge_rows"),
        changes=whole("cdc_merge_changes"),
        files=whole("cdc_merge_files"),
        seconds=get("cdc_merge_duration_seconds"),
        check_ok=None if check_ok is None else bool(check_ok),
        mismatched_days=whole("cdc_merge_check_mismatched_days"),
    )


def textfile_path(lake_dir: Path, configured: Path | None) -> Path:
    """Where the merge writes its textfile: ``merge.metrics_textfile``, else beside the merge
    records (``<lake>/_merge/``)."""
    return configured if configured is not None else lake_dir / "_merge" / TEXTFILE_NAME
