"""Detections over time: the collectors' detection records (``cdc.binlog.<instance>.detections``,
``governance.DetectionRecord``, never a value) summed per hour, instance, logical
table, column, detector and applied action into ``detection_counts``.

A daemon thread in the web admin process reads every instance's detection topic by manual
partition assignment (no consumer group): the next offset of each partition lives in
``detection_offsets`` and is written in the same database transaction as the counts of the
records before it, so a restart (or a crash between two batches) resumes exactly there and
counts every record once. Two admin processes reading the same topic cannot double count
either: the offset moves only from the value the batch started at (compare-and-set), and a
batch that loses that race is rolled back and read again.

Reads are ``read_committed``: records of an aborted collector transaction are never counted.
A record that does not parse is logged with its topic, partition and offset (one sentence,
no value: the records carry none) and passed over, so one bad record cannot stop the chart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from cdc_platform.config import KafkaSettings
from cdc_platform.kafka import consumer_config, high_watermark, kafka_errors
from governance import DetectionRecord, detections_topic
from simple_binlog.errors import CdcMirrorError, ContractError
from webui.models import DetectionCount, DetectionOffset, Instance
from webui.monitoring import Series

log = logging.getLogger(__name__)

HOUR_S = 3600

CountKey = tuple[int, str, str, str, str, str]  # hour, instance, table, column, detector, action


@dataclass(frozen=True)
class Received:
    """One Kafka record of a detection topic."""

    topic: str
    partition: int
    offset: int
    payload: bytes | None


def hour_of(ms: int) -> int:
    return (ms // 1000) // HOUR_S * HOUR_S


def aggregate(records: Iterable[DetectionRecord]) -> dict[CountKey, int]:
    """Sum the records' counts per hour and series. Pure."""
    totals: dict[CountKey, int] = defaultdict(int)
    for record in records:
        key = (
            hour_of(record.detected_at_ms),
            record.instance,
            record.logical_table,
            record.column,
            record.detector,
            record.action.value,
        )
        totals[key] += record.count
    return dict(totals)


def decode(received: Received) -> DetectionRecord | None:
    """The record, or None (logged) when it is not a detection record."""
    if received.payload is None:
        log.warning(
            "detection topic %s partition %d offset %d: an empty record; passed over",
            received.topic,
            received.partition,
            received.offset,
        )
        return None
    try:
        return DetectionRecord.decode(received.payload)
    except ContractError as exc:
        log.warning(
            "detection topic %s partition %d offset %d: %s Passed over.",
            received.topic,
            received.partition,
            received.offset,
            exc,
        )
        return None


class OffsetMoved(Exception):
    """Another reader stored this partition's batch first; this batch was not counted."""


