"""A mirror whose partitions were lost and that the group never assigns again (a librdkafka
consumer stuck after a broker restart, seen once in the chaos suite) makes its Kafka consumer
again after ``rejoin_timeout_s``, and consumes on with the new one; one that is assigned
again in time keeps its consumer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import TopicPartition

import mirror.consumer
from mirror.consumer import MirrorConsumer
from tests.unit.mirror.consumers import memory_consumer

TOPIC = "cdc.binlog.local"


class _Group:
    """What the fake consumers of one test do, in the order they are made: ``scripts[n]``
    lists the callbacks the n-th consumer's polls fire ("assign", "lost"), one per poll."""

    def __init__(self, scripts: list[list[str]], stop: threading.Event, polls: int) -> None:
        self.scripts = scripts
        self.stop = stop
        self.polls_left = polls
        self.closed: list[int] = []
        self.made = 0

    def consumer(self, _config: dict[str, Any]) -> _FakeConsumer:
        self.made += 1
        return _FakeConsumer(self, self.scripts[min(self.made, len(self.scripts)) - 1], self.made)


class _FakeConsumer:
    def __init__(self, group: _Group, script: list[str], number: int) -> None:
        self._group = group
        self._script = list(script)
        self._number = number
        self._callbacks: dict[str, Any] = {}

    def subscribe(self, _topics: list[str], **callbacks: Any) -> None:
        self._callbacks = callbacks

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        partitions = [TopicPartition(TOPIC, 0)]
        if self._script:
            event = self._script.pop(0)
            self._callbacks[f"on_{event}"](self, partitions)
        self._group.polls_left -= 1
        if self._group.polls_left <= 0:
            self._group.stop.set()
        return []

    def commit(self, **_kw: Any) -> None:
        return None

    def close(self) -> None:
        self._group.closed.append(self._number)


class _FakeProducer:
    def __init__(self, _config: dict[str, Any]) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0


def _run(
    monkeypatch: pytest.MonkeyPatch, scripts: list[list[str]], timeout_s: float
) -> tuple[MirrorConsumer, _Group]:
    stop = threading.Event()
    group = _Group(scripts, stop, polls=400)
    monkeypatch.setattr(mirror.consumer, "ensure_topic", lambda *_a, **_kw: True)
    monkeypatch.setattr(mirror.consumer, "Consumer", group.consumer)
    monkeypatch.setattr(mirror.consumer, "Producer", _FakeProducer)
    monkeypatch.setattr(mirror.consumer, "_IDLE_WAKE_S", 0.001)
    consumer = memory_consumer(stop)
    consumer.rejoin_timeout_s = timeout_s
    consumer.run()
    return consumer, group


def test_a_consumer_never_assigned_again_after_losing_its_partitions_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer, group = _run(monkeypatch, [["assign", "lost"], ["assign"]], timeout_s=0.0)
    assert consumer.consumers_made == 2
    assert group.closed[0] == 1  # the stuck one closed before the new one was made
    assert consumer.joined
    assert consumer.assignment == {(TOPIC, 0)}


def test_a_consumer_assigned_again_in_time_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, group = _run(monkeypatch, [["assign", "lost", "assign"]], timeout_s=3600.0)
    assert consumer.consumers_made == 1
    assert group.closed == [1]  # only at the end
    assert consumer.joined
