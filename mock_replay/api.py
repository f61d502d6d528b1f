"""History replay as a Python API, for the web admin.

``ReplayService.start`` validates and records a run at once — a bad condition, an unknown
instance, a table without a key raise ``CdcMirrorError`` with one sentence and nothing is
published — then reads and publishes it in a background thread. ``status`` and ``runs`` read
the instance's progress topic, so they show runs started by the CLI or by another process
and survive restarts; ``cancel`` stops a run of this process at once and asks a run of any
other process to stop through the progress topic.

Status reads use ``read_committed``: a run killed within the last minute can hold them back
until the broker aborts its open transaction (``transaction.timeout.ms``, 60 s).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, load_snapshot, load_source_snapshot
from mock_replay.errors import ReplayError
from mock_replay.progress import RunStatus, TableProgress
from mock_replay.publish import CancelWatch, KafkaProgressStore
from mock_replay.runner import (
    Cancellation,
    PreparedRun,
    ReplayRequest,
    RunOutcome,
    execute_run,
    load_for_resume,
    request_cancel,
    start_run,
)
from simple_binlog.errors import CdcMirrorError

log = logging.getLogger(__name__)

__all__ = ["ReplayRequest", "ReplayService", "RunStatus", "TableProgress"]


@dataclass
class _LocalRun:
    instance: str
    cancellation: Cancellation
    thread: threading.Thread | None = None
    outcome: RunOutcome | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ReplayService:
    """Start, watch and cancel replay runs. One per process; thread-safe."""

    def __init__(self, settings: Settings, config: ConfigSnapshot | None = None) -> None:
        """``settings``: Kafka and the ``replay:`` limits; ``config``: the instances
        (connection with password, shard rules), by default read from the configuration store
        once, now. With ``config_store.source: webui`` that snapshot carries no password: a
        run reads its instance's login with the instance's source_reader token when it
        starts (``_with_login``)."""
        self._settings = settings
        self._given = config is not None
        self._config = config or load_snapshot(settings)
        self._local: dict[str, _LocalRun] = {}
        self._lock = threading.Lock()

    def _store(self, instance: str) -> KafkaProgressStore:
        self._config.instance(instance)  # ConfigError naming the known instances
        return KafkaProgressStore(self._settings.kafka, instance)

    def start(self, request: ReplayRequest) -> str:
        """Validate and record a new run, start it in the background; returns its id."""
        store = self._store(request.instance)
        prepared = start_run(
            self._settings, request, store, config=self._with_login(request.instance)
        )
        self._launch(request.instance, prepared, {}, store)
        return prepared.spec.run_id

    def resume(self, instance: str, run_id: str, rate_limit: float | None = None) -> str:
        """Continue a recorded run after its last committed key (e.g. after a crash)."""
        with self._lock:
            local = self._local.get(run_id)
            if local is not None and not local.done.is_set():
                raise ReplayError(f"replay run {run_id} is still running in this process.")
        store = self._store(instance)
        prepared, existing = load_for_resume(
            self._settings, instance, run_id, store, rate_limit, self._with_login(instance)
        )
        self._launch(instance, prepared, existing, store)
        return run_id

    def _with_login(self, instance: str) -> ConfigSnapshot:
        """The snapshot with ``instance``'s password: the one given or read at start, except
        from the web admin, whose component token carries none: then the snapshot of the
        instance's source_reader token (``config_store.source_tokens``), read now."""
        if self._given or self._settings.config_store.source != "webui":
            return self._config
        return load_source_snapshot(self._settings, instance)

    def _launch(
        self,
        instance: str,
        prepared: PreparedRun,
        existing: dict[str, TableProgress],
        store: KafkaProgressStore,
    ) -> None:
        run_id = prepared.spec.run_id
        cancellation = Cancellation(CancelWatch(self._settings.kafka, instance, run_id))
        local = _LocalRun(instance, cancellation)

        def work() -> None:
            try:
                local.outcome = execute_run(self._settings, prepared, existing, store, cancellation)
            except CdcMirrorError as exc:
                local.error = str(exc)
                log.error("replay run %s failed: %s", run_id, exc)
            finally:
                cancellation.close()
                store.close()
                local.done.set()

        local.thread = threading.Thread(target=work, name=f"replay-{run_id}", daemon=True)
        with self._lock:
            self._local[run_id] = local
        local.thread.start()

    def status(self, run_id: str, instance: str | None = None) -> RunStatus:
        """The run's recorded spec, per-table progress and state."""
        for name in self._instances(run_id, instance):
            status = self._store(name).runs().get(run_id)
            if status is not None:
                return status
        raise ReplayError(f"no replay run {run_id!r} is recorded.")

    def runs(self, instance: str | None = None) -> list[RunStatus]:
        """Every recorded run, newest first."""
        found: list[RunStatus] = []
        for name in [instance] if instance else [i.name for i in self._config.instances]:
            found.extend(self._store(name).runs().values())
        return sorted(found, key=lambda s: s.spec.created_ms, reverse=True)

    def cancel(self, run_id: str, instance: str | None = None) -> None:
        """Stop the run after its current chunk; what is committed stays committed."""
        with self._lock:
            local = self._local.get(run_id)
        if local is not None:
            local.cancellation.cancel()
            instance = local.instance
        status = self.status(run_id, instance)
        if status.state_name == "running":
            store = self._store(status.spec.instance)
            try:
                request_cancel(store, run_id)
            finally:
                store.close()

    def wait(self, run_id: str, timeout_s: float | None = None) -> RunOutcome | None:
        """Wait for a run of this process to end; its outcome (None if still running).
        Raises ReplayError with the run's error if it failed."""
        with self._lock:
            local = self._local.get(run_id)
        if local is None:
            raise ReplayError(f"replay run {run_id!r} was not started by this process.")
        if not local.done.wait(timeout_s):
            return None
        if local.error is not None:
            raise ReplayError(local.error)
        return local.outcome

    def is_running_here(self, run_id: str) -> bool:
        with self._lock:
            local = self._local.get(run_id)
        return local is not None and not local.done.is_set()

    def _instances(self, run_id: str, instance: str | None) -> list[str]:
        if instance:
            return [instance]
        with self._lock:
            local = self._local.get(run_id)
        if local is not None:
            return [local.instance]
        return [i.name for i in self._config.instances]
