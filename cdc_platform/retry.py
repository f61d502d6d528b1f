"""The one retry policy: exponential back-off with jitter, built on tenacity.

What is retried is decided by the error taxonomy (``simple_binlog.errors``): a
``RetriableError`` (a service away, a transaction aborted, a rebalance) is tried again after a
wait; anything else, ``FatalError`` first, is raised at once. The waits double from
``first_delay_s`` up to ``max_delay_s``; each is drawn at random from its upper half ("equal
jitter"), so processes that failed together do not come back in step. The policy gives up
(raising the last error) after ``max_attempts`` calls or before a wait would end past
``deadline_s``; a ``stop`` event set during a wait ends it at once with ``RetryCancelled``.

The sleep, the clock and the random draw are injectable: unit tests need no real waiting.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import tenacity
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from simple_binlog.errors import CdcMirrorError, FatalError, RetriableError

T = TypeVar("T")

OnRetry = Callable[[RetriableError, float], object]
"""Told of each failure that will be retried: the error and the wait before the next try."""


class RetryCancelled(CdcMirrorError):
    """The stop event was set while waiting to retry (the caller was asked to stop)."""


def is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, RetriableError) and not isinstance(exc, FatalError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    first_delay_s: float = 0.5
    max_delay_s: float = 30.0
    deadline_s: float | None = None  # from the first call; None: no deadline
    max_attempts: int | None = None  # calls in all; None: no limit
    sleep: Callable[[float], object] | None = None  # None: time.sleep, or the stop event's wait
    clock: Callable[[], float] = time.monotonic
    uniform: Callable[[float, float], float] = field(default=random.uniform)

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1, 2, …)."""
        ceiling = min(self.max_delay_s, self.first_delay_s * 2 ** min(failures - 1, 64))
        return self.uniform(ceiling / 2, ceiling)

    def call(
        self,
        work: Callable[[], T],
        *,
        stop: threading.Event | None = None,
        on_retry: OnRetry | None = None,
    ) -> T:
        """``work()``, retried by the policy. Raises its last error when the policy gives up,
        a non-retriable one at once, and ``RetryCancelled`` if ``stop`` is set while waiting."""
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_retriable),
            wait=_Wait(self),
            stop=_Stop(self, self.clock()),
            sleep=self._sleeper(stop),
            before_sleep=_tell(on_retry),
            reraise=True,
        )
        return retrying(work)

    def _sleeper(self, stop: threading.Event | None) -> Callable[[float], None]:
        wait = self.sleep or (stop.wait if stop is not None else time.sleep)

        def sleep(seconds: float) -> None:
            wait(seconds)
            if stop is not None and stop.is_set():
                raise RetryCancelled("stopped while waiting to retry.")

        return sleep


class _Wait(wait_base):
    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self._policy.delay(retry_state.attempt_number)


class _Stop(stop_base):
    def __init__(self, policy: RetryPolicy, started: float) -> None:
        self._policy = policy
        self._started = started

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        policy = self._policy
        if policy.max_attempts is not None and retry_state.attempt_number >= policy.max_attempts:
            return True
        if policy.deadline_s is None:
            return False
        waited_until = policy.clock() + (retry_state.upcoming_sleep or 0.0)
        return waited_until - self._started > policy.deadline_s


def _tell(on_retry: OnRetry | None) -> Callable[[tenacity.RetryCallState], None] | None:
    if on_retry is None:
        return None

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        if isinstance(error, RetriableError):
            on_retry(error, retry_state.upcoming_sleep)

    return before_sleep
