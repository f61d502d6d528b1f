"""The one retry policy, with an injected sleep, clock and random draw: no real waiting."""

from __future__ import annotations

import random
import threading

import pytest

from cdc_platform.retry import RetryCancelled, RetryPolicy
from simple_binlog.errors import (
    ConfigError,
    FencedError,
    RetriableError,
    ServiceUnavailableError,
    TransactionAbortedError,
)


class FakeTime:
    """A clock that only moves when slept on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def failing(times: int, error: Exception, result: str = "done"):
    calls: list[int] = []

    def work() -> str:
        calls.append(len(calls))
        if len(calls) <= times:
            raise error
        return result

    return work, calls


def test_waits_double_up_to_the_maximum_and_stay_in_their_jitter_bounds() -> None:
    policy = RetryPolicy(first_delay_s=0.5, max_delay_s=30.0, uniform=random.Random(7).uniform)
    for failures, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (7, 30.0), (80, 30.0)]:
        draws = [policy.delay(failures) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in draws), (failures, min(draws), max(draws))
        assert max(draws) - min(draws) > ceiling / 4  # jittered, not a fixed wait


def test_the_jitter_draws_between_half_and_the_whole_ceiling() -> None:
    bounds: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        bounds.append((low, high))
        return high

    RetryPolicy(first_delay_s=1.0, max_delay_s=5.0, uniform=uniform).delay(4)
    assert bounds == [(2.5, 5.0)]


def test_retries_a_retriable_error_with_the_injected_sleep_until_it_succeeds() -> None:
    time_ = FakeTime()
    told: list[tuple[str, float]] = []
    policy = RetryPolicy(
        first_delay_s=0.5,
        max_delay_s=30.0,
        sleep=time_.sleep,
        clock=time_.clock,
        uniform=lambda _low, high: high,
    )
    work, calls = failing(3, ServiceUnavailableError("Kafka is away."))
    result = policy.call(work, on_retry=lambda exc, delay: told.append((str(exc), delay)))
    assert result == "done"
    assert len(calls) == 4
    assert time_.slept == [0.5, 1.0, 2.0]
    assert told == [("Kafka is away.", 0.5), ("Kafka is away.", 1.0), ("Kafka is away.", 2.0)]


@pytest.mark.parametrize(
    "error",
    [FencedError("fenced"), ConfigError("bad setting"), ValueError("a bug")],
)
def test_gives_up_at_once_on_an_error_that_is_not_retriable(error: Exception) -> None:
    time_ = FakeTime()
    policy = RetryPolicy(sleep=time_.sleep, clock=time_.clock)
    work, calls = failing(5, error)
    with pytest.raises(type(error)) as raised:
        policy.call(work)
    assert raised.value is error
    assert len(calls) == 1
    assert time_.slept == []


def test_every_retriable_error_is_retried() -> None:
    time_ = FakeTime()
    policy = RetryPolicy(sleep=time_.sleep, clock=time_.clock)
    work, calls = failing(1, TransactionAbortedError("aborted"))
    assert policy.call(work) == "done"
    assert len(calls) == 2


def test_stops_before_a_wait_would_pass_the_deadline_and_raises_the_last_error() -> None:
    time_ = FakeTime()
    policy = RetryPolicy(
        first_delay_s=1.0,
        max_delay_s=4.0,
        deadline_s=10.0,
        sleep=time_.sleep,
        clock=time_.clock,
        uniform=lambda _low, high: high,
    )
    work, calls = failing(100, ServiceUnavailableError("still away"))
    with pytest.raises(ServiceUnavailableError, match="still away"):
        policy.call(work)
    # waits 1 + 2 + 4 = 7 s; the next 4 s would end at 11 s, past the 10 s deadline
    assert time_.slept == [1.0, 2.0, 4.0]
    assert len(calls) == 4


def test_stops_after_the_attempts_allowed() -> None:
    time_ = FakeTime()
    policy = RetryPolicy(max_attempts=3, sleep=time_.sleep, clock=time_.clock)
    work, calls = failing(100, ServiceUnavailableError("away"))
    with pytest.raises(ServiceUnavailableError):
        policy.call(work)
    assert len(calls) == 3
    assert len(time_.slept) == 2


def test_a_stop_set_while_waiting_cancels_without_another_try() -> None:
    stop = threading.Event()
    time_ = FakeTime()

    def sleep_and_get_stopped(seconds: float) -> None:
        time_.sleep(seconds)
        stop.set()

    policy = RetryPolicy(sleep=sleep_and_get_stopped, clock=time_.clock)
    work, calls = failing(100, ServiceUnavailableError("away"))
    with pytest.raises(RetryCancelled):
        policy.call(work, stop=stop)
    assert len(calls) == 1


def test_a_stop_event_is_the_default_sleep_so_setting_it_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()  # already stopped: its wait returns at once
    policy = RetryPolicy(first_delay_s=60.0, max_delay_s=60.0)
    work, calls = failing(100, ServiceUnavailableError("away"))
    with pytest.raises(RetryCancelled):
        policy.call(work, stop=stop)
    assert len(calls) == 1


def test_the_retriable_branch_of_the_taxonomy_is_what_is_retried() -> None:
    assert issubclass(ServiceUnavailableError, RetriableError)
    assert issubclass(TransactionAbortedError, RetriableError)
    assert not issubclass(FencedError, RetriableError)
    assert not issubclass(ConfigError, RetriableError)
