"""Kafka naming and client configuration shared by every component.

One topic per MySQL instance (``<topic_prefix><instance>``), keyed by physical table so the
rows of a table keep their order. Producers always use ``acks=all`` with idempotence; readers
of the stream use ``read_committed`` so a collector's aborted transactions are never seen.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from simple_binlog.config import KafkaSettings
from simple_binlog.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

# Properties a user may not override: they are what makes the stream lossless and ordered.
_PINNED_PRODUCER = {
    "acks": "all",
    "enable.idempotence": "true",
    "max.in.flight.requests.per.connection": "5",
}
_PINNED_CONSUMER = {"enable.auto.commit": "false"}


def topic_name(settings: KafkaSettings, instance: str) -> str:
    return f"{settings.topic_prefix}{instance}"


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
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka at {settings.bootstrap_servers} did not answer ({exc.args[0].str()})."
        ) from None
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
        error = exc.args[0]
        if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise ServiceUnavailableError(
            f"creating Kafka topic {topic} failed: {error.str()}"
        ) from None
    return True
