"""Where the collector's messages go, committed together with the position they lead to.

Lifecycle of a ``Publisher``: ``start()`` once (it fences any earlier owner of the instance and
returns the last committed position), then rounds of ``add()`` … ``commit(position)``; after
an error, ``abort()`` and resume from the position ``start()``/``commit()`` last returned;
``close()`` at the end. Nothing added is visible to readers until ``commit`` returns.

``KafkaPublisher`` is the real one: a transactional producer whose ``transactional.id`` is
fixed per MySQL instance, so a new active collector's ``init_transactions`` fences the old
one: whatever the old one sends afterwards is aborted by the broker, never read by a
``read_committed`` consumer. The position is written to a compacted topic inside the same
transaction. ``MemoryPublisher`` is the fake for unit tests.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NoReturn

import orjson
from confluent_kafka import KafkaError, Producer

from cdc_platform.config import KafkaSettings
from cdc_platform.governance_model import DetectionRecord, detections_topic
from cdc_platform.kafka import (
    KafkaFatalError,
    MessageTooLargeError,
    RetriableRequestError,
    ensure_topic,
    kafka_errors,
    producer_config,
    read_to_end,
)
from collector.encoder import MessageEncoder
from collector.position import CollectorPosition
from simple_binlog import errors
from simple_binlog.control import HEARTBEAT_KEY, WatermarkHeartbeat
from simple_binlog.errors import (
    CdcMirrorError,
    FatalError,
    ServiceUnavailableError,
    TransactionAbortedError,
)
from simple_binlog.message import SimpleBinlog
from simple_binlog.naming import topic_name
from simple_binlog.routing import partition_key

log = logging.getLogger(__name__)


class FencedError(errors.FencedError):
    """Another collector took over this instance; this one must stop publishing."""


class AbortedError(TransactionAbortedError):
    """The open transaction was aborted; resume from the last committed position."""


class ProducerLostError(FatalError):
    """librdkafka declared the producer unusable (a fatal error) without a fencing: nobody
    took over, but this producer can never commit again. A new producer of the same
    ``transactional.id`` (its ``init_transactions`` settles the open transaction) must take
    over from the last committed position, which the publisher reads again on ``start``."""


class OversizedMessageError(MessageTooLargeError):
    """One row is larger than the broker accepts."""


class Publisher(ABC):
    @abstractmethod
    def start(self) -> CollectorPosition | None: ...

    @abstractmethod
    def add(self, message: SimpleBinlog) -> None: ...

    @abstractmethod
    def dead_letter(self, message: SimpleBinlog, error: str) -> None:
        """Record a message that cannot be published, in the same transaction."""

    @abstractmethod
    def schema_change(self, key: str, record: dict[str, Any]) -> None:
        """Publish a DDL record (``collector.ddl``) in the open transaction."""

    @abstractmethod
    def detections(self, records: list[DetectionRecord]) -> None:
        """Publish governance detection records (``governance``) in the open
        transaction."""

    @abstractmethod
    def heartbeat(self, heartbeat: WatermarkHeartbeat) -> None:
        """Publish a watermark heartbeat to every partition of the instance's topic, in the
        open transaction (``simple_binlog.control``)."""

    @abstractmethod
    def commit(self, position: CollectorPosition) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


class MemoryPublisher(Publisher):
    """Keeps committed messages and positions in lists; ``pending`` until commit."""

    def __init__(self, position: CollectorPosition | None = None) -> None:
        self.committed: list[SimpleBinlog] = []
        self.dead: list[tuple[SimpleBinlog, str]] = []
        self.positions: list[CollectorPosition] = [position] if position else []
        self.pending: list[SimpleBinlog] = []
        self._pending_dead: list[tuple[SimpleBinlog, str]] = []
        self.schema_changes: list[dict[str, Any]] = []
        self._pending_changes: list[dict[str, Any]] = []
        self.detection_records: list[DetectionRecord] = []
        self._pending_detections: list[DetectionRecord] = []
        self.heartbeats: list[WatermarkHeartbeat] = []
        self._pending_heartbeats: list[WatermarkHeartbeat] = []

    def start(self) -> CollectorPosition | None:
        return self.positions[-1] if self.positions else None

    def add(self, message: SimpleBinlog) -> None:
        self.pending.append(message)

    def dead_letter(self, message: SimpleBinlog, error: str) -> None:
        self._pending_dead.append((message, error))

    def schema_change(self, key: str, record: dict[str, Any]) -> None:
        self._pending_changes.append(record)

    def detections(self, records: list[DetectionRecord]) -> None:
        self._pending_detections += records

    def heartbeat(self, heartbeat: WatermarkHeartbeat) -> None:
        self._pending_heartbeats.append(heartbeat)

    def commit(self, position: CollectorPosition) -> None:
        self.committed += self.pending
        self.heartbeats += self._pending_heartbeats
        self.dead += self._pending_dead
        self.schema_changes += self._pending_changes
        self.detection_records += self._pending_detections
        self.positions.append(position)
        self.abort()

    def abort(self) -> None:
        self.pending, self._pending_dead, self._pending_changes = [], [], []
        self._pending_detections, self._pending_heartbeats = [], []

    def close(self) -> None:
        self.abort()


def positions_topic(settings: KafkaSettings, instance: str) -> str:
    """Compacted, one per instance: only that instance's collector writes to it, so after its
    ``init_transactions`` no open transaction can hold a reader back."""
    return f"{topic_name(settings, instance)}.positions"


# The key of the record that opens each transaction in the positions topic (``KafkaPublisher.
# _begin_transaction``); the position itself is keyed by the instance's name.
OPENING_KEY_SUFFIX = ".transaction-opened"


def dead_letter_topic(settings: KafkaSettings, instance: str) -> str:
    return f"{topic_name(settings, instance)}.dead-letter"


def schema_changes_topic(settings: KafkaSettings, instance: str) -> str:
    """DDL of the instance in binlog order (one partition: one order for all tables)."""
    return f"{topic_name(settings, instance)}.schema-changes"


class KafkaPublisher(Publisher):
    def __init__(
        self,
        settings: KafkaSettings,
        instance: str,
        timeout_s: float = 60.0,
        make_producer: Callable[[dict[str, Any]], Producer] = Producer,
    ) -> None:
        self._settings = settings
        self._make_producer = make_producer  # tests wrap the real one to inject an error
        self._instance = instance
        self._timeout_s = timeout_s
        self._topic = topic_name(settings, instance)
        self._positions_topic = positions_topic(settings, instance)
        self._dead_topic = dead_letter_topic(settings, instance)
        self._ddl_topic = schema_changes_topic(settings, instance)
        self._detections_topic = detections_topic(self._topic)
        self._detections_topic_ready = False
        self._producer: Producer | None = None
        self._in_transaction = False
        self._last_warned: dict[int, float] = {}
        self._encoder = MessageEncoder()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> CollectorPosition | None:
        ensure_topic(self._settings, self._topic)
        ensure_topic(self._settings, self._dead_topic)
        ensure_topic(self._settings, self._ddl_topic, partitions=1)
        ensure_topic(self._settings, self._positions_topic, partitions=1, compacted=True)
        config = producer_config(
            self._settings,
            client_id=f"cdc-collector-{self._instance}",
            transactional_id=f"cdc-collector.{self._instance}",
        )
        config["error_cb"] = self._on_client_error
        try:
            servers = self._settings.bootstrap_servers
            with kafka_errors(f"starting the collector's transactions at {servers}"):
                self._producer = self._make_producer(config)
                # Fences every earlier producer of this instance and settles its open
                # transaction.
                self._producer.init_transactions(self._timeout_s)
        except CdcMirrorError as exc:
            # Whatever the new producer met, starting again later is what the service does.
            raise ServiceUnavailableError(str(exc)) from exc
        return self._load_position()

    def close(self) -> None:
        if self._producer is not None:
            if self._in_transaction:
                self.abort()
            self._producer.flush(5)
            self._producer = None

    # -- one transaction ----------------------------------------------------------------------
    def add(self, message: SimpleBinlog) -> None:
        self._produce(
            self._topic,
            partition_key(message.schema_name, message.table_name),
            self._encoder.encode(message),
        )

    def dead_letter(self, message: SimpleBinlog, error: str) -> None:
        record = {
            "error": error,
            "binlogOffset": message.binlog_offset,
            "schemaName": message.schema_name,
            "tableName": message.table_name,
            "eventType": message.event_type.value,
            "primaryKey": dict(
                zip(message.primary_keys, message.primary_key_values(), strict=True)
            ),
            "position": message.position.to_json() if message.position else None,
            "size": len(message.encode()),
        }
        self._produce(
            self._dead_topic,
            partition_key(message.schema_name, message.table_name),
            orjson.dumps(record),
        )

    def schema_change(self, key: str, record: dict[str, Any]) -> None:
        self._produce(self._ddl_topic, key.encode(), orjson.dumps(record))

    def detections(self, records: list[DetectionRecord]) -> None:
        if not self._detections_topic_ready:
            # Made on first use: instances without governance get no such topic.
            ensure_topic(self._settings, self._detections_topic)
            self._detections_topic_ready = True
        for record in records:
            self._produce(
                self._detections_topic,
                partition_key(record.schema_name, record.table_name),
                record.encode(),
            )

    def heartbeat(self, heartbeat: WatermarkHeartbeat) -> None:
        producer = self._require_producer()
        # Asked each time (a metadata round trip every heartbeat interval): a partition added
        # to the topic gets heartbeats from the next one on.
        try:
            with kafka_errors(f"listing the partitions of {self._topic}"):
                metadata = producer.list_topics(self._topic, timeout=self._timeout_s)
        except CdcMirrorError as exc:
            self._raise_for(exc, "listing the topic's partitions")
        partitions = sorted(metadata.topics[self._topic].partitions)
        value = heartbeat.encode()
        for partition in partitions:
            self._produce(self._topic, HEARTBEAT_KEY, value, partition)

    def commit(self, position: CollectorPosition) -> None:
        producer = self._require_producer()
        if not self._in_transaction:
            self._begin_transaction()
        self._produce(
            self._positions_topic, self._instance.encode(), orjson.dumps(position.to_json())
        )
        while True:
            try:
                with kafka_errors("committing"):
                    producer.commit_transaction(self._timeout_s)
                break
            except RetriableRequestError as exc:
                # The outcome is unknown (a timeout, a coordinator moving): committing again
                # is the only safe move. Aborting and resuming from the previous position
                # would publish this transaction twice if it did commit.
                log.warning("Kafka: committing again (%s)", exc)
            except CdcMirrorError as exc:
                try:
                    self._raise_for(exc, "committing")
                finally:
                    self._in_transaction = False
        # A successful commit means every message of the transaction was delivered: one that
        # was not makes the commit fail (abortable). No delivery reports are kept: those of an
        # aborted transaction ("purged in queue") arrive during the next one, and once made it
        # look failed after it had committed, so the caller republished committed rows.
        self._in_transaction = False

    def abort(self) -> None:
        if self._producer is None or not self._in_transaction:
            return
        try:
            with kafka_errors("aborting the transaction"):
                self._producer.abort_transaction(self._timeout_s)
        except FatalError as exc:
            self._raise_for(exc, "aborting the transaction")
        finally:
            self._in_transaction = False

    # -- internals ----------------------------------------------------------------------------
    def _require_producer(self) -> Producer:
        if self._producer is None:
            raise CdcMirrorError("the publisher is not started.")
        return self._producer

    def _begin_transaction(self) -> None:
        """Begin a transaction and put the positions topic's partition in it at once.

        Kafka adds a partition to a transaction (an AddPartitionsToTxn round trip to the
        coordinator) before the first record sent to it in that transaction. The position
        is known only at the commit, so without the opening record that round trip would
        come at the commit, in series with the position's write and the commit itself,
        while every row read meanwhile waits; made here, it overlaps the adding of rows.
        The record has a key of its own: readers of the topic look at the instance's key only.
        """
        producer = self._require_producer()
        try:
            with kafka_errors("beginning a transaction"):
                producer.begin_transaction()
        except CdcMirrorError as exc:
            self._raise_for(exc, "beginning a transaction")
        self._in_transaction = True
        self._produce(self._positions_topic, self._opening_key, b"")

    @property
    def _opening_key(self) -> bytes:
        return f"{self._instance}{OPENING_KEY_SUFFIX}".encode()

    def _produce(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        producer = self._require_producer()
        if not self._in_transaction:
            self._begin_transaction()
        while True:
            try:
                with kafka_errors("producing"):
                    if partition is None:
                        producer.produce(topic, key=key, value=value)
                    else:
                        producer.produce(topic, key=key, value=value, partition=partition)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
            except MessageTooLargeError as exc:
                raise OversizedMessageError(
                    f"a message of {len(value)} bytes exceeds Kafka's maximum message size."
                ) from exc
            except CdcMirrorError as exc:
                self._raise_for(exc, "producing")

    def _on_client_error(self, error: KafkaError) -> None:
        # Broker down and the like: librdkafka retries by itself. Say so, but once per kind of
        # error every 30 s, not several times a second while a broker is away.
        now = time.monotonic()
        if now - self._last_warned.get(error.code(), -1e9) >= 30:
            self._last_warned[error.code()] = now
            log.warning("Kafka: %s (retrying; repeats are muted for 30 s)", error.str())

    def _raise_for(self, error: CdcMirrorError, doing: str) -> NoReturn:
        """What the collector does with a Kafka error (mapped by ``cdc_platform.kafka``)."""
        if isinstance(error, errors.FencedError):
            raise FencedError(
                f"another collector took over this instance ({error}); stepping down."
            ) from error
        if isinstance(error, KafkaFatalError):
            # Not a takeover (librdkafka says "fenced" for that): e.g. the coordinator
            # answering EndTxn with INVALID_TXN_STATE right after it loaded the transaction
            # log. The producer is dropped; nothing of its open transaction is visible.
            self._producer = None
            self._in_transaction = False
            raise ProducerLostError(
                f"the Kafka producer became unusable while {doing} ({error}); "
                "nothing uncommitted is visible to readers."
            ) from error
        if isinstance(error, TransactionAbortedError):
            self.abort()
            raise AbortedError(f"the Kafka transaction was aborted: {error}") from error
        if isinstance(error, RetriableRequestError):
            raise AbortedError(f"{error} Will retry.") from error
        raise error

    def _load_position(self) -> CollectorPosition | None:
        """The last committed position of this instance: the compacted topic read to its end."""
        last: bytes | None = None
        for record in read_to_end(
            self._settings,
            self._positions_topic,
            group_id=f"cdc-collector-{self._instance}-position",
            partitions=[0],
            idle_timeout_s=self._timeout_s,
        ):
            if record.key == self._instance.encode():
                last = record.value
        return CollectorPosition.from_json(orjson.loads(last)) if last else None
