"""The collector's own binlog reading on hand-built events: table maps, row images, and the
order-dependent state (GTID, split-transaction skip, offsets) of ``EventDecoder``.

The integration test ``test_fast_decoder.py`` compares against python-mysql-replication on a
real server; these pin the formats down without one.
"""

from __future__ import annotations

import struct

import pytest

from collector import binlog_events as ev
from collector.decoding import TableSchema
from collector.position import CollectorPosition
from collector.row_decoder import RowDecoder, TableDecoders
from collector.schema import BinlogTableSchemas
from collector.work import EventDecoder, Heartbeat, RowChanges, SchemaChange, TransactionEnd
from simple_binlog.errors import ContractError
from simple_binlog.offsets import OffsetState

TABLE_ID = 77
UTF8MB4 = 45


def lenenc(value: int) -> bytes:
    assert value < 0xFB
    return bytes([value])


def table_map(
    schema="shop", table="orders", table_id=TABLE_ID, names=("id", "name", "amount", "created")
) -> bytes:
    """id INT UNSIGNED, name VARCHAR(20) utf8mb4, amount DECIMAL(10,2), created DATETIME(3)."""
    types = bytes([ev.LONG, ev.VARCHAR, ev.NEWDECIMAL, ev.DATETIME2])
    metadata = struct.pack("<H", 80) + bytes([10, 2]) + bytes([3])
    body = table_id.to_bytes(6, "little") + b"\x01\x00"
    body += bytes([len(schema)]) + schema.encode() + b"\x00"
    body += bytes([len(table)]) + table.encode() + b"\x00"
    body += lenenc(len(types)) + types + lenenc(len(metadata)) + metadata
    body += bytes([0b1110])  # nullable columns: all but id
    signedness = bytes([0b10000000])  # numeric columns in order: id (unsigned), amount
    body += bytes([1]) + lenenc(len(signedness)) + signedness
    charsets = lenenc(UTF8MB4)
    body += bytes([2]) + lenenc(len(charsets)) + charsets
    column_names = b"".join(lenenc(len(n)) + n.encode() for n in names)
    body += bytes([4]) + lenenc(len(column_names)) + column_names
    body += bytes([8, 1, 0])  # SIMPLE_PRIMARY_KEY: column 0
    return body


