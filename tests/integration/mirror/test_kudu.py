"""What only the Kudu applier has, on the local stack's Kudu cluster: tombstones purged after
the TTL; a table Kudu cannot hold (its key, a column type change) stops with one sentence while
the others flow; an unreachable master.

The contract every target keeps runs against Kudu too, parametrised over the targets rather than
copied: shuffled and duplicated batches with a new column, tombstones, stale replays
(test_appliers.py), equal to MySQL row for row after a workload with key changes and deletes
(test_equal_to_mysql.py), kill -9 mid-batch (test_kill9.py), the batch writer against the
reference path on every Kind (test_kudu_writer.py)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from cdc_platform.config import Settings, TableMirror
from mirror.applier import MemoryApplier
from mirror.plan import ChangeRouter
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.message import EventType, SimpleBinlog, Source
from simple_binlog.routing import ShardRouter
from simple_binlog.values import decode, parse_column_type
from tests.integration.mirror.kudu_store import kudu_applier, kudu_rows
from tests.unit.mirror.workload import BASE_TYPES, LOGICAL, Workload


def _router(settings: Settings) -> ChangeRouter:
    return ChangeRouter(settings.tables, ShardRouter(list(settings.shard_rules)), "kudu")


def _changes(router: ChangeRouter, messages: list[SimpleBinlog]) -> list:
    return [c for m in messages for c in router.route("local", m).changes]


def _reference(router: ChangeRouter, messages: list[SimpleBinlog]) -> MemoryApplier:
    reference = MemoryApplier()
    reference.apply_batch(_changes(router, messages))
    return reference


def _canonical(row: dict[str, Any], types: dict[str, str]) -> dict[str, Any]:
    return {n: decode(parse_column_type(types[n]), v, n) for n, v in row.items()}


def _assert_equal(settings: Settings, reference: MemoryApplier, types: dict[str, str]) -> None:
    stored = kudu_rows(settings, LOGICAL)
    live = {k: r for k, r in stored.items() if not r["_deleted"]}
    entries = reference.tables[LOGICAL]
    expected = {key[0]: row for key, row in reference.rows(LOGICAL).items()}
    assert set(live) == set(expected)
    for key, row in expected.items():
        assert {n: live[key][n] for n in row} == _canonical(row, types), key
        assert live[key]["_binlog_offset"] == entries[(key,)].offset
    # Every delete the reference holds is a tombstone at its offset.
    for (key,), entry in entries.items():
        if entry.row is None:
            assert stored[key]["_deleted"] is True
            assert stored[key]["_binlog_offset"] == entry.offset


def test_tombstones_older_than_the_ttl_are_purged_and_younger_ones_kept(
    kudu_settings: Settings,
) -> None:
    workload = Workload(random.Random(7))
    first = workload.step()
    shard = (first.schema_name, first.table_name)
    second = workload._message(shard, EventType.INSERT, workload._row(workload._fresh_key()))
    deletes = [
        workload._message(shard, EventType.DELETE, dict(first.content)),
        workload._message(shard, EventType.DELETE, dict(second.content)),
    ]
    router = _router(kudu_settings)
    applier = kudu_applier(kudu_settings)
    old_second = deletes[0].binlog_offset // 10**6
    try:
        applier.apply_batch(_changes(router, [first, second, *deletes]))
        # A clock just past the TTL for both: both go; one not yet past it: none go.
        ttl = kudu_settings.mirror.tombstone_ttl_s
        assert applier.purge_tombstones(now_s=old_second + ttl - 5) == 0
        assert len(kudu_rows(kudu_settings, LOGICAL)) == 2
        assert applier.purge_tombstones(now_s=old_second + ttl + 5) == 2
    finally:
        applier.close()
    assert kudu_rows(kudu_settings, LOGICAL) == {}


def _point(offset: int, key: float) -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=offset // 10**6 * 1000,
        event_type=EventType.INSERT,
        schema_name="geo_00",
        table_name="points_00",
        source=Source.BINLOG,
        content={"x": key, "label": "p"},
        column_types={"x": "double", "label": "varchar(8)"},
        primary_keys=("x",),
    )


def test_a_table_kudu_cannot_hold_stops_with_one_sentence_and_the_others_flow(
    kudu_settings: Settings,
) -> None:
    settings = kudu_settings.model_copy(
        update={
            "tables": [
                *kudu_settings.tables,
                TableMirror(db_prefix="geo", table_prefix="points", targets=["kudu"]),
            ]
        }
    )
    workload = Workload(random.Random(3))
    orders = workload.messages(50)
    router = _router(settings)
    applier = kudu_applier(settings)
    try:
        first = applier.apply_batch(_changes(router, [_point(workload.offset + 1, 1.5), *orders]))
        assert first.applied > 0
        assert applier.stopped == {
            "geo_points": "key column x is double, which Kudu cannot hold in a primary key"
        }
        later = workload.messages(20)
        second = applier.apply_batch(_changes(router, [_point(workload.offset + 1, 2.5), *later]))
        assert second.applied > 0  # the orders keep flowing
    finally:
        applier.close()
    _assert_equal(settings, _reference(router, orders + later), BASE_TYPES)


def test_an_unreachable_master_fails_with_one_sentence(kudu_settings: Settings) -> None:
    settings = kudu_settings.model_copy(
        update={
            "kudu": kudu_settings.kudu.model_copy(
                update={"masters": ["127.0.0.1:1"], "operation_timeout_s": 2.0}
            )
        }
    )
    with pytest.raises(
        ServiceUnavailableError, match=r"^Kudu at 127\.0\.0\.1:1 failed listing tables \("
    ) as info:
        kudu_applier(settings)
    assert "\n" not in str(info.value)


def _reading(offset: int, key: int, value: object, value_type: str) -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=offset // 10**6 * 1000,
        event_type=EventType.INSERT,
        schema_name="meter_00",
        table_name="readings_00",
        source=Source.BINLOG,
        content={"id": key, "v": value},
        column_types={"id": "int(11)", "v": value_type},
        primary_keys=("id",),
    )


def test_a_column_type_change_stops_that_table_with_one_sentence_and_the_others_flow(
    kudu_settings: Settings,
) -> None:
    """ALTER TABLE … MODIFY v VARCHAR: Kudu cannot change a column's type, so the table stops
    (nothing of it is written from then on) while the orders keep flowing."""
    settings = kudu_settings.model_copy(
        update={
            "tables": [
                *kudu_settings.tables,
                TableMirror(db_prefix="meter", table_prefix="readings", targets=["kudu"]),
            ]
        }
    )
    workload = Workload(random.Random(4))
    orders = workload.messages(40)
    router = _router(settings)
    applier = kudu_applier(settings)
    try:
        first = applier.apply_batch(
            _changes(router, [_reading(workload.offset + 1, 1, 7, "int(11)"), *orders])
        )
        assert first.applied > 1 and applier.stopped == {}
        later = workload.messages(30)
        changed = _reading(workload.offset + 1, 2, "seven", "varchar(8)")
        second = applier.apply_batch(_changes(router, [changed, *later]))
        assert second.applied > 0  # the orders keep flowing
        assert applier.stopped == {
            "meter_readings": "column v is now varchar(8) (STRING in Kudu) but the Kudu table "
            "holds INT32, and Kudu cannot change a column's type"
        }
        again = applier.apply_batch(
            _changes(router, [_reading(workload.offset + 2, 3, 9, "int(11)")])
        )
        assert again.applied == 0  # a stopped table stays stopped until mirrored again
    finally:
        applier.close()
    _assert_equal(settings, _reference(router, orders + later), BASE_TYPES)
    readings = kudu_rows(settings, "meter_readings")
    assert {k: r["v"] for k, r in readings.items()} == {"1": 7}
