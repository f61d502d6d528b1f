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
    # A chunk's digest sums the first 64 bits: the salt changes those.
    return f"{hash((i, salt)) & (2**64 - 1):016x}{i:016x}"


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


def test_settle_drops_a_key_whose_target_holds_the_source_row_of_the_round_end() -> None:
    # The key changes between r1 and r2 and the target already holds r2: in flight.
    source = MemorySide({(1,): "v1"})
    source.changes = [{(1,): "v2"}]
    target = MemorySide({(1,): "v2"})
    settled = settle({(1,): Difference.DIFFERENT}, source, target, Marks())
    assert settled.in_flight == [(1,)] and settled.differences == {}


def test_settle_keeps_a_drift_that_no_source_state_of_the_round_explains() -> None:
    # The key changes in the first round and the target holds neither state: no verdict
    # that round; then it stays put and the drift is confirmed twice.
    source = MemorySide({(1,): "v1"})
    source.changes = [{(1,): "v2"}]
    target = MemorySide({(1,): "drift"})
    settled = settle({(1,): Difference.DIFFERENT}, source, target, Marks())
    assert settled.differences == {(1,): Difference.DIFFERENT} and settled.rounds == 3


# -- the scan: windows, chunk sizes, resume ---------------------------------------------------


def _shape(table: str = "t"):
    from validation.table import TableShape

    return TableShape(table, (("d", "t"),), (("id", "int(11)"),), ("id",))


def test_next_chunk_rows_follows_the_time_budget_within_bounds() -> None:
    from validation.run import Options, next_chunk_rows

    options = Options(chunk_time_s=0.5, min_chunk_rows=100, max_chunk_rows=10_000)
    assert next_chunk_rows(1000, 0.25, options) == 2000  # twice as fast: twice the rows
    assert next_chunk_rows(1000, 5.0, options) == 500  # at most halved per chunk
    assert next_chunk_rows(8000, 0.01, options) == 10_000  # capped
    assert next_chunk_rows(150, 10.0, options) == 100  # floored
    assert next_chunk_rows(1000, 9.0, Options(chunk_time_s=None)) == 1000  # fixed


def test_scan_waits_once_per_window_and_finds_the_drift() -> None:
    from validation.plan import DescentStats
    from validation.progress import MemoryProgress
    from validation.run import Options, scan

    source = MemorySide({(i,): _hash(i) for i in range(1, 1001)})
    target = MemorySide(dict(source.rows))
    target.rows[(500,)] = _hash(500, "drift")
    del target.rows[(10,)]
    watermark = Marks()
    store = MemoryProgress()
    stats = DescentStats()
    options = Options(chunk_rows=100, chunk_time_s=None, window_s=3600.0, leaf_rows=8)
    found, resumed = scan(_shape(), source, target, watermark, options, stats, store)
    assert found == {(500,): Difference.DIFFERENT, (10,): Difference.MISSING}
    assert not resumed and stats.rows == 1000 and stats.chunks == 11
    assert watermark.waits == 1  # one window: every MySQL chunk, then one wait
    record = store.load("t", "memory")
    assert record is not None and record.done and record.after is None


def test_scan_counts_each_sides_hashing_time() -> None:
    import itertools

    from validation.plan import DescentStats
    from validation.progress import MemoryProgress
    from validation.run import Options, scan

    source = MemorySide({(i,): _hash(i) for i in range(1, 1001)})
    target = MemorySide(dict(source.rows))
    stats = DescentStats()
    options = Options(chunk_rows=100, chunk_time_s=None, window_s=0.0, leaf_rows=8)
    ticks = itertools.count()  # each look at the clock: one second later
    scan(_shape(), source, target, Marks(), options, stats, MemoryProgress(), None,
         lambda: float(next(ticks)))  # fmt: skip
    # 11 chunks a side, each digest at least one tick long (the other thread's looks at the
    # shared clock may fall in between).
    assert stats.chunks == 11
    assert stats.source_s >= 11 and stats.target_s >= 11


