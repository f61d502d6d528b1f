"""``webui.replay.ReplayService`` over ``mock_replay.api`` (the real history replay).

mock_replay takes its instances as a configuration snapshot; every call hands it the
admin's instances (passwords decrypted in memory only, each with its own shard rules), and
the run is published to ``<kafka.topic_prefix><instance>`` as mock_replay does — an instance
whose topic was set to something else in the admin is refused rather than replayed into the
wrong topic.

Runs started here are tracked by the service that started them (cancel stops them at once);
status and history come from the instances' progress topics, so runs of the CLI or of other
processes show too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import date

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig
from cdc_platform.kafka import topic_names
from mock_replay import api as mock_api
from mock_replay.errors import ReplayError
from mock_replay.publish import progress_topic
from simple_binlog.errors import CdcMirrorError
from webui.replay import ReplayNotFoundError, ReplayRequest, ReplayState, ReplayStatus

log = logging.getLogger(__name__)

# The admin's instances as mock_replay needs them: with their passwords.
InstancesProvider = Callable[[], list[InstanceConfig]]

_STATES: dict[str, ReplayState] = {
    "running": "running",
    "done": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
}


class MockReplayService:
    def __init__(self, settings: Settings, instances: InstancesProvider) -> None:
        self._settings = settings
        self._instances = instances
        self._lock = threading.Lock()
        self._started_by: dict[str, mock_api.ReplayService] = {}

    def _service(self) -> mock_api.ReplayService:
        configured = tuple(self._instances())
        if not configured:
            raise CdcMirrorError("no instance is configured in the admin yet; add one first.")
        return mock_api.ReplayService(
            self._settings, ConfigSnapshot(version=0, instances=configured)
        )

    def start(self, request: ReplayRequest) -> str:
        expected = f"{self._settings.kafka.topic_prefix}{request.instance}"
        topics = {i.name: i.topic or expected for i in self._instances()}
        if request.instance in topics and topics[request.instance] != expected:
            raise CdcMirrorError(
                f"instance {request.instance!r} publishes to {topics[request.instance]!r}, but "
                f"replays go to {expected!r}; use the default topic to replay this instance."
            )
        service = self._service()
        run_id = service.start(
            mock_api.ReplayRequest(
                instance=request.instance,
                db_prefix=request.db_prefix,
                table_prefix=request.table_prefix,
                condition=request.condition,
                execute_day=request.execute_time.isoformat() if request.execute_time else None,
                batch_size=request.batch_size,
            )
        )
        with self._lock:
            self._started_by[run_id] = service
        return run_id

    def status(self, run_id: str) -> ReplayStatus:
        return _status(self._find(run_id)[0])

    def cancel(self, run_id: str) -> ReplayStatus:
        run, service = self._find(run_id)
        service.cancel(run_id, run.spec.instance)
        return self.status(run_id)

    def _find(self, run_id: str) -> tuple[mock_api.RunStatus, mock_api.ReplayService]:
        """The run and the service to act on it: the one that started it, if it was here."""
        with self._lock:
            service = self._started_by.get(run_id)
        if service is not None:
            return service.status(run_id), service
        existing = self._progress_topics()
        names = [i.name for i in self._instances()]
        replayed = [n for n in names if progress_topic(self._settings.kafka, n) in existing]
        if replayed:
            service = self._service()
            for name in replayed:
                try:
                    return service.status(run_id, name), service
                except ReplayError as exc:
                    if "no replay run" not in str(exc):
                        raise
        raise ReplayNotFoundError(f"no replay run {run_id!r}.")

    def runs(self) -> list[ReplayStatus]:
        names = [instance.name for instance in self._instances()]
        existing = self._progress_topics()
        # An instance never replayed has no progress topic yet; mock_replay cannot read a
        # topic that does not exist, and there is nothing to read.
        replayed = [n for n in names if progress_topic(self._settings.kafka, n) in existing]
        if not replayed:
            return []
        service = self._service()
        found = [run for name in replayed for run in service.runs(name)]
        found.sort(key=lambda run: run.spec.created_ms, reverse=True)
        return [_status(run) for run in found]

    def _progress_topics(self) -> set[str]:
        return topic_names(self._settings.kafka, timeout_s=10)


def _status(run: mock_api.RunStatus) -> ReplayStatus:
    spec = run.spec
    state = _STATES.get(run.state_name, "running")
    final = run.state is not None and state != "running"
    return ReplayStatus(
        run_id=spec.run_id,
        request=ReplayRequest(
            instance=spec.instance,
            db_prefix=spec.db_prefix,
            table_prefix=spec.table_prefix,
            condition=spec.condition,
            execute_time=date.fromisoformat(spec.execute_day),
            batch_size=spec.batch_size,
        ),
        state=state,
        rows_done=run.rows_done,
        # The estimate comes from table statistics; once done, the real count is known.
        rows_total=run.rows_done if state == "succeeded" else (run.estimated_rows or None),
        started_at=spec.created_ms / 1000,
        finished_at=(run.state.updated_ms / 1000) if final and run.state else None,
        error=run.state.error if run.state else None,
        note="cancel requested" if run.cancel_requested and state == "running" else None,
    )
