"""Pure rules of the Iceberg snapshots: day tags, Iceberg's in-place type promotions, the
literals of the MERGE's key range, how the MERGE matches keys, which days a retention
expires, and the dt view's query and the digest of its columns."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake_snapshots import day_tag, days_view, snapshot_table, tag_day
from merge.maintenance import expired_days
from merge.schema import SchemaPlan
from merge.snapshot import (
    merge_statement,
    promotable,
    sql_literal,
    view_columns,
    view_mark,
    view_query,
)


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


_COLUMNS = [("id", "bigint", True), ("channel", "string", True)]
_BRANCHES = [
    ("dt-2026-11-19", (("dt", "2026-11-19"),), frozenset({"id"})),
    ("dt-2026-11-20", (("dt", "2026-11-20"),), frozenset({"id", "channel"})),
]


def test_the_dt_view_reads_each_tag_in_the_current_columns() -> None:
    query = view_query("`lake`.`snap`.`t`", [(c, kind) for c, kind, _ in _COLUMNS], _BRANCHES)
    assert query == (
        "SELECT CAST(`id` AS bigint) AS `id`, CAST(NULL AS string) AS `channel`, "
        "'2026-11-19' AS dt FROM `lake`.`snap`.`t` VERSION AS OF 'dt-2026-11-19' UNION ALL "
        "SELECT CAST(`id` AS bigint) AS `id`, CAST(`channel` AS string) AS `channel`, "
        "'2026-11-20' AS dt FROM `lake`.`snap`.`t` VERSION AS OF 'dt-2026-11-20'"
    )


def test_the_view_columns_digest_changes_with_the_columns_not_with_the_days() -> None:
    columns = view_columns(_COLUMNS, _BRANCHES)
    assert columns == [*_COLUMNS, ("dt", "string", False)]
    mark = view_mark(columns)
    # Another day (a branch more or less): the same columns, the same digest.
    assert view_mark(view_columns(_COLUMNS, _BRANCHES[1:])) == mark
    hourly = [(tag, (*fixed, ("hr", "03")), present) for tag, fixed, present in _BRANCHES]
    for other in (
        view_columns([*_COLUMNS, ("score", "int", True)], _BRANCHES),  # a column added
        view_columns([("id", "bigint", True), ("channel", "varchar(8)", True)], _BRANCHES),
        view_columns([("id", "bigint", False), ("channel", "string", True)], _BRANCHES[1:]),
        view_columns(_COLUMNS, hourly),
    ):
        assert view_mark(other) != mark
    # A required column that a tag lacks is NULL there: nullable in the view.
    required = [("id", "bigint", True), ("channel", "string", False)]
    assert view_columns(required, _BRANCHES)[1] == ("channel", "string", True)
    assert view_columns(required, _BRANCHES[1:])[1] == ("channel", "string", False)