def test_scan_resumes_after_the_stored_key_with_the_stored_candidates() -> None:
    from validation.plan import DescentStats
    from validation.progress import MemoryProgress, ScanProgress
    from validation.run import Options, scan

    source = MemorySide({(i,): _hash(i) for i in range(1, 1001)})
    target = MemorySide(dict(source.rows))
    target.rows[(20,)] = _hash(20, "drift")  # before the stored key: not scanned again
    target.rows[(900,)] = _hash(900, "drift")
    store = MemoryProgress()
    store.save(ScanProgress("t", "memory", [600], 600, 6, [([7], "missing")]))
    stats = DescentStats()
    options = Options(chunk_rows=100, chunk_time_s=None, window_s=0.0, leaf_rows=8)
    found, resumed = scan(_shape(), source, target, Marks(), options, stats, store)
    assert resumed
    assert found == {(7,): Difference.MISSING, (900,): Difference.DIFFERENT}
    assert stats.rows == 1000 and stats.chunks == 6 + 5
    assert store.saves == 1 + 5  # the stored record, then one per window of one chunk
    assert source.reads < 11 + 10  # the first 600 rows were not hashed again


def test_scan_asks_the_load_guard_before_each_source_chunk_and_waits_while_loaded() -> None:
    from cdc_platform.load_guard import LoadGuard, LoadSample
    from validation.plan import DescentStats
    from validation.progress import MemoryProgress
    from validation.run import Options, scan

    class Busy:
        """Threads_running 50 for the first two looks, then 3."""

        def __init__(self) -> None:
            self.looks = 0

        def load(self) -> LoadSample:
            self.looks += 1
            return LoadSample(50 if self.looks <= 2 else 3)

    now = [0.0]
    waited: list[float] = []

    def wait(seconds: float) -> bool:
        waited.append(seconds)
        now[0] += seconds
        return False

    probe = Busy()
    guard = LoadGuard(probe, 32, 0, 2.0, wait, lambda: now[0], every_s=0.0, what="validation")
    source = MemorySide({(i,): _hash(i) for i in range(1, 301)})
    target = MemorySide(dict(source.rows))
    options = Options(chunk_rows=100, chunk_time_s=None, window_s=0.0)
    found, _ = scan(
        _shape(), source, target, Marks(), options, DescentStats(), MemoryProgress(), guard
    )
    assert found == {}
    # One pause of two waits (the first look and the one after the first wait are busy),
    # then one look before each of the other three chunks (the last one empty).
    assert waited == [2.0, 2.0] and guard.pauses == 1 and guard.paused_s == 4.0
    assert probe.looks == 3 + 3


@dataclass
class ProvisionalMemorySide(MemorySide):
    """A target that compares provisionally until ``listed``: its provisional digest sees
    only ``early`` (what a range read would find), and it confirms a chunk only if no key of
    ``late`` (what only the listing finds) falls in it."""

    early: dict[Key, str] = field(default_factory=dict)
    late: set[Key] = field(default_factory=set)
    listed_after: int = 0  # provisional digests answered before the listing ends
    provisional: int = 0
    confirmed: list[Chunk] = field(default_factory=list)

    @property
    def listed(self) -> bool:
        return self.provisional >= self.listed_after

    def provisional_digest(self, chunk: Chunk, rows: int) -> ChunkDigest | None:
        if self.listed:
            return None
        self.provisional += 1
        keys = [k for k in sorted(self.early) if chunk.holds(k)]
        return ChunkDigest.of_rows([self.early[k] for k in keys])

    def confirms(self, chunk: Chunk) -> bool:
        self.confirmed.append(chunk)
        return not any(chunk.holds(k) for k in self.late)


