"""The consumer loop on the real Kafka: a target that fails is retried without committing or
skipping; tables of other targets are skipped and counted; two consumers of one group share
the partitions and a second one joining mid-stream (a rebalance) loses and repeats nothing
that matters: the result equals the reference; a batch is applied ``mirror.max_wait_ms`` after
its first message, not held until it is full, and its offsets are committed even when no
batch follows."""

from __future__ import annotations

import dataclasses
import random
import threading

import pytest

from cdc_platform.config import Settings
from mirror.applier import ApplyResult, MemoryApplier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.message import SimpleBinlog
from simple_binlog.routing import ShardRouter
from tests.integration.mirror.harness import MirrorScene, wait_for
from tests.unit.mirror.workload import LOGICAL, Workload, table_mirror


class FlakyApplier(MemoryApplier):
    """The in-memory applier, unreachable for its first ``failures`` batches."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.lock = threading.Lock()

    def apply_batch(self, changes) -> ApplyResult:
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                raise ServiceUnavailableError("the test target is down.")
            return super().apply_batch(changes)


def _consumer(
    scene: MirrorScene,
    applier: MemoryApplier,
    stop: threading.Event,
    metrics: MirrorMetrics,
    batch_size: int = 200,
    max_wait_ms: int = 50,
) -> MirrorConsumer:
    settings = scene.settings
    kafka = settings.kafka.model_copy(
        update={
            "topic_prefix": scene.topic_prefix,
            "client_properties": {"session.timeout.ms": "6000"},
        }
    )
    mirror = settings.mirror.model_copy(
        update={
            "group_prefix": f"mt{scene.tag}",
            "batch_size": batch_size,
            "max_wait_ms": max_wait_ms,
        }
    )
    router = ChangeRouter(settings.tables, ShardRouter(list(settings.shard_rules)), "redis")
    return MirrorConsumer(kafka, mirror, "redis", ["local"], router, applier, metrics, stop)


def _reference(settings: Settings, messages: list[SimpleBinlog]) -> dict:
    router = ChangeRouter(settings.tables, ShardRouter(list(settings.shard_rules)), "redis")
    reference = MemoryApplier()
    reference.apply_batch(c for m in messages for c in router.route("local", m).changes)
    return reference.rows(LOGICAL)


@pytest.mark.timeout(180)
def test_unreachable_target_is_retried_and_other_tables_are_skipped(
    mirror_settings: Settings,
) -> None:
    settings = mirror_settings.model_copy(
        update={
            "tables": [
                table_mirror(),
                table_mirror(db_prefix="crm", table_prefix="users", targets=["warehouse"]),
            ]
        }
    )
    scene = MirrorScene(settings)
    messages = Workload(random.Random(2)).messages(1000)
    other = [
        dataclasses.replace(m, schema_name="crm_00", table_name="users_00") for m in messages[:50]
    ]
    scene.publish(messages + other)
    applier, stop, metrics = FlakyApplier(failures=3), threading.Event(), MirrorMetrics("redis")
    consumer = _consumer(scene, applier, stop, metrics)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        wait_for(lambda: scene.committed_lag("redis") == 0, 120, "everything committed")
    finally:
        stop.set()
        thread.join(30)
    assert applier.failures == 0 and metrics.apply_errors._value.get() == 3
    assert metrics.skipped._value.get() == 50
    assert applier.rows(LOGICAL) == _reference(settings, messages)


@pytest.mark.timeout(240)
def test_a_second_consumer_joining_mid_stream_shares_the_work(mirror_settings: Settings) -> None:
    scene = MirrorScene(mirror_settings)
    workload = Workload(random.Random(17))
    first = workload.messages(3000)
    scene.publish(first)
    # One shared applier stands for the shared target; its guard sorts out any repeats.
    applier = FlakyApplier(failures=0)
    stops = [threading.Event(), threading.Event()]
    metrics = [MirrorMetrics("redis"), MirrorMetrics("redis")]
    consumers = [_consumer(scene, applier, stops[i], metrics[i], batch_size=50) for i in range(2)]
    threads = [threading.Thread(target=c.run) for c in consumers]
    threads[0].start()
    try:
        wait_for(lambda: consumers[0].batches > 3, 60, "the first consumer to apply batches")
        threads[1].start()  # a rebalance: the first consumer commits what it applied, then splits
        second = workload.messages(3000)
        scene.publish(second)
        wait_for(lambda: consumers[1].assignment, 90, "the second consumer to get partitions")
        wait_for(lambda: scene.committed_lag("redis") == 0, 120, "everything committed")
        owned = [set(c.assignment) for c in consumers]
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(30)
    # Both owned partitions (the range assignor splits the six between them).
    assert consumers[0].batches > 0 and owned[0] and owned[1]
    assert not owned[0] & owned[1]
    assert applier.rows(LOGICAL) == _reference(mirror_settings, first + second)


@pytest.mark.timeout(180)
def test_a_slow_stream_is_applied_in_small_batches_and_committed_when_it_stops(
    mirror_settings: Settings,
) -> None:
    """With a batch size far beyond the stream, a lone message and then a few more are
    applied anyway, and their offsets committed although no batch follows (the asynchronous
    commits are sent when due, also while idle)."""
    scene = MirrorScene(mirror_settings)
    workload = Workload(random.Random(23))
    applier, stop, metrics = FlakyApplier(failures=0), threading.Event(), MirrorMetrics("redis")
    consumer = _consumer(scene, applier, stop, metrics, batch_size=100_000, max_wait_ms=20)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        wait_for(lambda: consumer.assignment, 90, "the consumer to get partitions")
        lone = workload.messages(1)
        scene.publish(lone)
        wait_for(lambda: consumer.batches == 1, 60, "the lone message's batch")
        assert applier.rows(LOGICAL) == _reference(mirror_settings, lone)
        wait_for(lambda: scene.committed_lag("redis") == 0, 60, "the lone message committed")
        more = workload.messages(5)
        scene.publish(more)
        wait_for(lambda: scene.committed_lag("redis") == 0, 60, "the next messages committed")
    finally:
        stop.set()
        thread.join(30)
    assert applier.rows(LOGICAL) == _reference(mirror_settings, lone + more)
