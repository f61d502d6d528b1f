"""Has a mirror applied everything the source had committed? (its consumer group's offsets)

``KafkaWatermark.mark()`` is the end of every partition of the instance's topic now (its
last stable offset, read_committed); ``wait(mark)`` returns once the target's consumer group
(``simple_binlog.naming.mirror_group``) has committed at least that far on every partition,
i.e. the mirror applied (it commits after applying) every message published before the mark.
A message the collector had not yet published at the mark is not covered by it alone.

``PositionWatermark`` covers it: its mark is MySQL's binlog position (read after the source
read), and its wait first waits for the collector to have committed a position covering it
(the collector commits its position in the same Kafka transaction as the rows,
``<instance topic>.positions``), then for the group as above. The target then holds the
source's state as of the mark (or later).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import orjson
from confluent_kafka import Consumer, TopicPartition

from cdc_platform.config import KafkaSettings
from cdc_platform.kafka import consumer_config, high_watermark, kafka_errors
from cdc_platform.mysql_source import position_covers
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

    def _only_markers_left(self, partition: int, committed: int, mark: int) -> bool:
        """Whether nothing but transaction markers lies between ``committed`` and ``mark``: a
        consumer commits the offset after its last message, and a transaction's commit marker
        after it takes an offset no consumer is handed (a quiet topic after a transactional
        write, such as a repair's, stays one offset "behind" for ever otherwise)."""
        partitions = [TopicPartition(self.topic, partition, committed)]
        with kafka_errors(f"reading {self.topic}[{partition}] after the group's offset"):
            self._probe.assign(partitions)
            try:
                give_up = self._clock() + 5.0
                while self._clock() < give_up:
                    record = self._probe.poll(0.2)
                    if record is not None and record.error() is None:
                        return (record.offset() or 0) >= mark  # a message not applied yet
                    position = self._probe.position([TopicPartition(self.topic, partition)])
                    if (position[0].offset or 0) >= mark:
                        return True
                return False
            finally:
                self._probe.unassign()

    def wait(self, mark: object) -> None:
        assert isinstance(mark, dict)
        deadline = self._clock() + self._timeout_s
        while True:
            committed = self.committed(list(mark))
            behind = {
                p: o
                for p, o in mark.items()
                if o > 0
                and committed.get(p, 0) < o
                and not self._only_markers_left(p, committed.get(p, 0), o)
            }
            if not behind:
                return
            if self._clock() >= deadline:
                raise ServiceUnavailableError(
                    f"the mirror's consumer group {self.group} did not catch up with {self.topic} "
                    f"within {self._timeout_s:.0f} s (behind on partitions {sorted(behind)}); "
                    "is the mirror running?"
                )
            self._sleep(self._poll_s)


# -- the source's position: has the collector published it? --------------------------------


def collector_positions_topic(topic: str) -> str:
    """Where the collector commits its position with every transaction (its contract with
    readers: ``<instance topic>.positions``, one JSON document with ``gtid``)."""
    return f"{topic}.positions"


class PositionWatermark:
    """``mark()``: the source's binlog position now (after a source read); ``wait(mark)``:
    until the collector has committed a position covering it — everything the source had
    committed at the mark is then in Kafka, written in the same transactions — and then
    until the target's group has applied the topic up to its end as of that moment
    (``KafkaWatermark``). So the target has applied the source's state as of the mark."""

    def __init__(
        self,
        kafka: KafkaWatermark,
        settings: KafkaSettings,
        instance: str,
        source_position: Callable[[], str],
        timeout_s: float = 120.0,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kafka = kafka
        self._instance = instance
        self._source_position = source_position
        self._topic = collector_positions_topic(kafka.topic)
        self._timeout_s, self._poll_s = timeout_s, poll_s
        self._clock, self._sleep = clock, sleep
        config = consumer_config(settings, group_id=f"cdc-validate-{uuid.uuid4().hex[:8]}")
        self._reader = Consumer(config)
        self.waits = 0

    def close(self) -> None:
        self._reader.close()
        self.kafka.close()

    def mark(self) -> str:
        return self._source_position()

    def published(self) -> str | None:
        """The collector's last committed GTID position (None: it never committed one)."""
        with kafka_errors(f"reading the collector's position from {self._topic}"):
            low, high = self._reader.get_watermark_offsets(
                TopicPartition(self._topic, 0), timeout=10
            )
            if high <= 0:
                return None
            # Compacted and written by one producer: the last records are near the end
            # (transaction markers take offsets too).
            self._reader.assign([TopicPartition(self._topic, 0, max(low, high - 32))])
            found: str | None = None
            partition = TopicPartition(self._topic, 0)
            give_up = self._clock() + 10
            # Until the read position passes the end: the last offsets may be transaction
            # markers, which poll never returns.
            while self._reader.position([partition])[0].offset < high:
                record = self._reader.poll(0.2)
                if record is not None and record.error() is None:
                    value = record.value()
                    if record.key() == self._instance.encode() and value:
                        found = str(orjson.loads(value).get("gtid") or "")
                elif record is None and self._clock() > give_up:
                    break
            self._reader.unassign()
        return found

    def wait(self, mark: object) -> None:
        assert isinstance(mark, str)
        self.waits += 1
        deadline = self._clock() + self._timeout_s
        while True:
            published = self.published()
            if published is not None and position_covers(published, mark):
                self.kafka.wait(self.kafka.mark())
                return
            if self._clock() >= deadline:
                raise ServiceUnavailableError(
                    f"the collector of instance {self._instance!r} has not published MySQL's "
                    f"position {mark} within {self._timeout_s:.0f} s (it is at "
                    f"{published or 'nothing'}); is the collector running?"
                )
            self._sleep(self._poll_s)
