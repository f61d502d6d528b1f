"""Chunks of the key space, the descent into differing chunks, and the settling rule (pure).

A ``Chunk`` is the keys ``lo < key <= hi`` in the key's order (``None``: unbounded). The
source (MySQL) gives chunk boundaries by a key-ordered scan of keys only; ``plan_chunks``
makes chunks of them. ``descend`` compares a chunk's ``ChunkDigest`` on both sides; when they
differ it splits the chunk at a middle key and compares the halves, until a chunk holds at
most ``leaf_rows`` rows on both sides: then the rows' hashes are compared key by key, which
names the keys missing from the target, extra in it, or different.

``settle`` is the consistency rule (see ``validation`` for the why): a key found different
is re-read until it is known to differ for real, to have been in flight, or to keep changing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from validation.canonical import ChunkDigest

Key = tuple[Any, ...]


class SpelledKey(tuple[Any, ...]):
    """A key as a target lists it under a name that is not the mirror's spelling of it
    (Redis's ``...:0042`` for 42, written behind the mirror's back): the same values, but a
    key of its own, never equal to the key itself nor to another spelling, so a leaf's
    per-row hashes hold both and compare the odd one as extra (the source has no such key).
    It sorts beside its key (tuple order). ``spelling``: the target's name, as listed."""

    spelling: str

    def __new__(cls, key: Key, spelling: str) -> SpelledKey:
        made = super().__new__(cls, key)
        made.spelling = spelling
        return made

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SpelledKey)
            and other.spelling == self.spelling
            and tuple(self) == tuple(other)
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((tuple(self), self.spelling))

    def __repr__(self) -> str:
        return f"SpelledKey({tuple(self)!r}, {self.spelling!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SpelledKey, (tuple(self), self.spelling))


@dataclass(frozen=True, slots=True)
class Chunk:
    """The keys ``lo < key <= hi`` (``lo`` None: from the first; ``hi`` None: to the last)."""

    lo: Key | None = None
    hi: Key | None = None

    def holds(self, key: Key) -> bool:
        return (self.lo is None or key > self.lo) and (self.hi is None or key <= self.hi)

    def split(self, middle: Key) -> tuple[Chunk, Chunk]:
        if not self.holds(middle) or middle == self.hi:
            raise ValueError(f"{middle!r} does not split {self!r}.")
        return Chunk(self.lo, middle), Chunk(middle, self.hi)


def plan_chunks(boundaries: Iterable[Key]) -> list[Chunk]:
    """Chunks ending at each boundary (ascending, distinct), and one after the last."""
    chunks: list[Chunk] = []
    lo: Key | None = None
    for boundary in boundaries:
        if lo is not None and boundary <= lo:
            raise ValueError(f"chunk boundaries are not ascending at {boundary!r}.")
        chunks.append(Chunk(lo, boundary))
        lo = boundary
    chunks.append(Chunk(lo, None))
    return chunks


class Side(Protocol):
    """One store's copy of the table, read by chunk or by key."""

    @property
    def name(self) -> str: ...

    def digest(self, chunk: Chunk) -> ChunkDigest: ...

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        """The ``count // 2``-th key of the chunk (1-based), or None if it has < 2 rows."""
        ...

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]: ...

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        """The row hash of each key that exists (absent keys are left out)."""
        ...


class Difference(Enum):
    MISSING = "missing"  # in the source, not in the target
    EXTRA = "extra"  # in the target, not in the source
    DIFFERENT = "different"


def classify(source: str | None, target: str | None) -> Difference | None:
    if source == target:
        return None
    if target is None:
        return Difference.MISSING
    if source is None:
        return Difference.EXTRA
    return Difference.DIFFERENT


@dataclass
class DescentStats:
    chunks: int = 0  # top-level chunks
    chunks_compared: int = 0
    chunks_split: int = 0
    leaves: int = 0
    rows: int = 0  # the source's rows in the top-level chunks
    # Seconds each side spent hashing the top-level chunks (the scan's; MySQL's runs in its
    # own thread): the larger one is the scan's critical path.
    source_s: float = 0.0
    target_s: float = 0.0


