"""``SimpleBinlog.encode()``, byte for byte, at a fraction of the cost per row. Pure logic.

``SimpleBinlog.to_json`` builds a dict per row holding the table's constant fields — schema,
table, source, key columns and the ``columnTypes`` object of every column — and orjson
serialises all of it again for every row. Here those constant fields are serialised once per
table (per ``column_types`` object) and each row only adds its own parts: offset, time, event
type, ``content``, ``beforeContent`` and ``position``. The result is the same bytes as
``message.encode()`` (``simple_binlog/message.py`` stays the contract):
``tests/unit/collector/test_encoder.py`` compares both on every column type, and a message
with ``extra`` fields (which may reorder or replace keys) is left to ``encode()`` itself.
"""

from __future__ import annotations

import orjson

from simple_binlog.message import BinlogPosition, SimpleBinlog

_dumps = orjson.dumps


class MessageEncoder:
    def __init__(self, limit: int = 4096) -> None:
        # id(column_types) → (the dict itself, so the id stays its own while cached;
        # schema, table, source, primary keys; their serialised form).
        self._tables: dict[int, tuple[object, tuple[object, ...], bytes]] = {}
        self._limit = limit

    def encode(self, message: SimpleBinlog) -> bytes:
        if message.extra:
            return message.encode()
        column_types = message.column_types
        identity = (
            message.schema_name,
            message.table_name,
            message.source,
            message.primary_keys,
        )
        cached = self._tables.get(id(column_types))
        if cached is None or cached[0] is not column_types or cached[1] != identity:
            cached = (column_types, identity, self._table_part(message))
            if len(self._tables) >= self._limit:
                self._tables.clear()
            self._tables[id(column_types)] = cached
        parts = [
            b'{"version":%d,"binlogOffset":%d,"executeTime":%d,"eventType":"%s",'
            % (
                message.version,
                message.binlog_offset,
                message.execute_time,
                message.event_type.value.encode(),
            ),
            cached[2],
            b',"content":',
            _dumps(message.content),
        ]
        if message.before_content is not None:
            parts += (b',"beforeContent":', _dumps(message.before_content))
        if message.position is not None:
            parts += (b',"position":', _position(message.position))
        parts.append(b"}")
        return b"".join(parts)

    @staticmethod
    def _table_part(message: SimpleBinlog) -> bytes:
        """``"schemaName":…,"columnTypes":{…}`` as ``to_json`` orders them."""
        document = {
            "schemaName": message.schema_name,
            "tableName": message.table_name,
            "source": message.source.value,
            "primaryKeys": list(message.primary_keys),
            "columnTypes": message.column_types,
        }
        return _dumps(document)[1:-1]


def _position(position: BinlogPosition) -> bytes:
    return b'{"serverId":%d,"file":%b,"pos":%d,"rowIndex":%d,"gtid":%b}' % (
        position.server_id,
        _dumps(position.file),
        position.pos,
        position.row_index,
        _dumps(position.gtid),
    )
