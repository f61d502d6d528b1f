"""The Redis side: one JSON document per key (``simple_binlog.naming``), hashed in Python.

Redis has no engine to hash in, and no key order: the keys under ``<prefix>:<table>:`` are
listed once (SCAN, keys only) and sorted by the typed key, which places each in its chunk;
a chunk's documents are then read with pipelined MGETs and hashed with the same canonical
encoding as the SQL engines (``validation.canonical.python_row_hash``). A tombstone (a
deleted row's ``row: null``) is not a row. A key listed before it was written is found by
``key_hashes`` (used when settling), which reads keys by name.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from cdc_platform.config import RedisSettings
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.naming import decode_redis_document, redis_key, redis_key_part_value
from simple_binlog.values import ColumnType, JsonScalar, Kind, decode
from validation.canonical import ChunkDigest, python_canonical, python_row_hash
from validation.plan import Chunk, Key
from validation.table import TableShape

BATCH = 1000


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
        self._client = redis.Redis.from_url(
            settings.url.get_secret_value(), socket_timeout=60, socket_connect_timeout=10
        )
        self._types = [shape.column_type(n) for n in shape.compared_columns]
        self._keys = self._list_keys()

    def close(self) -> None:
        self._client.close()

    def _fail(self, exc: redis.exceptions.RedisError) -> ServiceUnavailableError:
        return ServiceUnavailableError(f"reading {self.shape.table} from Redis failed ({exc}).")

    def _list_keys(self) -> list[Key]:
        head = f"{self._prefix}:{self.shape.table}:"
        width = len(self.shape.key)
        found: list[Key] = []
        try:
            for raw in self._client.scan_iter(match=f"{head}*", count=BATCH):
                parts = raw.decode()[len(head) :].split(":")
                if len(parts) == width:
                    found.append(key_from_parts(self.shape.key_types, parts))
        except redis.exceptions.RedisError as exc:
            raise self._fail(exc) from None
        return sorted(found)

    def _in(self, chunk: Chunk) -> list[Key]:
        start = 0 if chunk.lo is None else bisect.bisect_right(self._keys, chunk.lo)
        stop = len(self._keys) if chunk.hi is None else bisect.bisect_right(self._keys, chunk.hi)
        return self._keys[start:stop]

    def _documents(self, keys: Sequence[Key]) -> Iterable[tuple[Key, str, dict[str, JsonScalar]]]:
        """(key, shard, row) of the live rows among ``keys``: MGETs of ``BATCH``, pipelined."""
        names = [redis_key(self._prefix, self.shape.table, self.shape.key_wire(k)) for k in keys]
        try:
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(names), BATCH):
                pipe.mget(names[start : start + BATCH])
            self.queries += 1
            values = [value for batch in pipe.execute() for value in batch]
        except redis.exceptions.RedisError as exc:
            raise self._fail(exc) from None
        for key, raw in zip(keys, values, strict=True):
            if raw is None:
                continue
            _, shard, row = decode_redis_document(raw)
            if row is not None:
                yield key, shard, row

    def _hash(self, shard: str, row: dict[str, JsonScalar]) -> str:
        wires = [row.get(name) for name in self.shape.compared_columns]
        return python_row_hash(shard, self._types, wires)

    def digest(self, chunk: Chunk) -> ChunkDigest:
        return ChunkDigest.of_rows(list(self.row_hashes(chunk).values()))

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
