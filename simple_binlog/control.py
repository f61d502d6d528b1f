"""Control messages: what an instance's topic carries besides row changes.

A control message is told apart by its Kafka key alone: it starts with a NUL byte, which no
MySQL schema or table name can hold, so no row's key (``schema.table``) ever does. Every
reader asks ``is_control(key)`` before decoding a value and skips what it is true for: it is
never a row, never dead-lettered, never stored. A reader that does not know a kind of control
message (one added later) skips it the same way.

The one kind today is the **watermark heartbeat** (key ``\\x00heartbeat``), published by the
collector that leads an instance while the source is idle, once to every partition of the
instance's topic and in a Kafka transaction of its own. Its ``executeTime`` is a promise:
every row change of that instance whose ``executeTime`` is earlier has been published before
this message, in every partition. A lake writer takes it as that partition's event time
(readiness advances with time, not only with rows); every other reader ignores it. Value::

    {"version": 1, "control": "heartbeat", "instance": "local", "executeTime": 1795333500000,
     "sourceTimeMs": 1795333510000, "position": {"file": "mariadb-bin.000004", "pos": 8407693}}

``sourceTimeMs`` is the source's clock when it was asked, ``position`` the binlog position the
collector had published up to (both for people and audits; readers need only executeTime).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from simple_binlog.errors import ContractError

CONTROL_KEY_PREFIX = b"\x00"
HEARTBEAT_KEY = CONTROL_KEY_PREFIX + b"heartbeat"
HEARTBEAT = "heartbeat"
HEARTBEAT_VERSION = 1


def is_control(key: bytes | None) -> bool:
    """Whether a Kafka record of an instance topic is a control message (skip it: not a row)."""
    return key is not None and key[:1] == CONTROL_KEY_PREFIX


def is_heartbeat(key: bytes | None) -> bool:
    """Whether a Kafka record is a watermark heartbeat (``decode_heartbeat`` reads it)."""
    return key == HEARTBEAT_KEY


@dataclass(frozen=True, slots=True)
class WatermarkHeartbeat:
    """Every row of ``instance`` with an executeTime before ``watermark_ms`` is published."""

    instance: str
    watermark_ms: int
    source_time_ms: int
    file: str
    pos: int

    def to_json(self) -> dict[str, Any]:
        return {
            "version": HEARTBEAT_VERSION,
            "control": HEARTBEAT,
            "instance": self.instance,
            "executeTime": self.watermark_ms,
            "sourceTimeMs": self.source_time_ms,
            "position": {"file": self.file, "pos": self.pos},
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())


def decode_heartbeat(value: bytes | None) -> WatermarkHeartbeat:
    """The heartbeat of a record whose key ``is_heartbeat``; ContractError if malformed."""
    try:
        document = orjson.loads(value or b"")
        if document.get("control") != HEARTBEAT or document.get("version") != HEARTBEAT_VERSION:
            raise ValueError("not a version 1 heartbeat")
        position = document.get("position") or {}
        watermark = document["executeTime"]
        if isinstance(watermark, bool) or not isinstance(watermark, int):
            raise ValueError("executeTime is not an integer")
        return WatermarkHeartbeat(
            instance=str(document["instance"]),
            watermark_ms=watermark,
            source_time_ms=int(document["sourceTimeMs"]),
            file=str(position.get("file", "")),
            pos=int(position.get("pos", 0)),
        )
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ContractError(f"a watermark heartbeat is malformed ({exc}).") from None
