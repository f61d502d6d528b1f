"""Pure lake layout: logical table and dt in a time zone."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRouter, ShardRule
from stream_writer.layout import day_of, logical_table, next_midnight_ms

UTC_ZONE = ZoneInfo("UTC")
SHANGHAI = ZoneInfo("Asia/Shanghai")
# 2024-03-01T23:30:00Z
LATE_EVENING_UTC_MS = 1_709_335_800_000


def test_logical_table_merges_shards_and_refuses_the_dead_letter_name() -> None:
    router = ShardRouter([ShardRule()])
    assert logical_table(router, "ordercenter_07", "orderinfo_42") == "ordercenter_orderinfo"
    with pytest.raises(ConfigError, match="dead-letter"):
        logical_table(router, "dead_01", "letter_02")


def test_dt_follows_the_configured_zone() -> None:
    assert day_of(LATE_EVENING_UTC_MS, UTC_ZONE) == "2024-03-01"
    # 07:30 the next morning in Shanghai (UTC+8).
    assert day_of(LATE_EVENING_UTC_MS, SHANGHAI) == "2024-03-02"


def test_next_midnight_in_zone_and_across_daylight_saving() -> None:
    assert next_midnight_ms("2024-03-01", UTC_ZONE) == 1_709_337_600_000
    assert next_midnight_ms("2024-03-01", SHANGHAI) == 1_709_337_600_000 - 8 * 3600 * 1000
    berlin = ZoneInfo("Europe/Berlin")
    # 2024-03-31 has 23 hours in Berlin.
    length = next_midnight_ms("2024-03-31", berlin) - next_midnight_ms("2024-03-30", berlin)
    assert length == 23 * 3600 * 1000
