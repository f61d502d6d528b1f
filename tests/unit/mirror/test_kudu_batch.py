"""The Kudu batch buffer (``mirror.kudu_batch``), without a JVM: the wire values as they came,
one buffer per set of column types, and a column the table holds under another Kudu type
refused with one sentence."""

from __future__ import annotations

import orjson
import pytest

from mirror.kudu_batch import ValueRefusedError, buffers
from mirror.kudu_types import kudu_type
from mirror.plan import RowChange
from simple_binlog.values import parse_column_type

TYPES = {"id": "int(11)", "v": "binary(4)", "n": "varchar(8)"}
STORED = {name: kudu_type(parse_column_type(spec)) for name, spec in TYPES.items()}


def _change(key: int, offset: int, row: dict[str, object], types: dict[str, str]) -> RowChange:
    return RowChange("t", (key,), offset, key == 2, row, types, ("id",), "s_00.t_00", 0)


def test_the_buffer_carries_wire_values_forms_and_fixed_lengths() -> None:
    changes = [
        _change(1, 10, {"id": 1, "v": "AQ==", "n": None}, TYPES),
        _change(2, 11, {"id": 2}, TYPES),  # a delete carrying only its key: the rest unset
    ]
    [buffer] = buffers(changes, STORED)
    assert (buffer.names, buffer.forms, buffer.fixed_lengths) == (
        ("id", "v", "n"),
        ("int", "binary", "text"),
        (0, 4, 0),
    )
    assert orjson.loads(buffer.changes) == [
        [10, False, "s_00.t_00", {"id": 1, "v": "AQ==", "n": None}],
        [11, True, "s_00.t_00", {"id": 2}],
    ]
    assert buffer.count == 2


def test_changes_whose_columns_carry_otherwise_go_in_a_buffer_of_their_own() -> None:
    """varchar(8) → varchar(16) carries alike (one buffer); binary(4) → binary(8) pads to
    another length (a buffer of its own)."""
    wider = {**TYPES, "n": "varchar(16)"}
    longer = {**TYPES, "v": "binary(8)"}
    changes = [
        _change(1, 10, {"id": 1, "n": "a"}, TYPES),
        _change(3, 12, {"id": 3, "n": "b"}, wider),
        _change(4, 13, {"id": 4, "v": "AQ=="}, longer),
    ]
    parts = buffers(changes, STORED)
    assert [(p.count, p.fixed_lengths) for p in parts] == [(2, (0, 4, 0)), (1, (0, 8, 0))]


def test_a_column_held_under_another_kudu_type_is_refused_with_one_sentence() -> None:
    changed = {**TYPES, "n": "int(11)"}
    with pytest.raises(ValueRefusedError) as info:
        buffers([_change(1, 10, {"id": 1, "n": 5}, changed)], STORED)
    assert str(info.value) == (
        "column n is int(11) (INT32 in Kudu) but the Kudu table holds STRING"
    )
