"""The Redis side: one JSON document per key (``simple_binlog.naming``), hashed in Python.

Redis has no engine to hash in, and no key order: the keys under ``<prefix>:<table>:`` are
listed once (SCAN, keys only) and sorted by the typed key, which places each in its chunk;
a chunk's documents are then read with MGETs of ``BATCH`` keys, all of a chunk's in one
pipeline (one round trip), and hashed with the same canonical encoding as the SQL engines
(``validation.canonical.RowHasher``: the per-column work chosen once, the wire values taken
as they are where they are the canonical text already, one md5 per row). A tombstone (a
deleted row's ``row: null``) is not a row. A key listed before it was written is found by
``key_hashes`` (used when settling), which reads keys by name.

The listing of a big table takes a while (SCAN walks the whole database): for a key of one
integer column, a chunk compared before it ends is read by range, the mirror's names of the
chunk's numbers printed from its bounds (``provisional_digest``), and confirmed once the
listing has ended (``confirms``: no name listed in the chunk that the range did not read),
else compared again from the listing.

The mirror writes each key under one name: a name listed that is not its key's spelling
(``...:0042``) marks its chunk as differing (``_spelled_otherwise``), and the leaf reads the
names as listed, such a name as a key of its own (``plan.SpelledKey``), so it is reported
extra as it is named. Key columns a projection (``redis_columns``) leaves out of the
documents are compared all the same, taken from each name.
"""

from __future__ import annotations

import bisect
import hashlib
import multiprocessing
import os
import re
import signal
import sys
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, overload

import msgspec
import numpy as np
import orjson
from numpy.typing import NDArray

from cdc_platform import redis_store
from cdc_platform.config import RedisSettings
from simple_binlog.errors import FatalError
from simple_binlog.naming import (
    decode_redis_document,
    redis_key,
    redis_key_part,
    redis_key_part_value,
)
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode
from validation.canonical import (
    _FRACTION_SCALE,
    _PREFIXED_KINDS,
    _TEXT_WIRE_KINDS,
    DOUBLE_EXACT_HIGH,
    DOUBLE_EXACT_LOW,
    NULL_PIECE,
    ChunkDigest,
    RowHasher,
    double_text,
    is_json,
    piece_of,
    python_canonical,
)
from validation.plan import Chunk, Key, SpelledKey
from validation.table import TableShape

try:
    # CPython's own md5: the same digest as hashlib's (OpenSSL's), cheaper per call for a
    # row's hundred-odd bytes, and there is a call per row. A build without it: hashlib's.
    from _md5 import md5 as _row_md5  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - CPython builds it unless configured not to
    _row_md5 = hashlib.md5

BATCH = 1000
_SCAN_COUNT = 10_000  # keys a SCAN step looks at: fewer round trips


def key_from_parts(types: Sequence[ColumnType], parts: Sequence[str]) -> Key:
    """The typed key of a Redis key's parts (each the text of a key column's wire value)."""
    values: list[Any] = []
    for column, part in zip(types, parts, strict=True):
        text = redis_key_part_value(part)
        wire: JsonScalar = int(text) if column.kind in (Kind.INT, Kind.YEAR, Kind.BIT) else text
        values.append(decode(column, wire))
    return tuple(values)


# A wire integer's range (INT to BIGINT UNSIGNED and BIT(64)): a number outside it is left
# to the general path (orjson reads it as a float, which ``RowHasher`` refuses), as before.
# msgspec checks the lower bound; it takes no upper bound above int64's, checked in the text.
_WIRE_INT_MAX = 2**64 - 1
_WireInt = Annotated[int, msgspec.Meta(ge=-(2**63))]


