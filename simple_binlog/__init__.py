"""The SimpleBinlog contract shared by every cdc-mirror component.

The message model, lossless values, ordering offsets, shard routing, Kafka naming and config.
Components import from here, never from each other.
"""

from simple_binlog.errors import CdcMirrorError, ConfigError, ContractError
from simple_binlog.message import (
    BinlogPosition,
    EventType,
    SimpleBinlog,
    Source,
    decode_message,
    from_json,
)
from simple_binlog.offsets import OffsetGenerator, OffsetState
from simple_binlog.routing import LogicalTable, ShardRouter, ShardRule

__all__ = [
    "BinlogPosition",
    "CdcMirrorError",
    "ConfigError",
    "ContractError",
    "EventType",
    "LogicalTable",
    "OffsetGenerator",
    "OffsetState",
    "ShardRouter",
    "ShardRule",
    "SimpleBinlog",
    "Source",
    "decode_message",
    "from_json",
]
