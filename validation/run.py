"""``cdc-mirror validate``: one table mirror against its targets, the repair, and the report.

``validate_table`` is the entry point for callers (the CLI, the scheduler): every target of
a table mirror, each reported on its own (an unreachable target is said so, never a
mismatch), and with a ``repair`` function the differing keys re-published and re-checked.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from cdc_platform.config import Settings, TableMirror
from cdc_platform.load_guard import LoadGuard
from simple_binlog.errors import ConfigError, ServiceUnavailableError
from simple_binlog.naming import mirror_group, topic_name
from simple_binlog.routing import ShardRouter
from simple_binlog.values import JsonScalar, Kind
from validation.canonical import ChunkDigest
from validation.mysql import MySqlSide
from validation.plan import (
    Chunk,
    DescentStats,
    Difference,
    Key,
    Side,
    SpelledKey,
    Watermark,
    descend,
    settle,
)
from validation.progress import MemoryProgress, ProgressStore, ScanProgress
from validation.table import TableShape

log = logging.getLogger(__name__)

_BINARY_KINDS = (Kind.BINARY, Kind.GEOMETRY)
Target = Literal["warehouse", "redis", "kudu", "lake", "snapshot"]
TARGETS: tuple[Target, ...] = ("warehouse", "redis", "kudu", "lake", "snapshot")
# The lake's targets are the table mirror's "hive" target: its current state always, the
# snapshot of a day when one is asked for (``Options.snapshot_day``).
_LAKE_TARGETS: tuple[Target, ...] = ("lake", "snapshot")
_WINDOWS_AHEAD = 8  # MySQL's windows hashed but not yet compared, at most


@dataclass(frozen=True, slots=True)
class Options:
    """``chunk_rows``: the first chunk's rows; with ``chunk_time_s`` each next chunk is sized
    so that MySQL hashes it in about that long (between ``min_chunk_rows`` and
    ``max_chunk_rows``, at most doubling or halving per chunk); None keeps ``chunk_rows``.
    ``window_s``: MySQL chunks read before a watermark mark is taken (0: after each chunk;
    the target waits once for every window MySQL has ready, see ``scan``). The load limits
    are the replay's (``replay:`` settings) unless given."""

    chunk_rows: int = 10_000
    chunk_time_s: float | None = 0.5
    min_chunk_rows: int = 100
    max_chunk_rows: int = 1_000_000
    window_s: float = 0.0
    leaf_rows: int = 64
    confirmations: int = 2
    max_rounds: int = 6
    watermark_timeout_s: float = 120.0
    max_threads_running: int = 32
    max_replica_lag_s: int = 30
    pause_poll_s: float = 2.0
    snapshot_day: dt.date | None = None  # the "snapshot" target's day
    # MySQL connections a chunk is hashed on at once (``validation.source_connections``).
    source_connections: int = 2

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Options:
        """The replay's load limits (``replay:``), the source's connections
        (``validation:``), and ``overrides``."""
        replay = settings.replay
        limits: dict[str, Any] = {
            "max_threads_running": replay.max_threads_running,
            "max_replica_lag_s": replay.max_replica_lag_s,
            "pause_poll_s": replay.pause_poll_s,
            "source_connections": settings.validation.source_connections,
        }
        return cls(**{**limits, **overrides})


@dataclass(frozen=True, slots=True)
class KeyReport:
    """One differing key, with both rows (column → canonical text) for people to read."""

    key: Key
    difference: Difference
    source: dict[str, Any] | None
    target: dict[str, Any] | None

    def differing_columns(self) -> list[str]:
        if self.source is None or self.target is None:
            return list((self.source or self.target or {}).keys())
        return [c for c in self.source if self.source.get(c) != self.target.get(c)]


