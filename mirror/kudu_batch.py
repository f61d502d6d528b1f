"""A batch of Kudu row changes as one buffer: what ``io.cdcmirror.kudu.GuardedBatch`` takes.

Building a Kudu row call by call from Python through JPype cost about 130 µs a row (several
bridge crossings per value, and each value decoded in Python). Here a batch becomes one JSON
buffer, ``[[offset, deleted, shard, row], …]`` with the rows' SimpleBinlog wire values as they
came (one orjson call), plus per column its name, its carrying form (``KuduType.form``) and
BINARY(n)'s fixed length; ``GuardedBatch`` (stack/jvm/kudu) decodes the wire values by form,
reads the stored offsets for the guard and upserts in one flush: a few bridge calls a batch.

Changes whose columns have other MySQL types (a type changed within the batch) go in separate
buffers, one per set of column types; within a batch a key occurs once (``latest_per_key``), so
the order of the buffers does not matter. A column whose Kudu type is not the one the table
holds refuses the batch (the applier stops the table). Pure logic: no JVM needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from mirror.kudu_types import KuduType, kudu_type
from mirror.plan import RowChange
from simple_binlog.errors import CdcMirrorError
from simple_binlog.values import parse_column_type


class ValueRefusedError(CdcMirrorError):
    """A column the Kudu table cannot take as typed; the applier stops the table with it."""


@dataclass(frozen=True, slots=True)
class BatchBuffer:
    """Changes whose columns share their MySQL types, as ``GuardedBatch`` takes them."""

    names: tuple[str, ...]
    forms: tuple[str, ...]
    fixed_lengths: tuple[int, ...]
    changes: bytes  # JSON: [[offset, deleted, shard, {column: wire value}], …]
    count: int


@dataclass(frozen=True, slots=True)
class _Layout:
    names: tuple[str, ...]
    forms: tuple[str, ...]
    fixed_lengths: tuple[int, ...]


def _layout(types: Mapping[str, str], stored: Mapping[str, KuduType]) -> _Layout:
    forms, lengths = [], []
    for name, spec in types.items():
        column = parse_column_type(spec)
        wanted = kudu_type(column)
        held = stored.get(name)
        if held is None or not held.same_as(wanted):
            text = held.text if held else "no such column"
            raise ValueRefusedError(
                f"column {name} is {spec} ({wanted.text} in Kudu) but the Kudu table holds {text}"
            )
        forms.append(wanted.form)
        lengths.append((column.length or 0) if column.is_fixed_binary else 0)
    return _Layout(tuple(types), tuple(forms), tuple(lengths))


def buffers(changes: Sequence[RowChange], stored: Mapping[str, KuduType]) -> list[BatchBuffer]:
    """``changes`` of one table whose columns have the Kudu types ``stored``, as buffers."""
    layouts: dict[tuple[tuple[str, str], ...], _Layout] = {}
    groups: dict[_Layout, list[RowChange]] = {}
    for change in changes:
        signature = tuple(change.column_types.items())
        layout = layouts.get(signature)
        if layout is None:
            layout = _layout(change.column_types, stored)
            layouts[signature] = layout
        groups.setdefault(layout, []).append(change)
    return [
        BatchBuffer(
            layout.names,
            layout.forms,
            layout.fixed_lengths,
            orjson.dumps([(c.offset, c.deleted, c.shard, c.row) for c in group]),
            len(group),
        )
        for layout, group in groups.items()
    ]
