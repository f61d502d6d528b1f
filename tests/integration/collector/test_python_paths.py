"""The collector as a whole process on its Python reference paths, as on a machine without a
C compiler: the C extension turned off by ``CDC_MIRROR_COLLECTOR_NATIVE=0`` (row decoding,
packet splitting and message construction all in Python). A workload of autocommits, small
transactions and a 20,000-row transaction split over many Kafka transactions must reach a
read_committed reader exactly once with the binlogOffsets of a clean read, and ``/health``
and the metrics must say the Python decoder ran."""

from __future__ import annotations

from collector import native
from tests.integration.collector.harness import (
    CollectorProcess,
    CollectorScene,
    assert_exactly_once,
    reached,
)
from tests.integration.collector.test_exactly_once import background

PORT = 29181


def test_the_python_paths_alone_capture_a_workload_exactly_once(scene: CollectorScene) -> None:
    process = CollectorProcess(
        {**scene.env, native.SWITCH: "0"}, PORT, scene.tmp / "python-paths.log"
    )
    scene.processes.append(process)  # stopped by the scene's teardown
    process.start()
    written = [0]
    thread, _stop, failures = background(scene, written, limit=30_000)
    thread.join()  # the workload stops by itself after `limit` rows
    assert failures == []
    end = scene.position_now()
    process.wait_for(
        lambda: reached(process.committed_gtid(), end.gtid), "the collector to catch up", 300
    )
    assert process.health()["decoder"] == "python"
    assert 'cdc_collector_native_decoder{instance="local"} 0.0' in process.metrics()
    process.stop()
    assert "turned off by CDC_MIRROR_COLLECTOR_NATIVE" in process.log.read_text()

    expected = scene.expected(end)
    assert len(expected) == written[0] >= 30_000
    assert_exactly_once(scene.received(len(expected)), expected)
