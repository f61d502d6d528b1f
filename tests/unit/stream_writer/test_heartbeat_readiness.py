"""A quiet source's days become ready by its heartbeats alone (pure readiness)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from stream_writer.layout import next_midnight_ms
from stream_writer.readiness import BatchProgress, ReadinessRule, WriterState, quiet_days

UTC_ZONE = ZoneInfo("UTC")
HOUR = 3600 * 1000
RULE = ReadinessRule(UTC_ZONE, lateness_budget_ms=HOUR, pipeline_delay_ms=5 * 60 * 1000)
DAY1, DAY2, DAY3 = "2024-03-01", "2024-03-02", "2024-03-03"
LONG_AFTER = next_midnight_ms(DAY3, UTC_ZONE) + 30 * 24 * HOUR


def _state_with_rows_on_day1() -> WriterState:
    state = WriterState()
    state.advance([BatchProgress("t", 0, 10, 0, next_midnight_ms(DAY1, UTC_ZONE) - HOUR)])
    state.table_days["shop_orders"] = {DAY1}
    return state


def test_rows_alone_leave_the_day_open_a_heartbeat_closes_it() -> None:
    state = _state_with_rows_on_day1()
    assert state.newly_ready(RULE, LONG_AFTER) == []  # the last row was at 23:00
    # A heartbeat batch: no rows, the partition's event time moves to day 2 01:00.
    state.advance([BatchProgress("t", 0, 13, 0, next_midnight_ms(DAY1, UTC_ZONE) + HOUR)])
    assert state.newly_ready(RULE, LONG_AFTER) == [DAY1]


def test_days_without_rows_become_ready_as_the_watermark_passes_them() -> None:
    state = _state_with_rows_on_day1()
    state.advance([BatchProgress("t", 0, 20, 0, next_midnight_ms(DAY3, UTC_ZONE) + HOUR)])
    assert state.newly_ready(RULE, LONG_AFTER) == [DAY1, DAY2, DAY3]
    state.ready_days.update([DAY1, DAY2, DAY3])
    assert state.newly_ready(RULE, LONG_AFTER) == []
    # Not before the watermark is an hour (the lateness budget) past the day's end.
    state.advance([BatchProgress("t", 0, 21, 0, next_midnight_ms(DAY3, UTC_ZONE) + 24 * HOUR)])
    assert state.newly_ready(RULE, LONG_AFTER) == []


def test_no_day_before_the_first_day_with_rows_and_none_without_any_rows() -> None:
    state = WriterState()
    state.advance([BatchProgress("t", 0, 3, 0, next_midnight_ms(DAY3, UTC_ZONE) + 2 * HOUR)])
    assert state.newly_ready(RULE, LONG_AFTER) == []  # a writer that never wrote a row
    state.table_days["shop_orders"] = {DAY2}
    assert state.newly_ready(RULE, LONG_AFTER) == [DAY2, DAY3]


def test_quiet_days_are_bounded() -> None:
    far = next_midnight_ms("2030-01-01", UTC_ZONE)
    assert len(quiet_days(DAY1, far, UTC_ZONE)) == 366
    assert quiet_days(DAY2, next_midnight_ms(DAY1, UTC_ZONE) - 1, UTC_ZONE) == set()
    assert quiet_days(DAY2, next_midnight_ms(DAY1, UTC_ZONE), UTC_ZONE) == {DAY2}
