"""Pure planning: routing by configuration, keys, key changes, latest change per key, and the
in-memory applier (the fake) against the reference ``InMemoryMirror``."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.applier import MemoryApplier
from mirror.memory import InMemoryMirror
from mirror.plan import ChangeRouter, RowChange, latest_per_key, project
from simple_binlog.errors import ContractError
from simple_binlog.message import EventType, SimpleBinlog, Source
from simple_binlog.routing import ShardRouter, ShardRule
from tests.unit.mirror.workload import LOGICAL, Workload, shuffled_batches, table_mirror

ROUTER = ShardRouter([ShardRule()])


def _message(
    event: EventType,
    content: dict,
    before: dict | None = None,
    offset: int = 10,
    schema: str = "shop_01",
    table: str = "orders_03",
    keys=("id",),
) -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=1,
        event_type=event,
        schema_name=schema,
        table_name=table,
        source=Source.BINLOG,
        content=content,
        column_types={k: "int(11)" for k in content},
        primary_keys=tuple(keys),
        before_content=before,
    )


def test_unconfigured_table_and_other_target_are_skipped_not_errors() -> None:
    router = ChangeRouter([table_mirror(targets=["hive"])], ROUTER, "redis")
    routed = router.route("local", _message(EventType.INSERT, {"id": 1}))
    assert routed.skipped and routed.changes == ()
    other = ChangeRouter([table_mirror()], ROUTER, "redis")
    assert other.route("local", _message(EventType.INSERT, {"id": 1}, schema="crm_01")).skipped
    # A table no shard rule names cannot be configured: skipped, not an error.
    strict = ChangeRouter(
        [table_mirror()], ShardRouter([ShardRule(schema_pattern=r"^(?P<db>shop)_\d+$")]), "redis"
    )
    assert strict.route("local", _message(EventType.INSERT, {"id": 1}, schema="crm")).skipped
    # Same logical name on another instance is another table.
    assert other.route("other", _message(EventType.INSERT, {"id": 1})).skipped


def test_shard_is_kept_and_key_change_deletes_the_old_key_at_the_same_offset() -> None:
    router = ChangeRouter([table_mirror()], ROUTER, "warehouse")
    message = _message(EventType.UPDATE, {"id": 2, "v": 5}, before={"id": 1, "v": 5}, offset=77)
    old, new = router.route("local", message).changes
    assert (old.key, old.deleted, old.offset) == ((1,), True, 77)
    assert (new.key, new.deleted, new.offset, new.shard) == ((2,), False, 77, "shop_01.orders_03")
    assert new.table == LOGICAL
    same_key = _message(EventType.UPDATE, {"id": 1, "v": 6}, before={"id": 1, "v": 5})
    assert len(router.route("local", same_key).changes) == 1


def test_configured_key_overrides_the_primary_key_and_must_be_present() -> None:
    router = ChangeRouter([table_mirror(key=["code"])], ROUTER, "redis")
    change = router.route("local", _message(EventType.INSERT, {"id": 1, "code": 9})).changes[0]
    assert change.key == (9,) and change.key_columns == ("code",)
    with pytest.raises(ContractError, match="lacks the key column 'code'"):
        router.route("local", _message(EventType.INSERT, {"id": 1}))
    with pytest.raises(ContractError, match="NULL key"):
        router.route("local", _message(EventType.INSERT, {"id": 1, "code": None}))


def test_table_without_key_is_a_contract_error_naming_the_setting() -> None:
    router = ChangeRouter([table_mirror()], ROUTER, "redis")
    with pytest.raises(ContractError, match="set 'key' of table mirror 'shop_orders'"):
        router.route("local", _message(EventType.INSERT, {"id": 1}, keys=()))


def _change(key: int, offset: int, deleted: bool = False) -> RowChange:
    return RowChange("t", (key,), offset, deleted, {"id": key}, {"id": "int"}, ("id",), "s.t", 0)


def test_latest_per_key_keeps_the_highest_offset_whatever_the_order() -> None:
    plan = latest_per_key(
        [_change(1, 5), _change(1, 9, deleted=True), _change(1, 7), _change(2, 1)]
    )
    assert plan.tables["t"][(1,)].offset == 9 and plan.tables["t"][(1,)].deleted
    assert plan.superseded == 2 and len(plan) == 2


def test_projection_keeps_listed_columns_it_has() -> None:
    assert project({"a": 1, "b": None, "c": 3}, ["b", "c", "zz"]) == {"b": None, "c": 3}
    assert project({"a": 1}, None) == {"a": 1}


def _reference(messages: list[SimpleBinlog]) -> InMemoryMirror:
    reference = InMemoryMirror(ROUTER)
    for message in messages:
        reference.apply(message)
    return reference


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 400))
def test_memory_applier_out_of_order_with_duplicates_equals_reference(
    seed: int, count: int
) -> None:
    rng = random.Random(seed)
    workload = Workload(rng)
    messages = workload.messages(count)
    router = ChangeRouter([table_mirror()], ROUTER, "redis")
    applier = MemoryApplier()
    for batch in shuffled_batches(messages, rng):
        applier.apply_batch(c for m in batch for c in router.route("local", m).changes)
    expected = _reference(messages).rows(LOGICAL)
    assert applier.rows(LOGICAL) == expected
    assert {k: r for k, (_, r) in workload.live.items()} == {k[0]: r for k, r in expected.items()}


def test_replaying_a_batch_is_a_no_op_counted_as_stale() -> None:
    rng = random.Random(3)
    messages = Workload(rng).messages(300)
    router = ChangeRouter([table_mirror()], ROUTER, "redis")
    changes = [c for m in messages for c in router.route("local", m).changes]
    applier = MemoryApplier()
    first = applier.apply_batch(changes)
    before = {k: v for k, v in applier.tables[LOGICAL].items()}
    again = applier.apply_batch(changes)
    assert again.applied == 0 and again.stale == first.applied
    assert applier.tables[LOGICAL] == before
