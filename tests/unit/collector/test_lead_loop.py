"""``lead_until_stepped_down``: what the leading process does when its collector ends."""

from __future__ import annotations

import threading

import pytest

from cdc_platform.retry import RetryPolicy
from collector.app import lead_until_stepped_down
from collector.publisher import FencedError, ProducerLostError
from simple_binlog.errors import ConfigError


class _Collector:
    def __init__(self, outcome: Exception | None, stop: threading.Event | None = None) -> None:
        self.outcome = outcome
        self.stop = stop

    def run(self) -> None:
        if self.stop is not None:
            self.stop.set()
        if self.outcome is not None:
            raise self.outcome


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _lead(
    outcomes: list[Exception | None], *, elected: bool = False, stop_after: int | None = None
) -> tuple[list[_Collector], list[str], list[float]]:
    stop = threading.Event()
    started: list[_Collector] = []
    counted: list[str] = []
    waits: list[float] = []

    def start() -> _Collector:
        index = len(started)
        collector = _Collector(outcomes[index], stop if index + 1 == stop_after else None)
        started.append(collector)
        return collector

    policy = RetryPolicy(first_delay_s=1.0, max_delay_s=8.0, uniform=lambda _low, high: high)
    stop.wait = lambda seconds=None: bool(waits.append(seconds or 0.0))  # type: ignore[method-assign]
    lead_until_stepped_down(
        start,  # type: ignore[arg-type]
        stop,
        count_error=counted.append,
        elected=elected,
        backoff=policy,
        clock=_Clock(),
    )
    return started, counted, waits


def _lost() -> ProducerLostError:
    return ProducerLostError("the Kafka producer became unusable while committing (…).")


def test_a_lost_producer_is_replaced_with_a_growing_wait() -> None:
    started, counted, waits = _lead([_lost(), _lost(), _lost(), None])
    assert len(started) == 4
    assert counted == ["producer_lost"] * 3
    assert waits == [1.0, 2.0, 4.0]


def test_under_an_election_a_lost_producer_steps_down() -> None:
    started, counted, waits = _lead([_lost(), None], elected=True)
    assert len(started) == 1
    assert counted == ["producer_lost"]
    assert waits == []


def test_a_fencing_steps_down_at_once() -> None:
    started, counted, _ = _lead([FencedError("another collector took over"), None])
    assert len(started) == 1
    assert counted == ["fenced"]


def test_stopped_while_replacing_it_starts_no_other() -> None:
    started, counted, _ = _lead([_lost(), None], stop_after=1)
    assert len(started) == 1
    assert counted == ["producer_lost"]


def test_other_errors_reach_the_caller() -> None:
    with pytest.raises(ConfigError):
        _lead([ConfigError("wrong password"), None])