class DocumentHasher:
    """The row hashes of a chunk's stored documents, as ``RowHasher`` makes them from the
    parsed documents, in one pass per row: each document is parsed by msgspec straight into
    the compared columns typed by Kind (no dict; a column the document lacks is NULL, other
    keys are skipped), and the row text is one generated f-string over them, so the common
    kinds cost no call of their own: a wire text that is the canonical text already is taken
    as it is, an integer printed, a text length-prefixed, a DOUBLE's ``<w>p<f>`` written out
    as ``canonical.double_piece`` does; the other kinds go through ``canonical.piece_of``. A
    document msgspec does not parse as typed (a wire value of another type, a malformed
    document) is hashed by ``RowHasher`` from ``orjson``'s parse, which hashes it or raises
    as before: nothing is skipped.

    Generated code, not a loop over the columns: the loop's per-column calls and branches
    were most of a row's time, and this runs for every row of every chunk. The loop over the
    rows is generated too (a call per row cost as much as a column's piece), and the rows'
    first 64 bits are summed by ``array`` in C, not read by an ``int.from_bytes`` per row."""

    def __init__(self, names: Sequence[str], columns: Sequence[ColumnType]) -> None:
        self._hasher = RowHasher(names, columns)
        fields: list[tuple[str, Any, Any]] = []
        lines: list[str] = []
        checks: list[str] = []  # a value the general path is to read
        pieces: list[str] = []
        scope: dict[str, Any] = {
            "NULL": NULL_PIECE,
            "INT_MAX": _WIRE_INT_MAX,
            "LOW": DOUBLE_EXACT_LOW,
            "HIGH": DOUBLE_EXACT_HIGH,
            "SCALE": _FRACTION_SCALE,
            "double_text": double_text,
            "DecodeError": msgspec.DecodeError,
            "md5": _row_md5,
        }
        for index, (name, column) in enumerate(zip(names, columns, strict=True)):
            value = f"v{index}"
            kind = column.kind
            lines.append(f"        {value} = row.f{index}")
            if kind in _TEXT_WIRE_KINDS:
                wire: Any = str
                piece = f"NULL if {value} is None else {value}"
            elif kind in _PREFIXED_KINDS and not is_json(column):
                wire = str
                piece = f"NULL if {value} is None else f'{{len({value})}}:{{{value}}}'"
            elif kind in (Kind.INT, Kind.YEAR, Kind.BIT):
                wire = _WireInt
                piece = f"NULL if {value} is None else {value}"
                checks.append(f"{value} is not None and {value} > INT_MAX")
            elif kind is Kind.DOUBLE:
                # ``double_piece`` written out (a call per row saved): msgspec reads a JSON
                # integer as a float, as ``piece_of`` does.
                wire = float
                lines += [
                    f"        if {value} is None: p{index} = NULL",
                    f"        elif LOW <= abs({value}) < HIGH:",
                    f"            w = int({value})",
                    f"            p{index} = f'{{w}}p{{int(({value} - w) * SCALE)}}'",
                    f"        else: p{index} = double_text({value})",
                ]
                piece = f"p{index}"
            else:
                # A FLOAT parsed as a float (and a number past 2^64 as orjson does); the
                # other kinds as they come.
                wire = float if kind is Kind.FLOAT else Any
                scope[f"piece{index}"] = piece_of(column, name)
                piece = f"NULL if {value} is None else piece{index}({value})"
            fields.append((f"f{index}", wire | None, msgspec.field(name=name, default=None)))
            pieces.append(f"{{{piece}}}")
        # gc=False: a parsed document holds no reference cycle (texts, numbers, the row),
        # and two tracked objects a row made the collector run every few hundred rows.
        row_type = msgspec.defstruct("StoredRow", fields, forbid_unknown_fields=False, gc=False)
        document_type = msgspec.defstruct(
            "StoredDocument",
            [
                ("shard", str, msgspec.field(name="_shard")),
                ("row", row_type | None),
            ],
            gc=False,
        )
        scope["decode"] = msgspec.json.Decoder(document_type).decode
        body = "{len(shard)}:{shard}," + ",".join(pieces)
        checked = (
            [
                f"        if {' or '.join(checks)}:",
                "            general.append(raw)",
                "            continue",
            ]
            if checks
            else []
        )
        source = "\n".join(
            [
                "def digests(raws):",
                "    found = []",
                "    found_one, general = found.append, []",
                "    for raw in raws:",
                "        if raw is None:",
                "            continue",
                "        try:",
                "            document = decode(raw)",
                "        except DecodeError:",
                "            general.append(raw)",
                "            continue",
                "        row = document.row",
                "        if row is None:",
                "            continue  # a tombstone",
                "        shard = document.shard",
                *lines,
                *checked,
                f'        found_one(md5(f"{body}".encode()).digest())',
                "    return found, general",
            ]
        )
        exec(source, scope)  # noqa: S102 - code made here from the Kinds alone, no input
        self._digests: Callable[[Iterable[bytes | None]], tuple[list[bytes], list[bytes]]] = scope[
            "digests"
        ]

    def chunk(self, raws: Iterable[bytes | None]) -> ChunkDigest:
        """The digest of the rows among ``raws`` (a missing key or a tombstone is none)."""
        digests, general = self._digests(raws)
        # Each md5's first 8 bytes, big-endian, summed in C: the digests as 64-bit words
        # (byte-swapped on a little-endian machine), every other one.
        words = array("Q", b"".join(digests))
        if sys.byteorder == "little":
            words.byteswap()
        count, total = len(digests), sum(words[::2])
        for raw in general:
            # Not parsed as typed, or a value the general path reads: orjson's parse.
            parsed = orjson.loads(raw)
            if parsed["row"] is None:
                continue
            count += 1
            total += int.from_bytes(
                _row_md5(self._hasher.text(parsed["_shard"], parsed["row"])).digest()[:8]
            )
        return ChunkDigest.of(count, total)


def _text(column: ColumnType, raw: bytes | None) -> str | bytes | None:
    """Canonical bytes as the SQL engines return them: text, but for binaries."""
    if raw is None or column.kind in (Kind.BINARY, Kind.GEOMETRY):
        return raw
    return raw.decode()


