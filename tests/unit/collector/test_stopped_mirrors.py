"""Table mirrors disabled or removed in the web admin stop at the collector: which physical
tables they leave out (``TableFilter`` with ``StoppedTables``), how a change of them is
received and switched to (``parse_remote_config``, ``diff_configs``), and that a collector
reading a recorded binlog publishes exactly what it publishes with the same tables excluded
by pattern, its committed positions still passing every transaction whose rows were all left
out. The live switch against the real web admin, MariaDB and Kafka:
tests/integration/collector/test_remote_config.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cdc_platform.config import CollectorSettings, MySQLInstance, TableMirror
from collector.app import FileSources
from collector.binlog_files import PositionalTableSchemas
from collector.metrics import CollectorMetrics
from collector.publisher import MemoryPublisher
from collector.remote_config import diff_configs, parse_remote_config
from collector.service import Collector, StoppedTables, TableFilter
from simple_binlog.errors import ConfigError
from simple_binlog.routing import ShardRule

from .recordings import FIXTURES, no_server
from .test_remote_config import LOCAL, document

EVERYTHING = [r".*"]


def test_a_stopped_mirror_leaves_out_every_shard_of_it() -> None:
    include = TableFilter(EVERYTHING, [], StoppedTables(frozenset({"shop_orders"})))
    assert not include("shop_00", "orders_00")
    assert not include("shop_17", "orders")
    assert not include("shop", "orders_3")
    # Another logical table of the same shards, and one whose name only starts alike.
    assert include("shop_00", "users_00")
    assert include("shop_00", "orders_history_00")
    assert include("shopping_00", "orders_00")


def test_stopping_never_takes_in_what_the_patterns_leave_out() -> None:
    include = TableFilter([r"shop_\d+\..*"], [r".*\.tmp_.*"], StoppedTables(frozenset({"x_y"})))
    assert include("shop_01", "users") and not include("crm", "users")
    assert not include("shop_01", "tmp_users")


def test_the_shard_rules_say_which_physical_tables_are_a_mirror_s() -> None:
    rules = (ShardRule(schema_pattern=r"^(?P<db>.+?)(_s\d+)?$"),)
    include = TableFilter(EVERYTHING, [], StoppedTables(frozenset({"shop_orders"}), rules))
    assert not include("shop_s07", "orders_01")
    assert include("shop_07", "orders_01")  # routed to shop_07_orders: not the mirror's


def test_a_table_no_rule_routes_belongs_to_no_mirror() -> None:
    rules = (ShardRule(schema_pattern=r"^(?P<db>shop)_\d+$"),)
    include = TableFilter(EVERYTHING, [], StoppedTables(frozenset({"shop_orders"}), rules))
    assert include("crm", "orders")  # no rule matches crm: published as before
    assert include("Shop Data", "orders") and include("shop_01", "")  # a database-level DDL
    assert not include("shop_01", "orders")


def test_nothing_stopped_changes_nothing() -> None:
    include = TableFilter(EVERYTHING, [], StoppedTables())
    assert include("shop_00", "orders_00") and include("any", "thing")


def test_the_config_file_stops_its_disabled_mirrors_of_the_instance() -> None:
    tables = [
        TableMirror(instance="orders", db_prefix="shop", table_prefix="orders", enabled=False),
        TableMirror(instance="orders", db_prefix="shop", table_prefix="users"),
        TableMirror(instance="other", db_prefix="crm", table_prefix="notes", enabled=False),
    ]
    stopped = StoppedTables.from_file(tables, "orders", [])
    assert stopped == StoppedTables(frozenset({"shop_orders"}), (ShardRule(),))


# -- from the web admin (pure) -------------------------------------------------------------------


def test_the_admin_s_stopped_tables_are_read_and_default_to_none() -> None:
    config = parse_remote_config(document(stopped_tables=["shop_orders"]), LOCAL, "orders")
    assert config.stopped_tables == {"shop_orders"}
    assert StoppedTables.of(config).names == {"shop_orders"}
    older_admin = document()
    older_admin.pop("stopped_tables", None)
    assert parse_remote_config(older_admin, LOCAL, "orders").stopped_tables == frozenset()


@pytest.mark.parametrize("malformed", ["shop_orders", [1, 2], {"shop_orders": True}])
def test_malformed_stopped_tables_are_refused_with_one_sentence(malformed: Any) -> None:
    with pytest.raises(ConfigError, match="'stopped_tables' is not a list of names"):
        parse_remote_config(document(stopped_tables=malformed), LOCAL, "orders")


def _diff(old: dict[str, Any], new: dict[str, Any]) -> tuple[tuple[str, ...], bool, bool]:
    before = parse_remote_config(document(1, **old), LOCAL, "orders")
    after = parse_remote_config(document(2, **new), LOCAL, "orders")
    diff = diff_configs(before, after)
    return diff.changed, diff.needs_switch, diff.filters_changed


def test_stopping_or_resuming_a_mirror_switches_at_a_boundary_like_a_filter() -> None:
    stopped = {"stopped_tables": ["shop_orders"]}
    assert _diff({}, stopped) == (("stopped table mirrors",), True, True)
    assert _diff(stopped, {}) == (("stopped table mirrors",), True, True)
    assert _diff(stopped, stopped) == ((), False, False)


def test_shard_rules_switch_the_reading_only_while_a_mirror_is_stopped() -> None:
    rules = {"shard_rules": [{"schema_pattern": "^(?P<db>.+?)(_s\\d+)?$"}]}
    assert _diff({}, rules) == (("shard rules",), False, False)
    stopped = {"stopped_tables": ["shop_orders"]}
    changed, switch, _ = _diff(stopped, {**stopped, **rules})
    assert changed == ("stopped table mirrors", "shard rules") and switch


# -- a whole collector over a recorded binlog ----------------------------------------------------

RECORDING = FIXTURES / "vector.binlog"  # dtb.foo: 4 rows, dtb.bar: 6 rows, in 10 transactions


def _collect(exclude: Sequence[str] = (), stopped: StoppedTables | None = None) -> MemoryPublisher:
    publisher = MemoryPublisher()
    Collector(
        MySQLInstance(name="recorded", host="127.0.0.1"),
        # A commit per transaction: every transaction end is a committed position.
        CollectorSettings(exclude=list(exclude), commit_interval_ms=0),
        publisher,
        CollectorMetrics(),
        source=FileSources([str(RECORDING)]),
        schemas=PositionalTableSchemas(no_server),
        stopped=stopped,
    ).run()
    return publisher


def test_a_stopped_mirror_publishes_what_excluding_its_tables_publishes() -> None:
    everything = _collect()
    assert {(m.schema_name, m.table_name) for m in everything.committed} == {
        ("dtb", "foo"),
        ("dtb", "bar"),
    }
    stopped = _collect(stopped=StoppedTables(frozenset({"dtb_bar"})))
    excluded = _collect(exclude=[r"dtb\.bar"])

    assert [m.table_name for m in stopped.committed] == ["foo"] * 4
    # The same messages, binlogOffsets included, as a reading that never took the table.
    assert stopped.committed == excluded.committed
    assert stopped.positions == excluded.positions
    # Transactions holding only the stopped table's rows still move the position on: the
    # positions committed are every transaction's end, the last one the file's end, as when
    # nothing is stopped (only the offsets differ: the left-out rows take none).
    assert [(p.file, p.pos, p.partial) for p in stopped.positions] == [
        (p.file, p.pos, p.partial) for p in everything.positions
    ]
    assert len(stopped.positions) == len(everything.positions) == 10
