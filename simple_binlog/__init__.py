"""The SimpleBinlog contract: the message model, lossless values and kinds, the type table,
offsets, routing, naming and the error taxonomy. Imports no other package of ours and no driver.
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
