"""The Redis applier: one string value per row, versioned by binlogOffset.

Key layout::

    <redis.key_prefix>:<logical table>:<key part>[:<key part>…]

Key parts are the key column values in key order (``TableMirror.key``, else MySQL's primary
key), as text (numbers in decimal, strings as they are), with ``%`` and ``:`` escaped as
``%25`` and ``%3A`` so a composite key can never read as another one. Example:
``cdc:ordercenter_orderinfo:18446744073709551615``.

Value: one JSON document whose first member is the offset, always 20 digits::

    {"_offset":"00001795333510000001","_shard":"ordercenter_02.orderinfo_01","row":{…}}

``row`` holds the row (lossless SimpleBinlog values, projected to ``TableMirror.redis_columns``
when set); a DELETE leaves a tombstone ``{"_offset":…,"_shard":…,"row":null}`` that expires
after ``mirror.tombstone_ttl_s``. A row expires after ``TableMirror.redis_ttl_s`` if set.
Schema evolution needs nothing here: ``row`` carries whatever columns the change had, so a new
MySQL column appears with the row's next change (until then it is absent, read as NULL).

Why a fixed-width string offset at a fixed place: binlogOffsets exceed 2^53 and Lua numbers
are doubles, so the script compares the stored offset (``GETRANGE key 12 31``, no JSON
parsing) with the new one as equal-length digit strings, which orders them exactly.

One ``EVALSHA`` applies up to ``mirror.redis_keys_per_call`` keys atomically; a batch's calls
are pipelined (each sent as soon as it is packed, the replies read at the end: one round trip
per batch, and Redis runs a call while the next is packed). The script is loaded once; after a
Redis restart or ``SCRIPT FLUSH`` (``NOSCRIPT``) it is loaded again and the refused calls sent
again.
All keys of one call must live on one node: this targets a single Redis (or a primary with
replicas), not Redis Cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from redis.exceptions import NoScriptError

from cdc_platform import redis_store
from cdc_platform.config import MirrorSettings, RedisSettings, TableMirror
from mirror.applier import ApplyResult, ChangeApplier
from mirror.plan import BatchPlan, RowChange, latest_per_key, project
from simple_binlog.naming import decode_redis_document, redis_key, redis_key_part

log = logging.getLogger(__name__)

# The key and document layout is the contract's (``simple_binlog.naming``), so readers of
# Redis (validation) need not import the mirror.
_key_part = redis_key_part
decode_value = decode_redis_document
__all__ = [
    "APPLY_SCRIPT",
    "OFFSET_WIDTH",
    "RedisApplier",
    "decode_value",
    "encode_value",
    "redis_key",
]

OFFSET_WIDTH = 20  # bytes 12..31 of every value: after {"_offset":"

# KEYS: the keys. ARGV[1]: a JSON array [length1, ttl_ms1, length2, ttl_ms2, …] (ttl 0: no
# expiry); ARGV[2]: the values concatenated. Why not one argument per value: packing and
# parsing thousands of arguments costs more than the guard itself, on both sides.
# Returns {applied, stale}. SET without PX clears an earlier TTL (a tombstone's).
APPLY_SCRIPT = """
local layout = cjson.decode(ARGV[1])
local values = ARGV[2]
local position = 1
local applied, stale = 0, 0
for i, key in ipairs(KEYS) do
  local length = layout[2 * i - 1]
  local ttl = layout[2 * i]
  local value = string.sub(values, position, position + length - 1)
  position = position + length
  local stored = redis.call('GETRANGE', key, 12, 31)
  if stored == '' or stored < string.sub(value, 13, 32) then
    if ttl > 0 then
      redis.call('SET', key, value, 'PX', ttl)
    else
      redis.call('SET', key, value)
    end
    applied = applied + 1
  else
    stale = stale + 1
  end
end
return {applied, stale}
"""


def _shard_member(shard: str) -> bytes:
    """``","_shard":"<shard>"`` (what follows the offset digits in every value)."""
    return b'","_shard":' + orjson.dumps(shard)


def encode_value(change: RowChange, columns: Sequence[str] | None) -> bytes:
    """The stored document; the offset first and zero-padded (see the module docstring)."""
    return _encode(change, columns, _shard_member(change.shard))


def _encode(change: RowChange, columns: Sequence[str] | None, shard_member: bytes) -> bytes:
    if change.deleted:
        row = b"null"
    elif columns is None:
        # No copy when it is a dict already (it is, decoded from JSON): orjson takes it as is.
        data = change.row
        row = orjson.dumps(data if isinstance(data, dict) else dict(data))
    else:
        row = orjson.dumps(project(change.row, columns))
    # One formatting operation per value: this runs for every key of every batch.
    return b'{"_offset":"%020d%b,"row":%b}' % (change.offset, shard_member, row)


