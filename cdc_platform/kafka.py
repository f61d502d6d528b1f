"""The Kafka adapter: client settings, topics, reading a topic to its end, and the one table
that turns librdkafka's errors into the product's (``simple_binlog.errors``).

Producers always use ``acks=all`` with idempotence; readers of the stream use
``read_committed`` so a collector's aborted transactions are never seen.

Every call into confluent-kafka that can raise goes through ``kafka_errors(doing)`` (or one of
the functions here that use it), which raises what ``map_kafka_error`` says, ``from`` the
driver's exception. Whether a failure is retried is then decided by the product error's class
(``RetriableError`` or ``FatalError``), never by a call site reading librdkafka's flags.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from cdc_platform.config import KafkaSettings
from simple_binlog.errors import (
    CdcMirrorError,
    ConfigError,
    ContractError,
    FatalError,
    FencedError,
    RetriableError,
    ServiceUnavailableError,
    TransactionAbortedError,
)

log = logging.getLogger(__name__)

# -- errors ------------------------------------------------------------------------------------


class KafkaFatalError(FatalError):
    """librdkafka says the client is unusable (a fatal error): stop using it."""


class RetriableRequestError(ServiceUnavailableError):
    """librdkafka says the same request may simply be made again (a timeout, a coordinator
    moving). For ``commit_transaction`` the outcome is unknown and committing again is the only
    safe move."""


class MessageTooLargeError(ContractError):
    """One message is larger than Kafka accepts (a data error: dead-letter it)."""


class UnknownTopicError(ServiceUnavailableError):
    """The topic or partition does not exist (yet)."""


class RebalanceError(RetriableError):
    """The consumer group moved on (a rebalance), so the commit was not made; the partitions'
    new owner reads again from the last commit."""


class ReadStalledError(ServiceUnavailableError):
    """Reading a topic to its end made no progress within the time allowed."""


class DriverError(Protocol):
    """What the table reads of a librdkafka error (``confluent_kafka.KafkaError``)."""

    def code(self) -> int: ...
    def str(self) -> str: ...
    def fatal(self) -> bool: ...
    def retriable(self) -> bool: ...
    def txn_requires_abort(self) -> bool: ...


_FENCING = frozenset({KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE})
_NO_SUCH_TOPIC = frozenset(
    {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}
)
# _NO_OFFSET: a commit found nothing to commit (its partitions were handed over meanwhile).
_REBALANCE = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError._NO_OFFSET,
    }
)
_REFUSED = frozenset(
    {
        KafkaError._INVALID_ARG,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)

_Rule = tuple[Callable[[DriverError], bool], type[CdcMirrorError]]

# THE table, first match wins. librdkafka's flags come first: a fatal error (the producer is
# unusable: fenced, or its idempotence state lost) or one that requires aborting the
# transaction means that whatever its code says.
_TABLE: tuple[_Rule, ...] = (
    (lambda e: e.fatal() and e.code() in _FENCING, FencedError),
    (lambda e: e.fatal(), KafkaFatalError),
    (lambda e: e.txn_requires_abort(), TransactionAbortedError),
    (lambda e: e.code() in _TOO_LARGE, MessageTooLargeError),
    (lambda e: e.code() in _REFUSED, ConfigError),
    (lambda e: e.code() in _NO_SUCH_TOPIC, UnknownTopicError),
    (lambda e: e.code() in _REBALANCE, RebalanceError),
    (lambda e: e.retriable(), RetriableRequestError),
)
# Everything else (broker down, timed out, transport): the service is away for now.
_DEFAULT: type[CdcMirrorError] = ServiceUnavailableError


def map_kafka_error(error: DriverError, doing: str) -> CdcMirrorError:
    """The product error for a librdkafka error met while ``doing`` something."""
    kind = next((kind for matches, kind in _TABLE if matches(error)), _DEFAULT)
    return kind(f"Kafka failed while {doing} ({error.str()}).")


def driver_error(exc: KafkaException) -> DriverError:
    """The ``KafkaError`` a ``KafkaException`` carries (one made of a string gets ``_FAIL``)."""
    carried = exc.args[0] if exc.args else None
    if isinstance(carried, KafkaError):
        return carried
    return KafkaError(KafkaError._FAIL, str(carried if carried is not None else exc))


@contextmanager
def kafka_errors(doing: str) -> Iterator[None]:
    """The boundary: a ``KafkaException`` inside becomes the product error of the table."""
    try:
        yield
    except KafkaException as exc:
        raise map_kafka_error(driver_error(exc), doing) from exc


# -- client settings ----------------------------------------------------------------------------

# Properties a user may not override: they are what makes the stream lossless and ordered.
_PINNED_PRODUCER = {
    "acks": "all",
    "enable.idempotence": "true",
    "max.in.flight.requests.per.connection": "5",
}
_PINNED_CONSUMER = {"enable.auto.commit": "false"}


def _base(settings: KafkaSettings, pinned: dict[str, str]) -> dict[str, Any]:
    clashes = sorted(set(settings.client_properties) & set(pinned))
    if clashes:
        raise ConfigError(
            f"kafka.client_properties may not set {clashes[0]!r}: cdc-mirror pins it to "
            f"{pinned[clashes[0]]!r} so no row is lost or reordered."
        )
    return {"bootstrap.servers": settings.bootstrap_servers, **settings.client_properties}


def producer_config(
    settings: KafkaSettings, client_id: str, transactional_id: str | None = None
) -> dict[str, Any]:
    config = _base(settings, _PINNED_PRODUCER)
    config.update(
        {
            "client.id": client_id,
            "compression.type": "lz4",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            # Checked by the client before sending: a larger row fails at once (and goes to
            # the dead-letter topic) instead of being rejected by the broker and retried.
            "message.max.bytes": settings.max_message_bytes,
            # Retry for as long as the delivery timeout allows; then the caller sees an error.
            "delivery.timeout.ms": 120_000,
            **_PINNED_PRODUCER,
        }
    )
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = 60_000
        # librdkafka requires a delivery timeout within the transaction timeout.
        config["delivery.timeout.ms"] = 60_000
    return config


def consumer_config(
    settings: KafkaSettings, group_id: str, client_id: str | None = None
) -> dict[str, Any]:
    config = _base(settings, _PINNED_CONSUMER)
    config.update(
        {
            "group.id": group_id,
            "client.id": client_id or group_id,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **_PINNED_CONSUMER,
        }
    )
    return config


def admin_config(settings: KafkaSettings) -> dict[str, Any]:
    return _base(settings, {})


# -- topics -------------------------------------------------------------------------------------


def topic_names(settings: KafkaSettings, timeout_s: float = 10.0) -> set[str]:
    """Every topic the cluster has."""
    admin = AdminClient(admin_config(settings))
    with kafka_errors(f"listing the topics at {settings.bootstrap_servers}"):
        return set(admin.list_topics(timeout=timeout_s).topics)


def ensure_topic(
    settings: KafkaSettings,
    topic: str,
    timeout_s: float = 30.0,
    partitions: int | None = None,
    compacted: bool = False,
) -> bool:
    """Create the topic with the configured partitions, replication and min.insync.replicas.

    Returns True if it was created, False if it existed. An existing topic with fewer
    partitions than configured is left as it is, with a warning: adding partitions would move
    tables to other partitions and break their order.
    """
    admin = AdminClient(admin_config(settings))
    with kafka_errors(f"listing the topics at {settings.bootstrap_servers}"):
        metadata = admin.list_topics(timeout=timeout_s)
    existing = metadata.topics.get(topic)
    if existing is not None and existing.error is None:
        if len(existing.partitions) < (partitions or settings.partitions):
            log.warning(
                "topic %s has %d partitions, fewer than the configured %d; left unchanged",
                topic,
                len(existing.partitions),
                settings.partitions,
            )
        return False
    new_topic = NewTopic(
        topic,
        num_partitions=partitions or settings.partitions,
        replication_factor=settings.replication_factor,
        config={
            "min.insync.replicas": str(settings.min_insync_replicas),
            "cleanup.policy": "compact" if compacted else "delete",
            "unclean.leader.election.enable": "false",
        },
    )
    future = admin.create_topics([new_topic], operation_timeout=timeout_s)[topic]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        error = driver_error(exc)
        if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise map_kafka_error(error, f"creating the topic {topic}") from exc
    _wait_for_leaders(admin, topic, timeout_s)
    return True


def _wait_for_leaders(admin: AdminClient, topic: str, timeout_s: float) -> None:
    """Return once every partition of a topic just created has a leader: the broker answers
    its creation before it elects them, and a read or write in between fails with
    UNKNOWN_TOPIC_OR_PART or NOT_LEADER_FOR_PARTITION."""
    deadline = time.monotonic() + timeout_s
    while True:
        with kafka_errors(f"waiting for the partitions of {topic} to have leaders"):
            described = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        partitions = {} if described is None or described.error else described.partitions
        if partitions and all(p.leader >= 0 for p in partitions.values()):
            return
        if time.monotonic() >= deadline:
            raise ServiceUnavailableError(
                f"the Kafka topic {topic} was created but its partitions have no leader after "
                f"{timeout_s:.0f} s."
            )
        time.sleep(0.1)  # metadata poll; the broker offers no wait for leader election


# -- reading ------------------------------------------------------------------------------------


def high_watermark(
    consumer: Consumer, topic: str, partition: int, timeout_s: float = 30.0, cached: bool = False
) -> int:
    """The end of one partition: its high watermark, or for a ``read_committed`` consumer its
    last stable offset (before the first record of a transaction still open)."""
    with kafka_errors(f"asking where {topic}[{partition}] ends"):
        where = TopicPartition(topic, partition)
        if cached:
            _low, high = consumer.get_watermark_offsets(where, cached=True)
        else:
            _low, high = consumer.get_watermark_offsets(where, timeout=timeout_s)
    return int(high)


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record read by ``read_to_end``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_to_end(
    settings: KafkaSettings,
    topic: str,
    *,
    group_id: str = "cdc-mirror-read-to-end",
    partitions: Iterable[int] | None = None,
    committed: bool = True,
    idle_timeout_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[KafkaRecord]:
    """Every record of ``topic`` (of ``partitions``, or all of them) from the beginning to the
    end it has when the read starts, in offset order within a partition.

    ``committed`` reads ``read_committed``: the end is then the last stable offset, so the
    read stops before a transaction still open (a killed producer's, until the broker aborts
    it); uncommitted, it reads what was produced, aborted records too. No group offsets are
    committed. Raises ``UnknownTopicError`` for a topic that does not
    exist and ``ReadStalledError`` when no progress is made for ``idle_timeout_s``.
    """
    config = consumer_config(settings, group_id=group_id)
    if not committed:
        config["isolation.level"] = "read_uncommitted"
    consumer = Consumer(config)
    try:
        with kafka_errors(f"reading {topic} to its end"):
            wanted = _partitions(consumer, topic, partitions, idle_timeout_s)
            ends = {p: high_watermark(consumer, topic, p, idle_timeout_s) for p in wanted}
            yield from _read(consumer, topic, ends, idle_timeout_s, clock)
    finally:
        consumer.close()


def _partitions(
    consumer: Consumer, topic: str, partitions: Iterable[int] | None, timeout_s: float
) -> list[int]:
    if partitions is not None:
        return sorted(partitions)
    described = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if described is None:
        raise UnknownTopicError(f"the Kafka topic {topic} does not exist.")
    if described.error is not None:
        raise map_kafka_error(described.error, f"describing the topic {topic}")
    return sorted(described.partitions)


def _read(
    consumer: Consumer,
    topic: str,
    ends: dict[int, int],
    idle_timeout_s: float,
    clock: Callable[[], float],
) -> Iterator[KafkaRecord]:
    done = {p: 0 for p in ends}  # the next offset to read, as far as is known
    unread = {p for p, end in ends.items() if end > 0}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(unread)])
    deadline = clock() + idle_timeout_s
    while unread:
        if clock() > deadline:
            at = {p: done[p] for p in sorted(unread)}
            of = {p: ends[p] for p in sorted(unread)}
            raise ReadStalledError(
                f"reading {topic} to its end made no progress for {idle_timeout_s:.0f} s "
                f"(next offsets {at}, ends {of})."
            )
        for message in consumer.consume(num_messages=1000, timeout=0.2):
            error = message.error()
            if error is not None:
                _skip_or_raise(error, topic)
                continue
            partition, offset = message.partition() or 0, message.offset() or 0
            done[partition] = max(done[partition], offset + 1)
            yield KafkaRecord(topic, partition, offset, message.key(), message.value())
        # Transaction markers occupy offsets too; the reader's position tells the truth.
        before = sum(done.values())
        for position in consumer.position([TopicPartition(topic, p) for p in sorted(unread)]):
            done[position.partition] = max(done[position.partition], position.offset)
        if sum(done.values()) > before or any(done[p] >= ends[p] for p in unread):
            deadline = clock() + idle_timeout_s
        unread = {p for p in unread if done[p] < ends[p]}


def _skip_or_raise(error: DriverError, topic: str) -> None:
    """A consumer's error event: librdkafka recovers by itself from the retriable ones (the
    idle timeout bounds how long); the others end the read."""
    if error.code() == KafkaError._PARTITION_EOF:
        return
    mapped = map_kafka_error(error, f"reading {topic}")
    if not isinstance(mapped, RetriableError):
        raise mapped
    log.debug("reading %s: %s (librdkafka retries)", topic, mapped)
