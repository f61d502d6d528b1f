"""Pure: hours of a day for hourly snapshots (ranges, tags, readiness, retention), the
table mirror's setting and the command line's --hour."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from cdc_platform.config import Settings, TableMirror, TableRetention
from cdc_platform.lake import WriterProgress
from cdc_platform.lake_snapshots import hour_tag, tag_day, tag_hour
from merge.app import READY_HOURS, expand_ready_hours, plan_requests
from merge.hours import (
    HOUR_MS,
    Hour,
    HourRule,
    day_hours,
    expired_hours,
    hour_of,
    hours_in_day,
    parse_hour,
)
from merge.job import NotReadyError, wait_hour_ready
from simple_binlog.errors import ConfigError

UTC_ZONE = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")
DAY = date(2026, 11, 25)


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def test_an_hours_range_and_its_neighbours() -> None:
    hour = Hour(DAY, 13)
    assert (hour.start_ms(UTC_ZONE), hour.end_ms(UTC_ZONE)) == (
        ms(2026, 11, 25, 13),
        ms(2026, 11, 25, 14),
    )
    assert hour.previous(UTC_ZONE) == Hour(DAY, 12)
    assert Hour(DAY, 0).previous(UTC_ZONE) == Hour(date(2026, 11, 24), 23)
    assert Hour(DAY, 23).next(UTC_ZONE) == Hour(date(2026, 11, 26), 0)
    assert Hour(DAY, 23).is_last(UTC_ZONE) and not hour.is_last(UTC_ZONE)
    # Berlin is UTC+1 in November: its 00:00-01:00 is 23:00-24:00 UTC the day before.
    assert Hour(DAY, 0).start_ms(BERLIN) == ms(2026, 11, 24, 23)
    assert hour_of(ms(2026, 11, 24, 23, 30), BERLIN) == Hour(DAY, 0)
    assert hour_of(ms(2026, 11, 25, 13, 59), UTC_ZONE) == hour


def test_a_days_hours_tile_it_also_when_the_clocks_move() -> None:
    for day, count in ((DAY, 24), (date(2026, 3, 29), 23), (date(2026, 10, 25), 25)):
        hours = day_hours(day, BERLIN)
        assert hours_in_day(day, BERLIN) == len(hours) == count
        assert hours[0].start_ms(BERLIN) == int(
            datetime(day.year, day.month, day.day, tzinfo=BERLIN).timestamp() * 1000
        )
        after = hours[-1].next(BERLIN)
        assert after == Hour(date.fromordinal(day.toordinal() + 1), 0)
        assert hours[-1].end_ms(BERLIN) == after.start_ms(BERLIN)
        assert all(h.end_ms(BERLIN) - h.start_ms(BERLIN) == HOUR_MS for h in hours)


def test_hour_tags_and_labels_round_trip() -> None:
    assert Hour(DAY, 7).tag == hour_tag(DAY, 7) == "hr-2026-11-25-07"
    assert tag_hour("hr-2026-11-25-07") == (DAY, 7)
    assert Hour(DAY, 7).label == "2026-11-25T07"
    assert parse_hour("2026-11-25T07", UTC_ZONE) == Hour(DAY, 7)
    # Day and hour tags are told apart; nothing else is taken for either.
    for other in ("dt-2026-11-25", "main", "hr-2026-11-25-25", "hr-2026-11-25-7", "hr-x"):
        assert tag_hour(other) is None
    assert tag_day("hr-2026-11-25-07") is None
    with pytest.raises(ValueError, match="not an hour of a day"):
        hour_tag(DAY, 25)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-11-25", "not an hour like"),
        ("2026-11-25T7", "not an hour like"),
        ("2026-11-32T07", "not an hour like"),
        ("2026-11-25T24", "hours 00 to 23"),
    ],
)
def test_parse_hour_refuses_nonsense(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_hour(text, UTC_ZONE)


def test_the_25th_hour_exists_only_on_the_day_the_clocks_go_back() -> None:
    assert parse_hour("2026-10-25T24", BERLIN) == Hour(date(2026, 10, 25), 24)
    with pytest.raises(ValueError, match="hours 00 to 23"):
        parse_hour("2026-11-25T24", BERLIN)


RULE = HourRule(UTC_ZONE, lateness_budget_ms=15 * 60_000, pipeline_delay_ms=4 * 60_000)


def test_an_hour_is_ready_by_the_writers_rule_at_the_hours_end() -> None:
    hour = Hour(DAY, 13)
    end = ms(2026, 11, 25, 14)
    late_enough = end + 4 * 60_000
    assert RULE.is_ready(hour, end + 15 * 60_000, late_enough, set())
    assert not RULE.is_ready(hour, end + 15 * 60_000 - 1, late_enough, set())  # watermark
    assert not RULE.is_ready(hour, end + 15 * 60_000, late_enough - 1, set())  # clock
    assert not RULE.is_ready(hour, None, late_enough, set())
    # A day the writer declared ready makes all its hours ready.
    assert RULE.is_ready(hour, None, 0, {"2026-11-25"})


def test_ready_hours_catch_up_in_order_up_to_the_first_not_ready() -> None:
    mark = ms(2026, 11, 25, 3, 20)  # past 03:00 + 15 min: hours up to 02 are ready
    found = RULE.ready_hours(Hour(date(2026, 11, 24), 22), mark, mark, set())
    assert [h.label for h in found] == [
        "2026-11-24T23",
        "2026-11-25T00",
        "2026-11-25T01",
        "2026-11-25T02",
    ]
    assert RULE.ready_hours(Hour(DAY, 2), mark, mark, set()) == []
    assert len(RULE.ready_hours(Hour(DAY, 0), None, 0, {"2026-11-25"}, limit=5)) == 5


def test_retention_drops_the_hours_of_days_past_it() -> None:
    today = date(2026, 11, 26)
    hours = [Hour(date(2026, 11, 22), 23), Hour(date(2026, 11, 23), 0), Hour(DAY, 5)]
    assert expired_hours(hours, today, keep_days=3) == [Hour(date(2026, 11, 22), 23)]
    assert expired_hours(hours, today, keep_days=1) == hours[:2]
    assert expired_hours(hours, today, keep_days=30) == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_waiting_for_an_hour_is_bounded_and_names_the_watermark() -> None:
    clock = FakeClock()
    behind = WriterProgress("w", 3, 0, {"globalWatermarkMs": ms(2026, 11, 25, 14, 5)})
    now = ms(2026, 11, 26)
    with pytest.raises(NotReadyError, match=r"end of hour 2026-11-25T13 after 25 s") as raised:
        wait_hour_ready(
            lambda: behind, "w", Hour(DAY, 13), RULE, 25, 10, clock, lambda: now, clock.pause
        )
    assert clock.pauses == [10, 10, 5]
    assert "2026-11-25T14:05:00+00:00" in str(raised.value)
    passed = WriterProgress("w", 4, 0, {"globalWatermarkMs": ms(2026, 11, 25, 14, 15)})
    wait_hour_ready(lambda: passed, "w", Hour(DAY, 13), RULE, 0, 10, clock, lambda: now)
    with pytest.raises(NotReadyError, match="committed no progress"):
        wait_hour_ready(lambda: None, "w", Hour(DAY, 13), RULE, 0, 10, clock, lambda: now)


def test_the_table_mirror_setting_is_validated() -> None:
    hourly = TableMirror(
        db_prefix="shop",
        table_prefix="orders",
        snapshots="hourly",
        retention=TableRetention(hourly_days=2),
    )
    assert hourly.snapshots == "hourly" and hourly.retention.hourly_days == 2
    assert TableMirror(db_prefix="shop", table_prefix="orders").snapshots == "daily"
    with pytest.raises(ValidationError, match="need the table mirrored to Hive"):
        TableMirror(db_prefix="a", table_prefix="b", snapshots="hourly", targets=["redis"])
    with pytest.raises(ValidationError, match="applies only to snapshots: hourly"):
        TableMirror(db_prefix="a", table_prefix="b", retention=TableRetention(hourly_days=2))
    with pytest.raises(ValidationError):
        TableMirror(db_prefix="a", table_prefix="b", snapshots="weekly")


SETTINGS = Settings(
    tables=[
        TableMirror(db_prefix="shop", table_prefix="orders", snapshots="hourly"),
        TableMirror(db_prefix="shop", table_prefix="carts"),
    ]
)


def test_command_plans_an_hour_of_hourly_tables_only() -> None:
    [request] = plan_requests(
        SETTINGS, None, ["shop_orders"], False, False, False, None, hour="2026-11-25T13"
    )
    assert (request.table, request.dt, request.hour) == ("shop_orders", DAY, 13)
    with pytest.raises(ConfigError, match="shop_carts has daily ones"):
        plan_requests(SETTINGS, None, [], True, False, False, None, hour="2026-11-25T13")
    with pytest.raises(ConfigError, match="--dt, the hour with --hour, or use --ready-hours"):
        plan_requests(
            SETTINGS, "2026-11-25", ["shop_orders"], False, False, False, None, hour="2026-11-25T13"
        )
    with pytest.raises(ConfigError, match="--dt, the hour with --hour, or use --ready-hours"):
        plan_requests(SETTINGS, None, ["shop_orders"], False, False, False, None)
    with pytest.raises(
        ConfigError, match=r"--hour: 2026-11-25 has hours 00 to 23 in UTC \(got '2026-11-25T99'\)"
    ):
        plan_requests(
            SETTINGS, None, ["shop_orders"], False, False, False, None, hour="2026-11-25T99"
        )


def test_command_plans_the_ready_hours_of_hourly_tables() -> None:
    with pytest.raises(ConfigError, match="--ready-hours merges tables with hourly snapshots"):
        plan_requests(SETTINGS, None, ["shop_carts"], False, False, False, None, ready_hours=True)
    # --all takes the hourly tables only.
    [planned] = plan_requests(SETTINGS, None, [], True, False, False, None, ready_hours=True)
    assert (planned.table, planned.hour) == ("shop_orders", READY_HOURS)

    class Hours:  # the merger's answer: the table's ready hours
        def ready_hours(self, table: str) -> list[Hour]:
            assert table == "shop_orders"
            return [Hour(DAY, 23), Hour(date(2026, 11, 26), 0)]

    expanded = expand_ready_hours(Hours(), [planned])  # type: ignore[arg-type]
    assert [(r.table, r.dt, r.hour) for r in expanded] == [
        ("shop_orders", DAY, 23),
        ("shop_orders", date(2026, 11, 26), 0),
    ]