@dataclass
class TargetReport:
    table: str
    target: str
    rows: int = 0
    chunks: int = 0
    stats: DescentStats = field(default_factory=DescentStats)
    differences: list[KeyReport] = field(default_factory=list)
    unsettled: list[Key] = field(default_factory=list)
    in_flight: int = 0
    position: str = ""
    source_queries: int = 0
    source_rows_read: int = 0  # the validation session's own Handler_read_* on MySQL
    paused_s: float = 0.0
    resumed: bool = False
    seconds: float = 0.0
    binary_columns: frozenset[str] = frozenset()  # shown in hex
    shape: TableShape | None = None

    @property
    def equal(self) -> bool:
        return not self.differences and not self.unsettled

    def keys(self, difference: Difference | None = None) -> list[Key]:
        return [r.key for r in self.differences if difference is None or r.difference is difference]


@runtime_checkable
class ProvisionalSide(Protocol):
    """A target that can compare a chunk before it is ready to read it for certain (Redis
    while its key listing runs): ``provisional_digest`` (None: not now, use ``digest``) and,
    once ``listed``, ``confirms`` whether that digest read everything the chunk holds."""

    @property
    def listed(self) -> bool: ...

    def provisional_digest(self, chunk: Chunk, rows: int) -> ChunkDigest | None: ...

    def confirms(self, chunk: Chunk) -> bool: ...


def next_chunk_rows(rows: int, seconds: float, options: Options) -> int:
    """The next chunk's rows so that it takes about ``chunk_time_s`` (pure)."""
    if options.chunk_time_s is None:
        return rows
    wanted = rows * options.chunk_time_s / max(seconds, 1e-3)
    wanted = min(max(wanted, rows / 2), rows * 2)
    return int(min(max(wanted, options.min_chunk_rows), options.max_chunk_rows))


