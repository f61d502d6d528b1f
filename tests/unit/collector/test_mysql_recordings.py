"""Offline decoding of binlog files recorded by real MySQL 5.0-9.6 and MariaDB 10.5 servers
(../shared/fixtures/mysql-binlogs/): every rows event decoded natively and by the Python
reference (they must agree), cross-checked against python-mysql-replication reading the same
bytes, and the whole file read through the collector's pipeline (file source → EventDecoder)
with the outcome each file must have. Every disagreement with the library is listed below
with its reason."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from collector import binlog_events as ev
from collector import mysql_events as mev
from collector.binlog_files import BinlogFiles, PositionalTableSchemas
from collector.position import CollectorPosition
from collector.row_decoder import TableDecoders
from collector.work import EventDecoder, RowChanges, TransactionEnd
from simple_binlog.errors import ContractError
from simple_binlog.offsets import OffsetState

from .recordings import FIXTURES, decode_file, fixture_files, no_server


@pytest.fixture(autouse=True, scope="module")
def recordings_present() -> None:
    # The recordings ship beside the checkout (../shared); without them these tests fail
    # instead of skipping, so a run that decoded nothing cannot pass.
    assert FIXTURES.is_dir(), f"the recorded binlogs are missing: {FIXTURES}"


# (file, rows events, rows decoded): what decodes, per file.
DECODED = {
    "binlog-invisible-columns.000001": (3, 3),
    "binlog_56_gtid_reserved_word.000001": (1, 1),
    "binlog_transaction_with_GTID_TAG.000001": (1, 1),
    "bug32407.001": (1, 2),
    "json.binlog.000001": (6, 12),
    "mariadb-bin.000001": (2, 2),
    "minimal_row_metadata.000001": (1, 0),
    "transaction_compression.000001": (1, 1),
    "update-full-row.binlog": (4, 6),
    "update-partial-row.binlog": (4, 5),
    "vector.binlog": (6, 10),
    "ver_5_1_23.001": (3, 5),
    "ver_trunk_row_v2.001": (3, 5),
    "write-full-row.binlog": (3, 6),
    "write-partial-row.binlog": (4, 5),
}

# Rows events the collector refuses, by (file, byte offset): all for one reason, a row image
# that lacks columns (NDB's partial rows; binlog_row_image=MINIMAL): a mirror cannot be kept
# exact from partial rows.
REFUSED = {
    ("json.binlog.000001", 3750),  # PARTIAL_UPDATE_ROWS with binlog_row_image=MINIMAL
    ("minimal_row_metadata.000001", 374),
    ("update-full-row.binlog", 471),
    ("update-partial-row.binlog", 415),
    ("update-partial-row.binlog", 463),
    ("write-full-row.binlog", 428),
    ("write-partial-row.binlog", 415),
    ("write-partial-row.binlog", 453),
}

# Every disagreement with python-mysql-replication 1.0.17, and why:
LIBRARY_DIFFERS = {
    # JSON: the library returns MySQL's binary JSON as a Python dict (and a JsonDiff object
    # for partial updates), which SimpleBinlog's text encoding refuses; the collector carries
    # MySQL's JSON text. Checked instead against the documents in test_json_values below.
    **{("json.binlog.000001", offset): "dict" for offset in (1059, 1409, 1759, 2111, 2612, 3750)},
    # VECTOR (MySQL 9): the library cannot read these table maps at all (optional metadata
    # kind 13, VECTOR_DIMENSIONALITY, is unknown to it, and it then misreads what follows).
    **{("vector.binlog", offset): "table map" for offset in (1085, 1279, 2537, 2731, 3146, 3336)},
}

# Files the reader refuses as a whole, and where.
FILE_ERRORS = {
    "binlog_truncated_event.000001": "at byte 4: the file ends inside an event header",
    "binlog_truncated_prev_gtid_event.000001": "at byte 120: the file ends inside an event",
    "corrupt-relay-bin.000624": "at byte 91204: a QUERY event is corrupt",
}


@pytest.fixture(scope="module")
def decoded() -> dict[str, object]:
    logging.disable(logging.WARNING)
    try:
        return {path.name: decode_file(path) for path in fixture_files()}
    finally:
        logging.disable(logging.NOTSET)


def test_every_rows_event_decodes_as_listed(decoded: dict[str, object]) -> None:
    found = {}
    refused = set()
    for name, result in decoded.items():
        events = result.events  # type: ignore[attr-defined]
        if events:
            found[name] = (len(events), sum(len(e.native or []) for e in events))
        refused |= {(name, e.offset) for e in events if e.error}
    assert found == DECODED
    assert refused == REFUSED


def test_native_decoder_agrees_with_the_python_reference(decoded: dict[str, object]) -> None:
    for name, result in decoded.items():
        for event in result.events:  # type: ignore[attr-defined]
            assert event.native == event.reference, (name, event.offset)


def test_python_mysql_replication_agrees_except_where_listed(decoded: dict[str, object]) -> None:
    differs = {}
    for name, result in decoded.items():
        for event in result.events:  # type: ignore[attr-defined]
            if event.error is not None and event.library_error is None:
                continue  # refused by the collector (REFUSED), read by the library
            if event.library_error is not None:
                reason = "table map" if "table map" in event.library_error else "dict"
                differs[(name, event.offset)] = reason
            elif event.library != event.native:
                differs[(name, event.offset)] = "values"
    assert differs == LIBRARY_DIFFERS


def test_values_against_the_table_definitions(decoded: dict[str, object]) -> None:
    """Values the files' own statements (their CREATE TABLE / INSERT text) say were written."""
    vector = decoded["vector.binlog"].events  # type: ignore[attr-defined]
    first = vector[0].native[0][1]
    assert vector[0].column_types["vector_column"] == "vector"
    assert isinstance(first["vector_column"], str)  # base64 of the float32s
    json_rows = decoded["json.binlog.000001"].events  # type: ignore[attr-defined]
    assert json_rows[0].column_types["@2"] == "json"
    assert json_rows[0].native[0][1]["@2"].startswith(("{", "["))
    maria = decoded["mariadb-bin.000001"]
    assert maria.flavour == "mariadb"  # type: ignore[attr-defined]
    compressed = decoded["transaction_compression.000001"].events  # type: ignore[attr-defined]
    assert compressed[0].table == "test.tb1"


