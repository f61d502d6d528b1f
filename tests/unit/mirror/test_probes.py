"""The mirror's /health/ready: its consumer joined the group and was given its partitions
(or no table mirror targets it yet); not while starting, nor after its partitions were lost."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import TopicPartition

import mirror.consumer
from cdc_platform.config import MirrorSettings, Settings
from cdc_platform.observability import Probe
from mirror.applier import MemoryApplier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.routing import ShardRouter

TOPIC = "cdc.binlog.local"


def make(instances: list[str], stop: threading.Event) -> MirrorConsumer:
    settings = Settings()
    return MirrorConsumer(
        settings.kafka,
        MirrorSettings(),
        "redis",
        instances,
        ChangeRouter([], ShardRouter(list(settings.shard_rules)), "redis"),
        MemoryApplier(),
        MirrorMetrics("redis"),
        stop,
    )


class FakeKafka:
    """The Kafka consumer and producer: each poll records the mirror's readiness, then plays
    the group's next step (assign, then lose the partition, then the operator stops)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.owner: MirrorConsumer | None = None
        self.seen: list[Probe] = []
        self.callbacks: dict[str, Any] = {}

    def consumer(self, _config: dict[str, Any]) -> FakeKafka:
        return self

    def subscribe(self, _topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        assert self.owner is not None
        self.seen.append(self.owner.ready())
        step = len(self.seen)
        if step == 1:
            self.callbacks["on_assign"](self, [TopicPartition(TOPIC, 0)])
        elif step == 2:
            self.callbacks["on_lost"](self, [TopicPartition(TOPIC, 0)])
        else:
            self.stop.set()
        return []

    def unsubscribe(self) -> None:
        self.callbacks = {}

    def commit(self, *_args: Any, **_kw: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0


def test_ready_once_assigned_and_not_after_the_partitions_were_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()
    kafka = FakeKafka(stop)
    monkeypatch.setattr(mirror.consumer, "ensure_topic", lambda *_a, **_k: True)
    monkeypatch.setattr(mirror.consumer, "Consumer", kafka.consumer)
    monkeypatch.setattr(mirror.consumer, "Producer", kafka.consumer)
    consumer = make(["local"], stop)
    kafka.owner = consumer
    before = consumer.ready()
    consumer.run()
    assert not before.ok
    assert before.reason.startswith("starting")
    assert [probe.ok for probe in kafka.seen] == [False, True, False]
    assert kafka.seen[0].reason == "waiting for the consumer group to assign partitions"
    assert kafka.seen[1].reason == "consuming 1 partitions"


def test_a_mirror_no_table_targets_yet_is_ready_with_nothing_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()
    kafka = FakeKafka(stop)
    monkeypatch.setattr(mirror.consumer, "ensure_topic", lambda *_a, **_k: True)
    monkeypatch.setattr(mirror.consumer, "Consumer", kafka.consumer)
    monkeypatch.setattr(mirror.consumer, "Producer", kafka.consumer)
    consumer = make([], stop)
    seen: list[Probe] = []

    def idle(_timeout: float) -> bool:
        seen.append(consumer.ready())
        stop.set()
        return True

    monkeypatch.setattr(stop, "wait", idle)
    consumer.run()
    assert [probe.ok for probe in seen] == [True]
    assert "no table mirror targets redis" in seen[0].reason
