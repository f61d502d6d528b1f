"""``cdc-mirror replay``: a run (new or resumed) with a progress bar in the terminal.

The run itself goes on in a thread of its own so Ctrl-C can cancel it cleanly: the current
chunk is committed or not at all, the run is recorded as cancelled, and ``--resume RUN_ID``
continues after the last committed key.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, load_source_snapshot
from mock_replay.errors import ReplayError
from mock_replay.progress import TableProgress
from mock_replay.publish import CancelWatch, KafkaProgressStore
from mock_replay.runner import (
    Cancellation,
    PreparedRun,
    ReplayRequest,
    RunOutcome,
    execute_run,
    load_for_resume,
    start_run,
)

log = logging.getLogger(__name__)


class RowsPerSecondColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed or 0:,.0f} rows/s", style="progress.data.speed")


@dataclass
class _Totals:
    """Rows done per table, summed for the bar."""

    done: dict[str, int]
    estimated: dict[str, int]

    def update(self, progress: TableProgress) -> tuple[int, int]:
        self.done[progress.table] = progress.rows_done
        # information_schema's estimate can be short; a finished table counts what it had.
        self.estimated[progress.table] = (
            progress.rows_done
            if progress.state == "done"
            else max(progress.estimated_rows, progress.rows_done)
        )
        return sum(self.done.values()), sum(self.estimated.values())


def _prepare(
    settings: Settings,
    request: ReplayRequest,
    resume: str | None,
    store: KafkaProgressStore,
    console: Console,
    config: ConfigSnapshot,
) -> tuple[PreparedRun, dict[str, TableProgress]]:
    if resume:
        prepared, existing = load_for_resume(
            settings, request.instance, resume, store, request.rate_limit, config
        )
        console.print(
            f"resuming replay run [bold]{escape(resume)}[/] ({len(prepared.spec.tables)} tables)"
        )
        return prepared, existing
    prepared = start_run(settings, request, store, config=config)
    console.print(
        f"replay run [bold]{escape(prepared.spec.run_id)}[/]: {len(prepared.spec.tables)} tables"
        f" of {escape(f'{request.db_prefix}*.{request.table_prefix}*')}, executeTime "
        f"{prepared.spec.execute_day} (UTC); resume with --resume {escape(prepared.spec.run_id)}"
    )
    return prepared, {}


def run_replay_command(
    settings: Settings,
    request: ReplayRequest,
    resume: str | None,
    console: Console,
    show_progress: bool = True,
) -> RunOutcome:
    # The instance with its password, once, at start: from the file, or from the web admin
    # with the instance's source_reader token (config_store.source_tokens).
    config = load_source_snapshot(settings, request.instance)
    store = KafkaProgressStore(settings.kafka, request.instance)
    store.ensure_topics()
    prepared, existing = _prepare(settings, request, resume, store, console, config)
    spec = prepared.spec
    cancellation = Cancellation(CancelWatch(settings.kafka, spec.instance, spec.run_id))
    totals = _Totals(
        {name: p.rows_done for name, p in existing.items()},
        {name: max(shape.estimated_rows, 1) for name, shape in prepared.shapes.items()},
    )
    progress_bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RowsPerSecondColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not show_progress,
        transient=False,
    )
    task = progress_bar.add_task(
        spec.run_id, total=sum(totals.estimated.values()), completed=sum(totals.done.values())
    )

    def on_progress(progress: TableProgress) -> None:
        done, estimated = totals.update(progress)
        progress_bar.update(task, completed=done, total=max(estimated, done))

    outcome: list[RunOutcome] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(
                execute_run(settings, prepared, existing, store, cancellation, on_progress)
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, re-raised there
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"replay-{spec.run_id}", daemon=True)
    try:
        with progress_bar:
            thread.start()
            try:
                while thread.is_alive():
                    thread.join(0.2)
            except KeyboardInterrupt:
                console.print("cancelling after the current chunk …")
                cancellation.cancel()
                thread.join()
            if outcome and outcome[0].state == "done":
                done = sum(totals.done.values())
                progress_bar.update(task, completed=done, total=done)
    finally:
        cancellation.close()
        store.close()
    if failure:
        raise failure[0]
    if not outcome:
        raise ReplayError(f"replay run {spec.run_id} ended without a result.")
    result = outcome[0]
    rate = result.rows / result.seconds if result.seconds > 0 else 0.0
    console.print(
        f"replay run {result.run_id} {result.state}: {result.rows:,} rows published in "
        f"{result.seconds:,.1f} s ({rate:,.0f} rows/s) from {len(spec.tables)} tables",
        markup=False,
    )
    if result.state == "cancelled":
        console.print(
            f"resume with: cdc-mirror replay --instance {spec.instance} --resume {spec.run_id}",
            markup=False,
        )
    return result
