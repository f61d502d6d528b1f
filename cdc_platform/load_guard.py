"""The load guard every reader of an OLTP server shares (history replay, validation): pause
before the next read while the server is busy or its replica lags, and say so in the log.

``LoadProbe.load()`` samples the server (``Threads_running``, and the replica's lag when a
replica is read); ``overload_reason`` decides (pure); ``LoadGuard`` asks at most every
``every_s`` and, while overloaded, waits ``poll_s`` between looks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadSample:
    threads_running: int
    # None when not reading a replica; -1 when the replica's replication is not running.
    replica_lag_s: int | None = None


class LoadProbe(Protocol):
    def load(self) -> LoadSample: ...


def overload_reason(sample: LoadSample, max_threads_running: int, max_lag_s: int) -> str | None:
    """Why a reader should pause now, or None. Pure logic."""
    if max_threads_running and sample.threads_running > max_threads_running:
        return (
            f"the server runs {sample.threads_running} threads, more than the limit of "
            f"{max_threads_running}"
        )
    if sample.replica_lag_s is not None:
        if sample.replica_lag_s < 0:
            return "the replica's replication is not running"
        if sample.replica_lag_s > max_lag_s:
            return (
                f"the replica is {sample.replica_lag_s} s behind its primary, more than the "
                f"limit of {max_lag_s} s"
            )
    return None


class LoadGuard:
    """Pauses before a read while the server is loaded or the replica lags, with a log line
    when it pauses and when it goes on (``what`` names the reader: "replay", "validation").
    Looks at the server at most every ``every_s``."""

    def __init__(
        self,
        source: LoadProbe,
        max_threads_running: int,
        max_lag_s: int,
        poll_s: float,
        wait: Callable[[float], bool],
        clock: Callable[[], float],
        every_s: float = 1.0,
        what: str = "replay",
    ) -> None:
        self._source = source
        self._max_threads = max_threads_running
        self._max_lag = max_lag_s
        self._poll_s = poll_s
        self._wait = wait  # returns True when the reader is cancelled
        self._clock = clock
        self._every_s = every_s
        self._what = what
        self._last_check = -1e18
        self.paused_s = 0.0
        self.pauses = 0

    def wait_until_calm(self) -> bool:
        """False if the reader was cancelled while paused."""
        now = self._clock()
        if now - self._last_check < self._every_s:
            return True
        self._last_check = now
        reason = overload_reason(self._source.load(), self._max_threads, self._max_lag)
        if reason is None:
            return True
        self.pauses += 1
        log.warning("%s paused: %s; looking again every %.0f s", self._what, reason, self._poll_s)
        started = self._clock()
        while reason is not None:
            if self._wait(self._poll_s):
                return False
            reason = overload_reason(self._source.load(), self._max_threads, self._max_lag)
        self.paused_s += self._clock() - started
        self._last_check = self._clock()
        log.info("%s resumed after a pause of %.0f s", self._what, self._clock() - started)
        return True
