"""A mirror started while Kafka does not answer (e.g. a broker restarting) waits for it and
keeps trying to make its topics, instead of exiting; a stop ends the wait."""

from __future__ import annotations

import threading

import pytest

import mirror.consumer
from cdc_platform.config import KafkaSettings
from simple_binlog.errors import ServiceUnavailableError
from tests.unit.mirror.consumers import memory_consumer


def test_a_mirror_waits_for_kafka_to_make_its_topics_and_a_stop_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()
    calls: list[str] = []

    def kafka_away(_kafka: KafkaSettings, topic: str, *_args: object, **_kw: object) -> bool:
        calls.append(topic)
        if len(calls) == 3:
            stop.set()  # the operator gives up while Kafka is still away
        raise ServiceUnavailableError("Kafka at 127.0.0.1:1 did not answer.")

    monkeypatch.setattr(mirror.consumer, "ensure_topic", kafka_away)
    monkeypatch.setattr(mirror.consumer, "Consumer", None)  # never reached: nothing to consume
    consumer = memory_consumer(stop)
    consumer.run()  # returns once stopped, having retried instead of raising
    assert calls == ["cdc.binlog.local"] * 3
