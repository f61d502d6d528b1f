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

One ``EVALSHA`` applies up to ``mirror.redis_keys_per_call`` keys atomically. The script is
loaded once; after a Redis restart or ``SCRIPT FLUSH`` (``NOSCRIPT``) it is loaded again.
All keys of one call must live on one node: this targets a single Redis (or a primary with
replicas), not Redis Cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import orjson
import redis

from mirror.applier import ApplyResult, ChangeApplier
from mirror.plan import RowChange, latest_per_key, project
from simple_binlog.config import MirrorSettings, RedisSettings, TableMirror
from simple_binlog.errors import ServiceUnavailableError
from simple_binlog.values import JsonScalar

log = logging.getLogger(__name__)

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


def _key_part(value: JsonScalar) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text.replace("%", "%25").replace(":", "%3A")


def redis_key(prefix: str, table: str, key: Sequence[JsonScalar]) -> str:
    return ":".join([prefix, table, *(_key_part(part) for part in key)])


def encode_value(change: RowChange, columns: Sequence[str] | None) -> bytes:
    """The stored document; the offset first and zero-padded (see the module docstring)."""
    row = None if change.deleted else project(change.row, columns)
    return b"".join(
        (
            b'{"_offset":"',
            str(change.offset).zfill(OFFSET_WIDTH).encode(),
            b'","_shard":',
            orjson.dumps(change.shard),
            b',"row":',
            orjson.dumps(row),
            b"}",
        )
    )


def decode_value(raw: bytes) -> tuple[int, str, dict[str, JsonScalar] | None]:
    """(offset, shard, row or None for a tombstone) of a stored value."""
    document = orjson.loads(raw)
    return int(document["_offset"]), document["_shard"], document["row"]


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
        self._client = redis.Redis.from_url(
            redis_settings.url.get_secret_value(), socket_timeout=30, socket_connect_timeout=10
        )
        try:
            self._sha: str = self._client.script_load(APPLY_SCRIPT)
        except redis.exceptions.RedisError as exc:
            raise ServiceUnavailableError(f"Redis cannot be reached ({exc}).") from None

    def apply_batch(self, changes: Iterable[RowChange]) -> ApplyResult:
        plan = latest_per_key(changes)
        keys: list[str] = []
        values: list[bytes] = []
        ttls: list[int] = []
        for table, latest in plan.tables.items():
            mirror = self._tables.get(table)
            columns = mirror.redis_columns if mirror else None
            row_ttl_ms = (mirror.redis_ttl_s or 0) * 1000 if mirror else 0
            for change in latest.values():
                keys.append(redis_key(self._prefix, table, change.key))
                values.append(encode_value(change, columns))
                ttls.append(self._tombstone_ttl_ms if change.deleted else row_ttl_ms)
        applied = stale = 0
        step = self._keys_per_call
        for start in range(0, len(keys), step):
            chunk = slice(start, start + step)
            layout = [
                n for v, t in zip(values[chunk], ttls[chunk], strict=True) for n in (len(v), t)
            ]
            done, rejected = self._run(keys[chunk], orjson.dumps(layout), b"".join(values[chunk]))
            applied += done
            stale += rejected
        return ApplyResult(applied, stale, plan.superseded)

    def _run(self, keys: list[str], layout: bytes, values: bytes) -> tuple[int, int]:
        try:
            try:
                result = self._client.evalsha(self._sha, len(keys), *keys, layout, values)
            except redis.exceptions.NoScriptError:
                # Redis restarted or its script cache was flushed: load it again, once.
                log.info("Redis lost the apply script (NOSCRIPT); loading it again")
                self._sha = self._client.script_load(APPLY_SCRIPT)
                result = self._client.evalsha(self._sha, len(keys), *keys, layout, values)
        except redis.exceptions.ConnectionError as exc:
            raise ServiceUnavailableError(f"Redis cannot be reached ({exc}).") from None
        except redis.exceptions.RedisError as exc:
            raise ServiceUnavailableError(f"Redis refused a mirror batch ({exc}).") from None
        return int(result[0]), int(result[1])

    def close(self) -> None:
        self._client.close()
