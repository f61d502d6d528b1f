"""Chunk planning, the descent into differing chunks and the settling rule, with sides in
memory."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from validation.canonical import ChunkDigest
from validation.plan import (
    Chunk,
    Difference,
    Key,
    descend,
    plan_chunks,
    settle,
)


@dataclass
class MemorySide:
    """A side holding key → row hash; ``reads`` counts chunk digests."""

    rows: dict[Key, str]
    name: str = "memory"
    reads: int = 0
    changes: list[dict[Key, str | None]] = field(default_factory=list)  # applied per key read

    def _keys(self, chunk: Chunk) -> list[Key]:
        keys = sorted(self.rows)
        start = 0 if chunk.lo is None else bisect.bisect_right(keys, chunk.lo)
        stop = len(keys) if chunk.hi is None else bisect.bisect_right(keys, chunk.hi)
        return keys[start:stop]

    def digest(self, chunk: Chunk) -> ChunkDigest:
        self.reads += 1
        return ChunkDigest.of_rows([self.rows[k] for k in self._keys(chunk)])

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        keys = self._keys(chunk)
        return keys[count // 2 - 1] if count >= 2 and len(keys) >= count // 2 else None

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        return {k: self.rows[k] for k in self._keys(chunk)}

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        found = {k: self.rows[k] for k in keys if k in self.rows}
        if self.changes:
            for key, value in self.changes.pop(0).items():
                if value is None:
                    self.rows.pop(key, None)
                else:
                    self.rows[key] = value
        return found


def _hash(i: int, salt: str = "") -> str:
    return f"{i:016x}{hash((i, salt)) & (2**64 - 1):016x}"


def test_plan_chunks_covers_the_key_space_without_overlap() -> None:
    chunks = plan_chunks([(10,), (20,)])
    assert chunks == [Chunk(None, (10,)), Chunk((10,), (20,)), Chunk((20,), None)]
    for key in [(-5,), (10,), (11,), (20,), (21,)]:
        assert sum(c.holds(key) for c in chunks) == 1
    assert plan_chunks([]) == [Chunk()]
    with pytest.raises(ValueError, match="ascending"):
        plan_chunks([(3,), (3,)])


def test_split_keeps_the_middle_on_the_left() -> None:
    left, right = Chunk((0,), (10,)).split((5,))
    assert left.holds((5,)) and not right.holds((5,)) and right.holds((10,))
    with pytest.raises(ValueError):
        Chunk((0,), (10,)).split((10,))


def test_descend_names_exactly_missing_extra_and_different_keys() -> None:
    source = MemorySide({(i,): _hash(i) for i in range(1000)})
    target = MemorySide(dict(source.rows))
    del target.rows[(17,)]
    target.rows[(500,)] = _hash(500, "drift")
    target.rows[(5000,)] = _hash(5000)
    chunks = plan_chunks([(k,) for k in range(99, 1000, 100)])
    found = descend(chunks, source, target, leaf_rows=8)
    assert found == {
        (17,): Difference.MISSING,
        (500,): Difference.DIFFERENT,
        (5000,): Difference.EXTRA,
    }
    # Halving: far fewer chunk reads than rows.
    assert source.reads < 60


def test_descend_reads_each_chunk_once_when_equal() -> None:
    source = MemorySide({(i,): _hash(i) for i in range(100)})
    target = MemorySide(dict(source.rows))
    assert descend(plan_chunks([(49,)]), source, target) == {}
    assert (source.reads, target.reads) == (2, 2)


def test_descend_splits_on_the_target_when_the_source_is_empty_there() -> None:
    source = MemorySide({})
    target = MemorySide({(i,): _hash(i) for i in range(100)})
    found = descend([Chunk()], source, target, leaf_rows=4)
    assert set(found) == set(target.rows) and set(found.values()) == {Difference.EXTRA}


class Marks:
    def __init__(self, on_wait: list[dict[Key, str | None]] | None = None, target=None) -> None:
        self.waits = 0
        self.on_wait = on_wait or []
        self.target = target

    def mark(self) -> object:
        return self.waits

    def wait(self, mark: object) -> None:
        self.waits += 1
        if self.on_wait:
            for key, value in self.on_wait.pop(0).items():
                self.target.rows[key] = value


def test_settle_drops_a_key_the_target_catches_up_with() -> None:
    source = MemorySide({(1,): "new"})
    target = MemorySide({(1,): "old"})
    watermark = Marks([{(1,): "new"}], target)
    settled = settle({(1,): Difference.DIFFERENT}, source, target, watermark)
    assert settled.differences == {} and settled.in_flight == [(1,)]


def test_settle_reports_a_lasting_difference_after_two_confirmations() -> None:
    source = MemorySide({(1,): "a", (2,): "b"})
    target = MemorySide({(1,): "drift"})
    settled = settle(
        {(1,): Difference.DIFFERENT, (2,): Difference.MISSING}, source, target, Marks()
    )
    assert settled.differences == {(1,): Difference.DIFFERENT, (2,): Difference.MISSING}
    assert settled.rounds == 2


def test_settle_never_reports_a_key_that_keeps_changing() -> None:
    source = MemorySide({(1,): "v0"})
    # Between the two source reads of every round the key changes again.
    source.changes = [c for i in range(1, 9) for c in ({(1,): f"v{i}"}, {})]
    target = MemorySide({(1,): "behind"})
    settled = settle({(1,): Difference.DIFFERENT}, source, target, Marks(), max_rounds=4)
    assert settled.differences == {} and settled.unsettled == [(1,)]


def test_redis_key_parts_read_back_as_typed_keys() -> None:
    from simple_binlog.naming import redis_key, redis_key_part
    from simple_binlog.values import parse_column_type
    from validation.redis import key_from_parts

    types = [parse_column_type("bigint(20) unsigned"), parse_column_type("varchar(8)")]
    name = redis_key("p", "t", ["18446744073709551615", "a:b%c"])
    parts = name.split(":")[2:]
    assert key_from_parts(types, parts) == (18446744073709551615, "a:b%c")
    assert redis_key_part(-7) == "-7"
