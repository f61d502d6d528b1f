"""Hourly snapshots against real services: MariaDB shards, the raw change layer in the stream
writer's Iceberg table, Spark with the lake's Iceberg catalog (the module's one session).

Two days of a table mirror with ``snapshots: hourly``: each hour merged once the writer's
committed watermark has passed it, each hour's tag equal to MySQL at the hour's end, hours
without a tag of their own merged with the next one, the day's tag equal to its last hour
(the day cut), an hour not ready refused, the hours ``merge --ready-hours`` takes, rows that
arrive late for a merged hour reaching the tags of the hours merged after they arrived (and
never undoing a newer change merged before them), a row late for a closed day reaching the
next day's first hour while the closed day's tags stay as merged, and ``cdc-mirror maintain`` dropping the hour
tags past ``retention.hourly_days`` while keeping the day tags.

The scenario runs here on local disk and in ``test_merge_remote.py`` on S3 (and HDFS with
``CDC_TEST_HDFS=1``), in that module's Spark session.
"""

from __future__ import annotations

import shutil
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from cdc_platform.config import TableRetention
from cdc_platform.config_store import snapshot_from_settings
from cdc_platform.lake_snapshots import hours_view, snapshot_as_of_hour
from merge.hours import Hour
from merge.job import Merger, MergeRequest, NotReadyError, merge_tables
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
    hourly_snapshots_scenario(spark, shop)


