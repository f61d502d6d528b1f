"""``cdc-mirror merge``: argument checks, one Spark session for all requested tables, a line
per table as it starts and as it ends. A failing table does not stop the others; the caller
exits non-zero when any failed (named on stderr, one sentence each) or when a table's check
against MySQL found a mismatch."""

from __future__ import annotations

from datetime import date

from rich.console import Console

from merge.archive import ArchiveOverride
from merge.job import MergeRequest, TableOutcome, build_merger, merge_tables
from simple_binlog.config import Settings
from simple_binlog.errors import ConfigError


def parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--dt must be a day like 2026-11-21 (got {text!r}).") from None


def plan_requests(
    settings: Settings,
    dt: str,
    tables: list[str],
    all_tables: bool,
    ignore_archive_rule: bool,
    force_archive_rule: bool,
    wait_ready_s: float | None,
    skip_readiness: bool = False,
) -> list[MergeRequest]:
    """Pure: the merges a command line asks for (ConfigError when it asks for nonsense)."""
    day = parse_day(dt)
    if ignore_archive_rule and force_archive_rule:
        raise ConfigError("--ignore-archive-rule and --force-archive-rule exclude each other.")
    if bool(tables) == all_tables:
        raise ConfigError("name the tables to merge with --table, or use --all (not both).")
    if all_tables:
        names = [t.name for t in settings.tables if "hive" in t.targets]
        if not names:
            raise ConfigError("no configured table is mirrored to Hive (tables: in the config).")
    else:
        names = [settings.table(name).name for name in tables]
    override = (
        ArchiveOverride.IGNORE
        if ignore_archive_rule
        else ArchiveOverride.FORCE
        if force_archive_rule
        else ArchiveOverride.NONE
    )
    if skip_readiness and wait_ready_s is not None:
        raise ConfigError("--skip-readiness and --wait-ready-s exclude each other.")
    return [MergeRequest(name, day, override, wait_ready_s, skip_readiness) for name in names]


def run_merge_command(
    settings: Settings,
    dt: str,
    tables: list[str],
    all_tables: bool,
    ignore_archive_rule: bool,
    force_archive_rule: bool,
    wait_ready_s: float | None,
    console: Console,
    err_console: Console,
    skip_readiness: bool = False,
) -> list[TableOutcome]:
    """Run the merges, reporting each table as it starts and ends; returns every outcome."""
    requests = plan_requests(
        settings,
        dt,
        tables,
        all_tables,
        ignore_archive_rule,
        force_archive_rule,
        wait_ready_s,
        skip_readiness,
    )
    merger = build_merger(settings)
    outcomes: list[TableOutcome] = []
    try:
        for number, request in enumerate(requests, 1):
            console.print(
                f"merging {request.table} {request.dt} ({number} of {len(requests)}) …",
                markup=False,
                highlight=False,
            )
            [outcome] = merge_tables(merger, [request])
            _report(outcome, console, err_console)
            outcomes.append(outcome)
    finally:
        merger.spark.stop()
    return outcomes


def _report(outcome: TableOutcome, console: Console, err_console: Console) -> None:
    """One line for the table (plain text: names and reasons are never read as markup)."""
    if outcome.result is None:
        err_console.print(f"error: {outcome.table}: {outcome.error}", markup=False)
        return
    result = outcome.result
    check = (
        "" if result.check is None else ("; check ok" if result.check.ok else "; check MISMATCH")
    )
    provisional = "" if result.readiness == "ready" else " (day not ready: provisional)"
    console.print(
        f"{outcome.table} {result.dt}: {result.rows} rows from {result.changes} changes "
        f"in {result.seconds:.1f} s; archive rule: {result.archive.reason}{check}{provisional}",
        markup=False,
    )
