"""The Kafka broker restarts under load: the collector blocks and retries, and the topic ends up
with every change exactly once, in order, with the same binlogOffsets.

It stops and starts the local stack's Kafka broker: on a stack shared with other work, set
``CDC_TEST_COLLECTOR_RESTARTS=0`` to skip it (like the chaos suite's
``CDC_TEST_CHAOS_RESTARTS``).
"""

from __future__ import annotations

import os

import pytest

from stack.manager import LocalStack
from tests.integration.collector.harness import CollectorScene, assert_exactly_once, reached
from tests.integration.collector.test_exactly_once import background

RESTARTS = os.environ.get("CDC_TEST_COLLECTOR_RESTARTS", "1") != "0"


@pytest.mark.skipif(not RESTARTS, reason="restarts a shared service: CDC_TEST_COLLECTOR_RESTARTS=0")
def test_broker_restart_loses_and_duplicates_nothing(scene: CollectorScene) -> None:
    collector = scene.collector(29161).start()
    thread, stop, failures = background(scene, big_every=0, pace_s=0.05)
    try:
        collector.wait_for(
            lambda: collector.committed_gtid() not in (None, scene.start.gtid), "commits"
        )
        kafka = LocalStack(scene.settings).select(["kafka"])[0]
        assert kafka.down() == "stopped"
        assert kafka.up() == "started"
        before = collector.committed_gtid()
        collector.wait_for(
            lambda: collector.committed_gtid() != before, "commits after the restart", 180
        )
        assert collector.alive()
    finally:
        stop.set()
        thread.join()
    assert failures == []
    end = scene.position_now()
    collector.wait_for(
        lambda: reached(collector.committed_gtid(), end.gtid), "the collector to catch up", 300
    )
    collector.stop()

    expected = scene.expected(end)
    assert len(expected) > 500
    assert_exactly_once(scene.received(len(expected)), expected)