def _mget_commands(names: Sequence[bytes | str]) -> tuple[bytes, int]:
    """MGETs of ``BATCH`` of ``names`` as one RESP text, and how many: packed here in one
    pass, not by redis-py's pipeline, which encodes and packs each name through a few calls
    of its own (about a fifth of a chunk's read, for every row)."""
    commands: list[bytes] = []
    for start in range(0, len(names), BATCH):
        part = [n.encode() if isinstance(n, str) else n for n in names[start : start + BATCH]]
        commands.append(b"*%d\r\n$4\r\nMGET\r\n" % (len(part) + 1))
        commands.append(b"".join([b"$%d\r\n%b\r\n" % (len(name), name) for name in part]))
    return b"".join(commands), len(commands) // 2


class _ChunkReader:
    """Reads documents by name (MGETs of ``BATCH``, all sent at once: one round trip) and
    hashes them."""

    def __init__(
        self, settings: RedisSettings, table: str, names: Sequence[str], types: Sequence[ColumnType]
    ) -> None:
        self._doing = f"the read of {table}"
        self._address = redis_store.address(settings)
        self._client = redis_store.connect(settings, socket_timeout_s=60)
        self.hasher = DocumentHasher(names, types)

    def close(self) -> None:
        self._client.close()

    def digest(self, parts: Iterable[_Part]) -> ChunkDigest:
        """The digest of the documents under the names of ``parts``, pipelined on one
        connection: each part's MGETs are sent before the reply to the one before is read
        and hashed, so Redis looks the next part up meanwhile (no thread: a worker process
        hashes while Redis works)."""
        count = total = 0
        with self._connection() as connection:
            sent: list[int] = []  # the MGETs of the parts sent and not yet read
            for part in parts:
                commands, mgets = _mget_commands(_names_of(part))
                connection.send_packed_command([commands])
                sent.append(mgets)
                if len(sent) > 1:
                    found = self.hasher.chunk(_replies(connection, sent.pop(0)))
                    count, total = count + found.count, total + found.total
            for mgets in sent:
                found = self.hasher.chunk(_replies(connection, mgets))
                count, total = count + found.count, total + found.total
        return ChunkDigest.of(count, total)

    def read(self, names: Sequence[bytes | str]) -> list[bytes | None]:
        if not names:
            return []
        commands, count = _mget_commands(names)
        with self._connection() as connection:
            connection.send_packed_command([commands])
            return _replies(connection, count)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A connection of the client's (redis-py's Connection is untyped), its errors the
        product's; after an error it is closed, not handed back (replies may be under way)."""
        with redis_store.redis_errors(self._doing, self._address):
            pool = self._client.connection_pool
            connection: Any = pool.get_connection()
            try:
                yield connection
            except BaseException:
                connection.disconnect()
                raise
            finally:
                pool.release(connection)


def _replies(connection: Any, mgets: int) -> list[bytes | None]:
    """The values the next ``mgets`` MGET replies on ``connection`` hold."""
    values: list[bytes | None] = []
    for _ in range(mgets):
        values += connection.read_response()
    return values


@dataclass(frozen=True, slots=True)
class _Printed:
    """Names that are the table's head and each number printed: a worker process is sent
    the numbers (a range, or 8 bytes a key), not the names, and prints them itself."""

    head: bytes
    numbers: range | NDArray[Any]

    def names(self) -> list[bytes]:
        numbers = self.numbers if isinstance(self.numbers, range) else self.numbers.tolist()
        head = self.head
        return [b"%b%d" % (head, number) for number in numbers]


# A part of a chunk's names, read (MGETs) and hashed together: as listed, or printed.
_Part = Sequence[bytes | str] | _Printed


def _names_of(part: _Part) -> Sequence[bytes | str]:
    return part.names() if isinstance(part, _Printed) else part


class RedisWorkerError(FatalError):
    """A worker process hashing Redis documents ended without an answer (killed, or out of
    memory): the run stops, with this sentence, rather than compare without its parts."""


# The reader of a worker process (``_DigestWorkers``), made once by its initializer.
_worker_reader: _ChunkReader | None = None


def _start_worker(
    settings: RedisSettings, table: str, names: Sequence[str], types: Sequence[ColumnType]
) -> None:
    """A worker process's start: its own Redis connection and document hasher. Ctrl-C is
    the main process's to handle (it stops the pool); a worker whose main process died
    (killed: no shutdown) ends too, rather than wait for parts forever."""
    global _worker_reader  # noqa: PLW0603 - one reader per worker process, for its life
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with, args=(parent,), daemon=True).start()
    _worker_reader = _ChunkReader(settings, table, names, types)


def _end_with(parent: Any) -> None:
    parent.join()  # returns when the parent process has ended
    os._exit(1)


def _worker_ready() -> None:
    """Nothing: done once a worker has started (``_DigestWorkers.ready``)."""


def _worker_digest(parts: Sequence[_Part]) -> ChunkDigest:
    if _worker_reader is None:  # pragma: no cover - the initializer makes it first
        raise RuntimeError("a Redis digest worker was used before its start")
    return _worker_reader.digest(parts)