@pytest.mark.parametrize("window_s", [0.0, 3600.0])
def test_scan_confirms_provisional_chunks_and_compares_again_those_it_cannot(
    window_s: float,
) -> None:
    """A chunk found equal provisionally is confirmed once the target is listed; one the
    target cannot confirm (a key only its listing finds, here an extra row) is compared for
    certain and its difference found; no progress is stored while a chunk waits."""
    from validation.plan import DescentStats
    from validation.progress import MemoryProgress
    from validation.run import Options, scan

    source = MemorySide({(i,): _hash(i) for i in range(2, 2001, 2)})
    target = ProvisionalMemorySide(dict(source.rows), early=dict(source.rows), listed_after=6)
    target.rows[(501,)] = _hash(501, "extra")  # listed only: not in a range read
    target.late = {(501,)}
    target.rows[(1900,)] = _hash(1900, "drift")  # after the listing: found as ever
    target.early[(1900,)] = target.rows[(1900,)]
    store = MemoryProgress()
    stats = DescentStats()
    options = Options(chunk_rows=100, chunk_time_s=None, window_s=window_s, leaf_rows=8)
    found, _ = scan(_shape(), source, target, Marks(), options, stats, store)
    assert found == {(501,): Difference.EXTRA, (1900,): Difference.DIFFERENT}
    assert target.provisional == 6 and len(target.confirmed) == 6
    assert stats.rows == 1000 and stats.chunks == 11
    record = store.load("t", "memory")
    assert record is not None and record.done
    # Without the confirmation the extra row would hide: the provisional digests all
    # matched MySQL's for the chunks before the listing ended.
    assert Chunk((400,), (600,)) in target.confirmed


@dataclass
class WaitingMemorySide(ProvisionalMemorySide):
    """``ProvisionalMemorySide`` that knows which chunks wait for their confirmation: found
    equal provisionally, neither confirmed nor compared for certain yet."""

    waiting: set[Chunk] = field(default_factory=set)

    def provisional_digest(self, chunk: Chunk, rows: int) -> ChunkDigest | None:
        digest = super().provisional_digest(chunk, rows)
        if digest is not None:
            self.waiting.add(chunk)  # compared for certain at once (``digest``) if unequal
        return digest

    def confirms(self, chunk: Chunk) -> bool:
        self.waiting.discard(chunk)
        return super().confirms(chunk)

    def digest(self, chunk: Chunk) -> ChunkDigest:
        self.waiting.discard(chunk)
        return super().digest(chunk)


class SavesPassingWaitingChunks:
    """A ``ProgressStore`` (``MemoryProgress``'s records) that records every save and, for
    each, the chunks waiting for confirmation it passes: a resumed scan would start after
    them, and their confirmation (a difference only the listing finds) would be lost."""

    def __init__(self, target: WaitingMemorySide) -> None:
        from validation.progress import MemoryProgress

        self.memory = MemoryProgress()
        self.target = target
        self.saved: list[tuple[list[object] | None, bool]] = []
        self.passed: list[Chunk] = []

    def load(self, table: str, target: str):
        return self.memory.load(table, target)

    def save(self, progress) -> None:
        self.saved.append((progress.after, progress.done))
        after = None if progress.after is None else tuple(progress.after)
        for chunk in self.target.waiting:
            if progress.done or (after is not None and (chunk.lo is None or after > chunk.lo)):
                self.passed.append(chunk)
        self.memory.save(progress)


@pytest.mark.parametrize("window_s", [0.0, 3600.0])
def test_no_stored_progress_passes_a_chunk_waiting_for_its_confirmation(window_s: float) -> None:
    """Chunks found equal provisionally wait for the listing; a store while one waits would
    let a resumed scan skip it. Here the listing ends after 6 provisional chunks, the
    window of 11 chunks of 100 rows (one per chunk or all at once): every save is made with
    no chunk waiting behind its position, and the scan still ends with its record."""
    from validation.plan import DescentStats
    from validation.run import Options, scan

    source = MemorySide({(i,): _hash(i) for i in range(2, 2001, 2)})
    target = WaitingMemorySide(dict(source.rows), early=dict(source.rows), listed_after=6)
    target.rows[(501,)] = _hash(501, "extra")  # listed only
    target.late = {(501,)}
    store = SavesPassingWaitingChunks(target)
    options = Options(chunk_rows=100, chunk_time_s=None, window_s=window_s, leaf_rows=8)
    found, _ = scan(_shape(), source, target, Marks(), options, DescentStats(), store)
    assert found == {(501,): Difference.EXTRA}
    assert target.provisional == 6  # chunks did wait
    assert store.passed == [], store.saved
    assert store.saved and store.saved[-1] == (None, True)
    assert target.waiting == set()
