"""Pure lake layout: logical table, dt in a time zone, file names and the file plan."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRouter, ShardRule
from stream_writer.layout import (
    FileName,
    StagedFile,
    day_of,
    logical_table,
    name_files,
    next_midnight_ms,
    rows_per_file,
)

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


def test_file_name_round_trips_and_locates_a_row() -> None:
    name = FileName("20240301120000", 17, 2, "cdc.binlog.local", 3, 1200, 1999)
    text = str(name)
    assert text == "binlog-20240301120000-17-2+cdc.binlog.local+3+1200+1999.parquet"
    assert FileName.parse(text) == name
    assert name.holds("cdc.binlog.local", 3, 1200)
    assert name.holds("cdc.binlog.local", 3, 1999)
    assert not name.holds("cdc.binlog.local", 3, 2000)
    assert not name.holds("cdc.binlog.local", 2, 1500)
    with pytest.raises(ValueError, match="not a stream writer file name"):
        FileName.parse("part-00000.parquet")


def test_rows_per_file_from_target_and_bytes_per_row() -> None:
    assert rows_per_file(64 * 2**20, 100.0) == 671_088
    assert rows_per_file(1000, 0.0) == 1000  # a nonsensical estimate cannot divide by zero
    assert rows_per_file(10, 1000.0) == 1


def _staged(table: str, partition: int, lo: int, hi: int, dt: str = "2024-03-01") -> StagedFile:
    return StagedFile(f"/s/{table}-{lo}", table, dt, "t", partition, lo, hi, hi - lo + 1, 10)


def test_name_files_numbers_each_group_in_offset_order() -> None:
    staged = [
        _staged("hot", 0, 2000, 2999),
        _staged("hot", 0, 0, 999),
        _staged("hot", 0, 1000, 1999),
        _staged("hot", 1, 5, 9),
        _staged("quiet", 0, 3, 3),
        _staged("quiet", 0, 7, 8, dt="2024-03-02"),
    ]
    named = {str(name) for _, name in name_files(staged, "20240301000000", 7)}
    assert named == {
        "binlog-20240301000000-7-0+t+0+0+999.parquet",
        "binlog-20240301000000-7-1+t+0+1000+1999.parquet",
        "binlog-20240301000000-7-2+t+0+2000+2999.parquet",
        "binlog-20240301000000-7-0+t+1+5+9.parquet",
        "binlog-20240301000000-7-0+t+0+3+3.parquet",
        "binlog-20240301000000-7-0+t+0+7+8.parquet",
    }
    by_path = {item.path: name for item, name in name_files(staged, "20240301000000", 7)}
    assert by_path["/s/hot-1000"].index == 1
