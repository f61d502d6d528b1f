"""The mirror backend's pure parts: comparing shard schemas and summing daily counts."""

from __future__ import annotations

import datetime as dt

import pytest

from cdc_platform.mysql_schema import ShardSchema, merge_shard_schemas, sum_daily_counts
from simple_binlog.errors import ConfigError


def test_agreeing_shards_give_one_schema() -> None:
    columns = {"id": "bigint(20) unsigned", "v": "varchar(10)"}
    merged = merge_shard_schemas(
        "a_b",
        [ShardSchema("a_01.b_00", columns, ("id",)), ShardSchema("a_00.b_00", columns, ("id",))],
    )
    assert merged.shards_agree and merged.differences == []
    assert merged.shards == ["a_00.b_00", "a_01.b_00"]
    assert merged.columns == columns and merged.key == ["id"]


def test_disagreeing_shards_are_described() -> None:
    merged = merge_shard_schemas(
        "a_b",
        [
            ShardSchema("a_00.b_00", {"id": "int(11)", "v": "varchar(10)"}, ("id",)),
            ShardSchema("a_01.b_00", {"id": "bigint(20)", "w": "int(11)"}, ("id", "w")),
        ],
    )
    assert not merged.shards_agree
    assert merged.differences == [
        "a_01.b_00.id is bigint(20), a_00.b_00.id is int(11)",
        "a_01.b_00 lacks column v",
        "a_01.b_00 has the extra column w",
        "a_01.b_00 is keyed by (id, w), a_00.b_00 by (id)",
    ]


def test_no_shard_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no MySQL table routes to the logical table 'x_y'"):
        merge_shard_schemas("x_y", [])


def test_daily_counts_cover_seven_days_before_today_summed_over_shards() -> None:
    today = dt.date(2026, 11, 22)
    totals = sum_daily_counts(
        [
            [(dt.date(2026, 11, 21), 3), (dt.date(2026, 11, 15), 1)],
            [(dt.date(2026, 11, 21), 4), (dt.date(2026, 11, 14), 99), (today, 5)],
        ],
        today,
    )
    assert list(totals) == [dt.date(2026, 11, d) for d in range(15, 22)]
    assert totals[dt.date(2026, 11, 21)] == 7 and totals[dt.date(2026, 11, 15)] == 1
    assert totals[dt.date(2026, 11, 18)] == 0
