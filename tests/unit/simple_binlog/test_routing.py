"""Shard routing: physical schema.table → logical table, first matching rule wins."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simple_binlog.errors import ConfigError
from simple_binlog.routing import LogicalTable, ShardRouter, ShardRule, partition_key

FAST = settings(max_examples=150, deadline=None, database=None)

words = st.from_regex(r"\A[a-z][a-z]{0,9}(_[a-z]{1,8}){0,2}\Z")
suffixes = st.one_of(st.just(""), st.integers(0, 9999).map(lambda n: f"_{n:02d}"))


@pytest.fixture
def default_router():
    return ShardRouter([ShardRule()])


def test_default_rule_merges_shards(default_router):
    logical = default_router.route("ordercenter_07", "orderinfo_42")
    assert logical == LogicalTable(db_prefix="ordercenter", table_prefix="orderinfo")
    assert logical.name == "ordercenter_orderinfo"


@pytest.mark.parametrize(
    ("schema", "table", "db_prefix", "table_prefix"),
    [
        ("shop", "users", "shop", "users"),
        ("order_center", "order_item", "order_center", "order_item"),
        ("ordercenter_0", "orderinfo_1023", "ordercenter", "orderinfo"),
        ("ordercenter_07", "orderinfo", "ordercenter", "orderinfo"),
        ("ordercenter", "orderinfo_42", "ordercenter", "orderinfo"),
        # Only the last numeric suffix is a shard number.
        ("db_2024_01", "t_1_2", "db_2024", "t_1"),
        ("t2", "v3", "t2", "v3"),
    ],
)
def test_default_rule_cases(default_router, schema, table, db_prefix, table_prefix):
    assert default_router.route(schema, table) == LogicalTable(db_prefix, table_prefix)


@FAST
@given(words, suffixes, words, suffixes)
def test_default_rule_strips_one_numeric_suffix(db, db_suffix, table, table_suffix):
    router = ShardRouter([ShardRule()])
    logical = router.route(db + db_suffix, table + table_suffix)
    assert (logical.db_prefix, logical.table_prefix) == (db, table)
    assert logical.name == f"{db}_{table}"
    # Every shard of the same logical table lands on the same name.
    assert router.route(db + "_99", table + "_0").name == logical.name


@FAST
@given(words, words)
def test_unsharded_names_map_to_themselves(db, table):
    logical = ShardRouter([ShardRule()]).route(db, table)
    assert (logical.db_prefix, logical.table_prefix) == (db, table)


def test_logical_name_is_lowercase(default_router):
    assert default_router.route("OrderCenter_07", "OrderInfo_42").name == "ordercenter_orderinfo"


def test_unusable_logical_name_is_a_config_error(default_router):
    with pytest.raises(ConfigError, match=r"my-db\.users"):
        default_router.route("my-db", "users")


def test_custom_rules_first_match_wins():
    specific = ShardRule(schema_pattern=r"^(?P<db>shop)_\d+$", table_pattern=r"^(?P<table>.+)$")
    router = ShardRouter([specific, ShardRule()])
    # The first rule keeps the table's suffix; the default (second) rule would strip it.
    assert router.route("shop_01", "items_3").name == "shop_items_3"
    # Not matched by the first rule: falls through to the default.
    assert router.route("billing_02", "items_3").name == "billing_items"

    reversed_router = ShardRouter([ShardRule(), specific])
    assert reversed_router.route("shop_01", "items_3").name == "shop_items"


def test_custom_rule_with_other_suffix_shape():
    rule = ShardRule(
        schema_pattern=r"^(?P<db>[a-z]+)(?:-\d{4})?$",
        table_pattern=r"^(?P<table>[a-z]+)_(?:\d{6})$",
    )
    router = ShardRouter([rule])
    assert router.route("logs-2024", "event_202401").name == "logs_event"


def test_a_rule_must_match_both_names():
    rule = ShardRule(schema_pattern=r"^(?P<db>shop)$", table_pattern=r"^(?P<table>orders)$")
    assert rule.match("shop", "orders") == LogicalTable("shop", "orders")
    assert rule.match("shop", "users") is None
    assert rule.match("bank", "orders") is None
    # Patterns must match the whole name.
    assert rule.match("shop", "orders_archive") is None


def test_no_matching_rule_is_a_config_error():
    router = ShardRouter([ShardRule(schema_pattern=r"^(?P<db>shop)_\d+$")])
    with pytest.raises(ConfigError, match=r"no shard routing rule matches other\.orders"):
        router.route("other", "orders")


def test_router_needs_a_rule():
    with pytest.raises(ConfigError, match="at least one rule"):
        ShardRouter([])


def test_routes_are_stable_when_cached(default_router):
    first = default_router.route("ordercenter_07", "orderinfo_42")
    assert default_router.route("ordercenter_07", "orderinfo_42") == first


@pytest.mark.parametrize(
    ("field", "pattern", "mentions"),
    [
        ("schema_pattern", r"^(?P<db>[a-z+$", "valid regular expression"),
        ("table_pattern", r"^(?P<table>.+))$", "valid regular expression"),
        ("schema_pattern", r"^(?P<table>.+)$", "(?P<db>"),
        ("schema_pattern", r"^(.+)_\d+$", "(?P<db>"),
        ("table_pattern", r"^(?P<db>.+)$", "(?P<table>"),
        ("table_pattern", r"^.+$", "(?P<table>"),
    ],
)
def test_invalid_patterns_are_rejected_at_validation(field, pattern, mentions):
    with pytest.raises(ValidationError) as caught:
        ShardRule(**{field: pattern})
    errors = caught.value.errors()
    assert errors[0]["loc"] == (field,)
    assert mentions in str(caught.value)


def test_rules_are_strict_and_frozen():
    with pytest.raises(ValidationError):
        ShardRule(db_pattern="^(?P<db>.+)$")
    rule = ShardRule()
    with pytest.raises(ValidationError):
        rule.schema_pattern = r"^(?P<db>x)$"


def test_partition_key_is_the_physical_table():
    assert partition_key("ordercenter_07", "orderinfo_42") == b"ordercenter_07.orderinfo_42"
    assert partition_key("订单", "t") == "订单.t".encode()