def packed_decimal(text: str, precision: int = 10, scale: int = 2) -> bytes:
    """MySQL's DECIMAL binary format, written independently of the decoder."""
    negative = text.startswith("-")
    whole, _, fraction = text.lstrip("-").partition(".")
    sizes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    intg = precision - scale
    whole = whole.rjust(intg, "0")
    fraction = fraction.ljust(scale, "0")
    out = b""
    head = intg % 9
    if head:
        out += int(whole[:head]).to_bytes(sizes[head], "big")
    for i in range(head, intg, 9):
        out += int(whole[i : i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(fraction[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(fraction[scale - scale % 9 :]).to_bytes(sizes[scale % 9], "big")
    out = bytes([out[0] ^ 0x80]) + out[1:]
    return bytes(b ^ 0xFF for b in out) if negative else out


def datetime2(y, mo, d, h, mi, s, micros, fsp=3) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    packed = ((ymd << 17) | (h << 12) | (mi << 6) | s) + 0x8000000000
    width = (fsp + 1) // 2
    unit = {1: 10_000, 2: 100, 3: 1}[width]
    return packed.to_bytes(5, "big") + (micros // unit).to_bytes(width, "big")


def row(id_, name, amount, created) -> bytes:
    nulls = 0
    values = struct.pack("<I", id_)
    if name is None:
        nulls |= 0b10
    else:
        values += bytes([len(name.encode())]) + name.encode()
    values += packed_decimal(amount) + datetime2(*created)
    return bytes([nulls]) + values


def rows_event(*rows: bytes, update: bool = False, table_id: int = TABLE_ID) -> bytes:
    body = table_id.to_bytes(6, "little") + b"\x01\x00" + lenenc(4) + b"\x0f"
    if update:
        body += b"\x0f"
    return body + b"".join(rows)


def schema_of(table: ev.TableMap) -> TableSchema:
    from collector.binlog_types import column_type

    return TableSchema(
        table.schema,
        table.table,
        {c.name: column_type(c) for c in table.columns},
        tuple(c.name for c in table.columns if c.is_primary),
    )


def test_table_map_carries_names_types_and_key() -> None:
    parsed = ev.table_map_event(table_map())
    assert (parsed.table_id, parsed.schema, parsed.table) == (TABLE_ID, "shop", "orders")
    assert schema_of(parsed) == TableSchema(
        "shop",
        "orders",
        {
            "id": "int unsigned",
            "name": "varchar",
            "amount": "decimal(10,2)",
            "created": "datetime(3)",
        },
        ("id",),
    )
    assert parsed.columns[1].encoding == "utf-8"


@pytest.mark.parametrize(
    "amount", ["0.00", "123.45", "-123.45", "99999999.99", "-0.01", "12345678.90"]
)
def test_rows_decode_to_canonical_values(amount) -> None:
    parsed = ev.table_map_event(table_map())
    decoder = RowDecoder(parsed, schema_of(parsed))
    body = rows_event(
        row(4_000_000_000, "héllo", amount, (2026, 11, 21, 12, 34, 56, 789_000)),
        row(1, None, amount, (1000, 1, 1, 0, 0, 0, 0)),
    )
    assert decoder.rows(body, ev.WRITE_ROWS_V1) == [
        (
            None,
            {
                "id": 4_000_000_000,
                "name": "héllo",
                "amount": amount,
                "created": "2026-11-21 12:34:56.789",
            },
        ),
        (None, {"id": 1, "name": None, "amount": amount, "created": "1000-01-01 00:00:00.000"}),
    ]


def test_update_rows_pair_before_and_after() -> None:
    parsed = ev.table_map_event(table_map())
    decoder = RowDecoder(parsed, schema_of(parsed))
    before = row(1, "a", "1.00", (2026, 1, 1, 0, 0, 0, 0))
    after = row(2, "b", "2.00", (2026, 1, 2, 0, 0, 0, 0))
    [(old, new)] = decoder.rows(rows_event(before, after, update=True), ev.UPDATE_ROWS_V1)
    assert (old["id"], new["id"], old["name"], new["name"]) == (1, 2, "a", "b")


def test_a_partial_row_image_is_refused() -> None:
    parsed = ev.table_map_event(table_map())
    decoder = RowDecoder(parsed, schema_of(parsed))
    body = (
        TABLE_ID.to_bytes(6, "little")
        + b"\x01\x00"
        + lenenc(4)
        + b"\x01"
        + b"\x00"
        + struct.pack("<I", 1)
    )
    with pytest.raises(ContractError, match="binlog_row_image=FULL"):
        decoder.rows(body, ev.WRITE_ROWS_V1)


class FakeStream:
    log_file = "mariadb-bin.000001"
    log_pos = 0


def event(kind: int, body: bytes, timestamp: int = 1_800_000_000) -> tuple[ev.EventHeader, bytes]:
    FakeStream.log_pos += 100
    return ev.EventHeader(timestamp, kind, 1, len(body) + 19, FakeStream.log_pos), body


def gtid(sequence: int) -> bytes:
    return struct.pack("<QIB", sequence, 0, 0)


def query(text: str, schema: str = "shop") -> bytes:
    return (
        struct.pack("<IIBHH", 1, 0, len(schema), 0, 0) + schema.encode() + b"\x00" + text.encode()
    )


def decoder_from(position: CollectorPosition, include=lambda s, t: True) -> EventDecoder:
    def no_lookup(schema: str, table: str) -> TableSchema:
        raise ContractError("no server here")

    decoders = TableDecoders(BinlogTableSchemas(no_lookup), include)
    return EventDecoder(position, decoders, include, decoders.forget, "local")


def transaction(sequence: int, rows: int, per_event: int = 2) -> list[tuple[ev.EventHeader, bytes]]:
    events = [event(ev.MARIADB_GTID, gtid(sequence)), event(ev.TABLE_MAP, table_map())]
    for start in range(0, rows, per_event):
        chunk = [
            row(sequence * 1000 + i, "x", "1.00", (2026, 1, 1, 0, 0, 0, 0))
            for i in range(start, min(rows, start + per_event))
        ]
        events.append(event(ev.WRITE_ROWS_V1, rows_event(*chunk)))
    events.append(event(ev.XID, struct.pack("<Q", sequence)))
    return events


def test_work_items_follow_the_binlog() -> None:
    events = [
        *transaction(5, 3),
        event(ev.MARIADB_GTID, gtid(6)),
        event(ev.QUERY, query("ALTER TABLE orders ADD COLUMN z INT")),
        event(ev.HEARTBEAT, b"mariadb-bin.000001"),
    ]
    items = list(
        decoder_from(CollectorPosition("local", "0-1-4", OffsetState())).items(events, FakeStream)
    )
    kinds = [type(item) for item in items]
    assert kinds == [
        RowChanges,
        RowChanges,
        TransactionEnd,
        SchemaChange,
        TransactionEnd,
        Heartbeat,
    ]
    offsets = [m.binlog_offset for item in items[:2] for m in item.messages]
    assert offsets == [1_800_000_000_000_001, 1_800_000_000_000_002, 1_800_000_000_000_003]
    assert items[2].gtid == "0-1-5"
    ddl = items[3].record
    assert (ddl["verb"], ddl["tableName"], ddl["afterBinlogOffset"]) == (
        "ALTER",
        "orders",
        offsets[-1],
    )
    assert [m.position.row_index for item in items[:2] for m in item.messages] == [0, 1, 0]


def test_a_split_transaction_resumes_after_the_rows_already_published() -> None:
    events = transaction(9, 7, per_event=3)  # rows events of 3, 3 and 1 rows
    clean = [
        m
        for i in decoder_from(CollectorPosition("local", "0-1-8", OffsetState())).items(
            events, FakeStream
        )
        if isinstance(i, RowChanges)
        for m in i.messages
    ]
    assert len(clean) == 7
    # Published before a crash: 4 rows of GTID 0-1-9, the last with this offset.
    resumed_at = CollectorPosition(
        "local", "0-1-8", OffsetState(clean[3].binlog_offset), partial="0-1-9", rows_done=4
    )
    items = [
        i for i in decoder_from(resumed_at).items(events, FakeStream) if isinstance(i, RowChanges)
    ]
    resumed = [m for item in items for m in item.messages]
    assert [m.to_json() for m in resumed] == [m.to_json() for m in clean[4:]]
    assert [(i.rows_before, i.first) for i in items] == [(3, 1), (6, 0)]


def test_excluded_tables_are_not_decoded_and_unknown_ids_are_errors() -> None:
    events = transaction(3, 2)
    items = list(
        decoder_from(
            CollectorPosition("local", "0-1-2", OffsetState()), include=lambda s, t: t != "orders"
        ).items(events, FakeStream)
    )
    assert [type(i) for i in items] == [TransactionEnd]
    orphan = [event(ev.MARIADB_GTID, gtid(4)), event(ev.WRITE_ROWS_V1, rows_event(table_id=99))]
    with pytest.raises(ContractError, match="table id 99"):
        list(
            decoder_from(CollectorPosition("local", "0-1-3", OffsetState())).items(
                orphan, FakeStream
            )
        )
