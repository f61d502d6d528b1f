"""Where replayed rows go, committed together with the progress they lead to.

Lifecycle of a ``ChunkPublisher``: ``start()`` once (it fences any earlier incarnation of the
same run worker: a ``kill -9``-ed one's open transaction is aborted), then one ``publish()``
per chunk — the chunk's rows and the table's new ``TableProgress`` in one Kafka transaction —
and ``close()``. A ``read_committed`` reader sees a chunk's rows exactly when it sees the
progress that says they are done, which is what makes a resumed run publish each row once.

``ProgressStore`` reads the progress topic (folded into ``RunStatus`` values) and writes the
records that need no transaction (run spec, run state, cancel requests).

``KafkaChunkPublisher``/``KafkaProgressStore`` are the real ones, ``MemoryChunkPublisher``/
``MemoryProgressStore`` the fakes for unit tests (shipped code, tested like the rest).
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cdc_platform.config import KafkaSettings
from cdc_platform.governance_model import DetectionRecord, detections_topic
from cdc_platform.kafka import (
    UnknownTopicError,
    consumer_config,
    ensure_topic,
    high_watermark,
    kafka_errors,
    producer_config,
    read_to_end,
)
from mock_replay.errors import ReplayError
from mock_replay.progress import RunSpec, RunStatus, TableProgress, fold
from simple_binlog.errors import CdcMirrorError, ServiceUnavailableError
from simple_binlog.naming import topic_name

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes]  # (key, value)


def progress_topic(settings: KafkaSettings, instance: str) -> str:
    """Compacted, one partition: the replay runs of one instance and their progress."""
    return f"{topic_name(settings, instance)}.replay-progress"


def transactional_id(instance: str, run_id: str, worker: int) -> str:
    """Fixed per run and worker, so a resumed worker fences the one it replaces."""
    return f"cdc-replay.{instance}.{run_id}.{worker}"


class ChunkPublisher(ABC):
    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def publish(
        self,
        key: bytes,
        values: Sequence[bytes],
        progress: TableProgress,
        detections: Sequence[DetectionRecord] = (),
    ) -> None:
        """Publish one table's rows (all under its partition key), the progress and the rows'
        governance detections atomically; raise if they are not committed."""

    @abstractmethod
    def close(self) -> None: ...


class ProgressStore(ABC):
    @abstractmethod
    def runs(self) -> dict[str, RunStatus]:
        """Every run of the instance with its committed progress."""

    @abstractmethod
    def write(self, key: bytes, value: dict[str, Any]) -> None:
        """Write one record outside any transaction and wait until it is stored."""

    def run(self, run_id: str) -> RunStatus:
        status = self.runs().get(run_id)
        if status is None:
            raise ReplayError(f"no replay run {run_id!r} is recorded for this instance.")
        return status


class MemoryChunkPublisher(ChunkPublisher):
    """Keeps committed rows and progress in lists. ``fail_after`` chunks it raises, as a
    broker failure would (nothing of that chunk committed)."""

    def __init__(self, store: MemoryProgressStore | None = None) -> None:
        self.rows: list[Record] = []
        self.progress: list[TableProgress] = []
        self.detections: list[DetectionRecord] = []
        self.store = store
        self.started = False
        self.fail_after: int | None = None

    def start(self) -> None:
        self.started = True

    def publish(
        self,
        key: bytes,
        values: Sequence[bytes],
        progress: TableProgress,
        detections: Sequence[DetectionRecord] = (),
    ) -> None:
        if self.fail_after is not None and len(self.progress) >= self.fail_after:
            raise ServiceUnavailableError("the memory publisher was told to fail.")
        self.rows.extend((key, value) for value in values)
        self.detections.extend(detections)
        self.progress.append(progress)
        if self.store is not None:
            self.store.write(progress.key, progress.to_json())

    def close(self) -> None:
        self.started = False


class MemoryProgressStore(ProgressStore):
    def __init__(self) -> None:
        self.records: list[tuple[bytes, dict[str, Any] | None]] = []
        self._lock = threading.Lock()

    def runs(self) -> dict[str, RunStatus]:
        with self._lock:
            return fold(list(self.records))

    def write(self, key: bytes, value: dict[str, Any]) -> None:
        with self._lock:
            self.records.append((key, value))


class KafkaChunkPublisher(ChunkPublisher):
    """A transactional producer per run worker; rows to the instance topic, progress to the
    progress topic, in one transaction per chunk."""

    def __init__(
        self,
        settings: KafkaSettings,
        instance: str,
        run_id: str,
        worker: int = 0,
        timeout_s: float = 60.0,
        producer_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self._settings = settings
        self._instance = instance
        self._timeout_s = timeout_s
        # librdkafka settings over the replay's own (e.g. a tiny local queue in a test).
        self._overrides = dict(producer_overrides or {})
        self._topic = topic_name(settings, instance)
        self._progress_topic = progress_topic(settings, instance)
        self._detections_topic = detections_topic(self._topic)
        self._detections_topic_ready = False
        self._transactional_id = transactional_id(instance, run_id, worker)
        self._servers = settings.bootstrap_servers
        self._producer: Producer | None = None

    def start(self) -> None:
        config = producer_config(
            self._settings,
            client_id=f"cdc-replay-{self._instance}",
            transactional_id=self._transactional_id,
        )
        # Bigger batches: a chunk is produced in one go and committed at once.
        config["linger.ms"] = 20
        config.update(self._overrides)
        with kafka_errors(f"starting the replay's transactions at {self._servers}"):
            self._producer = Producer(config)
            # Fences an earlier incarnation of this worker and aborts its open transaction.
            self._producer.init_transactions(self._timeout_s)

    def publish(
        self,
        key: bytes,
        values: Sequence[bytes],
        progress: TableProgress,
        detections: Sequence[DetectionRecord] = (),
    ) -> None:
        producer = self._producer
        if producer is None:
            raise CdcMirrorError("the replay publisher is not started.")
        if detections and not self._detections_topic_ready:
            ensure_topic(self._settings, self._detections_topic)  # on first use only
            self._detections_topic_ready = True
        try:
            with kafka_errors(f"publishing a chunk of {progress.table} at {self._servers}"):
                producer.begin_transaction()
                self._produce_rows(producer, key, values)
                for record in detections:
                    self._produce(
                        producer,
                        self._detections_topic,
                        f"{record.schema_name}.{record.table_name}".encode(),
                        record.encode(),
                    )
                self._produce(
                    producer, self._progress_topic, progress.key, orjson.dumps(progress.to_json())
                )
                # No delivery callbacks: a message that fails for good fails the commit, and
                # the transaction with it (a Python callback per row cost more than the row's
                # produce).
                producer.commit_transaction(self._timeout_s)
        except CdcMirrorError:
            self._abort_quietly(producer)
            raise

    def _produce_rows(self, producer: Producer, key: bytes, values: Sequence[bytes]) -> None:
        """All of a chunk's rows in one call (the configured partitioner places each by its
        key, as ``produce`` would); rows the local queue had no room for are produced again
        once deliveries made room, other failures raise."""
        pending: list[dict[str, Any]] = [{"key": key, "value": value} for value in values]
        while pending:
            queued = producer.produce_batch(self._topic, pending)
            if queued == len(pending):
                return
            failed = [message for message in pending if "_error" in message]
            if len(failed) != len(pending) - queued:
                # Every row not queued must say why, or a row would be left out unseen.
                raise KafkaException(
                    KafkaError(
                        KafkaError._FAIL,
                        f"{len(pending) - queued} rows were not queued but "
                        f"{len(failed)} reported an error",
                    )
                )
            for message in failed:
                error: KafkaError = message.pop("_error")
                if error.code() != KafkaError._QUEUE_FULL:
                    raise KafkaException(error)
            producer.poll(0.05)  # the local queue is full: let deliveries drain
            pending = failed

    def _produce(self, producer: Producer, topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                return
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain

    def _abort_quietly(self, producer: Producer) -> None:
        try:
            with kafka_errors("aborting the replay transaction"):
                producer.abort_transaction(self._timeout_s)
        except CdcMirrorError as exc:
            # The commit error is what the caller needs; this one only explains the state.
            log.warning("%s (after the failure that made it abort)", exc)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None


def fence(settings: KafkaSettings, instance: str, run_id: str, workers: int) -> None:
    """Fence every earlier producer of the run's workers: their open transactions (a killed
    run's) are aborted now, not at the broker's transaction timeout, so the progress topic
    can be read committed without waiting."""
    for worker in range(workers):
        producer = Producer(
            producer_config(
                settings,
                client_id=f"cdc-replay-{instance}-fence",
                transactional_id=transactional_id(instance, run_id, worker),
            )
        )
        try:
            with kafka_errors(f"fencing the earlier run at {settings.bootstrap_servers}"):
                producer.init_transactions(60)
        finally:
            producer.flush(5)


class KafkaProgressStore(ProgressStore):
    """The progress topic of one instance, read to its end with ``read_committed``."""

    def __init__(self, settings: KafkaSettings, instance: str, timeout_s: float = 90.0) -> None:
        self._settings = settings
        self._instance = instance
        self._topic = progress_topic(settings, instance)
        self._timeout_s = timeout_s
        self._producer: Producer | None = None

    def ensure_topics(self) -> None:
        ensure_topic(self._settings, topic_name(self._settings, self._instance))
        ensure_topic(self._settings, self._topic, partitions=1, compacted=True)

    def runs(self) -> dict[str, RunStatus]:
        return fold(self._read_all())

    def spec(self, run_id: str) -> RunSpec:
        """A run's spec without waiting for open transactions: specs are written outside
        transactions, so a read_uncommitted reader sees them as they are. Progress records
        are left out here (an uncommitted one may yet be aborted)."""
        records = [
            record for record in self._read_all(committed=False) if record[0].startswith(b"run/")
        ]
        status = fold(records).get(run_id)
        if status is None:
            raise ReplayError(
                f"no replay run {run_id!r} is recorded for instance {self._instance!r}."
            )
        return status.spec

    def _read_all(self, committed: bool = True) -> list[tuple[bytes, dict[str, Any] | None]]:
        # Read committed, the end is the last stable offset: progress after an open
        # transaction of another run (a killed run's, until the broker's transaction timeout)
        # is not read yet.
        records = read_to_end(
            self._settings,
            self._topic,
            group_id=f"cdc-replay-{self._instance}-status",
            partitions=[0],
            committed=committed,
            idle_timeout_s=self._timeout_s,
        )
        try:
            return [
                (
                    record.key or b"",
                    orjson.loads(record.value) if record.value is not None else None,
                )
                for record in records
            ]
        except UnknownTopicError:
            return []  # no run was ever recorded for this instance

    def write(self, key: bytes, value: dict[str, Any]) -> None:
        if self._producer is None:
            self._producer = Producer(
                producer_config(self._settings, client_id=f"cdc-replay-{self._instance}-control")
            )
        errors: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Any) -> None:
            if error is not None:
                errors.append(error)

        self._producer.produce(
            self._topic, key=key, value=orjson.dumps(value), on_delivery=delivered
        )
        remaining = self._producer.flush(self._timeout_s)
        if remaining or errors:
            reason = errors[0].str() if errors else "timed out"
            raise ServiceUnavailableError(
                f"writing to the replay progress topic {self._topic} failed ({reason})."
            )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None


class CancelWatch:
    """Tails the progress topic from now on for a cancel request of one run.

    Cancel requests are written outside transactions, so this reader uses read_uncommitted
    and is never held back by the runs' open transactions.
    """

    def __init__(self, settings: KafkaSettings, instance: str, run_id: str) -> None:
        config = consumer_config(settings, group_id=f"cdc-replay-{instance}-cancel")
        config["isolation.level"] = "read_uncommitted"
        self._consumer = Consumer(config)
        self._wanted = f"cancel/{run_id}".encode()
        topic = progress_topic(settings, instance)
        partition = TopicPartition(topic, 0)
        partition.offset = high_watermark(self._consumer, topic, 0, timeout_s=30)
        self._consumer.assign([partition])
        self.requested = False
        # Asked from the publishing thread and the read-ahead thread.
        self._lock = threading.Lock()

    def poll(self) -> bool:
        with self._lock:
            if not self.requested:
                for record in self._consumer.consume(num_messages=1000, timeout=0):
                    if record.error() is None and record.key() == self._wanted:
                        self.requested = True
            return self.requested

    def close(self) -> None:
        self._consumer.close()
