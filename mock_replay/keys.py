"""Replay of a set of keys: the rows MySQL holds now for exactly those keys, as MOCK events.

This is how a repair reaches every mirror (``cdc-mirror validate --repair`` calls it with the
keys validation found): the rows go through the normal stream, so the lake, the warehouse and
Redis converge the same way, and each store's version guard decides as for any replayed row.
It never writes to a store and only reads MySQL.

* A key MySQL holds is published as a MOCK ``INSERT`` of its row (its own shard), encoded as
  the history replay encodes rows (``RowEncoder``) and governed by the policy set in force.
* A key no shard holds (extra in a target) is published as a MOCK ``DELETE`` whose content is
  the key with every other column NULL (its before-image is not known), under the table's
  first shard (``shards[0]``): the mirrors key rows by the logical table, so any of its
  shards names it.
* Every event carries ``mock_offset(query start)``: the read's start minus five minutes, so a
  change the collector publishes after the read always wins over the repair, and a repair
  never moves a key back. The other side of that rule: a key whose target copy carries a
  change of the last five minutes is left alone by the guard (the caller re-validates and
  reports it). ``executeTime`` is the read's time: a repair is a change of today.
* One Kafka transaction per shard holds the shard's events and a ``TableProgress`` record of
  run ``repair-…`` in the replay-progress topic (``KafkaChunkPublisher``), so a read_committed
  reader sees all of a shard's events or none.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot, snapshot_from_settings
from governance.source import start_governance
from mock_replay.condition import quote_identifier
from mock_replay.errors import ReplayError
from mock_replay.plan import (
    RowEncoder,
    TableShape,
    _select_expression,
    binlog_spelling,
    decode_key,
    encode_key,
)
from mock_replay.progress import TableProgress
from mock_replay.publish import KafkaChunkPublisher, KafkaProgressStore
from mock_replay.source import MySQLSource
from simple_binlog.message import EventType, SimpleBinlog, Source
from simple_binlog.offsets import mock_offset
from simple_binlog.routing import partition_key
from simple_binlog.values import JsonScalar

WireKey = tuple[JsonScalar, ...]
KEYS_PER_QUERY = 500


@dataclass(frozen=True, slots=True)
class KeyReplay:
    """What a key replay published: rows re-published, keys deleted, their offset, the run."""

    run_id: str
    rows: int
    deletes: int
    offset: int


def _where_keys(key: Sequence[str], count: int) -> str:
    columns = [quote_identifier(c) for c in key]
    if len(columns) == 1:
        return f"{columns[0]} IN ({', '.join(['%s'] * count)})"
    one = f"({', '.join(['%s'] * len(columns))})"
    return f"({', '.join(columns)}) IN ({', '.join([one] * count)})"


def key_rows_query(shape: TableShape, keys: Sequence[WireKey]) -> tuple[str, tuple[object, ...]]:
    """The SELECT of the rows of ``keys`` (wire form) in one shard, and its parameters."""
    columns = ", ".join(_select_expression(n, s) for n, s in shape.column_types.items())
    params = [value for key in keys for value in decode_key(shape, key)]
    table = f"{quote_identifier(shape.schema)}.{quote_identifier(shape.table)}"
    # Only quoted identifiers are formatted in; the key values are bound.
    sql = f"SELECT {columns} FROM {table} WHERE {_where_keys(shape.key, len(keys))}"  # noqa: S608
    return sql, tuple(params)


def replay_keys(
    settings: Settings,
    instance: str,
    shards: Sequence[tuple[str, str]],
    key_columns: Sequence[str],
    keys: Sequence[WireKey],
    now: dt.datetime | None = None,
    config: ConfigSnapshot | None = None,
) -> KeyReplay:
    """Publish the current MySQL row of each of ``keys`` (wire form, ``key_columns`` order)
    of the logical table made of ``shards``, or a DELETE for a key no shard holds."""
    if not shards:
        raise ReplayError("a key replay needs at least one shard of the table.")
    now = now or dt.datetime.now(dt.UTC)
    run_id = f"repair-{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    query_start = int(now.timestamp())
    offset = mock_offset(query_start)
    execute_ms = int(now.timestamp() * 1000)
    config = config or snapshot_from_settings(settings)
    wanted = list(dict.fromkeys(tuple(k) for k in keys))
    # The policy set before anything is read: without it nothing may be published.
    governance = start_governance(settings, instance, poll=False)
    source = MySQLSource(config.instance(instance).login())
    publisher = KafkaChunkPublisher(settings.kafka, instance, run_id)
    rows = deletes = 0
    try:
        KafkaProgressStore(settings.kafka, instance).ensure_topics()
        publisher.start()
        found: set[WireKey] = set()
        shapes = [_keyed(source.shape(schema, table), key_columns) for schema, table in shards]
        for shape in shapes:
            encoder = RowEncoder(shape, offset, execute_ms)
            template = encoder.message_for({})
            policies = governance.at_boundary() if governance is not None else None
            values: list[bytes] = []
            for start in range(0, len(wanted), KEYS_PER_QUERY):
                batch = wanted[start : start + KEYS_PER_QUERY]
                for row in source.read_chunk(*key_rows_query(shape, batch), shape.name):
                    content = encoder.content(row)
                    found.add(encoder.key_of(content))
                    if policies is None:
                        values.append(encoder.encode(content))
                        continue
                    governed, _, types = policies.govern(template, content)
                    values.append(replace(template, content=governed, column_types=types).encode())
            if values:
                _publish(publisher, shape, values, run_id)
                rows += len(values)
        # Keys no shard holds: a DELETE of the key alone, under the first shard.
        first = shapes[0]
        gone = [key for key in wanted if _normal(first, key) not in found]
        if gone:
            _publish(
                publisher, first, [_delete(first, k, offset, execute_ms) for k in gone], run_id
            )
            deletes = len(gone)
        return KeyReplay(run_id, rows, deletes, offset)
    finally:
        publisher.close()
        source.close()
        if governance is not None:
            governance.close()


def _keyed(shape: TableShape, key_columns: Sequence[str]) -> TableShape:
    missing = [c for c in key_columns if c not in shape.column_types]
    if missing:
        raise ReplayError(f"key column {missing[0]!r} is not a column of {shape.name}.")
    return replace(shape, key=tuple(key_columns))


def _normal(shape: TableShape, key: WireKey) -> WireKey:
    """A caller's wire key as ``RowEncoder.key_of`` spells it (decoded and encoded again)."""
    return tuple(encode_key(shape, decode_key(shape, key)))


def _delete(shape: TableShape, key: WireKey, offset: int, execute_ms: int) -> bytes:
    # Every column, NULL but the key: a message with fewer columns would read to the
    # warehouse mirror as columns dropped in MySQL.
    content: dict[str, JsonScalar] = dict.fromkeys(shape.column_types)
    content.update(zip(shape.key, key, strict=True))
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=execute_ms,
        event_type=EventType.DELETE,
        schema_name=shape.schema,
        table_name=shape.table,
        source=Source.MOCK,
        content=content,
        column_types={name: binlog_spelling(spec) for name, spec in shape.column_types.items()},
        primary_keys=shape.key,
    ).encode()


def _publish(
    publisher: KafkaChunkPublisher, shape: TableShape, values: list[bytes], run_id: str
) -> None:
    progress = TableProgress(
        run_id=run_id, table=shape.name, key_columns=shape.key, estimated_rows=len(values)
    )
    progress = progress.advanced(tuple([None] * len(shape.key)), len(values)).finished("done")
    publisher.publish(partition_key(shape.schema, shape.table), values, progress)
