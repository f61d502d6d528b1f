"""``cdc-mirror merge``: argument checks, one Spark session for all requested tables, a line
per table as it starts and as it ends. A failing table does not stop the others; the caller
exits non-zero when any failed (named on stderr, one sentence each) or when a table's check
against MySQL found a mismatch."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

from rich.console import Console

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, load_snapshot, snapshot_from_settings
from cdc_platform.observability import ObservabilityServer, Probe, serve_observability
from merge import records
from merge.archive import ArchiveOverride
from merge.hours import parse_hour
from merge.job import Merger, MergeRequest, TableOutcome, build_merger, merge_tables
from merge.metrics import MergeMetrics, textfile_path
from simple_binlog.errors import ConfigError

log = logging.getLogger(__name__)

# The ``hour`` of a planned request that stands for "every ready hour of the table".
READY_HOURS = -1


def parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--dt must be a day like 2026-11-21 (got {text!r}).") from None


def _when(
    settings: Settings, dt: str | None, hour: str | None, ready_hours: bool
) -> tuple[date, int | None]:
    """The day and hour (None: the whole day; ``READY_HOURS``) a command line names."""
    if (dt is not None) + (hour is not None) + ready_hours != 1:
        raise ConfigError(
            "name the day with --dt, the hour with --hour, or use --ready-hours (one of them)."
        )
    if hour is not None:
        try:
            parsed = parse_hour(hour, ZoneInfo(settings.stream_writer.time_zone))
        except ValueError as exc:
            raise ConfigError(f"--hour: {exc}.") from None
        return parsed.day, parsed.index
    if dt is not None:
        return parse_day(dt), None
    return date.today(), READY_HOURS


def plan_requests(
    settings: Settings,
    dt: str | None,
    tables: list[str],
    all_tables: bool,
    ignore_archive_rule: bool,
    force_archive_rule: bool,
    wait_ready_s: float | None,
    skip_readiness: bool = False,
    config: ConfigSnapshot | None = None,
    hour: str | None = None,
    ready_hours: bool = False,
    remerge: bool = False,
) -> list[MergeRequest]:
    """Pure: the merges a command line asks for (ConfigError when it asks for nonsense), of
    the table mirrors of ``config`` (default: those of ``settings``). ``hour``
    (``2026-11-25T13``) instead of ``dt``: that hour of every named table, which must have
    hourly snapshots; one already merged is skipped unless ``remerge``. ``ready_hours``:
    instead of a day or hour, every ready hour of each named table (one request per table
    with ``hour`` -1: the merger finds its hours)."""
    config = config or snapshot_from_settings(settings)
    day, index = _when(settings, dt, hour, ready_hours)
    if remerge and hour is None:
        raise ConfigError("--remerge merges an hour again: use it with --hour.")
    if ignore_archive_rule and force_archive_rule:
        raise ConfigError("--ignore-archive-rule and --force-archive-rule exclude each other.")
    if bool(tables) == all_tables:
        raise ConfigError("name the tables to merge with --table, or use --all (not both).")
    if all_tables:
        names = [t.name for t in config.tables_for("hive")]
        if not names:
            raise ConfigError("no configured table is mirrored to Hive (tables: in the config).")
    else:
        names = [config.table(name).name for name in tables]
    override = (
        ArchiveOverride.IGNORE
        if ignore_archive_rule
        else ArchiveOverride.FORCE
        if force_archive_rule
        else ArchiveOverride.NONE
    )
    if skip_readiness and wait_ready_s is not None:
        raise ConfigError("--skip-readiness and --wait-ready-s exclude each other.")
    if index is not None:
        daily = [name for name in names if config.table(name).snapshots != "hourly"]
        if daily and not (ready_hours and all_tables):
            option = "--ready-hours" if ready_hours else "--hour"
            raise ConfigError(
                f"{option} merges tables with hourly snapshots; {', '.join(daily)} "
                "has daily ones (snapshots: hourly in its table mirror)."
            )
        names = [name for name in names if name not in daily]
    # An hour named by hand or by the scheduler may have been merged already (its tag
    # exists): reported and skipped, unless --remerge (the web admin's Re-run) asks again.
    skip_merged = hour is not None and not remerge
    return [
        MergeRequest(name, day, override, wait_ready_s, skip_readiness, index, skip_merged)
        for name in names
    ]


def expand_ready_hours(merger: Merger, requests: list[MergeRequest]) -> list[MergeRequest]:
    """Each ``READY_HOURS`` request as one request per ready hour of its table, in order."""
    expanded: list[MergeRequest] = []
    for request in requests:
        if request.hour != READY_HOURS:
            expanded.append(request)
            continue
        for hour in merger.ready_hours(request.table):
            expanded.append(
                MergeRequest(
                    request.table,
                    hour.day,
                    request.override,
                    request.wait_ready_s,
                    request.skip_readiness,
                    hour.index,
                )
            )
    return expanded


def run_merge_command(
    settings: Settings,
    dt: str | None,
    tables: list[str],
    all_tables: bool,
    ignore_archive_rule: bool,
    force_archive_rule: bool,
    wait_ready_s: float | None,
    console: Console,
    err_console: Console,
    skip_readiness: bool = False,
    hour: str | None = None,
    ready_hours: bool = False,
    remerge: bool = False,
) -> list[TableOutcome]:
    """Run the merges, reporting each table as it starts and ends; returns every outcome.
    The table mirrors are read from the configuration store once, at start."""
    config = load_snapshot(settings)
    requests = plan_requests(
        settings,
        dt,
        tables,
        all_tables,
        ignore_archive_rule,
        force_archive_rule,
        wait_ready_s,
        skip_readiness,
        config,
        hour,
        ready_hours,
        remerge,
    )
    metrics = MergeMetrics()
    textfile = textfile_path(settings.lake_dir, settings.merge.metrics_textfile)
    metrics.load(textfile)
    merger: Merger | None = None

    def ready() -> Probe:
        if merger is None:
            return Probe(False, "starting Spark")
        return Probe(True, "merging")

    server = _serve(settings, metrics, ready)
    outcomes: list[TableOutcome] = []
    try:
        merger = build_merger(settings, config)
        try:
            requests = expand_ready_hours(merger, requests)
            if ready_hours and not requests:
                console.print("no hour is ready to merge", markup=False, highlight=False)
            for number, request in enumerate(requests, 1):
                when = (
                    f"{request.dt}T{request.hour:02d}"
                    if request.hour is not None
                    else str(request.dt)
                )
                console.print(
                    f"merging {request.table} {when} ({number} of {len(requests)}) …",
                    markup=False,
                    highlight=False,
                )
                [outcome] = merge_tables(merger, [request])
                _report(outcome, console, err_console)
                outcomes.append(outcome)
                record_outcome(metrics, outcome, time.time())
                _write_textfile(metrics, textfile)
        finally:
            merger.close()
            merger.spark.stop()
    finally:
        if server is not None:
            server.close()
    return outcomes


def record_outcome(metrics: MergeMetrics, outcome: TableOutcome, now: float) -> None:
    """Pure: one table's merge into the metrics (a failure keeps its last success). A day or
    hour not ready yet, or an hour already merged, is no merge: the metrics stay as they were
    (not ready is waiting, not a failure: no CdcMergeFailed)."""
    if outcome.not_ready or outcome.skipped is not None:
        return
    result = outcome.result
    if result is None:
        metrics.failed(outcome.table, now)
        return
    check = result.check
    metrics.succeeded(
        outcome.table,
        result.dt,
        rows=result.rows,
        changes=result.changes,
        files=result.files,
        seconds=result.seconds,
        check_ok=None if check is None else check.ok,
        mismatched_days=None if check is None else len(check.mismatches),
        now=now,
    )


def _serve(
    settings: Settings, metrics: MergeMetrics, ready: Callable[[], Probe]
) -> ObservabilityServer | None:
    """The merge's /metrics and probes while it runs; a merge never fails for them (another
    merge running holds the port: this one goes on without)."""
    port = settings.merge.metrics_port
    if not port:
        return None
    try:
        return serve_observability(
            settings.merge.metrics_host, port, metrics.registry, "merge", ready
        )
    except OSError as exc:
        log.warning("merge metrics not served on port %d (%s); merging anyway", port, exc)
        return None


def _write_textfile(metrics: MergeMetrics, path: Path) -> None:
    try:
        metrics.write(path)
    except OSError as exc:
        log.warning("merge metrics not written to %s: %s", path, exc)


def _report(outcome: TableOutcome, console: Console, err_console: Console) -> None:
    """One line for the table (plain text: names and reasons are never read as markup)."""
    if outcome.skipped is not None:
        console.print(f"{outcome.table} {outcome.skipped}", markup=False)
        return
    if outcome.result is None:
        # Not ready is no error: run again later (exit code NOT_READY).
        kind = "not ready" if outcome.not_ready else "error"
        err_console.print(f"{kind}: {outcome.table}: {outcome.error}", markup=False)
        return
    result = outcome.result
    check = (
        "" if result.check is None else ("; check ok" if result.check.ok else "; check MISMATCH")
    )
    provisional = "" if result.readiness == "ready" else " (day not ready: provisional)"
    when = f"{result.dt}T{result.hour:02d}" if result.hour is not None else str(result.dt)
    console.print(
        f"{outcome.table} {when}: {result.rows} rows from {result.changes} changes "
        f"in {result.seconds:.1f} s; archive rule: {result.archive.reason}{check}{provisional}",
        markup=False,
    )


def write_outcomes(path: Path, outcomes: list[TableOutcome]) -> None:
    """Every table's outcome as JSON (``{"outcomes": [{"table", "error", "notReady",
    "skipped", "result"}]}``, the result as ``MergeResult.to_json``), written atomically:
    what a scheduler reads back."""
    document = {
        "outcomes": [
            {
                "table": o.table,
                "error": o.error,
                "notReady": o.not_ready,
                "skipped": o.skipped,
                "result": None if o.result is None else o.result.to_json(),
            }
            for o in outcomes
        ]
    }
    records.write_json(path, document)