def hourly_snapshots_scenario(spark: Any, shop: Shop, storage_only: bool = False) -> None:
    """``storage_only``: leave out the parts whose outcome does not depend on the storage,
    the check per hour (MySQL's counts) and the retention of hour tags (tested here on local
    disk; maintenance itself on every storage in ``test_maintenance.py``)."""
    mirror = shop.mirror(snapshots="hourly", retention=TableRetention(hourly_days=1))
    settings = shop.merge_settings([mirror], check=not storage_only)
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
    if not storage_only:
        assert hour0.check is not None and hour0.check.ok, hour0.check.to_json()
    with pytest.raises(NotReadyError, match="end of hour 2026-11-20T02"):
        merger.merge(MergeRequest(shop.table, DAY1, hour=2, wait_ready_s=0))
    hour1 = merger.merge(MergeRequest(shop.table, DAY1, hour=1))
    assert (hour1.mode, hour1.from_hour) == ("merge", 1)
    assert hour_rows(spark, shop, merger, DAY1, 0) == expected[(DAY1, 0)]
    assert hour_rows(spark, shop, merger, DAY1, 1) == expected[(DAY1, 1)]
    # `merge --hour` of an hour already merged (by hand, --ready-hours, the scheduler) finds
    # its tag and merges nothing (--remerge would); one not ready yet is no failure either.
    skipped, waiting = merge_tables(
        merger,
        [
            MergeRequest(shop.table, DAY1, hour=1, skip_merged=True),
            MergeRequest(shop.table, DAY1, hour=2, wait_ready_s=0, skip_merged=True),
        ],
    )
    assert (skipped.result, skipped.error) == (None, None)
    assert skipped.skipped is not None and "2026-11-20T01 already merged" in skipped.skipped
    assert merger.store.state(shop.table).hours[Hour(DAY1, 1)] == hour1.snapshot_id
    assert (waiting.not_ready, waiting.result, waiting.skipped) == (True, None, None)

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

    # DAY2: hours 00 and 01 on top of DAY1's tag.
    clock_to(shop, at(DAY2, 0, 30))
    shop.update(placed[renamed], renamed)
    expected[(DAY2, 0)] = shop.mysql_rows()
    clock_to(shop, at(DAY2, 1, 10))
    placed[shop.insert(0, datetime(2026, 11, 21, 1, 10))] = 0
    expected[(DAY2, 1)] = shop.mysql_rows()
    shop.write_raw(spark, DAY2, ready=False)
    watermark(shop, at(DAY2, 2) + BUDGET_S)
    assert merger.merge(MergeRequest(shop.table, DAY2, hour=0)).mode == "merge"
    hour1 = merger.merge(MergeRequest(shop.table, DAY2, hour=1))
    assert hour1.late_from is None

    # Changes of 01:50 and 01:55 reach the lake after hour 01 was merged (late): the first
    # with hour 02's rows, the second only after hour 02 was merged too; the key the second
    # one updates is deleted at 02:20, in time for hour 02. A late row is in the tag of every
    # hour merged after it arrived, and never undoes a newer change merged before it.
    late_one, late_two = sorted(placed)[2:4]
    clock_to(shop, at(DAY2, 1, 50))
    shop.update(placed[late_one], late_one)
    clock_to(shop, at(DAY2, 1, 55))
    shop.update(placed[late_two], late_two)
    held_back = shop.messages.pop()
    clock_to(shop, at(DAY2, 2, 20))
    shop.delete(placed.pop(late_two), late_two)
    expected[(DAY2, 2)] = shop.mysql_rows()
    shop.write_raw(spark, DAY2, ready=False)
    watermark(shop, at(DAY2, 3) + BUDGET_S)
    # The raw snapshot hour 01's merge read is stored with its tag in the lake: a merge
    # without the local merge records (another host) finds the late row by it.
    shutil.rmtree(settings.lake_dir / "_merge")
    hour2 = merger.merge(MergeRequest(shop.table, DAY2, hour=2))
    assert (hour2.from_hour, hour2.late_from) == (2, "2026-11-21T01")
    assert hour_rows(spark, shop, merger, DAY2, 2) == expected[(DAY2, 2)]
    shop.messages.append(held_back)
    shop.write_raw(spark, DAY2, ready=False)
    watermark(shop, at(DAY2 + timedelta(days=1), 0) + BUDGET_S)
    closed = merger.merge(MergeRequest(shop.table, DAY2, hour=23))
    assert (closed.mode, closed.day_closed, closed.hour) == ("merge", True, 23)
    assert (closed.from_hour, closed.late_from) == (3, "2026-11-21T01")
    expected[(DAY2, 23)] = shop.mysql_rows()
    assert snapshot_rows(spark, settings, shop.table, DAY2) == expected[(DAY2, 23)]
    assert hour_rows(spark, shop, merger, DAY2, 23) == expected[(DAY2, 23)]
    assert late_two not in expected[(DAY2, 23)]
    assert hour_rows(spark, shop, merger, DAY2, 0) == expected[(DAY2, 0)]
    # An hour tag keeps what it was merged with: hour 01 without the late change of 01:50.
    assert hour_rows(spark, shop, merger, DAY2, 1) == expected[(DAY2, 1)]
    assert hour_rows(spark, shop, merger, DAY2, 2) == expected[(DAY2, 2)]
    state = merger.store.state(shop.table)
    assert state.days[DAY2] == closed.snapshot_id == state.current
    assert state.hours[Hour(DAY2, 23)] == closed.snapshot_id
    assert state.days[DAY1] == hour23.snapshot_id
    assert hour1.snapshot_id == state.hours[Hour(DAY2, 1)]

    # A change of DAY2 23:30 reaches the lake after DAY2 closed (the writer counts it late
    # for DAY2): DAY3's first hour has it (its changes start at DAY2 23:30), and DAY2's tags
    # keep what they were merged with.
    day3 = DAY2 + timedelta(days=1)
    clock_to(shop, at(DAY2, 23, 30))
    shop.update(placed[renamed], renamed)
    expected[(day3, 0)] = shop.mysql_rows()
    shop.write_raw(spark, DAY2, ready=False)
    shop.watermark_ms = (at(day3, 1) + BUDGET_S) * 1000
    shop.mark_ready(DAY2, {shop.table: 1})
    first = merger.merge(MergeRequest(shop.table, day3, hour=0))
    assert (first.mode, first.late_from) == ("merge", "2026-11-21T23")
    assert hour_rows(spark, shop, merger, day3, 0) == expected[(day3, 0)]
    assert expected[(day3, 0)] != expected[(DAY2, 23)]
    assert snapshot_rows(spark, settings, shop.table, DAY2) == expected[(DAY2, 23)]
    assert hour_rows(spark, shop, merger, DAY2, 23) == expected[(DAY2, 23)]
    assert hour_rows(spark, shop, merger, DAY2, 2) == expected[(DAY2, 2)]
    state = merger.store.state(shop.table)
    assert state.days[DAY2] == state.hours[Hour(DAY2, 23)] == closed.snapshot_id
    assert state.hours[Hour(day3, 0)] == first.snapshot_id == state.current

    if storage_only:
        return
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
    assert {hour.day for hour in state.hours} == {DAY2, day3}
    days = {row["dt"] for row in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()}
    assert days == {str(DAY2), str(day3)}
    assert snapshot_rows(spark, settings, shop.table, DAY1) == expected[(DAY1, 23)]


