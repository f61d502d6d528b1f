"""MySQL GTID sets as positions, and partial JSON updates applied to the before image."""

from __future__ import annotations

import pytest

from collector import binlog_events as ev
from collector import mysql_events, mysql_json
from collector.decoding import TableSchema
from collector.mysql_gtid import Gtid, GtidSet
from collector.position import CollectorPosition, advance_gtid_position
from collector.row_decoder import RowDecoder
from simple_binlog.errors import ContractError
from simple_binlog.offsets import OffsetState

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_gtid_sets_merge_intervals_and_keep_tags_apart() -> None:
    position = GtidSet.parse(f"{UUID.upper()}:1-5:7,{UUID}:tag_a:1-2")
    position = position.add(Gtid.parse(f"{UUID}:6")).add(Gtid.parse(f"{UUID}:tag_a:3"))
    assert str(position) == f"{UUID}:1-7:tag_a:1-3"
    assert Gtid.parse(f"{UUID}:tag_a:2") in position
    assert Gtid.parse(f"{UUID}:8") not in position
    assert GtidSet.parse(str(position)) == position


def test_positions_advance_by_flavour() -> None:
    assert advance_gtid_position("0-1-41", "0-1-42") == "0-1-42"  # MariaDB: unchanged
    assert advance_gtid_position(f"{UUID}:1-41", f"{UUID}:42") == f"{UUID}:1-42"
    assert advance_gtid_position(f"{UUID}:1-41", "") == f"{UUID}:1-41"  # anonymous
    stored = CollectorPosition("i", f"{UUID}:1-42", OffsetState(), partial=f"{UUID}:t:3")
    assert CollectorPosition.from_json(stored.to_json()) == stored
    with pytest.raises(ContractError):
        CollectorPosition.from_json({**stored.to_json(), "gtid": f"{UUID}:0-x"})


def test_json_diffs_apply_to_the_before_value() -> None:
    document = mysql_json.parse(b"\x00\x01\x00\x0c\x00\x0b\x00\x01\x00\x05\x01\x00a")
    assert mysql_json.to_text(document) == '{"a": 1}'
    document = mysql_json.apply_diff(document, mysql_json.INSERT, "$.b", [True])
    document = mysql_json.apply_diff(document, mysql_json.REPLACE, "$.a", "x")
    assert mysql_json.to_text(document) == '{"a": "x", "b": [true]}'
    document = mysql_json.apply_diff(document, mysql_json.REMOVE, "$.b[0]", None)
    assert mysql_json.to_text(document) == '{"a": "x", "b": []}'
    with pytest.raises(ContractError):
        mysql_json.apply_diff(document, mysql_json.REPLACE, "$.c.d", 1)


def test_a_partial_update_publishes_the_full_after_value() -> None:
    columns = [ev.BinlogColumn(0, ev.LONG, "id"), ev.BinlogColumn(1, ev.JSON, "doc", length_size=1)]
    table_map = ev.TableMap(1, "s", "t", columns, True)
    schema = TableSchema("s", "t", {"id": "int", "doc": "json"}, ("id",))
    decoder = RowDecoder(table_map, schema)
    body = bytes.fromhex(
        "010000000000"
        "0000"
        "0200"
        "02"
        "03"
        "03"  # ids, flags, no extra, 2 columns, all
        "00"
        "01000000"
        "02"
        "0402"  # before: id 1, doc false
        "01"
        "01"
        "00"
        "01000000"  # after: PARTIAL_JSON, doc partial, id 1
        "08"
        "00"
        "03"
        "242e61"
        "02"
        "0401"  # doc: REPLACE $.a with true... on a literal
    )
    with pytest.raises(ContractError, match="does not apply"):
        mysql_events.partial_update_rows(decoder, body)
    body = bytes.fromhex(
        "010000000000"
        "0000"
        "0200"
        "02"
        "03"
        "03"
        "00"
        "01000000"
        "02"
        "0402"
        "01"
        "01"
        "00"
        "01000000"
        "06"
        "00"
        "01"
        "24"
        "02"
        "0401"  # REPLACE $ (the whole document) with true
    )
    assert mysql_events.partial_update_rows(decoder, body) == [
        ({"id": 1, "doc": "false"}, {"id": 1, "doc": "true"})
    ]
