"""The scan's progress in Kafka (``validation.progress.KafkaProgress``): what a crashed run
left is what the next run reads, the latest record of a table and target wins, and an
instance that never validated has none."""

from __future__ import annotations

import uuid

from cdc_platform.config import Settings
from validation.progress import KafkaProgress, ScanProgress


def test_the_latest_progress_of_a_table_and_target_is_read_back(local_stack: Settings) -> None:
    kafka = local_stack.kafka.model_copy(update={"topic_prefix": f"vp{uuid.uuid4().hex[:8]}."})
    store = KafkaProgress(kafka, "local")
    try:
        assert store.load("orders", "redis") is None  # no topic yet
        store.save(ScanProgress("orders", "redis", ["17"], 17, 1, [(["3"], "missing")]))
        store.save(ScanProgress("orders", "warehouse", None, 40, 2, [], done=True))
        store.save(ScanProgress("orders", "redis", ["33"], 33, 2, [(["3"], "missing")]))
        again = KafkaProgress(kafka, "local")  # a new process after a crash
        found = again.load("orders", "redis")
        assert found is not None and found.after == ["33"] and found.rows == 33
        assert found.candidates == [(["3"], "missing")] and not found.done
        finished = again.load("orders", "warehouse")
        assert finished is not None and finished.done and finished.after is None
        assert again.load("other", "redis") is None
    finally:
        store.close()
