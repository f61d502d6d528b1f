"""Has a mirror applied everything the source had committed? (its consumer group's offsets)

``KafkaWatermark.mark()`` is the end of every partition of the instance's topic now (its
last stable offset, read_committed); ``wait(mark)`` returns once the target's consumer group
(``simple_binlog.naming.mirror_group``) has committed at least that far on every partition,
i.e. the mirror applied (it commits after applying) every message published before the mark.
A message the collector had not yet published at the mark is not covered: ``settle``'s
second confirmation round covers that (see ``validation``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from cdc_platform.config import KafkaSettings
from cdc_platform.kafka import consumer_config, high_watermark, kafka_errors
from simple_binlog.errors import ServiceUnavailableError

Marks = dict[int, int]  # partition → offset


class KafkaWatermark:
    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        group: str,
        timeout_s: float = 120.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.topic, self.group = topic, group
        self._timeout_s, self._poll_s = timeout_s, poll_s
        self._clock, self._sleep = clock, sleep
        # A consumer only to ask; it never subscribes, so it joins no group.
        config = consumer_config(settings, group_id=f"cdc-validate-{uuid.uuid4().hex[:8]}")
        self._probe = Consumer(config)
        self._group = Consumer(consumer_config(settings, group_id=group))

    def close(self) -> None:
        self._probe.close()
        self._group.close()

    def _partitions(self) -> list[int]:
        with kafka_errors(f"listing the partitions of {self.topic}"):
            metadata = self._probe.list_topics(self.topic, timeout=10)
        topic = metadata.topics.get(self.topic)
        return sorted(topic.partitions) if topic is not None and topic.error is None else []

    def mark(self) -> Marks:
        return {p: high_watermark(self._probe, self.topic, p) for p in self._partitions()}

    def committed(self, partitions: list[int]) -> Marks:
        with kafka_errors(f"reading the offsets of group {self.group}"):
            found = self._group.committed(
                [TopicPartition(self.topic, p) for p in partitions], timeout=10
            )
        return {tp.partition: max(tp.offset, 0) for tp in found}

    def wait(self, mark: object) -> None:
        assert isinstance(mark, dict)
        deadline = self._clock() + self._timeout_s
        while True:
            committed = self.committed(list(mark))
            behind = {p: o for p, o in mark.items() if o > 0 and committed.get(p, 0) < o}
            if not behind:
                return
            if self._clock() >= deadline:
                raise ServiceUnavailableError(
                    f"the mirror's consumer group {self.group} did not catch up with {self.topic} "
                    f"within {self._timeout_s:.0f} s (behind on partitions {sorted(behind)}); "
                    "is the mirror running?"
                )
            self._sleep(self._poll_s)
