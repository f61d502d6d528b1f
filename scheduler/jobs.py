"""What the scheduler starts and what it asks: each job is a ``cdc-mirror`` command in a child
process (merge, validate, the configured maintenance command), the lake's state comes from
merge's public readiness API (``merge.readiness``) and the snapshot tables' tags
(``cdc_platform.snapshot_tags``): a day or hour merged outside the scheduler counts as merged.

A child process, not a call: a merge runs Spark, which is best started and ended with its
process; a scheduler that loses its leadership stops its child at once (``stop``), so two
schedulers never merge the same day together; and the exit codes are the CLI's
(``simple_binlog.errors.EXIT_CODES``): 0 done, 4 a check found a mismatch, 6 the day or hour
is not ready yet (a merge that waits: ``waiting``), anything else failed. An hour's merge
answering an operator's re-run, or retrying a failed or interrupted one, passes ``--remerge``
(merge skips an hour whose tag exists otherwise: one merged by hand is not merged twice).
Each run's output goes to ``<stack.home>/scheduler/<kind>-<table>-<dt>.log`` (an
hour's merge: ``merge-<table>-<dt>T<hh>.log``, ``cdc-mirror merge --hour``); the
last line of its errors is the run's error sentence. A merge's and a validation's figures
come from their ``--result-file`` (``validation_results``: each target's outcome).

``MemoryLake`` and ``FakeJobs`` are the fakes: real code for the scheduler's unit tests and
the failover test.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.control import RunState, ValidationResult, validation_results
from cdc_platform.snapshot_tags import SnapshotTagReader, SnapshotTags, TagsUnavailableError
from scheduler.plan import Due
from simple_binlog.errors import ExitCode

if TYPE_CHECKING:
    from merge.readiness import MergedDay

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobResult:
    state: RunState  # succeeded | mismatch | failed | waiting (not ready yet)
    rows: int | None = None
    files: int | None = None
    check_ok: bool | None = None
    error: str | None = None
    validation: list[ValidationResult] | None = None


class Lake(Protocol):
    def ready_days(self) -> set[date]:
        """The days the stream writer declared ready."""

    def snapshot_tags(self, tables: list[str]) -> dict[str, SnapshotTags]:
        """Each table's merged days (a final snapshot, not a provisional one) and hours, as
        the lake holds them whoever merged them, each with its snapshot's commit time."""


class Jobs(Protocol):
    def run(self, due: Due, stop: threading.Event) -> JobResult:
        """Run ``due`` to its end, or until ``stop`` is set (then: failed, stopped)."""


# --- the real ones ------------------------------------------------------------------------

# After the snapshot tables' tags could not be read, the next try (a pass meanwhile goes by
# the run history and merge's records).
TAGS_RETRY_S = 600.0


class MergeLake:
    """The lake as merge's public readiness API (``merge.readiness``) and the snapshot tables'
    tags (``cdc_platform.snapshot_tags``: one metastore query a pass, a table's metadata file
    read only when it changed) report it."""

    def __init__(
        self,
        settings: Settings,
        config: Callable[[], ConfigSnapshot],
        tags: SnapshotTagReader | None = None,
    ) -> None:
        self._settings = settings
        self._config = config
        self._tags = tags or SnapshotTagReader(settings)
        self._unavailable: str | None = None  # why the tags cannot be read (said once)
        self._next_try = 0.0  # monotonic time: after a failed read, not before

    def ready_days(self) -> set[date]:
        from merge.readiness import ready_days  # noqa: PLC0415 - merge imports Spark's API

        return set(ready_days(self._settings, self._config()))

    def snapshot_tags(self, tables: list[str]) -> dict[str, SnapshotTags]:
        """The tags' days and hours, with the days of merge's records: a day whose merge was
        provisional (``--skip-readiness``) is not merged even though its tag exists. Whether
        it was comes from the facts stored with the tag (the same metadata file, so a merge
        on any host counts), else from merge's record on this host (a tag set by an earlier
        version)."""
        from merge.readiness import merged_days  # noqa: PLC0415

        tags: dict[str, SnapshotTags] = {}
        if time.monotonic() >= self._next_try:
            try:
                tags = self._tags.tags(tables)
                self._unavailable = None
            except TagsUnavailableError as exc:
                if str(exc) != self._unavailable:
                    log.warning(
                        "%s The scheduler goes by its run history and merge's records, and "
                        "tries again in %g s.",
                        exc,
                        TAGS_RETRY_S,
                    )
                self._unavailable = str(exc)
                # Not every pass: a storage this process cannot reach fails the same way.
                self._next_try = time.monotonic() + TAGS_RETRY_S
        found: dict[str, SnapshotTags] = {}
        for table in tables:
            records = merged_days(self._settings, table)
            tagged = tags.get(table, SnapshotTags())
            days = {
                d: ms
                for d, ms in tagged.days.items()
                if not tagged.provisional.get(d, _provisional(records.get(d)))
            }
            for day, record in records.items():
                if not record.provisional and not tagged.provisional.get(day, False):
                    days.setdefault(day, 0)  # a record without its tag: merged, time unknown
            found[table] = SnapshotTags(days, tagged.hours)
        return found