# Parts in a worker's run at most: a run's reads are pipelined (more parts: more of them
# overlap with the hashing), a chunk's last run is what one worker hashes while the others
# may have nothing left (more parts: a longer wait at each chunk's end).
_RUN_PARTS = 4


def _runs(parts: Sequence[_Part], workers: int) -> list[Sequence[_Part]]:
    """``parts`` in runs of consecutive parts: two runs per worker at least where there are
    parts enough, at most ``_RUN_PARTS`` each."""
    size = max(1, min(_RUN_PARTS, -(-len(parts) // (2 * workers))))
    return [parts[start : start + size] for start in range(0, len(parts), size)]


class _DigestWorkers:
    """Worker processes (spawned: the main process has threads) that each read and hash
    whole parts of a chunk, on connections of their own, and answer with the parts'
    digests (a count and a sum): the main process only lists and hands out the names, so
    the per-key work (MGET replies, parse, row text, md5) runs on as many cores as there
    are workers. A part's error (a Redis error, a value the hasher refuses) is raised here
    as the worker raised it; a worker that ended without answering is one
    ``RedisWorkerError``."""

    def __init__(
        self,
        count: int,
        settings: RedisSettings,
        table: str,
        names: Sequence[str],
        types: Sequence[ColumnType],
    ) -> None:
        self._table, self._count = table, count
        self._pool = ProcessPoolExecutor(
            count,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(settings, table, list(names), list(types)),
        )
        # One no-op per worker: each spawns one, and done tells that it has started.
        self._started: list[Future[None]] = [self._pool.submit(_worker_ready) for _ in range(count)]

    @property
    def ready(self) -> bool:
        """Whether the workers have started (until then chunks are hashed in this process;
        a worker that failed to start counts as ready: its error shows at the next parts)."""
        return all(started.done() for started in self._started)

    def digest(self, parts: Iterable[_Part]) -> tuple[ChunkDigest, int]:
        """The digest of the documents under the names of ``parts``, and how many parts:
        handed out in runs of consecutive parts, each worker pipelining a run's reads."""
        futures: list[Future[ChunkDigest]] = []
        listed = list(parts)
        try:
            futures = [self._pool.submit(_worker_digest, run) for run in _runs(listed, self._count)]
            digests = [future.result() for future in futures]
        except BrokenProcessPool as exc:
            raise RedisWorkerError(
                f"a worker process hashing {self._table}'s Redis documents ended without "
                f"an answer ({exc}: it did not start, was killed or ran out of memory); "
                f"validation.redis_workers: 0 hashes them in this process."
            ) from exc
        finally:
            for future in futures:
                future.cancel()  # after an error: the parts not yet begun
        count = sum(digest.count for digest in digests)
        return ChunkDigest.of(count, sum(digest.total for digest in digests)), len(listed)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class _IntegerKeys(Sequence[Key]):
    """The sorted keys of a one-integer-column key as one numpy array (8 bytes a key; a
    Python int in a list took about 40, the most of a 10M-key listing's memory), each made a
    key (a 1-tuple) when asked for."""

    def __init__(self, numbers: NDArray[Any]) -> None:
        self.numbers = numbers

    def __len__(self) -> int:
        return len(self.numbers)

    @overload
    def __getitem__(self, index: int) -> Key: ...

    @overload
    def __getitem__(self, index: slice) -> list[Key]: ...

    def __getitem__(self, index: int | slice) -> Key | list[Key]:
        if isinstance(index, slice):
            return [(number,) for number in self.numbers[index].tolist()]
        return (int(self.numbers[index]),)

    def after(self, key: Key) -> int:
        """Where ``key`` would go after its equals (``bisect_right``), searched in C."""
        number = key[0]
        if not isinstance(number, int):
            return bisect.bisect_right(self, key)  # pragma: no cover - a key of another kind
        info = np.iinfo(self.numbers.dtype)
        if number < info.min:
            return 0
        if number > info.max:
            return len(self.numbers)
        return int(np.searchsorted(self.numbers, number, side="right"))


# A SCAN reply of names that are each the table's head and a number's own text (ASCII digits,
# no leading zero) is read as one text by numpy; a run of this many digits or more may not
# fit the array's type (numpy's text parse clamps a signed overflow), and such a reply is
# read name by name instead.
_LONG_NUMBER = {
    np.dtype(np.int64): re.compile(rb"[0-9]{19}"),
    np.dtype(np.uint64): re.compile(rb"[0-9]{20}"),
}


def _plain_numbers(
    batch: Sequence[bytes], head: bytes, dtype: np.dtype[Any]
) -> NDArray[Any] | None:
    """The numbers of ``batch`` if each name is ``head`` and a number's own text (no sign,
    no leading zero), parsed in C from the joined text; None for any other reply."""
    if not batch:
        return None
    joined = b" ".join(batch)
    if joined.count(head) != len(batch):
        return None  # a name without the head, or with it twice
    text = joined.replace(head, b"")
    spaced = b" " + text + b" "
    if not spaced.replace(b" ", b"").isdigit() or b"  " in spaced or b" 0" in spaced:
        return None
    if _LONG_NUMBER[dtype].search(text):
        return None
    numbers: NDArray[Any] = np.fromstring(text, dtype=dtype, sep=" ")
    return numbers if len(numbers) == len(batch) else None


class _IntegerNames:
    """The Redis keys of a span of ``_IntegerKeys``, printed from the numbers when asked for
    (a name kept per key, sorted along with the numbers, cost the listing more than printing
    the names of each chunk as it is read); a name SCAN listed that is not the head and the
    number printed (a key written behind the mirror's back as ``007``, or an escape) is
    kept and read as it was listed, beside the number's own name if that was listed too."""

    def __init__(self, head: str, keys: _IntegerKeys, odd: dict[int, list[bytes]]) -> None:
        self._head, self._numbers, self._odd = head.encode(), keys.numbers, odd
        self._odd_numbers = sorted(odd)

    @property
    def has_odd(self) -> bool:
        return bool(self._odd)

    def odd_in(self, span: slice) -> list[bytes]:
        """The names spelled other than their number printed among a span's."""
        if not self._odd or span.start >= span.stop:
            return []
        low, high = int(self._numbers[span.start]), int(self._numbers[span.stop - 1])
        first = bisect.bisect_left(self._odd_numbers, low)
        last = bisect.bisect_right(self._odd_numbers, high)
        return [name for number in self._odd_numbers[first:last] for name in self._odd[number]]

    def odd_between(self, after: int, upto: int | None) -> bool:
        """Whether a name spelled other than its number printed was listed for a number
        ``after < number <= upto`` (``upto`` None: no upper bound)."""
        first = bisect.bisect_right(self._odd_numbers, after)
        return first < len(self._odd_numbers) and (upto is None or self._odd_numbers[first] <= upto)

    def printed(self, span: slice) -> _Printed:
        """A span's names when none is odd (``has_odd`` false): its numbers printed."""
        return _Printed(self._head, self._numbers[span])

    def __getitem__(self, span: slice) -> list[bytes | str]:
        numbers: list[int] = self._numbers[span].tolist()
        head = self._head
        names: list[bytes | str] = [b"%b%d" % (head, number) for number in numbers]
        if not numbers or not self._odd:
            return names
        first = bisect.bisect_left(self._odd_numbers, numbers[0])
        last = bisect.bisect_right(self._odd_numbers, numbers[-1])
        for number in self._odd_numbers[first:last]:
            # Every listing of the number (they are adjacent): its odd names, then its own
            # name for each listing left (the number's own name, if SCAN listed it).
            start = bisect.bisect_left(numbers, number)
            stop = bisect.bisect_right(numbers, number)
            spelled: list[bytes | str] = list(self._odd[number])
            names[start:stop] = spelled + names[start : stop - len(spelled)]
        return names


class _ListedNames(list[bytes]):
    """The names of the general listing, sorted with their keys, and where those spelled
    other than the mirror spells their key are (a leading zero, an escape the mirror does
    not write: written behind its back)."""

    def __init__(self, names: Iterable[bytes], odd: Sequence[int]) -> None:
        super().__init__(names)
        self.odd_positions = list(odd)

    def odd_in(self, span: slice) -> list[bytes]:
        first = bisect.bisect_left(self.odd_positions, span.start)
        last = bisect.bisect_left(self.odd_positions, span.stop)
        return [self[position] for position in self.odd_positions[first:last]]


def _spelled_otherwise(names: Sequence[bytes]) -> ChunkDigest:
    """A digest part for names the mirror never writes, none a row's: a chunk holding one
    differs from MySQL's even when its document is a row MySQL has under its own name, so
    it is descended into and the name reported (``RedisSide.row_hashes``)."""
    total = sum(
        int.from_bytes(_row_md5(b"\0spelled otherwise:" + name).digest()[:8]) for name in names
    )
    return ChunkDigest.of(len(names), total)


# A chunk's documents are read in parts of this many keys, the next part read (in the
# reader thread) while this one is hashed: Redis looks them up and sends them meanwhile.
_PART = 5 * BATCH

# The Redis keys of a span of the sorted keys: as listed, or printed from integer keys.
_Names = _ListedNames | _IntegerNames


class RedisSide:
    name = "redis"

    def __init__(self, settings: RedisSettings, shape: TableShape, workers: int = 0) -> None:
        """``workers``: processes that read and hash the parts of big chunks
        (``validation.redis_workers``; 0: this process, with a thread reading ahead)."""
        self.shape = shape
        self.queries = 0
        self._prefix = settings.key_prefix
        self._address = redis_store.address(settings)
        self._types = [shape.column_type(n) for n in shape.compared_columns]
        self._hasher = RowHasher(shape.compared_columns, self._types)
        self._reader = _ChunkReader(settings, shape.table, shape.compared_columns, self._types)
        self._client = redis_store.connect(settings, socket_timeout_s=60)
        self._settings, self._worker_count = settings, workers
        # Started at the first chunk of two parts or more (a small table never starts them);
        # a projection without the key is hashed here (its rows' keys read from the names).
        self._workers: _DigestWorkers | None = None
        # Listed in a thread of its own: MySQL hashes its first chunks meanwhile (the scan
        # starts its source side at once), and chunks of an integer key are read by range
        # until the list is there (``provisional_digest``). The reads thread reads each
        # chunk's next part while this one is hashed.
        self._lister = ThreadPoolExecutor(1, thread_name_prefix=f"validate-{shape.table}-list")
        self._reads = ThreadPoolExecutor(1, thread_name_prefix=f"validate-{shape.table}-reads")
        self._listing = self._lister.submit(self._list_keys)
        key_kinds = [t.kind for t in shape.key_types]
        self._by_range = key_kinds in ([Kind.INT], [Kind.UINT64])
        self._unsigned = key_kinds == [Kind.UINT64]
        # Chunks read by range before the listing ended: where each range started (the
        # first number read minus one).
        self._read_after: dict[Chunk, int] = {}

    @property
    def _keys(self) -> Sequence[Key]:
        return self._listing.result()[0]

    @property
    def _names(self) -> _Names:
        return self._listing.result()[1]

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
        self._lister.shutdown(wait=True, cancel_futures=True)
        self._reads.shutdown(wait=True, cancel_futures=True)
        self._reader.close()
        self._client.close()

    def _errors(self) -> AbstractContextManager[None]:
        return redis_store.redis_errors(f"the read of {self.shape.table}", self._address)

    def _scan(self, pattern: str) -> Iterator[list[bytes]]:
        """SCAN's replies of the names matching ``pattern``, each next step sent before the
        last reply is handed on, so Redis walks the next keys while this process reads the
        last ones (redis-py's ``scan_iter`` waits for each reply before it asks again)."""
        pool = self._client.connection_pool
        connection: Any = pool.get_connection()  # redis-py's Connection is untyped
        steps = ("MATCH", pattern, "COUNT", _SCAN_COUNT)
        try:
            connection.send_command("SCAN", 0, *steps)
            while True:
                replied, batch = connection.read_response()
                cursor = int(replied)
                if cursor:
                    connection.send_command("SCAN", cursor, *steps)
                yield batch
                if not cursor:
                    break
        except BaseException:
            # A reply may be under way: the connection is closed, not handed back with it.
            connection.disconnect()
            raise
        finally:
            pool.release(connection)

    def _list_keys(self) -> tuple[Sequence[Key], _Names]:
        """The typed keys, sorted, and their Redis keys as listed (read again by name)."""
        head = f"{self._prefix}:{self.shape.table}:"
        width, types = len(self.shape.key), self.shape.key_types
        if width == 1 and types[0].kind in (Kind.INT, Kind.UINT64, Kind.YEAR, Kind.BIT):
            return self._list_integer_keys(head)
        return self._list_general(head)

    def _list_general(self, head: str) -> tuple[Sequence[Key], _Names]:
        """Any key: each name read by ``key_from_parts``, the keys sorted with their names."""
        start, width, types = len(head), len(self.shape.key), self.shape.key_types
        found: list[tuple[Key, bytes, bool]] = []
        with self._errors():
            for batch in self._scan(f"{head}*"):
                for raw in batch:
                    parts = raw.decode()[start:].split(":")
                    if len(parts) == width:
                        key = key_from_parts(types, parts)
                        spelled = [redis_key_part(w) for w in self.shape.key_wire(key)]
                        found.append((key, raw, spelled != parts))
        found.sort()  # by key (the names only break ties of keys spelled two ways)
        odd = [position for position, (_, _, otherwise) in enumerate(found) if otherwise]
        return [key for key, _, _ in found], _ListedNames((name for _, name, _ in found), odd)

    def _list_integer_keys(self, head: str) -> tuple[Sequence[Key], _Names]:
        """``_list_keys`` for a key of one integer column (the common key): the numbers in
        one numpy array, sorted in C, the names printed again when read (``_IntegerNames``).
        A reply of numbers' own texts is parsed whole (``_plain_numbers``); in any other a
        name is read on its own (a sign, a leading zero, an escape: by ``key_from_parts``)
        and kept when it is not the number printed. A number the array's type cannot hold
        (written behind the mirror's back) lists the table the general way."""
        start, types = len(head), self.shape.key_types
        spelled = head.encode()
        dtype = np.dtype(np.uint64 if types[0].kind in (Kind.UINT64, Kind.BIT) else np.int64)
        replies: list[NDArray[Any]] = []
        odd: dict[int, list[bytes]] = {}
        with self._errors():
            for batch in self._scan(f"{head}*"):
                plain = _plain_numbers(batch, spelled, dtype)
                if plain is not None:
                    replies.append(plain)
                    continue
                found: list[int] = []
                for raw in batch:
                    part = raw[start:]
                    if part.isdigit():
                        number = int(part)
                    elif b":" not in part:
                        number = key_from_parts(types, [part.decode()])[0]
                    else:
                        continue  # a name of more parts: not a key of this table
                    found.append(number)
                    if raw != b"%b%d" % (spelled, number):
                        odd.setdefault(number, []).append(raw)
                try:
                    replies.append(np.array(found, dtype=dtype))
                except OverflowError:
                    return self._list_general(head)
        numbers: NDArray[Any] = np.concatenate(replies) if replies else np.empty(0, dtype)
        replies.clear()
        numbers.sort()
        keys = _IntegerKeys(numbers)
        return keys, _IntegerNames(head, keys, odd)

    def _range(self, chunk: Chunk) -> slice:
        keys = self._keys
        after = keys.after if isinstance(keys, _IntegerKeys) else partial(bisect.bisect_right, keys)
        start = 0 if chunk.lo is None else after(chunk.lo)
        stop = len(keys) if chunk.hi is None else after(chunk.hi)
        return slice(start, stop)

    def _in(self, chunk: Chunk) -> list[Key]:
        return list(self._keys[self._range(chunk)])

    def _read(self, names: Sequence[bytes | str]) -> list[bytes | None]:
        """The values of ``names``: MGETs of ``BATCH``, one pipeline (one round trip)."""
        self.queries += 1
        return self._reader.read(names)

    def _name(self, key: Key) -> str:
        """The name the mirror writes ``key`` under."""
        return redis_key(self._prefix, self.shape.table, self.shape.key_wire(key))

    def _documents(self, keys: Sequence[Key]) -> Iterable[tuple[Key, str, dict[str, JsonScalar]]]:
        """(key, shard, row) of the live rows among ``keys``, each read under the mirror's
        name of it, a ``SpelledKey`` under its own spelling; a key column the documents
        leave out (``redis_columns``) taken from the key."""
        names = [k.spelling if isinstance(k, SpelledKey) else self._name(k) for k in keys]
        unstored = self.shape.unstored_key
        for key, raw in zip(keys, self._read(names), strict=True):
            if raw is None:
                continue
            _, shard, row = decode_redis_document(raw)
            if row is not None:
                if unstored:
                    row = {**row, **self._key_columns(key)}
                yield key, shard, row

    def _key_columns(self, key: Key) -> dict[str, JsonScalar]:
        """The wire values of the key columns the documents leave out."""
        wire = dict(zip(self.shape.key, self.shape.key_wire(key), strict=True))
        return {name: wire[name] for name in self.shape.unstored_key}

    def _hash(self, shard: str, row: dict[str, JsonScalar]) -> str:
        return self._hasher.hexdigest(shard, row)

    def digest(self, chunk: Chunk) -> ChunkDigest:
        # The listed names, not rebuilt from the keys, read in parts: each part's read is
        # under way while the one before is hashed.
        self._read_after.pop(chunk, None)  # read from the listing: nothing to confirm
        span = self._range(chunk)
        found = self._digest_parts(self._parts(span), span.stop - span.start)
        names = self._names
        if isinstance(names, _IntegerNames) and not names.has_odd:
            return found  # the common case: every name the mirror's own
        odd = names.odd_in(span)
        if not odd:
            return found
        marks = _spelled_otherwise(odd)
        return ChunkDigest.of(found.count + marks.count, found.total + marks.total)

    @property
    def listed(self) -> bool:
        """Whether the key listing has ended (``confirms`` then answers at once)."""
        return self._listing.done()

    def provisional_digest(self, chunk: Chunk, rows: int) -> ChunkDigest | None:
        """Before the key listing has ended, for a key of one integer column: the digest of
        the documents under the mirror's own names of every number of the chunk, printed
        from its bounds (MGETs of names that need no listing), when MySQL's ``rows`` of the
        chunk fill at least about half of its numbers; None otherwise (after the listing,
        for a sparse range, at the table's end): ``digest`` then waits for the listing.

        Provisional: a name SCAN lists that the range did not read (a number spelled
        otherwise, written behind the mirror's back; for the first chunk, a number below the
        range) is not in it, so the caller asks ``confirms`` once the listing has ended and
        compares the chunk again if it says no."""
        if self._listing.done() or not self._by_range or chunk.hi is None or rows < 1:
            return None
        hi = chunk.hi[0]
        if not isinstance(hi, int) or (chunk.lo is not None and not isinstance(chunk.lo[0], int)):
            return None  # pragma: no cover - MySQL reads an integer column as an int
        after = hi - rows if chunk.lo is None else chunk.lo[0]
        if self._unsigned:
            after = max(after, -1)
        if hi - after > 2 * rows + BATCH:
            return None  # mostly missing numbers: the listing's names read fewer keys
        self._read_after[chunk] = after
        head = f"{self._prefix}:{self.shape.table}:".encode()
        parts = (
            _Printed(head, range(start, min(start + _PART, hi + 1)))
            for start in range(after + 1, hi + 1, _PART)
        )
        return self._digest_parts(parts, hi - after)

    def confirms(self, chunk: Chunk) -> bool:
        """Whether ``provisional_digest``'s digest of ``chunk`` read every name the listing
        found in it (waits for the listing): no name in it spelled other than the number
        printed, and none below the range read."""
        after = self._read_after.pop(chunk)
        keys, names = self._keys, self._names
        if not isinstance(keys, _IntegerKeys) or not isinstance(names, _IntegerNames):
            return False  # listed the general way: a name the range did not print
        span = self._range(chunk)
        if span.start < span.stop and int(keys.numbers[span.start]) <= after:
            return False
        return not names.odd_between(after, int(chunk.hi[0]) if chunk.hi else None)

    def _digest_parts(self, parts: Iterator[_Part], keys: int) -> ChunkDigest:
        """The digest of the documents under the names of ``parts`` (about ``keys``): by
        the worker processes once started, else here, each part's read under way (in the
        reads thread) while the one before is hashed."""
        workers = self._started_workers(keys)
        if workers is not None:
            found, parts_read = workers.digest(parts)
            self.queries += parts_read
            return found
        chunk_of = self._reader.hasher.chunk
        count = total = 0
        names = _names_of(next(parts, []))
        reading = self._reads.submit(self._read, names)
        while True:
            following = next(parts, None)
            raws = reading.result()
            following_names = None if following is None else _names_of(following)
            if following_names is not None:
                reading = self._reads.submit(self._read, following_names)
            part = self._keyed_chunk(names, raws) if self.shape.unstored_key else chunk_of(raws)
            names = following_names or []
            count, total = count + part.count, total + part.total
            if following_names is None:
                return ChunkDigest.of(count, total)

    def _started_workers(self, keys: int) -> _DigestWorkers | None:
        """The worker processes for a span of about ``keys`` names, if it is worth them (two
        parts or more) and they have started (they start at the first such span; it and
        the next are hashed here meanwhile); None: hash here."""
        if self._worker_count < 1 or self.shape.unstored_key or keys < 2 * _PART:
            return None
        if self._workers is None:
            self._workers = _DigestWorkers(
                self._worker_count,
                self._settings,
                self.shape.table,
                self.shape.compared_columns,
                self._types,
            )
        return self._workers if self._workers.ready else None

    def _parts(self, span: slice) -> Iterator[_Part]:
        """The names of a span of the keys in parts of ``_PART``, an integer key's printed
        part by part (a chunk of 1M keys printed at once raised the peak RSS by about
        100 MiB); with odd names listed, the span's at once (an odd name takes its number's
        place, which a part's edge could split from it)."""
        names = self._names
        if isinstance(names, _IntegerNames) and not names.has_odd:
            for start in range(span.start, span.stop, _PART):
                yield names.printed(slice(start, min(start + _PART, span.stop)))
            return
        listed = names[span]
        for start in range(0, len(listed), _PART):
            yield listed[start : start + _PART]

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        keys = self._in(chunk)
        return keys[len(keys) // 2 - 1] if len(keys) >= 2 else None

    def _keyed_chunk(
        self, names: Sequence[bytes | str], raws: Sequence[bytes | None]
    ) -> ChunkDigest:
        """``DocumentHasher.chunk`` for documents that leave out a key column
        (``redis_columns``): each row hashed with its key, read from its name, by
        ``RowHasher`` (a row at a time: a projection without the key is rare)."""
        head = len(f"{self._prefix}:{self.shape.table}:")
        types = self.shape.key_types
        count = total = 0
        for name, raw in zip(names, raws, strict=True):
            if raw is None:
                continue
            _, shard, row = decode_redis_document(raw)
            if row is None:
                continue
            text = name.decode() if isinstance(name, bytes) else name
            key = key_from_parts(types, text[head:].split(":"))
            row = {**row, **self._key_columns(key)}
            count += 1
            total += int.from_bytes(_row_md5(self._hasher.text(shard, row)).digest()[:8])
        return ChunkDigest.of(count, total)

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        """The hash of each live row of ``chunk`` under each name listed in it, read as
        listed: a name the mirror does not write (``...:0042`` for 42) is a ``SpelledKey``,
        a key of its own (extra: MySQL has none), beside the key's own name if listed."""
        span = self._range(chunk)
        keys: list[Key] = []
        for key, name in zip(self._keys[span], self._names[span], strict=True):
            text = name.decode() if isinstance(name, bytes) else name
            keys.append(key if text == self._name(key) else SpelledKey(key, text))
        return self.key_hashes(keys)

    def key_hashes(self, keys: Sequence[Key]) -> dict[Key, str]:
        return {key: self._hash(shard, row) for key, shard, row in self._documents(keys)}

    def rows(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        found: dict[Key, dict[str, Any]] = {}
        for key, shard, row in self._documents(keys):
            texts = {
                name: _text(column, python_canonical(column, row.get(name)))
                for name, column in zip(self.shape.compared_columns, self._types, strict=True)
            }
            found[key] = {"_shard": shard, **texts}
        return found
