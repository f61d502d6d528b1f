"""What the web admin needs from history replay (``mock_replay``), as an interface.

``ReplayService`` is the contract: start a run, ask its status, cancel it, list runs. The real
implementation is an adapter over ``mock_replay``'s API; ``SimulatedReplayService`` is an
in-process stand-in whose runs advance with time, shipped for tests and for trying the admin
without Kafka. It publishes nothing, and says so in every run's ``note``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simple_binlog.errors import CdcMirrorError

ReplayState = Literal["pending", "running", "succeeded", "failed", "cancelled"]
FINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class ReplayRequest(BaseModel):
    """One replay: every shard of a logical table, optionally only rows matching a condition.

    ``condition`` is passed to mock_replay as hostile input; it validates it against the
    table's columns and binds values. The admin only bounds its length.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance: str = Field(min_length=1, max_length=63)
    db_prefix: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_$]+$")
    table_prefix: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_$]+$")
    condition: str | None = Field(None, max_length=2000)
    # The day the replayed rows belong to (their executeTime); default: yesterday.
    execute_time: date | None = None
    batch_size: int = Field(10_000, ge=1, le=1_000_000)

    @field_validator("condition")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None


def percent_done(state: str, rows_done: int, rows_total: int | None) -> float | None:
    """A replay's progress: 100 once it succeeded, else its rows done of the total, at most
    100 (None while the total is not known)."""
    if state == "succeeded":
        return 100.0
    if not rows_total:
        return None
    return min(100.0, 100.0 * rows_done / rows_total)


class ReplayStatus(BaseModel):
    run_id: str
    request: ReplayRequest
    state: ReplayState
    rows_done: int
    rows_total: int | None
    started_at: float  # unix seconds
    finished_at: float | None
    error: str | None = None
    note: str | None = None

    @property
    def percent(self) -> float | None:
        return percent_done(self.state, self.rows_done, self.rows_total)


class ReplayNotFoundError(CdcMirrorError):
    """No replay run with that id."""


class ReplayService(Protocol):
    def start(self, request: ReplayRequest) -> str:
        """Start a run; returns its id. Raises CdcMirrorError with a sentence on bad input."""
        ...

    def status(self, run_id: str) -> ReplayStatus:
        """Raises ReplayNotFoundError for an unknown id."""
        ...

    def cancel(self, run_id: str) -> ReplayStatus:
        """Ask a run to stop; a finished run is returned unchanged."""
        ...

    def runs(self) -> list[ReplayStatus]:
        """Every run this service knows, newest first."""
        ...


@dataclass
class _SimulatedRun:
    status: ReplayStatus
    duration_s: float


class SimulatedReplayService:
    """Runs that move from 0 to ``rows_total`` over ``duration_s`` of wall time.

    Progress is computed from the clock when asked, so no thread is needed and a test can
    drive time with ``clock``.
    """

    NOTE = "simulated replay: nothing is published (mock_replay is not wired in)"

    def __init__(
        self,
        duration_s: float = 6.0,
        rows_total: int = 120_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._duration = duration_s
        self._rows_total = rows_total
        self._clock = clock
        self._runs: dict[str, _SimulatedRun] = {}
        self._lock = threading.Lock()

    def start(self, request: ReplayRequest) -> str:
        run_id = uuid.uuid4().hex[:12]
        status = ReplayStatus(
            run_id=run_id,
            request=request,
            state="running",
            rows_done=0,
            rows_total=self._rows_total,
            started_at=self._clock(),
            finished_at=None,
            note=self.NOTE,
        )
        with self._lock:
            self._runs[run_id] = _SimulatedRun(status, self._duration)
        return run_id

    def status(self, run_id: str) -> ReplayStatus:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise ReplayNotFoundError(f"no replay run {run_id!r}.")
            run.status = self._advance(run)
            return run.status

    def cancel(self, run_id: str) -> ReplayStatus:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise ReplayNotFoundError(f"no replay run {run_id!r}.")
            run.status = self._advance(run)
            if run.status.state not in FINAL_STATES:
                run.status = run.status.model_copy(
                    update={"state": "cancelled", "finished_at": self._clock()}
                )
            return run.status

    def runs(self) -> list[ReplayStatus]:
        with self._lock:
            for run in self._runs.values():
                run.status = self._advance(run)
            return sorted(
                (r.status for r in self._runs.values()), key=lambda s: s.started_at, reverse=True
            )

    def _advance(self, run: _SimulatedRun) -> ReplayStatus:
        status = run.status
        if status.state in FINAL_STATES:
            return status
        elapsed = self._clock() - status.started_at
        fraction = 1.0 if run.duration_s <= 0 else min(1.0, elapsed / run.duration_s)
        rows = int(self._rows_total * fraction)
        if fraction >= 1.0:
            return status.model_copy(
                update={
                    "state": "succeeded",
                    "rows_done": rows,
                    "finished_at": status.started_at + run.duration_s,
                }
            )
        return status.model_copy(update={"rows_done": rows})


__all__ = [
    "FINAL_STATES",
    "ReplayNotFoundError",
    "ReplayRequest",
    "ReplayService",
    "ReplayState",
    "ReplayStatus",
    "SimulatedReplayService",
]
