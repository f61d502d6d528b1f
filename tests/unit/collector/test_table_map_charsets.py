"""ENUM and SET labels in a table map are text in the column's character set, which MariaDB
lists after the labels; and a table the filter excludes has its columns never parsed (a map
this reader could not read must not stop the collection of other tables)."""

from __future__ import annotations

import pytest

from collector import binlog_events as ev
from collector.row_decoder import TableDecoders
from collector.schema import BinlogTableSchemas
from simple_binlog.errors import ContractError

LATIN1_SWEDISH_CI, UTF8MB4_GENERAL_CI = 8, 45


def tlv(kind: int, payload: bytes) -> bytes:
    assert len(payload) < 0xFB
    return bytes([kind, len(payload)]) + payload


def labels(*values: bytes) -> bytes:
    return bytes([len(values)]) + b"".join(bytes([len(v)]) + v for v in values)


def enum_set_map(encoding: str, collation: int) -> bytes:
    """``kind ENUM('café','thé')``, ``tags SET('crème','brûlée')`` in ``encoding``."""
    body = (42).to_bytes(6, "little") + b"\x01\x00"
    body += b"\x04shop\x00" + b"\x05menus\x00"
    body += b"\x02" + bytes([ev.STRING, ev.STRING])
    body += b"\x04" + bytes([ev.ENUM, 1, ev.SET, 1])
    body += b"\x00"  # NULL bitmap
    body += tlv(4, b"\x04kind\x04tags")
    body += tlv(5, labels(*(v.encode(encoding) for v in ("crème", "brûlée"))))
    body += tlv(6, labels(*(v.encode(encoding) for v in ("café", "thé"))))
    body += tlv(10, bytes([collation]))
    return body


@pytest.mark.parametrize(
    ("encoding", "collation"), [("latin1", LATIN1_SWEDISH_CI), ("utf-8", UTF8MB4_GENERAL_CI)]
)
def test_enum_and_set_labels_are_decoded_in_their_character_set(encoding, collation) -> None:
    parsed = ev.table_map_event(enum_set_map(encoding, collation))
    kind, tags = parsed.columns
    assert (kind.type, kind.name, kind.enum_values) == (ev.ENUM, "kind", ["café", "thé"])
    assert (tags.type, tags.name, tags.set_values) == (ev.SET, "tags", ["crème", "brûlée"])


def test_labels_without_a_listed_character_set_are_utf8() -> None:
    body = enum_set_map("utf-8", UTF8MB4_GENERAL_CI)
    without_charset = body[: -len(tlv(10, b"\x00"))]
    parsed = ev.table_map_event(without_charset)
    assert parsed.columns[0].enum_values == ["café", "thé"]


def test_table_names_are_read_without_the_columns() -> None:
    assert ev.table_names(enum_set_map("latin1", LATIN1_SWEDISH_CI)) == ("shop", "menus")


def test_an_excluded_table_map_is_not_parsed() -> None:
    def no_lookup(schema: str, table: str):
        raise AssertionError("an excluded table was looked up")

    decoders = TableDecoders(BinlogTableSchemas(no_lookup), lambda schema, table: False)
    unreadable = enum_set_map("latin1", LATIN1_SWEDISH_CI)[:30] + b"\xff\xff"
    with pytest.raises(ContractError):
        ev.table_map_event(unreadable)  # what an included table would have met
    decoders.on_table_map(unreadable)
    assert decoders.for_rows(unreadable) is None  # its rows are passed over