def _provisional(record: MergedDay | None) -> bool:
    return record is not None and record.provisional


def _last_error_line(path: Path) -> str | None:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        text = line.strip()
        for prefix in ("error:", "not ready:"):
            if text.startswith(prefix):
                return text.removeprefix(prefix).strip()[:2000]
    return None


class CommandJobs:
    """Each job a ``cdc-mirror`` child process (``python -m cdc_mirror``) with the same
    configuration file as the scheduler."""

    def __init__(
        self,
        settings: Settings,
        config: Callable[[], ConfigSnapshot],
        config_file: Path | None,
        python: str = sys.executable,
        poll_s: float = 0.5,
    ) -> None:
        self._settings = settings
        self._config = config
        self._config_file = config_file
        self._python = python
        self._poll_s = poll_s
        self.log_dir = settings.stack.home.resolve() / "scheduler"

    def _cli(self, *args: str) -> list[str]:
        config = ["--config", str(self._config_file)] if self._config_file else []
        return [self._python, "-m", "cdc_mirror", *config, *args]

    def command(self, due: Due, result_file: Path) -> list[str] | None:
        """The command line of ``due``; None when there is nothing to run for it."""
        day = due.dt.isoformat()
        if due.kind == "merge":
            # An hour of a table with hourly snapshots: merge's own --hour (its readiness too).
            when = ["--dt", day] if due.hour is None else ["--hour", due.when]
            if due.hour is not None and (due.request is not None or due.attempt > 1):
                # A re-run must redo the hour; a retry too (the failed attempt may have set
                # its tag before its check failed to run).
                when.append("--remerge")
            return self._cli(
                "merge", "--table", due.table, *when, "--result-file", str(result_file)
            )
        if due.kind == "validation":
            mirror = self._config().table(due.table)
            targets = mirror.scheduled_validation_targets  # none: validation is off
            if not targets:
                return None
            # validation: repair re-publishes the differing keys through the stream, at most
            # validation_repair_max_keys of them (above, the run only reports them).
            repair = (
                ["--repair", f"--repair-max-keys={mirror.validation_repair_max_keys}"]
                if mirror.validation == "repair"
                else []
            )
            return self._cli(
                "validate",
                due.table,
                *(f"--target={t}" for t in targets),
                *repair,
                "--result-file",
                str(result_file),
                "--no-record",  # the run is recorded here, with its outcome
            )
        template = self._settings.scheduler.maintenance_command
        if not template:
            return None
        return [part.format(table=due.table, dt=day) for part in template]

    def run(self, due: Due, stop: threading.Event) -> JobResult:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{due.kind}-{due.table}-{due.when}"
        output = self.log_dir / f"{stem}.log"
        result_file = self.log_dir / f"{stem}.result.json"
        result_file.unlink(missing_ok=True)
        command = self.command(due, result_file)
        if command is None:
            return JobResult("succeeded", error=None)
        log.info("starting %s", " ".join(command))
        timeout_s = self._settings.scheduler.job_timeout_s
        with output.open("w") as sink:
            # A session of its own: a stop ends the child's whole tree (Spark's JVM too).
            child = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
            deadline = time.monotonic() + timeout_s
            while child.poll() is None:
                if stop.is_set() or time.monotonic() > deadline:
                    _end(child)
                    why = "the scheduler stopped" if stop.is_set() else f"{timeout_s:g} s passed"
                    return JobResult("failed", error=f"stopped before it ended ({why}).")
                time.sleep(self._poll_s)
        return _outcome(child.returncode, output, result_file, due)


