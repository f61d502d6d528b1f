"""The Redis side: one JSON document per key (``simple_binlog.naming``), hashed in Python.

Redis has no engine to hash in, and no key order: the keys under ``<prefix>:<table>:`` are
listed once (SCAN, keys only) and sorted by the typed key, which places each in its chunk;
a chunk's documents are then read with MGETs of ``BATCH`` keys, all of a chunk's in one
pipeline (one round trip), and hashed with the same canonical encoding as the SQL engines
(``validation.canonical.RowHasher``: the per-column work chosen once, the wire values taken
as they are where they are the canonical text already, one md5 per row). A tombstone (a
deleted row's ``row: null``) is not a row. A key listed before it was written is found by
``key_hashes`` (used when settling), which reads keys by name.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import orjson

from cdc_platform import redis_store
from cdc_platform.config import RedisSettings
from simple_binlog.naming import decode_redis_document, redis_key, redis_key_part_value
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode
from validation.canonical import ChunkDigest, RowHasher, python_canonical
from validation.plan import Chunk, Key
from validation.table import TableShape

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


def _text(column: ColumnType, raw: bytes | None) -> str | bytes | None:
    """Canonical bytes as the SQL engines return them: text, but for binaries."""
    if raw is None or column.kind in (Kind.BINARY, Kind.GEOMETRY):
        return raw
    return raw.decode()


class RedisSide:
    name = "redis"

    def __init__(self, settings: RedisSettings, shape: TableShape) -> None:
        self.shape = shape
        self.queries = 0
        self._prefix = settings.key_prefix
        self._address = redis_store.address(settings)
        self._client = redis_store.connect(settings, socket_timeout_s=60)
        self._types = [shape.column_type(n) for n in shape.compared_columns]
        self._hasher = RowHasher(shape.compared_columns, self._types)
        # Listed in a thread: MySQL hashes its first chunks meanwhile (the scan starts its
        # source side at once); the first chunk read here waits for the list.
        self._lister = ThreadPoolExecutor(1, thread_name_prefix=f"validate-{shape.table}-keys")
        self._listing = self._lister.submit(self._list_keys)

    @property
    def _keys(self) -> list[Key]:
        return self._listing.result()[0]

    @property
    def _names(self) -> list[bytes]:
        return self._listing.result()[1]

    def close(self) -> None:
        self._lister.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def _errors(self) -> AbstractContextManager[None]:
        return redis_store.redis_errors(f"the read of {self.shape.table}", self._address)

    def _list_keys(self) -> tuple[list[Key], list[bytes]]:
        """The typed keys, sorted, and their Redis keys as listed (read again by name)."""
        head = f"{self._prefix}:{self.shape.table}:"
        start, width, types = len(head), len(self.shape.key), self.shape.key_types
        if width == 1 and types[0].kind in (Kind.INT, Kind.UINT64, Kind.YEAR, Kind.BIT):
            return self._list_integer_keys(head)
        found: list[tuple[Key, bytes]] = []
        with self._errors():
            for raw in self._client.scan_iter(match=f"{head}*", count=_SCAN_COUNT):
                parts = raw.decode()[start:].split(":")
                if len(parts) == width:
                    found.append((key_from_parts(types, parts), raw))
        found.sort()  # by key (the names only break ties of keys spelled two ways)
        return [key for key, _ in found], [name for _, name in found]

    def _list_integer_keys(self, head: str) -> tuple[list[Key], list[bytes]]:
        """``_list_keys`` for a key of one integer column (the common key): the digits read
        by ``int`` alone, anything else (a sign, an escape) by ``key_from_parts``."""
        start, types = len(head), self.shape.key_types
        numbers: list[int] = []
        names: list[bytes] = []
        with self._errors():
            for raw in self._client.scan_iter(match=f"{head}*", count=_SCAN_COUNT):
                part = raw[start:]
                if part.isdigit():  # ASCII digits only
                    numbers.append(int(part))
                    names.append(raw)
                elif b":" not in part:
                    numbers.append(key_from_parts(types, [part.decode()])[0])
                    names.append(raw)
        # Sorted by the number alone, the names taken along: sorting (number, name) pairs
        # compared tuples and cost several times as much.
        order = sorted(range(len(numbers)), key=numbers.__getitem__)
        return [(numbers[i],) for i in order], [names[i] for i in order]

    def _range(self, chunk: Chunk) -> slice:
        start = 0 if chunk.lo is None else bisect.bisect_right(self._keys, chunk.lo)
        stop = len(self._keys) if chunk.hi is None else bisect.bisect_right(self._keys, chunk.hi)
        return slice(start, stop)

    def _in(self, chunk: Chunk) -> list[Key]:
        return self._keys[self._range(chunk)]

    def _read(self, names: Sequence[bytes | str]) -> list[bytes | None]:
        """The values of ``names``: MGETs of ``BATCH``, one pipeline (one round trip)."""
        with self._errors():
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(names), BATCH):
                pipe.mget(names[start : start + BATCH])
            self.queries += 1
            return [value for batch in pipe.execute() for value in batch]

    def _documents(self, keys: Sequence[Key]) -> Iterable[tuple[Key, str, dict[str, JsonScalar]]]:
        """(key, shard, row) of the live rows among ``keys``."""
        names = [redis_key(self._prefix, self.shape.table, self.shape.key_wire(k)) for k in keys]
        for key, raw in zip(keys, self._read(names), strict=True):
            if raw is None:
                continue
            _, shard, row = decode_redis_document(raw)
            if row is not None:
                yield key, shard, row

    def _hash(self, shard: str, row: dict[str, JsonScalar]) -> str:
        return self._hasher.hexdigest(shard, row)

    def digest(self, chunk: Chunk) -> ChunkDigest:
        # The listed names, not rebuilt from the keys; each row's first 64 bits summed as
        # they come (the document parsed here, not by ``decode_redis_document``: its offset
        # is not needed, and this runs for every row).
        text, count, total = self._hasher.text, 0, 0
        for raw in self._read(self._names[self._range(chunk)]):
            if raw is None:
                continue
            document = orjson.loads(raw)
            row = document["row"]
            if row is not None:
                count += 1
                total += int.from_bytes(hashlib.md5(text(document["_shard"], row)).digest()[:8])  # noqa: S324 - a checksum
        return ChunkDigest.of(count, total)

    def middle_key(self, chunk: Chunk, count: int) -> Key | None:
        keys = self._in(chunk)
        return keys[len(keys) // 2 - 1] if len(keys) >= 2 else None

    def row_hashes(self, chunk: Chunk) -> dict[Key, str]:
        return self.key_hashes(self._in(chunk))

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
