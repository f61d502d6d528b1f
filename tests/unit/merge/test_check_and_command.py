"""Pure: the check's comparison, readiness waiting, records, and the command line's plan."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from cdc_platform.config import Settings, TableMirror
from cdc_platform.lake import WriterProgress
from merge import records
from merge.app import plan_requests
from merge.archive import ArchiveOverride
from merge.check import check_days, check_facts, compare, counts_at_cut
from merge.job import NotReadyError, late_rows, wait_ready
from simple_binlog.errors import ConfigError

DT = date(2026, 11, 21)


def test_check_days_end_with_dt() -> None:
    days = check_days(DT)
    assert days[0] == date(2026, 11, 15)
    assert days[-1] == DT
    assert len(days) == 7


def test_compare_flags_mismatched_days() -> None:
    mysql = {day: 10 for day in check_days(DT)}
    snapshot = dict(mysql) | {DT: 9}
    result = compare(DT, snapshot, mysql)
    assert result.mismatches == [DT]
    assert not result.ok
    assert result.to_json()["days"][-1] == {
        "day": "2026-11-21",
        "snapshot": 9,
        "mysql": 10,
        "match": False,
    }
    assert compare(DT, mysql, mysql).ok


def test_stalled_when_snapshot_counts_stop_while_mysql_moves() -> None:
    before_day = DT - timedelta(days=1)
    counts = {day: 10 for day in check_days(before_day)}
    previous = compare(before_day, counts, counts).to_json()
    mysql_now = {day: 10 for day in check_days(DT)} | {before_day: 12}
    snapshot_now = {day: 10 for day in check_days(DT)}
    assert compare(DT, snapshot_now, mysql_now, previous).stalled
    snapshot_moving = dict(snapshot_now) | {before_day: 12}
    assert not compare(DT, snapshot_moving, mysql_now, previous).stalled


def test_the_check_stored_with_a_tag_is_enough_for_the_next_stalled_flag() -> None:
    # Stored with the tag's merge facts in the lake (the local records may be absent): the
    # counts of both sides per day, compact, and the next comparison reads them as before.
    before_day = DT - timedelta(days=1)
    counts = {day: 10 for day in check_days(before_day)}
    stored = check_facts(compare(before_day, counts, counts))
    assert set(stored) == {"ok", "days"}
    assert stored["days"][-1] == {"day": "2026-11-20", "snapshot": 10, "mysql": 10}
    mysql_now = {day: 10 for day in check_days(DT)} | {before_day: 12}
    snapshot_now = {day: 10 for day in check_days(DT)}
    assert compare(DT, snapshot_now, mysql_now, stored).stalled
    assert not compare(DT, snapshot_now, mysql_now, None).stalled


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_wait_ready_is_bounded() -> None:
    clock = FakeClock()
    nothing_ready = WriterProgress("w", 3, 0, {"readyDays": ["2026-11-20"]})
    with pytest.raises(NotReadyError, match="has not marked 2026-11-21 ready") as raised:
        wait_ready(lambda: nothing_ready, "w", DT, 25, 10, clock, clock.pause)
    assert clock.pauses == [10, 10, 5]
    assert "2026-11-20" in str(raised.value)
    with pytest.raises(NotReadyError, match="committed no progress"):
        wait_ready(lambda: None, "w", DT, 0, 10, clock, clock.pause)


def test_wait_ready_returns_the_committed_record() -> None:
    clock = FakeClock()
    committed: list[WriterProgress | None] = [None]

    def pause(seconds: float) -> None:
        clock.pause(seconds)
        committed[0] = WriterProgress(
            "w",
            7,
            123,
            {"readyDays": ["2026-11-21"], "tableDays": {"a_b": ["2026-11-21"], "c_d": []}},
        )

    record = wait_ready(lambda: committed[0], "w", DT, 60, 10, clock, pause)
    assert record["dt"] == "2026-11-21" and record["batchId"] == 7
    assert record["tablesWithData"] == ["a_b"]
    assert clock.pauses == [10]


def test_late_rows_from_the_writers_progress() -> None:
    assert late_rows(None, "2026-11-21", "a_b") == 0
    progress = WriterProgress("w", 1, 0, {"lateRows": {"2026-11-21": {"a_b": 3}}})
    assert late_rows(progress, "2026-11-21", "a_b") == 3
    assert late_rows(progress, "2026-11-21", "other") == 0
    assert late_rows(progress, "2026-11-22", "a_b") == 0


def test_records_are_replaced_whole(tmp_path: Path) -> None:
    path = records.merge_record_path(tmp_path, "a_b", "2026-11-21")
    records.write_json(path, {"rows": 1})
    records.write_json(path, {"rows": 2})
    assert records.read_json(path) == {"rows": 2}
    assert [p.name for p in path.parent.iterdir()] == ["2026-11-21.json"]


SETTINGS = Settings(
    tables=[
        TableMirror(db_prefix="ordercenter", table_prefix="orderinfo"),
        TableMirror(db_prefix="shop", table_prefix="cart", targets=["redis"]),
        TableMirror(db_prefix="shop", table_prefix="orders"),
    ]
)


def test_command_plans_all_hive_tables() -> None:
    requests = plan_requests(SETTINGS, "2026-11-21", [], True, False, True, 30.0)
    assert [r.table for r in requests] == ["ordercenter_orderinfo", "shop_orders"]
    assert {r.override for r in requests} == {ArchiveOverride.FORCE}
    assert requests[0].dt == DT
    assert requests[0].wait_ready_s == 30.0
    assert not requests[0].skip_readiness


def test_command_may_skip_readiness_but_not_also_wait_for_it() -> None:
    requests = plan_requests(
        SETTINGS, "2026-11-21", ["shop_orders"], False, False, False, None, True
    )
    assert [(r.table, r.skip_readiness) for r in requests] == [("shop_orders", True)]
    with pytest.raises(ConfigError, match="--skip-readiness and --wait-ready-s exclude each other"):
        plan_requests(SETTINGS, "2026-11-21", ["shop_orders"], False, False, False, 5.0, True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("2026-11-32", ["shop_orders"], False, False, False), "--dt must be a day"),
        (("2026-11-21", ["shop_orders"], False, True, True), "exclude each other"),
        (("2026-11-21", [], False, False, False), "--table, or use --all"),
        (("2026-11-21", ["shop_orders"], True, False, False), "--table, or use --all"),
        (("2026-11-21", ["nope"], False, False, False), "no table mirror named 'nope'"),
    ],
)
def test_command_refuses_nonsense(args: tuple[object, ...], message: str) -> None:
    dt, tables, all_tables, ignore, force = args
    with pytest.raises(ConfigError, match=message):
        plan_requests(SETTINGS, dt, tables, all_tables, ignore, force, None)  # type: ignore[arg-type]


def test_mysql_counts_are_taken_back_to_the_cut_by_the_changes_since():
    # Yesterday's snapshot is compared with MySQL now: a row of day d deleted today, a row
    # inserted today, an update moving a row between days, all undone; NULL days ignored.
    d1, d2, today = date(2026, 11, 24), date(2026, 11, 25), date(2026, 11, 26)
    now = {d1: 10, d2: 7, today: 3}
    changes = [
        ("DELETE", d2, None, 2),  # two rows of d2 deleted since the cut
        ("INSERT", today, None, 3),  # created since the cut
        ("UPDATE", d1, d2, 1),  # its check column moved from d2 to d1
        ("UPDATE", d2, d2, 4),  # updated, same day: no move
        ("INSERT", None, None, 5),  # check column NULL: on no day
    ]
    at_cut = counts_at_cut(now, changes)
    assert at_cut == {d1: 9, d2: 10, today: 0}
    assert compare(d2, {d1: 9, d2: 10}, at_cut).mismatches == []
    assert compare(d2, {d1: 9, d2: 10}, now).mismatches == [d1, d2]