def _end(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's process group, SIGKILL after 30 s."""
    for signum, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)
        try:
            child.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _validation_outcome(result_file: Path) -> list[ValidationResult] | None:
    try:
        return validation_results(json.loads(result_file.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("the validation's result file %s cannot be read: %s", result_file, exc)
        return None


def _outcome(code: int, output: Path, result_file: Path, due: Due) -> JobResult:
    validation = _validation_outcome(result_file) if due.kind == "validation" else None
    figures: dict[str, Any] = {}
    if due.kind == "merge" and result_file.is_file():
        try:
            document = json.loads(result_file.read_text())
            [outcome] = [o for o in document["outcomes"] if o["table"] == due.table]
            figures = outcome.get("result") or {}
        except (ValueError, KeyError, TypeError):
            figures = {}
    rows, files, check_ok = figures.get("rows"), figures.get("files"), figures.get("checkOk")
    if validation is not None:
        rows = sum(result.rows for result in validation)
        verdicts = {result.verdict for result in validation}
        check_ok = None if "unreachable" in verdicts else verdicts <= {"equal"}
    if code == ExitCode.OK:
        return JobResult("succeeded", rows, files, check_ok, validation=validation)
    if code == ExitCode.CHECK_FAILED:
        what = "the check against MySQL" if due.kind == "merge" else "the validation"
        error = f"{what} found a difference."
        skipped = next((r.repair_skipped for r in validation or [] if r.repair_skipped), None)
        if skipped is not None:
            error = f"{what} found a difference; {skipped}"
        elif any(r.still_differing for r in validation or []):
            error = f"{what} found a difference, and keys still differ after its repair."
        return JobResult("mismatch", rows, files, False, error, validation)
    if code == ExitCode.NOT_READY and due.kind == "merge":
        return JobResult("waiting", error=_last_error_line(output) or "not ready yet.")
    unreachable = [r.error for r in validation or [] if r.error]
    error = (
        _last_error_line(output)
        or (unreachable[0] if unreachable else None)
        or f"exited with code {code} (see {output})."
    )
    return JobResult("failed", rows, files, check_ok, error, validation)


# --- the fakes ----------------------------------------------------------------------------


@dataclass
class MemoryLake:
    """``merged``: each table's merged days, ``hours``: its merged hours (their tags);
    ``committed``: when a tag's snapshot was committed (Unix ms, by (table, day, hour); 0
    when not listed)."""

    ready: set[date] = field(default_factory=set)
    merged: dict[str, set[date]] = field(default_factory=dict)
    hours: dict[str, set[tuple[date, int]]] = field(default_factory=dict)
    committed: dict[tuple[str, date, int | None], int] = field(default_factory=dict)

    def ready_days(self) -> set[date]:
        return set(self.ready)

    def snapshot_tags(self, tables: list[str]) -> dict[str, SnapshotTags]:
        def at(table: str, day: date, hour: int | None) -> int:
            return self.committed.get((table, day, hour), 0)

        return {
            table: SnapshotTags(
                {day: at(table, day, None) for day in self.merged.get(table, set())},
                {(day, h): at(table, day, h) for day, h in self.hours.get(table, set())},
            )
            for table in tables
        }

    def tag(self, table: str, day: date, hour: int | None, committed_ms: int = 0) -> None:
        """A day's or an hour's tag set (by a merge, the scheduler's or another)."""
        if hour is None:
            self.merged.setdefault(table, set()).add(day)
        else:
            self.hours.setdefault(table, set()).add((day, hour))
        self.committed[(table, day, hour)] = committed_ms


@dataclass
class FakeJobs:
    """Runs nothing: records each job, tags a merged day or hour in ``lake``, and answers with
    ``results[(kind, table, dt)]`` (an hour's merge: ``(kind, table, dt, hour)``) when set
    (a list: one per attempt) else success."""

    lake: MemoryLake
    results: dict[tuple[object, ...], list[JobResult]] = field(default_factory=dict)
    started: list[Due] = field(default_factory=list)
    on_start: Callable[[Due], None] | None = None

    def run(self, due: Due, stop: threading.Event) -> JobResult:
        self.started.append(due)
        if self.on_start is not None:
            self.on_start(due)
        key: tuple[object, ...] = (due.kind, due.table, due.dt)
        if due.hour is not None:
            key = (*key, due.hour)
        queued = self.results.get(key)
        result = queued.pop(0) if queued else JobResult("succeeded", rows=1, files=1)
        if due.kind == "merge" and result.state in ("succeeded", "mismatch"):
            self.lake.tag(due.table, due.dt, due.hour)  # a check runs after the tag is set
        return result