def _pipeline(path: Path) -> tuple[list[RowChanges], BinlogFiles]:
    source = BinlogFiles([str(path)])
    decoder = EventDecoder(
        CollectorPosition("t", "", OffsetState()),
        TableDecoders(PositionalTableSchemas(no_server), lambda _s, _t: True),
        lambda _s, _t: True,
        lambda: None,
        "t",
    )
    return [item for item in decoder.items(source, source) if isinstance(item, RowChanges)], source


@pytest.mark.parametrize("name", sorted(FILE_ERRORS))
def test_truncated_or_corrupt_files_name_file_and_byte(name: str) -> None:
    error = decode_file(FIXTURES / name, with_library=False).error
    assert error is not None and FILE_ERRORS[name] in error
    assert name in error and error.startswith("BinlogFileError")


def test_a_development_build_numbering_its_events_differently_is_refused_by_name() -> None:
    """MySQL 5.2.2-a_drop6p13 (a row-replication development tree) wrote TABLE_MAP as event
    16 and its rows events as 17-19; renumbered as MySQL's reader does, the table map reads
    and the first rows event stops the collector as a pre-GA server's, not as garbage."""
    source = BinlogFiles([str(FIXTURES / "ver_5_1-wl2325_r.001")])
    kinds = [header.type for header, _ in source]
    pre_ga_rows = [mev.PRE_GA_WRITE_ROWS, mev.PRE_GA_UPDATE_ROWS, mev.PRE_GA_DELETE_ROWS]
    assert [k for k in kinds if k not in (ev.QUERY, ev.FORMAT_DESCRIPTION, mev.STOP)] == [
        kind for rows in pre_ga_rows for kind in (ev.TABLE_MAP, rows)
    ]
    assert decode_file(FIXTURES / "ver_5_1-wl2325_r.001", with_library=False).error is None
    with pytest.raises(ContractError, match=r"a rows event of a MySQL 5\.1 pre-GA server"):
        _pipeline(FIXTURES / "ver_5_1-wl2325_r.001")


def test_gtids_reach_the_messages() -> None:
    changes, _ = _pipeline(FIXTURES / "binlog_transaction_with_GTID_TAG.000001")
    gtid = changes[0].context.gtid
    assert gtid is not None
    uuid, tag, number = gtid.split(":")
    assert len(uuid) == 36 and tag and int(number) >= 1
    changes, _ = _pipeline(FIXTURES / "mariadb-bin.000001")
    assert all(c.context.gtid and c.context.gtid.count("-") == 2 for c in changes)


def test_statement_format_data_stops_with_one_sentence() -> None:
    with pytest.raises(ContractError, match="binlog_format=ROW"):
        _pipeline(FIXTURES / "binlog_transaction.000001")


def test_an_incident_stops_the_collector() -> None:
    with pytest.raises(ContractError, match="INCIDENT"):
        _pipeline(FIXTURES / "bug40482-bin.000001")


def test_resuming_after_a_committed_position_skips_what_was_published() -> None:
    path = FIXTURES / "vector.binlog"
    everything, _ = _pipeline(path)
    # A committed transaction end: the transaction after the third rows event ends past it.
    source = BinlogFiles([str(path)])
    ends = [
        item.pos
        for item in EventDecoder(
            CollectorPosition("t", "", OffsetState()),
            TableDecoders(PositionalTableSchemas(no_server), lambda _s, _t: True),
            lambda _s, _t: True,
            lambda: None,
            "t",
        ).items(source, source)
        if isinstance(item, TransactionEnd)
    ]
    committed = next(end for end in ends if end > everything[2].context.pos)
    source = BinlogFiles(
        [str(path)], CollectorPosition("t", "", OffsetState(), file=path.name, pos=committed)
    )
    decoder = EventDecoder(
        CollectorPosition("t", "", OffsetState()),
        TableDecoders(PositionalTableSchemas(no_server), lambda _s, _t: True),
        lambda _s, _t: True,
        lambda: None,
        "t",
    )
    rest = [i for i in decoder.items(source, source) if isinstance(i, RowChanges)]
    assert [c.context.pos for c in rest] == [
        c.context.pos for c in everything if c.context.pos > committed
    ]
    assert 0 < len(rest) < len(everything)