class RedisApplier(ChangeApplier):
    def __init__(
        self,
        redis_settings: RedisSettings,
        mirror_settings: MirrorSettings,
        tables: Sequence[TableMirror],
    ) -> None:
        self._prefix = redis_settings.key_prefix
        self._tombstone_ttl_ms = mirror_settings.tombstone_ttl_s * 1000
        self._keys_per_call = mirror_settings.redis_keys_per_call
        self._tables = {t.name: t for t in tables}
        self._address = redis_store.address(redis_settings)
        self._client = redis_store.connect(redis_settings, socket_timeout_s=30)
        with redis_store.redis_errors("loading the apply script", self._address):
            self._sha: str = self._client.script_load(APPLY_SCRIPT)

    def apply_batch(self, changes: Iterable[RowChange]) -> ApplyResult:
        plan = latest_per_key(changes)
        with redis_store.redis_errors("a mirror batch", self._address):
            applied, stale = self._apply(plan)
        return ApplyResult(applied, stale, plan.superseded)

    def _apply(self, plan: BatchPlan) -> tuple[int, int]:
        """Each call is sent as soon as it is packed and the replies are read at the end, so
        Redis runs one call's script while the next is being packed, and a batch costs one
        round trip. Each call is atomic on its own; a batch that fails part-way is applied
        again by the caller, which the offset guard makes harmless."""
        calls: list[_Call] = []
        with _Connection(self._client) as connection:
            for call in self._calls(plan):
                connection.send(call.packed(self._sha))
                calls.append(call)
            replies = connection.replies(len(calls))
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            # Redis restarted or its script cache was flushed: load it again, once.
            log.info("Redis lost the apply script (NOSCRIPT); loading it again")
            self._sha = self._client.script_load(APPLY_SCRIPT)
            with _Connection(self._client) as connection:
                for index in missing:
                    connection.send(calls[index].packed(self._sha))
                for index, reply in zip(missing, connection.replies(len(missing)), strict=True):
                    replies[index] = reply
        applied = stale = 0
        for reply in replies:
            if isinstance(reply, redis.exceptions.RedisError):
                raise reply
            applied += int(reply[0])
            stale += int(reply[1])
        return applied, stale

    def _calls(self, plan: BatchPlan) -> Iterator[_Call]:
        """The batch's keys in calls of at most ``mirror.redis_keys_per_call``."""
        keys: list[bytes] = []
        values: list[bytes] = []
        layout: list[int] = []
        step = self._keys_per_call
        for table, latest in plan.tables.items():
            mirror = self._tables.get(table)
            columns = mirror.redis_columns if mirror else None
            row_ttl_ms = (mirror.redis_ttl_s or 0) * 1000 if mirror else 0
            key_prefix = f"{self._prefix}:{table}:"
            shard_members: dict[str, bytes] = {}
            for key, change in latest.items():
                if len(key) == 1:
                    key_text = key_prefix + _key_part(key[0])
                else:
                    key_text = key_prefix + ":".join(_key_part(part) for part in key)
                keys.append(key_text.encode())
                member = shard_members.get(change.shard)
                if member is None:
                    member = shard_members[change.shard] = _shard_member(change.shard)
                value = _encode(change, columns, member)
                values.append(value)
                layout += (len(value), self._tombstone_ttl_ms if change.deleted else row_ttl_ms)
                if len(keys) == step:
                    yield _Call.of(keys, layout, values)
                    keys, values, layout = [], [], []
        if keys:
            yield _Call.of(keys, layout, values)

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True, slots=True)
class _Call:
    """One EVALSHA of the apply script, packed for the wire but for the script's SHA1, so a
    reload after NOSCRIPT (a new SHA1 only if the script changed) reuses the packing."""

    arguments: int
    tail: bytes  # the RESP of the arguments after the SHA1

    @classmethod
    def of(cls, keys: list[bytes], layout: list[int], values: list[bytes]) -> _Call:
        # Why not redis-py's packing: for thousands of keys per call it cost more than the
        # script running them.
        tail = [b"%d" % len(keys), *keys, orjson.dumps(layout), b"".join(values)]
        return cls(len(tail) + 2, b"".join([b"$%d\r\n%b\r\n" % (len(a), a) for a in tail]))

    def packed(self, sha: str) -> list[bytes]:
        head = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%b\r\n" % (self.arguments, len(sha), sha.encode())
        return [head, self.tail]


class _Connection:
    """A connection of the client's pool for sending calls now and reading replies later.
    A refused call's reply is its exception (the other replies are still read, keeping the
    connection in step); on any other error the connection is closed, as replies may be
    left unread on it."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._connection = self._pool.get_connection()

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self._connection.disconnect()  # type: ignore[no-untyped-call]  # untyped in redis-py
        self._pool.release(self._connection)

    def send(self, packed: list[bytes]) -> None:
        self._connection.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]

    def replies(self, count: int) -> list[Any]:
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(self._connection.read_response())
            except redis.exceptions.ResponseError as exc:
                replies.append(exc)
        return replies
