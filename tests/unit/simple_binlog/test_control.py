"""Control messages of the contract: told apart by key, the heartbeat's value round-trips."""

from __future__ import annotations

import orjson
import pytest

from simple_binlog.control import (
    HEARTBEAT_KEY,
    WatermarkHeartbeat,
    decode_heartbeat,
    is_control,
    is_heartbeat,
)
from simple_binlog.errors import ContractError
from simple_binlog.message import decode_message
from simple_binlog.routing import partition_key

HEARTBEAT = WatermarkHeartbeat("local", 1_795_333_500_000, 1_795_333_510_000, "bin.000004", 77)


def test_a_heartbeat_key_is_a_control_key_and_no_row_key_is() -> None:
    assert is_control(HEARTBEAT_KEY) and is_heartbeat(HEARTBEAT_KEY)
    assert is_control(b"\x00a later kind") and not is_heartbeat(b"\x00a later kind")
    for schema, table in [("shop", "orders"), ("", ""), (" x", "\u00e9t\u00e9"), ("a.b", "c")]:
        key = partition_key(schema, table)
        assert not is_control(key) and not is_heartbeat(key)
    assert not is_control(None) and not is_control(b"")


def test_heartbeat_round_trip_and_document() -> None:
    assert decode_heartbeat(HEARTBEAT.encode()) == HEARTBEAT
    document = orjson.loads(HEARTBEAT.encode())
    assert document == {
        "version": 1,
        "control": "heartbeat",
        "instance": "local",
        "executeTime": 1_795_333_500_000,
        "sourceTimeMs": 1_795_333_510_000,
        "position": {"file": "bin.000004", "pos": 77},
    }


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"{not json",
        b"[]",
        orjson.dumps({**HEARTBEAT.to_json(), "control": "other"}),
        orjson.dumps({**HEARTBEAT.to_json(), "version": 2}),
        orjson.dumps({**HEARTBEAT.to_json(), "executeTime": "soon"}),
        orjson.dumps({**HEARTBEAT.to_json(), "executeTime": True}),
        orjson.dumps({k: v for k, v in HEARTBEAT.to_json().items() if k != "instance"}),
    ],
)
def test_a_malformed_heartbeat_is_one_contract_error(value: bytes) -> None:
    with pytest.raises(ContractError, match="heartbeat is malformed"):
        decode_heartbeat(value)


def test_a_heartbeat_is_never_a_row() -> None:
    # A reader that decodes the value without asking is_control first gets a contract error
    # (a dead letter), never a row to store.
    with pytest.raises(ContractError):
        decode_message(HEARTBEAT.encode())
