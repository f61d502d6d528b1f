"""``webui.replay.ReplayService`` over ``mock_replay.api`` (the real history replay).

mock_replay reads an instance's connection from ``Settings.instances``; the admin keeps its
instances in its own database. So every call builds settings whose ``instances`` are the
admin's (passwords decrypted in memory only), and the run is published to
``<kafka.topic_prefix><instance>`` as mock_replay does — an instance whose topic was set to
something else in the admin is refused rather than replayed into the wrong topic.

Runs started here are tracked by the service that started them (cancel stops them at once);
status and history come from the instances' progress topics, so runs of the CLI or of other
processes show too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import date

from mock_replay import api as mock_api
from mock_replay.errors import ReplayError
from simple_binlog.config import MySQLInstance, Settings
from simple_binlog.errors import CdcMirrorError
from webui.replay import ReplayNotFoundError, ReplayRequest, ReplayState, ReplayStatus

log = logging.getLogger(__name__)

# The admin's instances as mock_replay needs them: (instance, its configured topic).
InstancesProvider = Callable[[], list[tuple[MySQLInstance, str]]]

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
        configured = [instance for instance, _ in self._instances()]
        if not configured:
            raise CdcMirrorError("no instance is configured in the admin yet; add one first.")
        derived = self._settings.model_copy(update={"instances": configured})
        return mock_api.ReplayService(derived)

    def start(self, request: ReplayRequest) -> str:
        topics = {i.name: t for i, t in self._instances()}
        expected = f"{self._settings.kafka.topic_prefix}{request.instance}"
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
        with self._lock:
            service = self._started_by.get(run_id)
        try:
            return _status((service or self._service()).status(run_id))
        except ReplayError as exc:
            if "no replay run" in str(exc):
                raise ReplayNotFoundError(f"no replay run {run_id!r}.") from exc
            raise

    def cancel(self, run_id: str) -> ReplayStatus:
        with self._lock:
            service = self._started_by.get(run_id)
        try:
            (service or self._service()).cancel(run_id)
        except ReplayError as exc:
            if "no replay run" in str(exc):
                raise ReplayNotFoundError(f"no replay run {run_id!r}.") from exc
            raise
        return self.status(run_id)

    def runs(self) -> list[ReplayStatus]:
        if not self._instances():
            return []
        return [_status(run) for run in self._service().runs()]


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
        rows_total=run.estimated_rows or None,
        started_at=spec.created_ms / 1000,
        finished_at=(run.state.updated_ms / 1000) if final and run.state else None,
        error=run.state.error if run.state else None,
        note="cancel requested" if run.cancel_requested and state == "running" else None,
    )
