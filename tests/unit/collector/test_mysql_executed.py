"""``collector.mysql_executed``: the GTID set a MySQL server had executed at a binlog position,
computed from the recorded files' own events (../shared/fixtures/mysql-binlogs/) and over the
MySQL stand-in's dump, checked against each file's GTID events read independently
(``tests/support/mysql_standin.Recording``)."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from collector import binlog_events as ev
from collector import mysql_events as mev
from collector.binlog_stream import mysql_executed_at
from collector.mysql_executed import executed_at
from collector.mysql_gtid import GtidSet
from collector.reader import server_position
from tests.support.mysql_standin import MySQLStandin, Recording

from .recordings import FIXTURES

# Files whose transactions carry GTIDs, and files with PREVIOUS_GTIDS only.
TRANSACTIONS = [
    "binlog_transaction_with_GTID.000001",  # 5.6.24
    "binlog_transaction_with_GTID_TAG.000001",  # 9.6.0, tagged
]
WITH_GTIDS = [
    *TRANSACTIONS,
    "binlog_transaction_previous_GTID_no_tag.000001",  # 8.0.40, no transaction
    "transaction_compression.000001",  # 8.0.32, an anonymous TRANSACTION_PAYLOAD
]


def _events(recording: Recording) -> Iterator[tuple[ev.EventHeader, bytes]]:
    trailer = 4 if recording.checksum else 0
    for event in recording.events:
        yield event.header, event.raw[ev.HEADER_LENGTH : len(event.raw) - trailer]


def _boundaries(recording: Recording) -> list[tuple[int, GtidSet]]:
    """Each position where a GTID transaction has ended (the end of the event before the next
    GTID event, or of the file), with the set executed there: PREVIOUS_GTIDS and the GTIDs
    of the transactions before it."""
    found: list[tuple[int, GtidSet]] = []
    executed, pending = GtidSet.parse(str(recording.previous)), None
    for event in recording.events:
        gtid = recording.gtid_of(event)
        kind = event.header.type
        if (gtid is not None or kind == mev.ANONYMOUS_GTID) and pending is not None:
            executed = executed.add(pending)
            found.append((event.offset, executed))
        if gtid is not None:
            pending = gtid
    if pending is not None:
        found.append((recording.end, executed.add(pending)))
    return found


@pytest.mark.parametrize("name", WITH_GTIDS)
def test_the_end_of_the_file_is_every_gtid_it_holds(name: str) -> None:
    recording = Recording.load(FIXTURES / name)
    assert executed_at(mev.expanded(_events(recording)), recording.end) == str(
        recording.executed
    )


@pytest.mark.parametrize("name", TRANSACTIONS)
def test_each_transaction_end_is_the_gtids_before_it(name: str) -> None:
    recording = Recording.load(FIXTURES / name)
    boundaries = _boundaries(recording)
    assert boundaries, f"{name} holds no GTID transaction"
    for pos, expected in boundaries:
        assert executed_at(mev.expanded(_events(recording)), pos) == str(expected), pos


@pytest.mark.parametrize("name", TRANSACTIONS)
def test_a_position_inside_a_transaction_has_no_set(name: str) -> None:
    recording = Recording.load(FIXTURES / name)
    gtid_events = [e for e in recording.events if recording.gtid_of(e) is not None]
    for event in gtid_events:  # just after the GTID event: its transaction is open
        assert executed_at(mev.expanded(_events(recording)), event.header.log_pos) is None
    assert executed_at(mev.expanded(_events(recording)), recording.end + 1) is None


def _connect(standin: MySQLStandin) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1", port=standin.port, user="cdc", password="standin-secret"
    )


@pytest.mark.parametrize("name", WITH_GTIDS[1:])
def test_server_position_pairs_the_end_with_the_set_read_from_the_dump(name: str) -> None:
    recording = Recording.load(FIXTURES / name)
    with MySQLStandin(recording) as standin:
        connection = _connect(standin)
        with connection.cursor() as cursor:
            here = server_position(cursor)
            # The connection the dump used is open again for the caller's next query.
            cursor.execute("SELECT @@version")
            assert cursor.fetchone() is not None
        connection.close()
        assert (here.file, here.pos, here.gtid) == (
            recording.name,
            recording.end,
            str(recording.executed),
        )
        scan = standin.dumps[-1]
        # A file dump from the file's start, under a server id no collector uses.
        assert (scan.file, scan.pos) == (recording.name, 4)
        assert scan.server_id >= 1 << 31


def test_a_position_inside_a_transaction_is_refused_over_the_dump() -> None:
    recording = Recording.load(FIXTURES / "binlog_transaction_with_GTID_TAG.000001")
    inside = next(e for e in recording.events if recording.gtid_of(e) is not None)
    with MySQLStandin(recording) as standin:
        connection = _connect(standin)
        assert mysql_executed_at(connection, recording.name, inside.header.log_pos) is None
        connection.close()
