"""What one stream writer reads and how it routes, under one configuration snapshot
(``writer_routing``, pure), and as the snapshot changes (``LiveRouting``).

The writer reads the topics of its instances (the ``--instance`` ones, else every instance of
the snapshot, so an instance added in the web admin is read from then on) or the ``--topic``
ones. Each topic's rows are routed by the shard rules of the instance it belongs to; a topic
of no instance of the snapshot by the rules all instances share (the config file gives every
instance the same ones), or the default rule when they differ or there is none.

A running writer's topics only grow: a topic left by a change (an instance removed) is still
read until the process restarts; dropping it from a running query would leave checkpointed
partitions that Spark's Kafka source with ``failOnDataLoss`` reports as data loss.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdc_platform.config import KafkaSettings
from cdc_platform.config_store import ConfigSnapshot, ConfigWatch, InstanceConfig
from simple_binlog.errors import ConfigError
from simple_binlog.naming import topic_name
from simple_binlog.routing import ShardRule

log = logging.getLogger(__name__)

DEFAULT_RULES: tuple[ShardRule, ...] = (ShardRule(),)


@dataclass(frozen=True)
class WriterRouting:
    """The topics one writer reads and the shard rules of each."""

    version: int
    topics: tuple[str, ...]  # sorted
    instances: tuple[str, ...] = ()  # whose topics are read (none for explicit topics)
    default: tuple[ShardRule, ...] = DEFAULT_RULES  # for a topic of no instance
    by_topic: Mapping[str, tuple[ShardRule, ...]] = field(default_factory=dict)

    def rules_for(self, topic: str) -> tuple[ShardRule, ...]:
        return self.by_topic.get(topic, self.default)

    def same_rules(self, other: WriterRouting) -> bool:
        """Whether every topic either reads is routed alike (and any other topic)."""
        read = set(self.topics) | set(other.topics)
        return self.default == other.default and all(
            self.rules_for(topic) == other.rules_for(topic) for topic in read
        )


def instance_topic(kafka: KafkaSettings, instance: InstanceConfig) -> str:
    return instance.topic or topic_name(kafka, instance.name)


def writer_routing(
    snapshot: ConfigSnapshot,
    kafka: KafkaSettings,
    instances: Sequence[str] = (),
    topics: Sequence[str] = (),
    reading: Sequence[str] = (),
) -> WriterRouting:
    """The routing of ``snapshot`` for a writer of ``instances`` (all when empty) or of the
    explicit ``topics``; ``reading``: the topics a running writer already reads (kept).
    ConfigError for a named instance the snapshot does not know."""
    chosen = [snapshot.instance(name) for name in instances] or list(snapshot.instances)
    by_topic = {instance_topic(kafka, i): i.shard_rules for i in snapshot.instances}
    read = set(topics) if topics else {instance_topic(kafka, i) for i in chosen}
    shared = {i.shard_rules for i in snapshot.instances}
    return WriterRouting(
        version=snapshot.version,
        topics=tuple(sorted(read | set(reading))),
        instances=() if topics else tuple(i.name for i in chosen),
        default=shared.pop() if len(shared) == 1 else DEFAULT_RULES,
        by_topic=by_topic,
    )


class LiveRouting:
    """A writer's routing as the configuration changes (the watch belongs to the caller):
    ``next`` (at the start of a batch)
    gives the routing of a new snapshot, or None when none came (or one that no longer names
    an instance the writer was told to read: logged, the routing in force stays)."""

    def __init__(
        self,
        watch: ConfigWatch,
        kafka: KafkaSettings,
        instances: Sequence[str] = (),
        topics: Sequence[str] = (),
    ) -> None:
        self._watch = watch
        self._kafka = kafka
        self._instances = tuple(instances)
        self._topics = tuple(topics)
        self.routing = writer_routing(watch.current, kafka, instances, topics)

    def next(self) -> WriterRouting | None:
        change = self._watch.take()
        if change is None:
            return None
        try:
            fresh = writer_routing(
                change.new, self._kafka, self._instances, self._topics, self.routing.topics
            )
        except ConfigError as exc:
            log.warning("%s The routing in force stays.", exc)
            return None
        self.routing = fresh
        return fresh