def test_an_archiving_hour_taken_again_keeps_its_deletes_ignored(spark: Any, shop: Shop) -> None:
    """Hour 01 archives 12 old rows (12 DELETEs of rows 60 days old > 7 × its 1 insert: ignored,
    kept in the snapshot). A change of 00:50 reaches the lake after hour 01 was merged, so hour
    02 takes every change from 00:50 on again, hour 01's among them. Hour 01's ignored DELETEs
    must stay ignored (its recorded decision), whatever the rule would decide on the span
    00:50–03:00 (12 DELETEs against 2 inserts: 12 < 14, not archiving)."""
    mirror = shop.mirror(snapshots="hourly")
    settings = shop.merge_settings([mirror], check=False)
    merger = Merger(settings, spark)
    archived = {
        shop.insert(n % 3, history_times(DAY1, shop.rng, old=True)): n % 3 for n in range(12)
    }
    placed = {shop.insert(n % 3, history_times(DAY1, shop.rng)): n % 3 for n in range(3)}
    shop.messages.clear()  # history before the stream: only the MOCK replay carries it
    clock_to(shop, at(DAY1, 0, 5))
    shop.mock_replay(shop._second)
    clock_to(shop, at(DAY1, 0, 50))
    late = sorted(placed)[0]
    shop.update(placed[late], late)
    held_back = shop.messages.pop()
    clock_to(shop, at(DAY1, 1, 10))
    for order_no, shard in sorted(archived.items()):
        shop.delete(shard, order_no)
    shop.insert(1, datetime(2026, 11, 20, 1, 20))
    shop.write_raw(spark, DAY1, ready=False)
    watermark(shop, at(DAY1, 2) + BUDGET_S)
    merger.merge(MergeRequest(shop.table, DAY1, hour=0))
    hour1 = merger.merge(MergeRequest(shop.table, DAY1, hour=1))
    assert hour1.archive.archiving and hour1.archive.ignored_deletes == len(archived)
    hour1_rows = hour_rows(spark, shop, merger, DAY1, 1)
    assert set(archived) <= set(hour1_rows)

    shop.messages.append(held_back)
    clock_to(shop, at(DAY1, 2, 10))
    shop.insert(2, datetime(2026, 11, 20, 2, 10))
    shop.write_raw(spark, DAY1, ready=False)
    watermark(shop, at(DAY1, 3) + BUDGET_S)
    hour2 = merger.merge(MergeRequest(shop.table, DAY1, hour=2))
    assert hour2.late_from == "2026-11-20T00"
    hour2_rows = hour_rows(spark, shop, merger, DAY1, 2)
    assert set(archived) <= set(hour2_rows), sorted(set(archived) - set(hour2_rows))
    assert hour2_rows == {**shop.mysql_rows(), **{key: hour1_rows[key] for key in archived}}


def test_a_first_hour_has_the_days_before_and_an_earlier_timed_delete_wins(
    spark: Any, shop: Shop
) -> None:
    """The table's first merged hour is DAY2 00: it has DAY1's replayed rows and changes. Then
    binlog times that are not monotonic: a key updated at DAY2 01:00:05 and then deleted by a
    change whose time reads 00:59:59 (a higher offset: hour 00's change, winning over the
    UPDATE). Hour 00's tag lacks the key; hour 01's merge, which takes the UPDATE, must not
    bring it back."""
    settings = shop.merge_settings([shop.mirror(snapshots="hourly")], check=False)
    merger = Merger(settings, spark)
    history = {shop.insert(n % 3, history_times(DAY1, shop.rng)): n % 3 for n in range(6)}
    shop.messages.clear()  # history before the stream: only the MOCK replay carries it
    clock_to(shop, at(DAY1, 0, 5))
    shop.mock_replay(shop._second)
    clock_to(shop, at(DAY1, 3))
    moved = shop.insert(0, datetime(2026, 11, 20, 3))
    gone = sorted(history)[0]
    shop.delete(history[gone], gone)
    shop.write_raw(spark, DAY1)
    clock_to(shop, at(DAY2, 0, 10))
    shop.insert(1, datetime(2026, 11, 21, 0, 10))
    clock_to(shop, at(DAY2, 1) + 5)
    shop.update(0, moved)
    shop.delete(0, moved)
    shop.messages[-1]["executeTime"] = (at(DAY2, 1) - 1) * 1000
    shop.write_raw(spark, DAY2)

    hour0 = merger.merge(MergeRequest(shop.table, DAY2, hour=0))
    assert hour0.mode == "first"
    rows0 = hour_rows(spark, shop, merger, DAY2, 0)
    assert len(rows0) == 6 - 1 + 1 + 1 - 1
    assert rows0 == shop.mysql_rows()
    merger.merge(MergeRequest(shop.table, DAY2, hour=1))
    rows1 = hour_rows(spark, shop, merger, DAY2, 1)
    assert moved not in rows1, "the UPDATE older than the DELETE brought the key back"
    assert rows1 == shop.mysql_rows()