def descend(
    chunks: Iterable[Chunk],
    source: Side,
    target: Side,
    leaf_rows: int = 64,
    stats: DescentStats | None = None,
    count_rows: bool = True,
) -> dict[Key, Difference]:
    """Every key whose row differs between the sides, by chunk hashes and halving
    (``count_rows``: add the given chunks' source rows and count to ``stats``)."""
    stats = stats if stats is not None else DescentStats()
    found: dict[Key, Difference] = {}
    pending = [(chunk, count_rows) for chunk in reversed(list(chunks))]
    while pending:
        chunk, top = pending.pop()
        mine, theirs = source.digest(chunk), target.digest(chunk)
        stats.chunks_compared += 1
        if top:
            stats.rows += mine.count
            stats.chunks += 1
        if mine == theirs:
            continue
        middle = None
        if max(mine.count, theirs.count) > leaf_rows:
            middle = _middle(chunk, source, mine.count) or _middle(chunk, target, theirs.count)
        if middle is None:
            stats.leaves += 1
            found.update(compare_rows(source.row_hashes(chunk), target.row_hashes(chunk)))
            continue
        stats.chunks_split += 1
        left, right = chunk.split(middle)
        pending += [(right, False), (left, False)]
    return found


def _middle(chunk: Chunk, side: Side, count: int) -> Key | None:
    if count < 2:
        return None
    middle = side.middle_key(chunk, count)
    if middle is None or not chunk.holds(middle) or middle == chunk.hi:
        return None
    return middle


def compare_rows(source: Mapping[Key, str], target: Mapping[Key, str]) -> dict[Key, Difference]:
    found: dict[Key, Difference] = {}
    for key in source.keys() | target.keys():
        kind = classify(source.get(key), target.get(key))
        if kind is not None:
            found[key] = kind
    return found


class Watermark(Protocol):
    """When has the target applied everything the source had committed?"""

    def mark(self) -> object:
        """A mark of what the source has committed now (taken after a source read)."""
        ...

    def wait(self, mark: object) -> None:
        """Return once the target has applied everything up to ``mark``; raise if it does
        not within the watermark's time limit."""
        ...


@dataclass
class Settled:
    """The keys that differ for real, and those still changing after every round."""

    differences: dict[Key, Difference] = field(default_factory=dict)
    unsettled: list[Key] = field(default_factory=list)
    in_flight: list[Key] = field(default_factory=list)
    rounds: int = 0


def settle(
    candidates: Mapping[Key, Difference],
    source: Side,
    target: Side,
    watermark: Watermark,
    confirmations: int = 2,
    max_rounds: int = 6,
    on_round: Callable[[int], None] | None = None,
) -> Settled:
    """The consistency rule, per key (see ``validation``'s docstring): a round reads the
    source (r1), waits for the target to apply what the source had committed then, reads the
    target (t) and the source again (r2). t == r1 or t == r2: the target holds a state the
    source had during the round, the key was in flight, dropped. r1 == r2 != t: one
    confirmation; ``confirmations`` in a row report it. r1 != r2 (and t neither): the key
    changed meanwhile, its confirmations start over. Keys left after ``max_rounds`` are
    reported as unsettled, never as differences."""
    result = Settled()
    pending = dict(candidates)
    streak = dict.fromkeys(pending, 0)
    while pending and result.rounds < max_rounds:
        result.rounds += 1
        if on_round is not None:
            on_round(result.rounds)
        keys = sorted(pending)
        before = source.key_hashes(keys)
        watermark.wait(watermark.mark())
        stored = target.key_hashes(keys)
        after = source.key_hashes(keys)
        for key in keys:
            first, now, theirs = before.get(key), after.get(key), stored.get(key)
            if theirs in (first, now):
                # The target, having applied at least the source's state at r1, holds the
                # source's row at r1 or at r2: the key was in flight.
                result.in_flight.append(key)
                del pending[key]
                continue
            if first != now:
                streak[key] = 0
                continue
            kind = classify(first, theirs)
            assert kind is not None
            streak[key] += 1
            pending[key] = kind
            if streak[key] >= confirmations:
                result.differences[key] = kind
                del pending[key]
    result.unsettled = sorted(pending)
    return result