def _never_cancelled(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass
class _Window:
    """MySQL's digests of consecutive chunks, the watermark's mark taken after them, and
    where the next window starts (``ended``: nothing after)."""

    chunks: list[tuple[Chunk, ChunkDigest]]
    mark: object
    after: Key | None
    ended: bool


def _hash_source(
    source: Side,
    lo: Key | None,
    watermark: Watermark,
    options: Options,
    stats: DescentStats,
    lock: threading.Lock,
    guard: LoadGuard | None,
    clock: Callable[[], float],
    put: Callable[[_Window | BaseException], bool],
) -> None:
    """The source's half of the scan (a thread): windows of chunk digests, each handed on
    with its mark, until the table ends or ``put`` refuses (the scan stopped)."""
    try:
        rows = options.chunk_rows
        ended = False
        while not ended:
            window: list[tuple[Chunk, ChunkDigest]] = []
            started = clock()
            while not ended and (not window or clock() - started < options.window_s):
                with lock:
                    if guard is not None:
                        guard.wait_until_calm()
                    hi = source.middle_key(Chunk(lo, None), 2 * rows)
                    chunk = Chunk(lo, hi)
                    began = clock()
                    digest = source.digest(chunk)
                    took = clock() - began
                stats.source_s += took
                rows = next_chunk_rows(rows, took, options) if digest.count else rows
                window.append((chunk, digest))
                stats.rows += digest.count
                lo, ended = hi, hi is None
            with lock:
                mark = watermark.mark()
            if not put(_Window(window, mark, lo, ended)):
                return
    except BaseException as exc:  # noqa: BLE001 - handed to the scan, which raises it
        put(exc)


def scan(
    shape: TableShape,
    source: Side,
    target: Side,
    watermark: Watermark,
    options: Options,
    stats: DescentStats,
    store: ProgressStore,
    guard: LoadGuard | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[Key, Difference], bool]:
    """Every candidate key of the table, chunk by chunk, and whether the scan resumed one.

    A window: MySQL chunks are cut (the ``rows``-th key after the last) and hashed for
    ``window_s``, each chunk's rows sized to ``chunk_time_s``; then a watermark is taken;
    once it is reached, the target has applied everything published up to MySQL's reads, and
    the target hashes the same chunks; differing ones are descended into. MySQL hashes the
    next windows meanwhile (a thread, at most ``_WINDOWS_AHEAD`` windows ahead), so the two
    engines work at the same time; the target waits once for all the windows MySQL has
    ready (the last one's mark covers them all). The progress is stored after each window
    (the next key, the candidates so far). The load guard is asked before each MySQL
    chunk."""
    previous = store.load(shape.table, target.name)
    resumed = previous is not None and not previous.done
    found: dict[Key, Difference] = {}
    lo: Key | None = None
    if resumed and previous is not None:
        lo = None if previous.after is None else shape.key_from_wire(previous.after)
        stats.rows, stats.chunks = previous.rows, previous.chunks
        for wire, kind in previous.candidates:
            found[_key_from_stored(shape, wire)] = Difference(kind)
        log.info("validation of %s in %s resumes after %s", shape.table, target.name, lo)
    lock = threading.Lock()  # the source's one connection: the thread's, or the descent's
    windows: queue.Queue[_Window | BaseException] = queue.Queue(maxsize=_WINDOWS_AHEAD)
    stopped = threading.Event()

    def put(item: _Window | BaseException) -> bool:
        while not stopped.is_set():
            try:
                windows.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    producer = threading.Thread(
        target=_hash_source,
        args=(source, lo, watermark, options, stats, lock, guard, clock, put),
        name=f"validate-{shape.table}-mysql",
        daemon=True,
    )
    producer.start()
    # Chunks found equal provisionally, with MySQL's digests, until the target confirms them.
    provisional: list[tuple[Chunk, ChunkDigest]] = []
    try:
        ended = False
        while not ended:
            # Every window MySQL has ready, and one wait for the last one's mark: the waits
            # adapt to how far MySQL is ahead.
            ready = [windows.get()]
            while not isinstance(ready[-1], BaseException) and not ready[-1].ended:
                try:
                    ready.append(windows.get_nowait())
                except queue.Empty:
                    break
            failed = next((w for w in ready if isinstance(w, BaseException)), None)
            ready_windows = [w for w in ready if isinstance(w, _Window)]
            if ready_windows:
                watermark.wait(ready_windows[-1].mark)
            for window in ready_windows:
                ended = _compare_window(
                    window,
                    shape,
                    source,
                    target,
                    options,
                    stats,
                    store,
                    found,
                    lock,
                    provisional,
                    clock,
                )
            if failed is not None:
                raise failed
    finally:
        stopped.set()
        producer.join()
    return found, resumed


def _compare_window(
    window: _Window,
    shape: TableShape,
    source: Side,
    target: Side,
    options: Options,
    stats: DescentStats,
    store: ProgressStore,
    found: dict[Key, Difference],
    lock: threading.Lock,
    provisional: list[tuple[Chunk, ChunkDigest]],
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """The target's digests of a window's chunks (after its watermark), the descent into
    those that differ, and the progress stored; whether the table ended with it.

    A target that compares provisionally (``ProvisionalSide``) may find a chunk equal
    before it can read it for certain: the chunk is kept in ``provisional`` with MySQL's
    digest and confirmed once the target can say (at the next window after that, at the
    latest at the table's end); a chunk it does not confirm is compared again as any chunk.
    No progress is stored while a chunk waits: a resumed scan starts before it."""
    early = target if isinstance(target, ProvisionalSide) else None
    if early is not None and provisional and early.listed:
        _confirm(provisional, early, source, target, options, stats, found, lock, clock)
    for chunk, mine in window.chunks:
        stats.chunks += 1
        stats.chunks_compared += 1
        began = clock()
        theirs = None if early is None else early.provisional_digest(chunk, mine.count)
        if theirs is not None and theirs == mine:
            stats.target_s += clock() - began
            provisional.append((chunk, mine))
            continue
        # Not compared provisionally, or found different: compared for certain (a real
        # difference is then descended into as ever).
        theirs = target.digest(chunk)
        stats.target_s += clock() - began
        if theirs != mine:
            _descend_into(chunk, source, target, options, stats, found, lock)
    if early is not None and provisional and window.ended:
        _confirm(provisional, early, source, target, options, stats, found, lock, clock)
    if provisional:
        return window.ended
    store.save(
        ScanProgress(
            shape.table,
            target.name,
            None if window.after is None else shape.key_wire(window.after),
            stats.rows,
            stats.chunks,
            [(_stored_key(shape, k), d.value) for k, d in sorted(found.items())],
            done=window.ended,
        )
    )
    return window.ended


def _stored_key(shape: TableShape, key: Key) -> list[JsonScalar]:
    """A candidate key as the progress keeps it: its wire values, and a ``SpelledKey``'s
    spelling after them."""
    wire = shape.key_wire(key)
    return [*wire, key.spelling] if isinstance(key, SpelledKey) else wire


def _key_from_stored(shape: TableShape, wire: Sequence[JsonScalar]) -> Key:
    if len(wire) == len(shape.key) + 1:
        return SpelledKey(shape.key_from_wire(wire[:-1]), str(wire[-1]))
    return shape.key_from_wire(wire)


def _descend_into(
    chunk: Chunk,
    source: Side,
    target: Side,
    options: Options,
    stats: DescentStats,
    found: dict[Key, Difference],
    lock: threading.Lock,
) -> None:
    # Compared afresh, then halved: a chunk that differed only in flight may compare equal
    # now.
    with lock:
        found.update(descend([chunk], source, target, options.leaf_rows, stats, False))


def _confirm(
    provisional: list[tuple[Chunk, ChunkDigest]],
    early: ProvisionalSide,
    source: Side,
    target: Side,
    options: Options,
    stats: DescentStats,
    found: dict[Key, Difference],
    lock: threading.Lock,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Each provisionally equal chunk confirmed by the target, or compared again for certain
    (and descended into if it differs)."""
    for chunk, mine in provisional:
        began = clock()
        if early.confirms(chunk):
            stats.target_s += clock() - began
            continue
        stats.chunks_compared += 1
        theirs = target.digest(chunk)
        stats.target_s += clock() - began
        if theirs != mine:
            _descend_into(chunk, source, target, options, stats, found, lock)
    provisional.clear()


def validate_sides(
    shape: TableShape,
    source: MySqlSide,
    target: Side,
    watermark: Watermark,
    options: Options = Options(),
    target_rows: Callable[[list[Key]], dict[Key, dict[str, Any]]] | None = None,
    store: ProgressStore | None = None,
    guard: LoadGuard | None = None,
) -> TargetReport:
    """The scan, settling, then the differing keys' rows."""
    started = time.monotonic()
    report = TargetReport(shape.table, target.name, shape=shape)
    report.binary_columns = frozenset(
        n for n in shape.compared_columns if shape.column_type(n).kind in _BINARY_KINDS
    )
    read_before = source.rows_read()
    candidates, report.resumed = scan(
        shape, source, target, watermark, options, report.stats, store or MemoryProgress(), guard
    )
    report.rows = report.stats.rows
    report.chunks = report.stats.chunks
    report.position = source.position
    _settle_into(report, shape, source, target, watermark, options, candidates, target_rows)
    report.source_queries = source.queries
    report.source_rows_read = source.rows_read() - read_before
    report.paused_s = guard.paused_s if guard is not None else 0.0
    report.seconds = time.monotonic() - started
    return report


def _settle_into(
    report: TargetReport,
    shape: TableShape,
    source: MySqlSide,
    target: Side,
    watermark: Watermark,
    options: Options,
    candidates: dict[Key, Difference],
    target_rows: Callable[[list[Key]], dict[Key, dict[str, Any]]] | None,
) -> None:
    settled = settle(
        candidates, source, target, watermark, options.confirmations, options.max_rounds
    )
    report.in_flight = len(settled.in_flight)
    report.unsettled = settled.unsettled
    keys = sorted(settled.differences)
    mine = source.rows(keys)
    theirs = target_rows(keys) if target_rows is not None else {}
    report.differences = [
        KeyReport(k, settled.differences[k], mine.get(k), theirs.get(k)) for k in keys
    ]


def _target_side(settings: Settings, mirror: TableMirror, target: Target, shape: TableShape) -> Any:
    if target == "kudu":
        from cdc_platform.kudu import client_jars  # noqa: PLC0415
        from validation.kudu import KuduSide  # noqa: PLC0415 - starts a JVM

        return KuduSide(settings.kudu, client_jars(settings), shape)
    if target == "warehouse":
        from validation.warehouse import WarehouseSide  # noqa: PLC0415

        return WarehouseSide(settings.postgres, settings.mirror.warehouse_schema, shape)
    from validation.redis import RedisSide  # noqa: PLC0415

    return RedisSide(
        settings.redis, shape.projected(mirror.redis_columns), settings.validation.redis_workers
    )


@dataclass
class _Session:
    shape: TableShape
    source: MySqlSide
    side: Any
    watermark: Watermark
    guard: LoadGuard


@contextmanager
def _session(
    settings: Settings,
    table: str,
    target: Target,
    options: Options,
    watermark: Watermark | None,
) -> Iterator[_Session]:
    mirror = settings.table(table)
    mirrored = "hive" if target in _LAKE_TARGETS else target
    if mirrored not in mirror.targets:
        raise ConfigError(f"table {table!r} is not mirrored to {mirrored}.")
    if target == "snapshot" and options.snapshot_day is None:
        raise ConfigError("validating the snapshot of a day needs the day (--day YYYY-MM-DD).")
    instance = settings.instance(mirror.instance)
    router = ShardRouter(list(settings.shard_rules))
    # Against Redis, one connection: the Redis side bounds the run (its documents are hashed
    # here), so a second connection hashing MySQL's chunks sooner only competes with it for
    # the cores (and cuts each chunk again, an index read of half its keys).
    connections = 1 if target == "redis" else options.source_connections
    source = MySqlSide(instance, connections=connections)
    try:
        shape = source.read_shape(router, mirror)
        if target == "redis":
            shape = source.shape = shape.projected(mirror.redis_columns)
        if target in _LAKE_TARGETS:
            from validation.lake import lake_sides  # noqa: PLC0415 - starts Spark

            lake = lake_sides(
                settings,
                shape,
                source,
                target,
                options.snapshot_day,
                watermark,
                options.watermark_timeout_s,
            )
            source, side, watermark = lake.source, lake.side, lake.watermark
            own_watermark = lake.own_watermark
        else:
            side = _target_side(settings, mirror, target, shape)
            own_watermark = None
        if watermark is None:
            from validation.watermark import KafkaWatermark, PositionWatermark  # noqa: PLC0415

            own_watermark = watermark = PositionWatermark(
                KafkaWatermark(
                    settings.kafka,
                    topic_name(settings.kafka, mirror.instance),
                    mirror_group(settings.mirror.group_prefix, target),
                    options.watermark_timeout_s,
                ),
                settings.kafka,
                mirror.instance,
                source.current_position,
                options.watermark_timeout_s,
            )
        guard = LoadGuard(
            source,
            options.max_threads_running,
            0,
            options.pause_poll_s,
            _never_cancelled,
            time.monotonic,
            what="validation",
        )
        try:
            yield _Session(shape, source, side, watermark, guard)
        finally:
            side.close()
            if own_watermark is not None:
                own_watermark.close()
    finally:
        source.close()


def validate(
    settings: Settings,
    table: str,
    target: Target,
    options: Options = Options(),
    watermark: Watermark | None = None,
    store: ProgressStore | None = None,
) -> TargetReport:
    """Validate ``table``'s copy in ``target`` against MySQL (see ``validation``);
    ``store``: where the scan's progress is kept for a resume (default: nowhere)."""
    with _session(settings, table, target, options, watermark) as session:
        return validate_sides(
            session.shape,
            session.source,
            session.side,
            session.watermark,
            options,
            session.side.rows,
            store,
            session.guard,
        )


def recheck(
    settings: Settings,
    table: str,
    target: Target,
    keys: Sequence[Key],
    options: Options = Options(),
    watermark: Watermark | None = None,
) -> TargetReport:
    """Only ``keys``, by the settling rule (after a repair: which of them still differ)."""
    started = time.monotonic()
    with _session(settings, table, target, options, watermark) as session:
        report = TargetReport(table, target, shape=session.shape)
        shape = session.shape
        report.binary_columns = frozenset(
            n for n in shape.compared_columns if shape.column_type(n).kind in _BINARY_KINDS
        )
        candidates = dict.fromkeys(keys, Difference.DIFFERENT)
        _settle_into(
            report,
            shape,
            session.source,
            session.side,
            session.watermark,
            options,
            candidates,
            session.side.rows,
        )
        report.rows = len(keys)
        report.source_queries = session.source.queries
        report.seconds = time.monotonic() - started
        return report


# -- a table mirror: every target, and the repair ------------------------------------------


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """What a repair publishes: the current MySQL rows of ``keys`` (wire form, in
    ``key_columns`` order) of the logical table made of ``shards`` on ``instance``."""

    table: str
    instance: str
    shards: tuple[tuple[str, str], ...]
    key_columns: tuple[str, ...]
    keys: tuple[tuple[JsonScalar, ...], ...]


# Publishes a RepairRequest through the stream (``mock_replay.keys.replay_keys`` behind the
# CLI); returns one sentence saying what it published.
Repairer = Callable[[RepairRequest], str]


@dataclass
class TableValidation:
    table: str
    reports: list[TargetReport] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # target → the sentence
    repair: RepairRequest | None = None
    repaired: str | None = None  # the repairer's sentence
    after_repair: list[TargetReport] = field(default_factory=list)
    # Why a repair that was asked for did not run (more differing keys than it may publish).
    repair_skipped: str | None = None

    @property
    def equal(self) -> bool:
        return not self.unreachable and all(r.equal for r in self.reports)

    @property
    def converged(self) -> bool:
        """Equal, or every differing key equal after the repair."""
        if self.repair is None:
            return self.equal
        return not self.unreachable and all(r.equal for r in self.after_repair)

    def to_json(self) -> dict[str, Any]:
        """The figures for a caller's records (``cdc-mirror validate --result-file``)."""

        def keys(items: Sequence[Key]) -> list[str]:
            return [key_text(key) for key in items]

        return {
            "table": self.table,
            "equal": self.equal,
            "converged": self.converged,
            "unreachable": self.unreachable,
            "targets": [
                {
                    "target": r.target,
                    "equal": r.equal,
                    "rows": r.rows,
                    "chunks": r.chunks,
                    "differences": {d.value: keys(r.keys(d)) for d in Difference if r.keys(d)},
                    "unsettled": keys(r.unsettled),
                    "inFlight": r.in_flight,
                    "sourceQueries": r.source_queries,
                    "sourceRowsRead": r.source_rows_read,
                    "pausedS": round(r.paused_s, 3),
                    "resumed": r.resumed,
                    "seconds": round(r.seconds, 3),
                }
                for r in self.reports
            ],
            "repair": None
            if self.repair is None
            else {
                "keys": len(self.repair.keys),
                "published": self.repaired,
                "stillDiffering": {
                    r.target: keys([d.key for d in r.differences] + r.unsettled)
                    for r in self.after_repair
                },
            },
            "repairSkipped": self.repair_skipped,
        }


def validate_table(
    settings: Settings,
    table: str,
    targets: Sequence[Target] | None = None,
    options: Options | None = None,
    repair: Repairer | None = None,
    watermarks: dict[str, Watermark] | None = None,
    store: ProgressStore | None = None,
    cancel: threading.Event | None = None,
    repair_max_keys: int | None = None,
) -> TableValidation:
    """Validate every target of ``table`` (default: those of its mirror that validation
    knows); with ``repair``, re-publish the keys that differ in any target once, wait for
    every target to apply them and re-check them (``after_repair``), unless more than
    ``repair_max_keys`` keys differ (then nothing is published: ``repair_skipped`` says
    why). A target that cannot be reached is in ``unreachable``, never a mismatch."""
    mirror = settings.table(table)
    options = options or Options.from_settings(settings)
    mirrored = set(mirror.targets) | ({"lake"} if "hive" in mirror.targets else set())
    if "hive" in mirror.targets and options.snapshot_day is not None:
        mirrored.add("snapshot")
    chosen = list(targets) if targets else [t for t in TARGETS if t in mirrored]
    result = TableValidation(table)
    wanted: dict[Key, None] = {}
    shape: TableShape | None = None
    for target in chosen:
        if cancel is not None and cancel.is_set():
            break
        watermark = (watermarks or {}).get(target)
        try:
            report = validate(settings, table, target, options, watermark, store)
        except ServiceUnavailableError as exc:
            result.unreachable[target] = unreachable(target, exc)
            continue
        result.reports.append(report)
        wanted.update(dict.fromkeys(report.keys()))
        shape = shape or report.shape
    if repair is None or not wanted or shape is None:
        return result
    if repair_max_keys is not None and len(wanted) > repair_max_keys:
        result.repair_skipped = repair_refused(table, len(wanted), repair_max_keys)
        return result
    keys = sorted(wanted)
    result.repair = RepairRequest(
        table,
        mirror.instance,
        shape.shards,
        shape.key,
        # A key spelled otherwise (``SpelledKey``) re-publishes its key's row (the name
        # itself is not the mirror's to remove): each key once.
        tuple(dict.fromkeys(tuple(shape.key_wire(k)) for k in keys)),
    )
    result.repaired = repair(result.repair)
    # A day's snapshot is history: the repair reaches the lake's current state (and the next
    # merges), not a day already merged, so it is not re-checked.
    for target in [t for t in chosen if t not in result.unreachable and t != "snapshot"]:
        watermark = (watermarks or {}).get(target)
        try:
            result.after_repair.append(recheck(settings, table, target, keys, options, watermark))
        except ServiceUnavailableError as exc:
            result.unreachable[target] = unreachable(target, exc)
    return result


# -- the report -----------------------------------------------------------------------------


def display(value: Any, binary: bool = False) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray):
        if not binary:
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                pass
        return "0x" + bytes(value).hex()
    return str(value)


def key_text(key: Key) -> str:
    """A key for people: its values; one the target spells otherwise, its name there."""
    values = "/".join(display(v) for v in key)
    if isinstance(key, SpelledKey):
        return f"{values} (named {key.spelling!r} in the target)"
    return values


def describe(report: TargetReport) -> list[str]:
    """Lines for people: a summary, then each differing key with its rows side by side
    (``*`` marks the columns that differ)."""
    binary = report.binary_columns
    verdict = "equal" if report.equal else "DIFFERENT"
    lines = [
        f"{report.table} in {report.target}: {verdict} — {report.rows} rows in {report.chunks} "
        f"chunks, {report.stats.chunks_compared} chunk comparisons, "
        f"{len(report.differences)} differing keys, {report.in_flight} in flight, "
        f"{len(report.unsettled)} still changing; MySQL at {report.position or '?'}; "
        f"{report.source_queries} source queries; {report.seconds:.1f} s"
    ]
    for item in report.differences:
        key = key_text(item.key)
        lines.append(f"  key {key}: {item.difference.value}")
        columns = list((item.source or item.target or {}).keys())
        changed = set(item.differing_columns())
        width = max((len(c) for c in columns), default=0)
        lines.append(f"    {'column':<{width}}  {'mysql':<30}  {report.target}")
        for column in columns:
            left = (
                "-" if item.source is None else display(item.source.get(column), column in binary)
            )
            right = (
                "-" if item.target is None else display(item.target.get(column), column in binary)
            )
            mark = " *" if column in changed and item.difference is Difference.DIFFERENT else ""
            lines.append(f"    {column:<{width}}  {left:<30}  {right}{mark}")
    lines += [f"  key {key_text(k)}: still changing" for k in report.unsettled]
    return lines


def repair_refused(table: str, keys: int, cap: int) -> str:
    return (
        f"not repaired: {keys} keys differ, more than the {cap} a repair may re-publish "
        f"(--repair-max-keys); find out why, then run 'cdc-mirror validate {table} --repair' "
        "if the source is right."
    )


def unreachable(target: str, exc: ServiceUnavailableError) -> str:
    return f"{target} could not be validated: {exc}"
