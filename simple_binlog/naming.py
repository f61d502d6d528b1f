"""Names in Kafka that are part of the contract (pure, no client).

One topic per MySQL instance (``<topic_prefix><instance>``), keyed by physical table so the
rows of a table keep their order.
"""

from __future__ import annotations

from simple_binlog.config import KafkaSettings


def topic_name(settings: KafkaSettings, instance: str) -> str:
    return f"{settings.topic_prefix}{instance}"
