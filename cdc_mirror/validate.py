"""``cdc-mirror validate``: validation of a table mirror, and its repair through the stream.

Validation and the replay are components and do not know each other: this layer hands the
keys validation found to the replay's key-set replay (``mock_replay.keys.replay_keys``),
which re-publishes them as MOCK events, and validation re-checks them once every target has
applied them (``validation.run.validate_table`` with a ``Repairer``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cdc_platform.config import MySQLInstance, Settings
from cdc_platform.config_store import load_snapshot, load_source_snapshot
from simple_binlog.errors import ExitCode
from validation.plan import SpelledKey
from validation.progress import KafkaProgress, MemoryProgress, ProgressStore, ScanProgress
from validation.run import (
    Options,
    Repairer,
    RepairRequest,
    TableValidation,
    Target,
    describe,
    key_text,
    validate_table,
)


def source_settings(settings: Settings, table: str) -> Settings:
    """The settings validation and its repair read ``table`` with. With ``config_store.source:
    file``, the file's. With ``webui``: the table mirror, its instance and the instance's shard
    rules from the web admin, the instance's MySQL login from the snapshot of its
    ``source_reader`` token (``config_store.source_tokens``): validation hashes chunks on MySQL
    itself, so it needs that login, and it gets that one instance's only (the component token
    carries none)."""
    if settings.config_store.source != "webui":
        return settings
    instance_name = load_snapshot(settings).table(table).instance
    snapshot = load_source_snapshot(settings, instance_name)
    instance = snapshot.instance(instance_name)
    login = instance.login()
    return settings.model_copy(
        update={
            "instances": [
                MySQLInstance(
                    name=login.name,
                    host=login.host,
                    port=login.port,
                    user=login.user,
                    password=login.password,
                    allow_cleartext_password=login.allow_cleartext_password,
                    server_public_key=login.server_public_key,
                )
            ],
            "tables": list(snapshot.tables),
            "shard_rules": list(instance.shard_rules),
        }
    )


def replay_repairer(settings: Settings) -> Repairer:
    """Repairs through the stream: the keys' current MySQL rows as MOCK events."""

    def repair(request: RepairRequest) -> str:
        from mock_replay.keys import replay_keys  # noqa: PLC0415

        done = replay_keys(
            settings, request.instance, request.shards, request.key_columns, request.keys
        )
        return (
            f"re-published {done.rows} rows and {done.deletes} deletes of {request.table} as "
            f"MOCK events at offset {done.offset} (run {done.run_id})"
        )

    return repair


class ReportingProgress:
    """A ``ProgressStore`` that also tells the user how far each target's scan got: a line
    per target at most every ``every_s`` seconds, and when its scan ends (a scan of a large
    table takes minutes, and the report comes only at the end)."""

    def __init__(
        self,
        inner: ProgressStore,
        report: Callable[[str], None],
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner, self._report, self._every_s, self._clock = inner, report, every_s, clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()  # targets are scanned side by side

    def load(self, table: str, target: str) -> ScanProgress | None:
        return self._inner.load(table, target)

    def save(self, progress: ScanProgress) -> None:
        self._inner.save(progress)
        now = self._clock()
        with self._lock:
            last = self._last.get(progress.target)
            if not progress.done and last is not None and now - last < self._every_s:
                return
            self._last[progress.target] = now
        state = "scan done" if progress.done else "scanning"
        chunks = f"{progress.chunks:,} chunk{'' if progress.chunks == 1 else 's'}"
        self._report(
            f"{progress.table} → {progress.target}: {state}, {progress.rows:,} rows in "
            f"{chunks} compared"
        )


def run_validation(
    settings: Settings,
    table: str,
    targets: Sequence[Target],
    options: Options,
    repair: bool = False,
    resume: bool = True,
    on_progress: Callable[[str], None] | None = None,
    repair_max_keys: int | None = None,
) -> TableValidation:
    """What the command runs; ``resume``: keep the scan's progress in Kafka and continue an
    unfinished scan of the same table and target; ``on_progress``: gets a line now and then
    while the scans run (``ReportingProgress``); ``repair_max_keys``: with ``repair``, the
    most keys it may re-publish (above, it only reports). The table mirror and its MySQL
    login come from ``config_store`` (``source_settings``)."""
    settings = source_settings(settings, table)
    store: ProgressStore = MemoryProgress()
    kafka_store: KafkaProgress | None = None
    if resume:
        kafka_store = KafkaProgress(settings.kafka, settings.table(table).instance)
        store = kafka_store
    if on_progress is not None:
        store = ReportingProgress(store, on_progress)
    try:
        return validate_table(
            settings,
            table,
            targets,
            options,
            replay_repairer(settings) if repair else None,
            store=store,
            repair_max_keys=repair_max_keys,
        )
    finally:
        if kafka_store is not None:
            kafka_store.close()


def outcome_lines(result: TableValidation) -> list[str]:
    """The report: each target, then the repair and what the re-check found."""
    lines: list[str] = []
    for report in result.reports:
        lines += describe(report)
    lines += list(result.unreachable.values())
    if result.repair_skipped is not None:
        lines.append(f"repair: {result.repair_skipped}")
    if result.repair is not None:
        lines.append(f"repair: {result.repaired}")
        for report in result.after_repair:
            total = len(result.repair.keys)
            # Keys, not names: a name spelled otherwise is its key's (``SpelledKey``), and the
            # repair re-published each key once.
            still = len({tuple(k) for k in [*report.keys(), *report.unsettled]})
            lines.append(
                f"  {report.target}: {total - still} of {total} keys equal after the repair"
                + (f", {still} still differ:" if still else "")
            )
            for item in report.differences:
                why = (
                    "a name the mirror never writes: the repair cannot remove it; delete it "
                    "in the target"
                    if isinstance(item.key, SpelledKey)
                    else "the target holds a newer change than the repair, or the key is "
                    "written again; validate again later"
                )
                lines.append(f"    key {key_text(item.key)}: {item.difference.value} ({why})")
            lines += [f"    key {key_text(k)}: still changing" for k in report.unsettled]
    return lines


def write_result(result: TableValidation, path: Path) -> None:
    path.write_text(json.dumps(result.to_json(), indent=1, default=str))


def exit_code(result: TableValidation) -> ExitCode:
    if result.unreachable:
        return ExitCode.UNAVAILABLE
    return ExitCode.OK if result.converged else ExitCode.CHECK_FAILED
