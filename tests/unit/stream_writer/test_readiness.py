"""Pure readiness: watermarks per partition, the global watermark, ready and late days."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from stream_writer.layout import next_midnight_ms
from stream_writer.readiness import (
    BatchProgress,
    PartitionProgress,
    ReadinessRule,
    WriterState,
    global_watermark,
)

UTC_ZONE = ZoneInfo("UTC")
HOUR = 3600 * 1000
DAY1 = "2024-03-01"
END_OF_DAY1 = next_midnight_ms(DAY1, UTC_ZONE)
RULE = ReadinessRule(UTC_ZONE, lateness_budget_ms=HOUR, pipeline_delay_ms=5 * 60 * 1000)
LONG_AFTER = END_OF_DAY1 + 30 * 24 * HOUR


def test_day_ready_needs_watermark_past_midnight_plus_budget() -> None:
    assert not RULE.is_ready(DAY1, None, LONG_AFTER)
    assert not RULE.is_ready(DAY1, END_OF_DAY1 + HOUR - 1, LONG_AFTER)
    assert RULE.is_ready(DAY1, END_OF_DAY1 + HOUR, LONG_AFTER)


def test_day_ready_needs_the_pipeline_delays_to_have_passed() -> None:
    watermark = END_OF_DAY1 + 2 * HOUR
    # Watermark far enough, but the clock says rows of the day may still be in flight.
    assert not RULE.is_ready(DAY1, watermark, END_OF_DAY1 + 5 * 60 * 1000 - 1)
    assert RULE.is_ready(DAY1, watermark, END_OF_DAY1 + 5 * 60 * 1000)


def test_global_watermark_is_the_minimum_of_lagging_partitions() -> None:
    partitions = [
        PartitionProgress("t", 0, 100, watermark_ms=50, lag=10),
        PartitionProgress("t", 1, 100, watermark_ms=30, lag=5),
        PartitionProgress("t", 2, 100, watermark_ms=10, lag=0),  # caught up: no hold-back
    ]
    assert global_watermark(partitions) == 30


def test_global_watermark_when_all_caught_up_is_the_highest() -> None:
    partitions = [
        PartitionProgress("t", 0, 100, watermark_ms=50, lag=0),
        PartitionProgress("t", 1, 0, watermark_ms=None, lag=0),  # never had a row
    ]
    assert global_watermark(partitions) == 50


def test_global_watermark_unknown_while_a_lagging_partition_wrote_nothing() -> None:
    partitions = [
        PartitionProgress("t", 0, 100, watermark_ms=50, lag=0),
        PartitionProgress("t", 1, 0, watermark_ms=None, lag=7),
    ]
    assert global_watermark(partitions) is None


def test_partition_watermark_never_moves_back_on_out_of_order_events() -> None:
    state = WriterState()
    state.advance([BatchProgress("t", 0, 10, 5, END_OF_DAY1)])
    state.advance([BatchProgress("t", 0, 20, 0, END_OF_DAY1 - 10 * HOUR)])
    progress = state.partitions["t:0"]
    assert progress.watermark_ms == END_OF_DAY1
    assert progress.next_offset == 20 and progress.lag == 0


def test_newly_ready_and_late_rows_are_counted_not_dropped() -> None:
    state = WriterState()
    state.table_days = {"orders": {DAY1, "2024-03-02"}, "users": {DAY1}}
    state.advance([BatchProgress("t", 0, 10, 0, END_OF_DAY1 + 2 * HOUR)])
    assert state.newly_ready(RULE, LONG_AFTER) == [DAY1]
    state.ready_days.add(DAY1)
    assert state.newly_ready(RULE, LONG_AFTER) == []
    late = state.count_late({("orders", DAY1): 3, ("orders", "2024-03-02"): 9})
    assert late == {DAY1: {"orders": 3}}
    state.count_late({("orders", DAY1): 2, ("users", DAY1): 1})
    assert state.late_rows == {DAY1: {"orders": 5, "users": 1}}


def test_state_round_trips_through_json() -> None:
    state = WriterState(last_batch=4)
    state.advance([BatchProgress("t", 1, 10, 2, 123)])
    state.table_days = {"orders": {DAY1}}
    state.ready_days = {DAY1}
    state.late_rows = {DAY1: {"orders": 1}}
    again = WriterState.from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.partitions["t:1"].watermark_ms == 123
    assert again.next_offsets() == {("t", 1): 10}