def store_batch(db: Session, topic: str, partition: int, batch: list[Received]) -> int:
    """Count the records of one partition at or past the stored offset and move the offset
    past the last, in the caller's transaction. Returns the number of records counted.

    Raises OffsetMoved when the stored offset changed under this batch (the caller rolls back).
    """
    stored = db.get(DetectionOffset, (topic, partition))
    start = stored.next_offset if stored is not None else 0
    fresh = [r for r in batch if r.offset >= start]
    if not fresh:
        return 0
    records = [record for record in (decode(r) for r in fresh) if record is not None]
    for key, count in aggregate(records).items():
        hour, instance, table, column, detector, action = key
        row = db.scalar(
            select(DetectionCount).where(
                DetectionCount.hour == hour,
                DetectionCount.instance == instance,
                DetectionCount.logical_table == table,
                DetectionCount.column_name == column,
                DetectionCount.detector == detector,
                DetectionCount.action == action,
            )
        )
        if row is None:
            db.add(
                DetectionCount(
                    hour=hour,
                    instance=instance,
                    logical_table=table,
                    column_name=column,
                    detector=detector,
                    action=action,
                    count=count,
                )
            )
        else:
            row.count += count
    next_offset = max(r.offset for r in fresh) + 1
    if stored is None:
        db.add(DetectionOffset(topic=topic, partition=partition, next_offset=next_offset))
    else:
        moved = db.execute(
            update(DetectionOffset)
            .where(
                DetectionOffset.topic == topic,
                DetectionOffset.partition == partition,
                DetectionOffset.next_offset == start,
            )
            .values(next_offset=next_offset)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            raise OffsetMoved(f"{topic}[{partition}]")
    return len(records)


class DetectionConsumer:
    """Reads every instance's detection topic into ``detection_counts`` until ``stop()``."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        kafka: KafkaSettings,
        refresh_s: float = 10.0,
        consumer_factory: Callable[[dict[str, object]], Consumer] = Consumer,
    ) -> None:
        self._sessions = sessions
        self._kafka = kafka
        self._refresh_s = refresh_s
        self._factory = consumer_factory
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._failing = False
        self.counted = 0  # records counted by this process (for tests and the log)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="webui-detections", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _loop(self) -> None:
        config = consumer_config(self._kafka, group_id="cdc-webui-detections")
        consumer = self._factory(config)
        try:
            next_refresh = 0.0
            while not self._stop.is_set():
                try:
                    with kafka_errors("counting detections"):
                        if time.monotonic() >= next_refresh:
                            self._refresh_assignment(consumer)
                            next_refresh = time.monotonic() + self._refresh_s
                        if not self._assigned:
                            self._stop.wait(min(self._refresh_s, 1.0))
                            continue
                        self.poll_once(consumer)
                except (SQLAlchemyError, CdcMirrorError) as exc:
                    # The consumer may have read past records whose counts were not stored:
                    # drop the assignment, so the next refresh starts again at the offsets
                    # the database holds.
                    self._report_failure(f"counting detections failed ({_one_line(exc)})")
                    consumer.unassign()
                    self._assigned.clear()
                    next_refresh = 0.0
                    self._stop.wait(5.0)
        finally:
            consumer.close()

    def topics(self) -> list[str]:
        with self._sessions() as db:
            return sorted({detections_topic(t) for t in db.scalars(select(Instance.topic))})

    def _refresh_assignment(self, consumer: Consumer) -> None:
        """Assign every partition of every instance's detection topic not yet assigned,
        at its stored offset (the beginning for a partition never read)."""
        wanted: list[TopicPartition] = []
        try:
            with kafka_errors(f"listing the topics at {self._kafka.bootstrap_servers}"):
                metadata = consumer.list_topics(timeout=10)
        except CdcMirrorError as exc:
            self._report_failure(str(exc).rstrip("."))
            return
        self._report_recovery()
        with self._sessions.begin() as db:
            for topic in self.topics():
                described = metadata.topics.get(topic)
                if described is None or described.error is not None:
                    continue  # no detections published yet; looked for again next refresh
                for partition in described.partitions:
                    if (topic, partition) in self._assigned:
                        continue
                    stored = db.get(DetectionOffset, (topic, partition))
                    offset = stored.next_offset if stored is not None else OFFSET_BEGINNING
                    if stored is not None:
                        offset = self._check_recreated(consumer, stored)
                    wanted.append(TopicPartition(topic, partition, offset))
        if wanted:
            consumer.incremental_assign(wanted)
            self._assigned.update((tp.topic, tp.partition) for tp in wanted)
            log.info("reading detections from %d new partition(s)", len(wanted))

    def _check_recreated(self, consumer: Consumer, stored: DetectionOffset) -> int:
        """The stored offset, or the partition's start when the partition now ends before it
        (the topic was deleted and created again): its records would otherwise sit below the
        stored offset and never be counted."""
        high = high_watermark(consumer, stored.topic, stored.partition, timeout_s=10)
        if high >= stored.next_offset:
            return stored.next_offset
        log.warning(
            "detection topic %s partition %d ends at offset %d, before the %d already counted "
            "(was it created again?); counting it from its start",
            stored.topic,
            stored.partition,
            high,
            stored.next_offset,
        )
        stored.next_offset = 0
        return OFFSET_BEGINNING

    def poll_once(self, consumer: Consumer, timeout_s: float = 1.0) -> int:
        """Consume what is there and store it, one transaction per partition."""
        messages = consumer.consume(num_messages=2000, timeout=timeout_s)
        batches: dict[tuple[str, int], list[Received]] = defaultdict(list)
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self._report_failure(f"reading detections failed ({error.str()})")
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            if topic is None or partition is None or offset is None:
                continue
            batches[(topic, partition)].append(Received(topic, partition, offset, message.value()))
        counted = 0
        for (topic, partition), batch in batches.items():
            try:
                with self._sessions.begin() as db:
                    counted += store_batch(db, topic, partition, batch)
            except OffsetMoved:
                # Another admin process counted these; continue from what it stored.
                with self._sessions() as db:
                    stored = db.get(DetectionOffset, (topic, partition))
                    if stored is not None:
                        consumer.seek(TopicPartition(topic, partition, stored.next_offset))
        self.counted += counted
        return counted

    def _report_failure(self, message: str) -> None:
        if not self._failing:
            log.warning("%s; detections are not being counted until it recovers", message)
            self._failing = True

    def _report_recovery(self) -> None:
        if self._failing:
            log.info("detections are being counted again")
            self._failing = False


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- reading the counts -------------------------------------------------------------------


@dataclass(frozen=True)
class DetectionTotal:
    instance: str
    logical_table: str
    column: str
    detector: str
    action: str
    count: int


def load_series(
    db: Session,
    since_hour: int,
    until_hour: int,
    table: str | None = None,
    column: str | None = None,
    detector: str | None = None,
) -> tuple[list[Series], list[DetectionTotal]]:
    """Hourly series by logical table, column and detector (instances and actions summed),
    and the totals per series, for the chart and its table. An hour without records is a
    zero (no record means nothing was detected), not a gap."""
    query = select(DetectionCount).where(DetectionCount.hour >= since_hour)
    if table:
        query = query.where(DetectionCount.logical_table == table)
    if column:
        query = query.where(DetectionCount.column_name == column)
    if detector:
        query = query.where(DetectionCount.detector == detector)
    points: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[tuple[str, str, str, str, str], int] = defaultdict(int)
    for row in db.scalars(query.order_by(DetectionCount.hour)):
        label = f"{row.logical_table}.{row.column_name} {row.detector}"
        points[label][row.hour] += row.count
        totals[(row.instance, row.logical_table, row.column_name, row.detector, row.action)] += (
            row.count
        )
    hours = range(since_hour, max(until_hour, since_hour) + 1, HOUR_S)
    series = [
        Series(label, [(float(hour), float(by_hour.get(hour, 0))) for hour in hours])
        for label, by_hour in sorted(points.items())
    ]
    listed = [DetectionTotal(*key, count) for key, count in sorted(totals.items())]
    return series, listed
