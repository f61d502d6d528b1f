"""Pure lake layout: logical table, dt in a time zone, file names and the file plan."""

from __future__ import annotations

import itertools
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRouter, ShardRule
from stream_writer.layout import (
    FileName,
    GroupStats,
    day_of,
    file_index,
    files_for,
    logical_table,
    next_midnight_ms,
    offset_ranges,
    plan_files,
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


def test_files_for_rounds_and_never_returns_zero() -> None:
    assert files_for(0, 100) == 1
    assert files_for(10, 100) == 1
    assert files_for(149, 100) == 1
    assert files_for(151, 100) == 2
    assert files_for(5_000, 100) == 50


@given(
    lo=st.integers(0, 10**12),
    span=st.integers(1, 10**6),
    files=st.integers(1, 200),
)
def test_offset_ranges_cover_the_range_once_and_match_file_index(
    lo: int, span: int, files: int
) -> None:
    hi = lo + span - 1
    ranges = offset_ranges(lo, hi, files)
    assert ranges[0][0] == lo and ranges[-1][1] == hi
    assert all(a_end + 1 == b_start for (_, a_end), (b_start, _) in itertools.pairwise(ranges))
    assert all(start <= end for start, end in ranges)
    for offset in {lo, hi, lo + span // 2, lo + span // 3}:
        start, end = ranges[file_index(offset, lo, hi, files)]
        assert start <= offset <= end


def _group(table: str, rows: int, lo: int = 0, partition: int = 0) -> GroupStats:
    return GroupStats(table, "2024-03-01", "t", partition, rows, lo, lo + rows * 3, rows * 500)


def test_plan_splits_a_hot_table_and_gives_quiet_tables_one_file() -> None:
    target = 1_000_000  # bytes; 100 bytes a row → 10,000 rows a file
    groups = [_group("hot", 500_000)] + [_group(f"quiet_{i}", 10_000 // 50) for i in range(20)]
    plan = plan_files(groups, 7, "20240301000000", target, {"hot": 100.0}, 100.0)
    per_table: dict[str, int] = {}
    for planned in plan.files:
        per_table[planned.table] = per_table.get(planned.table, 0) + 1
    assert per_table["hot"] == 50
    assert all(per_table[f"quiet_{i}"] == 1 for i in range(20))
    # Ids are dense and unique; names carry the batch and the group's partition.
    assert [f.file_id for f in plan.files] == list(range(len(plan.files)))
    hot = [f for f in plan.files if f.table == "hot"]
    assert [f.name.index for f in hot] == list(range(50))
    assert all(f.name.batch_id == 7 and f.name.partition == 0 for f in hot)
    assert hot[0].relative_path.startswith("hot/dt=2024-03-01/binlog-20240301000000-7-0+t+0+0+")


def test_plan_uses_measured_bytes_per_row_over_the_default() -> None:
    groups = [_group("a", 100_000), _group("b", 100_000)]
    plan = plan_files(groups, 1, "20240301000000", 1_000_000, {"a": 10.0}, 100.0)
    counts = {t: sum(1 for f in plan.files if f.table == t) for t in ("a", "b")}
    assert counts == {"a": 1, "b": 10}
