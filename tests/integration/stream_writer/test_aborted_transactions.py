"""A micro-batch whose Kafka offsets hold only aborted transactions (what a broker restart
under an open collector transaction leaves) has no committed record: the writer must pass over
it and go on, not fail on it. Found by the chaos suite: Spark wrote such a batch as a bare
directory, reading it back failed, and the restarted writer failed on the same batch for ever.
"""

from __future__ import annotations

from pathlib import Path

from cdc_platform.config import Settings
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    caught_up,
    end_offsets,
    message,
    produce_aborted,
    produce_messages,
    wait_until,
)

WAIT_S = 300.0
DAY_MS = 1_795_305_600_000  # 2026-11-22 00:00 UTC


def test_batch_of_aborted_transactions_only_is_passed_over(
    local_stack: Settings, topic: str, tmp_path: Path
) -> None:
    env = WriterEnv.create(tmp_path, topic, local_stack, trigger_interval_s=1)
    aborted = [message("shop_00", "orders_00", i, DAY_MS + i, 10_000 + i) for i in range(30)]
    produce_aborted(
        local_stack,
        topic,
        ((f"{m.schema_name}.{m.table_name}".encode(), m.encode()) for m in aborted),
    )
    ends = end_offsets(local_stack, topic)
    assert sum(ends.values()) > 0  # the aborted records and their markers take offsets

    with LakeRun(env, tmp_path) as run:
        writer = run.writer
        wait_until(
            lambda: caught_up(env, ends),
            WAIT_S,
            "the writer to pass the aborted offsets",
            writer.diagnostics,
        )
        assert writer.proc.poll() is None, writer.diagnostics()

        committed = [message("shop_00", "orders_00", i, DAY_MS + i, 20_000 + i) for i in range(5)]
        produce_messages(local_stack, topic, committed)
        ends = end_offsets(local_stack, topic)
        wait_until(
            lambda: caught_up(env, ends),
            WAIT_S,
            "the writer to write the committed rows",
            writer.diagnostics,
        )
        result = run.query_and_drop()
        assert writer.stop() == 0, writer.diagnostics()

    rows = result["shop_orders"]["rows"]
    assert sorted(r[7] for r in rows) == [m.content["id"] for m in committed]
    assert "dead_letter" not in result or not result["dead_letter"]["rows"]
