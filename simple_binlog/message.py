"""The SimpleBinlog message: one JSON document per changed row.

Seed fields (all required): ``binlogOffset``, ``executeTime``, ``eventType``, ``schemaName``,
``tableName``, ``source``, ``version``, ``content``. Added so the stream is auditable and
idempotent: ``primaryKeys``, ``columnTypes`` (decodes ``content`` losslessly, see
``simple_binlog.values``), ``beforeContent`` (the before-image of an UPDATE, so a primary-key
change can delete the old key) and ``position`` (server id, binlog file/position, GTID, the
row's index inside its rows event; absent for MOCK rows, which come from a SELECT).

``content`` holds the after-image for INSERT/UPDATE and the before-image for DELETE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from simple_binlog.errors import ContractError
from simple_binlog.values import JsonScalar, decode, parse_column_type

FORMAT_VERSION = 1


class EventType(StrEnum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


class Source(StrEnum):
    BINLOG = "BINLOG"
    MOCK = "MOCK"


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """Where a row came from. ``row_index`` counts rows inside the rows event (0-based), so a
    transaction split across several Kafka transactions can resume at the exact row."""

    server_id: int
    file: str
    pos: int
    row_index: int
    gtid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "serverId": self.server_id,
            "file": self.file,
            "pos": self.pos,
            "rowIndex": self.row_index,
            "gtid": self.gtid,
        }


@dataclass(frozen=True, slots=True)
class SimpleBinlog:
    binlog_offset: int
    execute_time: int
    event_type: EventType
    schema_name: str
    table_name: str
    source: Source
    content: dict[str, JsonScalar]
    column_types: dict[str, str]
    primary_keys: tuple[str, ...]
    before_content: dict[str, JsonScalar] | None = None
    position: BinlogPosition | None = None
    version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "version": self.version,
            "binlogOffset": self.binlog_offset,
            "executeTime": self.execute_time,
            "eventType": self.event_type.value,
            "schemaName": self.schema_name,
            "tableName": self.table_name,
            "source": self.source.value,
            "primaryKeys": list(self.primary_keys),
            "columnTypes": self.column_types,
            "content": self.content,
        }
        if self.before_content is not None:
            document["beforeContent"] = self.before_content
        if self.position is not None:
            document["position"] = self.position.to_json()
        document.update(self.extra)
        return document

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())

    def decoded_content(self) -> dict[str, Any]:
        """``content`` as canonical Python values (Decimal, datetime, bytes, …)."""
        return {
            name: decode(parse_column_type(self.column_types[name]), value, name)
            for name, value in self.content.items()
        }

    def primary_key_values(self) -> tuple[JsonScalar, ...]:
        return tuple(self.content[name] for name in self.primary_keys)


_REQUIRED = (
    "version",
    "binlogOffset",
    "executeTime",
    "eventType",
    "schemaName",
    "tableName",
    "source",
    "content",
)
_KNOWN = {*_REQUIRED, "primaryKeys", "columnTypes", "beforeContent", "position"}


def _require(document: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = document[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ContractError(f"SimpleBinlog field '{name}' has the wrong type ({value!r}).")
    return value


def _row(document: dict[str, Any], name: str) -> dict[str, JsonScalar]:
    row: dict[str, JsonScalar] = _require(document, name, dict)
    for column, value in row.items():
        if value is not None and not isinstance(value, int | float | str):
            raise ContractError(
                f"SimpleBinlog field '{name}.{column}' must be a JSON scalar, not {value!r}."
            )
    return row


def _position(raw: Any) -> BinlogPosition | None:
    if raw is None:
        return None
    try:
        return BinlogPosition(
            server_id=int(raw["serverId"]),
            file=str(raw["file"]),
            pos=int(raw["pos"]),
            row_index=int(raw["rowIndex"]),
            gtid=raw.get("gtid"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ContractError(f"SimpleBinlog field 'position' is malformed ({exc}).") from None


def from_json(document: Any) -> SimpleBinlog:
    """Validate a decoded document. Raises ContractError with one sentence naming the field."""
    if not isinstance(document, dict):
        raise ContractError("a SimpleBinlog message must be a JSON object.")
    missing = [name for name in _REQUIRED if name not in document]
    if missing:
        raise ContractError(f"SimpleBinlog message lacks the required field '{missing[0]}'.")
    version = _require(document, "version", int)
    if version != FORMAT_VERSION:
        raise ContractError(
            f"SimpleBinlog version {version} is not supported (this build reads {FORMAT_VERSION})."
        )
    offset = _require(document, "binlogOffset", int)
    if offset <= 0:
        raise ContractError(f"SimpleBinlog field 'binlogOffset' must be positive ({offset}).")
    try:
        event_type = EventType(document["eventType"])
        source = Source(document["source"])
    except ValueError as exc:
        raise ContractError(f"SimpleBinlog message has {exc}.") from None
    content = _row(document, "content")
    column_types = document.get("columnTypes") or {}
    if not isinstance(column_types, dict):
        raise ContractError("SimpleBinlog field 'columnTypes' must be an object.")
    untyped = [name for name in content if name not in column_types]
    if column_types and untyped:
        raise ContractError(f"SimpleBinlog column '{untyped[0]}' has no entry in 'columnTypes'.")
    primary_keys = document.get("primaryKeys") or []
    if not isinstance(primary_keys, list) or any(
        not isinstance(k, str) or k not in content for k in primary_keys
    ):
        raise ContractError("SimpleBinlog field 'primaryKeys' must name columns of 'content'.")
    before = _row(document, "beforeContent") if document.get("beforeContent") is not None else None
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=_require(document, "executeTime", int),
        event_type=event_type,
        schema_name=_require(document, "schemaName", str),
        table_name=_require(document, "tableName", str),
        source=source,
        content=content,
        column_types=column_types,
        primary_keys=tuple(primary_keys),
        before_content=before,
        position=_position(document.get("position")),
        version=version,
        extra={k: v for k, v in document.items() if k not in _KNOWN},
    )


def decode_message(payload: bytes) -> SimpleBinlog:
    """Parse and validate one Kafka message value."""
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ContractError(f"a SimpleBinlog message is not valid JSON ({exc}).") from None
    return from_json(document)
