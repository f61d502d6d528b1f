"""A Redis-target mirror consumer over a memory applier, for the unit tests that replace its
Kafka clients."""

from __future__ import annotations

import threading

from cdc_platform.config import MirrorSettings, Settings
from mirror.applier import MemoryApplier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.routing import ShardRouter


def memory_consumer(stop: threading.Event) -> MirrorConsumer:
    """Reads the instance ``local``'s topic with the default settings until ``stop``."""
    settings = Settings()
    return MirrorConsumer(
        settings.kafka,
        MirrorSettings(),
        "redis",
        ["local"],
        ChangeRouter([], ShardRouter(list(settings.shard_rules)), "redis"),
        MemoryApplier(),
        MirrorMetrics("redis"),
        stop,
    )
