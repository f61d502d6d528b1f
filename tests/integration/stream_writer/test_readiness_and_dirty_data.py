"""Readiness with out-of-order and late events, and dirty data, on one running writer.

Day 1 (2024-03-01) and the first half hour of day 2 arrive with some day-1 events shuffled
in after day-2 ones; the lateness budget is one hour, so day 1 is not ready until events of
day 2 05:00 arrive. Then a late day-1 event is written and reported, not dropped. Messages
that are not SimpleBinlog, or whose table cannot be routed, go to the dead-letter table with
their Kafka coordinates and a one-sentence error, and the writer keeps going. Readiness is
read as merge and downstream schedulers read it, from the writer's committed progress row in
the lake (here by pyiceberg, while the writer runs): a ready day's rows are all committed by
then. The tables are read from a separate Spark session while the writer runs.

On local disk and S3 (the stack's SeaweedFS) in every run, on HDFS as well with
``CDC_TEST_HDFS=1`` (pyiceberg reads it through WebHDFS).
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from cdc_platform.config import Settings
from cdc_platform.lake import WriterProgress
from tests.integration.stream_writer.conftest import STORAGES
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    caught_up,
    end_offsets,
    message,
    produce,
    produce_messages,
    wait_until,
)

DAY1, DAY2 = "2024-03-01", "2024-03-02"
DAY1_START_MS = 1_709_251_200_000
MINUTE = 60_000
WAIT_S = 240.0


def _good(table: tuple[str, str], row_id: int, minute: int):
    return message(table[0], table[1], row_id, DAY1_START_MS + minute * MINUTE, row_id)


ORDERS, USERS = ("shop", "orders"), ("crm", "users")


def _dirty() -> list[tuple[bytes, bytes, str]]:
    """(key, value, expected error fragment)."""
    valid = _good(ORDERS, 999_999, 10).to_json()
    wrong_version = {**valid, "version": 2}
    missing = {k: v for k, v in valid.items() if k != "executeTime"}
    bad_type = {**valid, "eventType": "UPSERT"}
    scalar_content = {**valid, "content": "just text"}
    wrong_json_type = {**valid, "binlogOffset": "twelve"}
    unroutable = {**valid, "schemaName": "Shop-Mixed", "tableName": "orders"}
    return [
        (b"x", b"{not json", "JSON object"),
        (b"x", orjson.dumps(wrong_version), "version 2 is not supported"),
        (b"x", orjson.dumps(missing), "lacks the required field 'executeTime'"),
        (b"x", orjson.dumps(bad_type), "unknown eventType 'UPSERT'"),
        (b"x", orjson.dumps(scalar_content), "'content' must be an object"),
        (b"x", orjson.dumps(wrong_json_type), "JSON object"),
        (b"Shop-Mixed.orders", orjson.dumps(unroutable), "not a usable table name"),
    ]


@pytest.mark.parametrize("storage", STORAGES)
def test_readiness_late_events_and_dead_letters(
    local_stack: Settings, remote_storage: set[str], topic: str, tmp_path: Path, storage: str
) -> None:
    env = WriterEnv.create(
        tmp_path, topic, local_stack, storage, lateness_budget_s=3600, trigger_interval_s=1
    )
    rng = random.Random(11)
    produced = []
    row_id = 0

    def good(table: tuple[str, str], minute: int):
        nonlocal row_id
        row_id += 1
        produced.append(_good(table, row_id, minute))
        return produced[-1]

    # Phase 1: day 1 every 10 minutes, then day 2 up to 00:30 with day-1 stragglers after it.
    phase1 = [good(rng.choice([ORDERS, USERS]), m) for m in range(0, 24 * 60, 10)]
    phase1 += [good(ORDERS, 24 * 60 + m) for m in range(0, 31, 5)]
    phase1 += [good(USERS, 24 * 60 - 3), good(ORDERS, 24 * 60 - 1)]
    produce_messages(local_stack, topic, phase1)
    dirty = _dirty()
    produce(local_stack, topic, [(k, v) for k, v, _ in dirty])

    run = LakeRun(env, tmp_path)
    writer = run.writer

    def settle() -> None:
        ends = end_offsets(local_stack, topic)
        wait_until(
            lambda: caught_up(env, ends), WAIT_S, "the writer to catch up", writer.diagnostics
        )

    def ready_days() -> list[str]:
        state = env.state()
        return [] if state is None else list(state["readyDays"])

    def committed_ids(table: str, dt: str) -> list[int]:
        rows = env.rows(table, ("content", "dt"))
        return sorted(orjson.loads(r["content"])["id"] for r in rows if r["dt"] == dt)

    def produced_ids(table: str, dt: str) -> list[int]:
        day_ms = DAY1_START_MS if dt == DAY1 else DAY1_START_MS + 24 * 60 * MINUTE
        return sorted(
            m.content["id"]
            for m in produced
            if f"{m.schema_name}_{m.table_name}" == table
            and day_ms <= m.execute_time < day_ms + 24 * 60 * MINUTE
        )

    with run:
        settle()
        # Watermark 00:30 of day 2 < midnight + 1 h: nothing is ready yet.
        assert ready_days() == [], env.state()

        # Phase 2: day 2 reaches 05:00 → day 1 is ready, day 2 is not.
        produce_messages(local_stack, topic, [good(USERS, 24 * 60 + 300)])
        settle()
        wait_until(lambda: DAY1 in ready_days(), 60, "day 1 to be ready", writer.diagnostics)
        progress = env.progress()
        assert progress is not None
        record = WriterProgress(
            progress["writer"], progress["batch_id"], progress["committed_ms"], progress["state"]
        ).ready_record(DAY1)
        assert record is not None and record["tablesWithData"] == ["crm_users", "shop_orders"]
        assert progress["ready_days"] == [DAY1]  # the column downstream SQL reads
        # Ready means committed: every row of the day is in its table already.
        for table in ("shop_orders", "crm_users"):
            assert committed_ids(table, DAY1) == produced_ids(table, DAY1), table

        # Phase 3: two late day-1 events: written, counted, reported.
        produce_messages(local_stack, topic, [good(ORDERS, 600), good(ORDERS, 601)])
        settle()
        wait_until(
            lambda: (env.state() or {}).get("lateRows") == {DAY1: {"shop_orders": 2}},
            60,
            "the late rows counted",
            writer.diagnostics,
        )
        assert ready_days() == [DAY1]

        result = run.query_and_drop()
        assert writer.proc.poll() is None, (
            "the writer stopped on dirty data\n" + writer.diagnostics()
        )
        assert writer.stop() == 0, writer.diagnostics()

    progress = result.pop("_cdc_writer_progress")
    [(_writer, _batch, ready_column, state)] = progress["rows"]
    assert ready_column == [DAY1] and state["lateRows"] == {DAY1: {"shop_orders": 2}}
    written = sorted(
        (r[5], r[6], r[7]) for t, c in result.items() if t != "dead_letter" for r in c["rows"]
    )
    assert written == sorted((m.schema_name, m.table_name, m.content["id"]) for m in produced)
    assert result["shop_orders"]["days"] == [DAY1, DAY2]
    assert result["crm_users"]["days"] == [DAY1, DAY2]

    dead = result["dead_letter"]["rows"]
    assert len(dead) == len(dirty), dead
    errors = sorted(r[2] for r in dead)
    for _key, _value, fragment in dirty:
        assert any(fragment in e for e in errors), (fragment, errors)
    assert len({(r[0], r[1]) for r in dead}) == len(dirty)  # distinct Kafka coordinates
