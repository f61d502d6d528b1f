"""The merge's metrics after a run: the figures and the check verdict of each table's last
merge, kept across runs in the textfile (a failure keeps the last success)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from merge.app import record_outcome
from merge.check import CheckResult
from merge.job import MergeResult, TableOutcome
from merge.metrics import MergeMetrics, textfile_path

DAY = date(2026, 11, 21)
MIDNIGHT = 1795219200.0  # 2026-11-21T00:00:00Z


def merged(table: str, mismatches: list[date] | None) -> TableOutcome:
    check = (
        None
        if mismatches is None
        else CheckResult(days=[DAY], snapshot={}, mysql={}, mismatches=mismatches, stalled=False)
    )
    result = MergeResult(
        table=table,
        dt=DAY,
        rows=1200,
        changes=340,
        location="lake.ods_snapshot.x VERSION AS OF 'dt-2026-11-21'",
        snapshot_id=7,
        archive=cast(Any, None),
        schema=cast(Any, None),
        seconds=12.5,
        late_rows_seen=0,
        files_kept=2,
        files=3,
        check=check,
    )
    return TableOutcome(table, result, None)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_run_exports_rows_files_duration_verdict_and_last_success(tmp_path: Path) -> None:
    metrics = MergeMetrics(CollectorRegistry())
    record_outcome(metrics, merged("orders", [DAY]), now=1000.0)
    record_outcome(metrics, merged("users", []), now=1001.0)
    record_outcome(metrics, merged("items", None), now=1002.0)
    path = textfile_path(tmp_path / "lake", None)
    metrics.write(path)
    assert path == tmp_path / "lake" / "_merge" / "cdc_merge.prom"
    got = samples(path.read_text())
    orders = (("table", "orders"),)
    assert got[("cdc_merge_rows", orders)] == 1200
    assert got[("cdc_merge_changes", orders)] == 340
    assert got[("cdc_merge_files", orders)] == 3
    assert got[("cdc_merge_duration_seconds", orders)] == 12.5
    assert got[("cdc_merge_day_timestamp_seconds", orders)] == MIDNIGHT
    assert got[("cdc_merge_last_success_timestamp_seconds", orders)] == 1000.0
    assert got[("cdc_merge_last_run_failed", orders)] == 0
    # The verdict per table and day: a mismatch marks the day red (0), a match 1.
    assert got[("cdc_merge_check_ok", (("dt", "2026-11-21"), ("table", "orders")))] == 0
    assert got[("cdc_merge_check_ok", (("dt", "2026-11-21"), ("table", "users")))] == 1
    assert got[("cdc_merge_check_mismatched_days", orders)] == 1
    # A table without a check column has no verdict (rather than a green one).
    assert not [key for key in got if key[0] == "cdc_merge_check_ok" and "items" in str(key)]


def test_the_next_run_keeps_other_tables_and_a_failure_keeps_the_last_success(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cdc_merge.prom"
    first = MergeMetrics(CollectorRegistry())
    record_outcome(first, merged("orders", []), now=1000.0)
    record_outcome(first, merged("users", [DAY]), now=1000.0)
    first.write(path)

    second = MergeMetrics(CollectorRegistry())
    second.load(path)
    record_outcome(second, TableOutcome("orders", None, "Spark went away"), now=2000.0)
    second.write(path)
    got = samples(path.read_text())
    orders, users = (("table", "orders"),), (("table", "users"),)
    assert got[("cdc_merge_last_run_failed", orders)] == 1
    assert got[("cdc_merge_last_run_timestamp_seconds", orders)] == 2000.0
    assert got[("cdc_merge_last_success_timestamp_seconds", orders)] == 1000.0
    assert got[("cdc_merge_rows", orders)] == 1200
    # users was not merged this run: its red day stays red until a merge says otherwise.
    assert got[("cdc_merge_check_ok", (("dt", "2026-11-21"), ("table", "users")))] == 0
    assert got[("cdc_merge_last_run_failed", users)] == 0


def test_a_first_failure_has_no_success_and_no_figures() -> None:
    metrics = MergeMetrics(CollectorRegistry())
    record_outcome(metrics, TableOutcome("orders", None, "not ready"), now=5.0)
    got = samples(generate_latest(metrics.registry).decode())
    assert got == {
        ("cdc_merge_last_run_timestamp_seconds", (("table", "orders"),)): 5.0,
        ("cdc_merge_last_run_failed", (("table", "orders"),)): 1.0,
    }


def test_a_day_not_ready_or_an_hour_already_merged_changes_no_figure() -> None:
    """Not ready yet is waiting, not a failed merge (no CdcMergeFailed); an hour skipped as
    already merged was no merge either."""
    metrics = MergeMetrics(CollectorRegistry())
    record_outcome(metrics, TableOutcome("orders", None, "not ready", not_ready=True), now=5.0)
    record_outcome(metrics, TableOutcome("orders", None, None, skipped="merged"), now=6.0)
    assert samples(generate_latest(metrics.registry).decode()) == {}
