"""Hourly snapshots against real services: MariaDB shards, the raw change layer in the stream
writer's Iceberg table, Spark with the lake's Iceberg catalog (the module's one session).

Two days of a table mirror with ``snapshots: hourly``: each hour merged once the writer's
committed watermark has passed it, each hour's tag equal to MySQL at the hour's end, hours
without a tag of their own merged with the next one, the day's tag equal to its last hour
(the day cut), an hour not ready refused, the hours ``merge --ready-hours`` takes, rows that arrive late for a merged hour making the
day merge whole (its tag still the day cut), and ``cdc-mirror maintain`` dropping the hour
tags past ``retention.hourly_days`` while keeping the day tags.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from cdc_platform.config import TableRetention
from cdc_platform.config_store import snapshot_from_settings
from cdc_platform.lake_snapshots import hours_view, snapshot_as_of_hour
from merge.hours import Hour
from merge.job import Merger, MergeRequest, NotReadyError
from merge.maintenance import Maintainer
from tests.integration.merge.harness import (
    SNAPSHOT_TEXT,
    Shop,
    day_start,
    history_times,
    snapshot_rows,
)

DAY1 = date(2026, 11, 20)
DAY2 = date(2026, 11, 21)
BUDGET_S = 900  # stream_writer.lateness_budget_s's default


def at(day: date, hour: int, minute: int = 0) -> int:
    return day_start(day) + hour * 3600 + minute * 60


def clock_to(shop: Shop, second: int) -> None:
    shop._second, shop._seq = second, 0


def watermark(shop: Shop, second: int) -> None:
    """The writer's committed global watermark at ``second`` (no day declared ready)."""
    shop.watermark_ms = second * 1000
    shop.mark_ready(None)


def hour_rows(spark: Any, shop: Shop, merger: Merger, day: date, hour: int) -> dict[str, Any]:
    columns = [f"{expr} AS `{name}`" for name, expr in SNAPSHOT_TEXT.items()]
    found = (
        snapshot_as_of_hour(spark, merger.settings, shop.table, day, hour)
        .selectExpr(*columns, "_shard")
        .collect()
    )
    return {row["order_no"]: row.asDict() for row in found}


