"""Pure rules of the Iceberg snapshots: day tags, Iceberg's in-place type promotions, the
literals of the MERGE's key range, how the MERGE matches keys, and which days a retention
expires."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake_snapshots import day_tag, days_view, snapshot_table, tag_day
from merge.maintenance import expired_days
from merge.schema import SchemaPlan
from merge.snapshot import merge_statement, promotable, sql_literal


def test_day_tags_name_days_and_nothing_else() -> None:
    assert day_tag(date(2026, 11, 25)) == "dt-2026-11-25"
    assert day_tag("2026-11-05") == "dt-2026-11-05"
    assert tag_day("dt-2026-11-25") == date(2026, 11, 25)
    for other in ("main", "cdc_merge_0a1b2c", "dt-2026-13-01", "dt-2026-11-25x", "x-dt-2026-11-25"):
        assert tag_day(other) is None
    with pytest.raises(ValueError):
        day_tag("yesterday")


def test_names_follow_the_settings() -> None:
    settings = Settings()
    assert snapshot_table(settings, "orders") == "`lake`.`ods_snapshot`.`orders`"
    assert days_view(settings, "orders") == "`ods_snapshot_dt`.`orders`"


@pytest.mark.parametrize(
    ("old", "new", "in_place"),
    [
        ("int", "bigint", True),
        ("float", "double", True),
        ("decimal(10,2)", "decimal(12,2)", True),
        ("decimal(12,2)", "decimal(16,4)", False),  # the scale changes
        ("bigint", "decimal(20,0)", False),
        ("date", "timestamp", False),
        ("int", "string", False),
    ],
)
def test_iceberg_promotes_only_its_own_widenings_in_place(
    old: str, new: str, in_place: bool
) -> None:
    assert promotable(old, new) is in_place


def test_key_range_literals_are_typed_and_quoted() -> None:
    assert sql_literal(42, "bigint") == "42"
    assert sql_literal("o'1\\x", "string") == "'o\\'1\\\\x'"
    assert sql_literal(date(2026, 11, 25), "date") == "DATE'2026-11-25'"
    assert sql_literal(Decimal("12.50"), "decimal(12,2)") == "CAST('12.50' AS decimal(12,2))"
    # No literal form here (or no value): the MERGE goes without the range condition.
    assert sql_literal(None, "bigint") is None
    assert sql_literal(b"\x00", "binary") is None
    assert sql_literal("42", "bigint") is None


def test_retention_keeps_the_day_n_days_back() -> None:
    days = [date(2026, 11, d) for d in (1, 19, 20, 21, 25)]
    assert expired_days(days, date(2026, 11, 25), 5) == [date(2026, 11, 1), date(2026, 11, 19)]
    assert expired_days(days, date(2026, 11, 25), 100) == []


def test_merge_matches_keys_null_safely_only_when_a_change_has_a_null_key() -> None:
    plan = SchemaPlan(columns=[("id", "bigint"), ("v", "string")], key=["id"])
    safe = merge_statement("t_snap", plan, "changes", (5, 9), null_keys=True)
    assert "ON t.`id` <=> s.`id` AND (t.`id` BETWEEN 5 AND 9 OR t.`id` IS NULL) " in safe
    plain = merge_statement("t_snap", plan, "changes", (5, 9), null_keys=False)
    # No change has a NULL key: plain equality matches the same rows, and no NULL key of the
    # table can match, so the scan leaves those out too.
    assert "ON t.`id` = s.`id` AND (t.`id` BETWEEN 5 AND 9) " in plain
    assert "<=>" not in plain and "IS NULL" not in plain
    assert plain.replace(" = s.`id` AND (t.`id` BETWEEN 5 AND 9)", "") == safe.replace(
        " <=> s.`id` AND (t.`id` BETWEEN 5 AND 9 OR t.`id` IS NULL)", ""
    )
