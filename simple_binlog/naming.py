"""Names that are part of the contract (pure, no client).

One topic per MySQL instance (``<topic_prefix><instance>``), keyed by physical table so the
rows of a table keep their order. The mirror consumes it in one consumer group per target
(``<mirror.group_prefix>.<target>``). Where the mirrors keep a row is named here too, so a
reader of a mirror (``validation``) finds it without importing the mirror:

* Redis: ``<redis.key_prefix>:<logical table>:<key part>[:<key part>…]``, one JSON document
  per key, ``{"_offset":"<20 digits>","_shard":"<schema.table>","row":{…} or null}``;
* warehouse: the table ``<mirror.warehouse_schema>.<logical table>`` with the bookkeeping
  columns ``_binlog_offset``, ``_shard`` and (soft deletes) ``_deleted``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import orjson

from simple_binlog.values import JsonScalar

WAREHOUSE_OFFSET_COLUMN = "_binlog_offset"
WAREHOUSE_SHARD_COLUMN = "_shard"
WAREHOUSE_DELETED_COLUMN = "_deleted"


class TopicSettings(Protocol):
    """What naming needs of the Kafka settings (the contract does not import configuration)."""

    @property
    def topic_prefix(self) -> str: ...


def topic_name(settings: TopicSettings, instance: str) -> str:
    return f"{settings.topic_prefix}{instance}"


def mirror_group(group_prefix: str, target: str) -> str:
    """The Kafka consumer group of the mirror of one target (redis, warehouse, kudu)."""
    return f"{group_prefix}.{target}"


def redis_key_part(value: JsonScalar) -> str:
    """A key column's wire value as a Redis key part: numbers in decimal, strings as they
    are, ``%`` and ``:`` escaped as ``%25`` and ``%3A``."""
    text = value if isinstance(value, str) else repr(value)
    if "%" in text or ":" in text:
        return text.replace("%", "%25").replace(":", "%3A")
    return text


def redis_key_part_value(part: str) -> str:
    """The text a key part was made from (the inverse of ``redis_key_part``'s escaping)."""
    if "%" not in part:
        return part
    return part.replace("%3A", ":").replace("%25", "%")


def redis_key(prefix: str, table: str, key: Sequence[JsonScalar]) -> str:
    return ":".join([prefix, table, *(redis_key_part(part) for part in key)])


def decode_redis_document(raw: bytes) -> tuple[int, str, dict[str, JsonScalar] | None]:
    """(offset, shard, row or None for a tombstone) of a stored Redis value."""
    document = orjson.loads(raw)
    return int(document["_offset"]), document["_shard"], document["row"]