def test_hourly_snapshots_equal_mysql_at_each_hour_and_the_day_cut(spark: Any, shop: Shop) -> None:
    mirror = shop.mirror(snapshots="hourly", retention=TableRetention(hourly_days=1))
    settings = shop.merge_settings([mirror])
    merger = Merger(settings, spark)
    placed = {shop.insert(n % 3, history_times(DAY1, shop.rng)): n % 3 for n in range(6)}
    shop.messages.clear()  # history before the stream: only the MOCK replay carries it

    # DAY1 00:05 the history read (MOCK rows), then changes in hours 00, 01 and 05.
    clock_to(shop, at(DAY1, 0, 5))
    shop.mock_replay(shop._second)
    shop._second += 60
    first = sorted(placed)[0]
    shop.update(placed[first], first)
    placed[shop.insert(1, datetime(2026, 11, 20, 0, 30))] = 1
    expected = {(DAY1, 0): shop.mysql_rows()}
    clock_to(shop, at(DAY1, 1, 10))
    renamed = shop.update(placed[first], first, shop.new_order_no())
    placed[renamed] = placed.pop(first)
    gone = sorted(placed)[1]
    shop.delete(placed.pop(gone), gone)
    placed[shop.insert(2, datetime(2026, 11, 20, 1, 20))] = 2
    expected[(DAY1, 1)] = shop.mysql_rows()
    clock_to(shop, at(DAY1, 5, 40))
    shop.update(placed[renamed], renamed)
    expected[(DAY1, 23)] = shop.mysql_rows()
    shop.write_raw(spark, DAY1, ready=False)

    # Hours 00 and 01 are ready (watermark 02:00 + the lateness budget), 02 is not.
    watermark(shop, at(DAY1, 2) + BUDGET_S)
    # What `merge --ready-hours` merges: from the first day the writer has rows for.
    assert merger.ready_hours(shop.table) == [Hour(DAY1, 0), Hour(DAY1, 1)]
    hour0 = merger.merge(MergeRequest(shop.table, DAY1, hour=0))
    assert merger.ready_hours(shop.table) == [Hour(DAY1, 1)]
    assert hour0.mode == "first"
    assert hour0.check is not None and hour0.check.ok, hour0.check.to_json()
    with pytest.raises(NotReadyError, match="end of hour 2026-11-20T02"):
        merger.merge(MergeRequest(shop.table, DAY1, hour=2, wait_ready_s=0))
    hour1 = merger.merge(MergeRequest(shop.table, DAY1, hour=1))
    assert (hour1.mode, hour1.from_hour) == ("merge", 1)
    assert hour_rows(spark, shop, merger, DAY1, 0) == expected[(DAY1, 0)]
    assert hour_rows(spark, shop, merger, DAY1, 1) == expected[(DAY1, 1)]

    # The day's end: hour 23 takes the changes of 02 … 23 (no tags of their own) and the
    # day's tag names its snapshot, the day cut.
    watermark(shop, at(DAY2, 0) + BUDGET_S)
    hour23 = merger.merge(MergeRequest(shop.table, DAY1, hour=23))
    assert (hour23.from_hour, hour23.day_closed) == (2, True)
    state = merger.store.state(shop.table)
    assert state.days == {DAY1: hour23.snapshot_id}
    assert merger.ready_hours(shop.table) == []  # DAY2 00 ends at 01:00 + the budget
    assert set(state.hours) == {Hour(DAY1, 0), Hour(DAY1, 1), Hour(DAY1, 23)}
    assert state.current == hour23.snapshot_id
    assert snapshot_rows(spark, settings, shop.table, DAY1) == expected[(DAY1, 23)]
    assert hour_rows(spark, shop, merger, DAY1, 23) == expected[(DAY1, 23)]
    view = hours_view(settings, shop.table)
    counted = {
        (row["dt"], row["hr"]): row["n"]
        for row in spark.sql(f"SELECT dt, hr, count(*) AS n FROM {view} GROUP BY dt, hr").collect()
    }
    assert counted == {
        (str(DAY1), "00"): len(expected[(DAY1, 0)]),
        (str(DAY1), "01"): len(expected[(DAY1, 1)]),
        (str(DAY1), "23"): len(expected[(DAY1, 23)]),
    }

    # DAY2: hours 00 and 01 on top of DAY1's tag; then a change of 01:50 reaches the lake
    # after hour 01 was merged (late): the day is merged whole at its end.
    clock_to(shop, at(DAY2, 0, 30))
    shop.update(placed[renamed], renamed)
    expected[(DAY2, 0)] = shop.mysql_rows()
    clock_to(shop, at(DAY2, 1, 10))
    placed[shop.insert(0, datetime(2026, 11, 21, 1, 10))] = 0
    expected[(DAY2, 1)] = shop.mysql_rows()
    shop.write_raw(spark, DAY2, ready=False)
    watermark(shop, at(DAY2, 2) + BUDGET_S)
    assert merger.merge(MergeRequest(shop.table, DAY2, hour=0)).mode == "merge"
    late_hour = merger.merge(MergeRequest(shop.table, DAY2, hour=1))
    clock_to(shop, at(DAY2, 1, 50))
    second = sorted(placed)[2]
    shop.update(placed[second], second)
    expected[(DAY2, 23)] = shop.mysql_rows()
    shop.write_raw(spark, DAY2, ready=False)
    watermark(shop, at(DAY2 + timedelta(days=1), 0) + BUDGET_S)
    closed = merger.merge(MergeRequest(shop.table, DAY2, hour=23))
    assert (closed.mode, closed.day_closed, closed.hour) == ("re-merge", True, None)
    assert snapshot_rows(spark, settings, shop.table, DAY2) == expected[(DAY2, 23)]
    assert hour_rows(spark, shop, merger, DAY2, 0) == expected[(DAY2, 0)]
    # The hour keeps what it was merged with; the late change is in the day's tag.
    assert hour_rows(spark, shop, merger, DAY2, 1) == expected[(DAY2, 1)]
    state = merger.store.state(shop.table)
    assert state.days[DAY2] == closed.snapshot_id == state.current
    assert state.days[DAY1] == hour23.snapshot_id
    assert late_hour.snapshot_id == state.hours[Hour(DAY2, 1)]

    # Retention: a day of hour tags (hourly_days 1) on 2026-11-22 drops DAY1's hours only.
    report = Maintainer(
        settings,
        spark,
        snapshot_from_settings(settings),
        now=lambda: datetime(2026, 11, 22, 12, tzinfo=UTC),
    ).run([shop.table])
    assert not report.failed, [(s.table, s.action, s.error) for s in report.failed]
    state = merger.store.state(shop.table)
    assert set(state.days) == {DAY1, DAY2}
    assert {hour.day for hour in state.hours} == {DAY2}
    days = {row["dt"] for row in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()}
    assert days == {str(DAY2)}
    assert snapshot_rows(spark, settings, shop.table, DAY1) == expected[(DAY1, 23)]
