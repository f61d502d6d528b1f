"""Pure: MySQL → snapshot type mapping, widening, and schema evolution planning."""

from __future__ import annotations

import pytest

from merge.schema import OFFSET_COLUMN, choose_key, plan_schema
from merge.types import SchemaChangeError, hive_type, widen
from simple_binlog.errors import ConfigError


@pytest.mark.parametrize(
    ("mysql", "hive"),
    [
        ("tinyint(4)", "int"),
        ("smallint(5) unsigned", "int"),
        ("int(11)", "int"),
        ("int(10) unsigned", "bigint"),
        ("bigint(20)", "bigint"),
        ("bigint(20) unsigned", "decimal(20,0)"),
        ("decimal(12,2)", "decimal(12,2)"),
        ("decimal(38,10)", "decimal(38,10)"),
        ("decimal(65,30)", "string"),
        ("float", "float"),
        ("double", "double"),
        ("date", "date"),
        ("datetime", "timestamp"),
        ("datetime(6)", "timestamp"),
        ("timestamp(3)", "timestamp"),
        ("time(6)", "string"),
        ("year(4)", "int"),
        ("bit(5)", "bigint"),
        ("bit(64)", "decimal(20,0)"),
        ("enum('NEW','PAID')", "string"),
        ("set('a','b')", "string"),
        ("varchar(64)", "string"),
        ("json", "string"),
        ("longtext", "string"),
        ("varbinary(16)", "binary"),
        ("blob", "binary"),
        ("point", "binary"),
        ("uuid", "string"),
    ],
)
def test_type_map_is_lossless(mysql: str, hive: str) -> None:
    assert hive_type(mysql) == hive


@pytest.mark.parametrize(
    ("old", "new", "result"),
    [
        ("int", "bigint", "bigint"),
        ("bigint", "int", "bigint"),  # narrowing in MySQL: the wider type stays
        ("bigint", "decimal(20,0)", "decimal(20,0)"),
        ("decimal(10,2)", "decimal(12,4)", "decimal(12,4)"),
        ("decimal(10,4)", "decimal(12,2)", "decimal(14,4)"),  # both digits and scale kept
        ("int", "decimal(5,2)", "decimal(12,2)"),
        ("float", "double", "double"),
        ("date", "timestamp", "timestamp"),
        ("int", "string", "string"),
        ("string", "int", "string"),
        ("decimal(38,0)", "decimal(38,30)", "string"),  # no decimal holds both
    ],
)
def test_widen(old: str, new: str, result: str) -> None:
    assert widen("c", old, new) == result


@pytest.mark.parametrize(("old", "new"), [("binary", "string"), ("date", "int"), ("float", "int")])
def test_widen_refuses_lossy_changes(old: str, new: str) -> None:
    with pytest.raises(SchemaChangeError, match="column 'c' changed from"):
        widen("c", old, new)


LIVE = {"id": "bigint(20)", "amount": "decimal(12,2)", "created_at": "datetime(6)"}


def test_first_plan_follows_mysql() -> None:
    plan = plan_schema("t", None, LIVE, ["id"])
    assert plan.columns == [
        ("id", "bigint"),
        ("amount", "decimal(12,2)"),
        ("created_at", "timestamp"),
    ]
    assert not plan.changed


def test_added_widened_and_dropped_columns() -> None:
    previous = [("id", "int"), ("amount", "decimal(12,2)"), ("legacy", "string")]
    plan = plan_schema("t", previous, LIVE | {"id": "bigint(20)"}, ["id"])
    assert plan.columns == [
        ("id", "bigint"),
        ("amount", "decimal(12,2)"),
        ("legacy", "string"),  # dropped in MySQL: kept, NULL for rows changed from now on
        ("created_at", "timestamp"),
    ]
    assert plan.added == ["created_at"]
    assert plan.widened == {"id": ("int", "bigint")}
    assert plan.dropped_kept == ["legacy"]
    assert plan.describe()["widened"] == {"id": {"from": "int", "to": "bigint"}}


def test_rename_is_an_add_and_a_kept_drop() -> None:
    previous = [("id", "bigint"), ("amount", "decimal(12,2)"), ("created", "timestamp")]
    plan = plan_schema("t", previous, LIVE, ["id"])
    assert plan.added == ["created_at"]
    assert plan.dropped_kept == ["created"]


def test_names_match_case_insensitively_like_hive() -> None:
    plan = plan_schema(
        "t",
        [("id", "bigint"), ("amount", "decimal(12,2)")],
        {"ID": "bigint", "Amount": "decimal(12,2)"},
        ["ID"],
    )
    assert not plan.changed
    assert [name for name, _ in plan.columns] == ["id", "amount"]


def test_unfollowable_change_is_an_error() -> None:
    with pytest.raises(SchemaChangeError):
        plan_schema("t", [("id", "bigint"), ("amount", "binary")], LIVE, ["id"])


def test_key_is_configured_or_mysqls() -> None:
    assert choose_key("t", ["order_no"], ["id"]) == ["order_no"]
    assert choose_key("t", None, ["id", "shard"]) == ["id", "shard"]
    with pytest.raises(ConfigError, match="has no key"):
        choose_key("t", None, [])


def test_key_must_be_a_column() -> None:
    with pytest.raises(ConfigError, match="names columns MySQL does not have: order_no"):
        plan_schema("t", None, LIVE, ["order_no"])


def test_bookkeeping_names_are_reserved() -> None:
    with pytest.raises(ConfigError, match="bookkeeping"):
        plan_schema("t", None, LIVE | {OFFSET_COLUMN: "bigint"}, ["id"])
