"""The collector's MySQL network path (collector.binlog_stream + collector.mysql_dump over
pymysql) against the MySQL STAND-IN (tests/support/mysql_standin.py), which serves recorded
binlog files (../shared/fixtures/mysql-binlogs/) as a MySQL source would. No MySQL server runs
here: these check the protocol as MySQL documents and its source code writes it, and that
the live path publishes exactly what ``collect --from-files`` publishes from the same file."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from cdc_platform.config import CollectorSettings, MySQLInstance
from collector import mysql_dump, mysql_gtid
from collector import mysql_events as mev
from collector.app import FileSources
from collector.binlog_files import PositionalTableSchemas
from collector.metrics import CollectorMetrics
from collector.position import CollectorPosition
from collector.publisher import MemoryPublisher
from collector.service import Collector
from simple_binlog.message import SimpleBinlog
from simple_binlog.offsets import OffsetState
from tests.support.mysql_standin import MySQLStandin, Recording, StandinOptions

from .recordings import FIXTURES, no_server


@pytest.fixture(autouse=True, scope="module")
def recordings_present() -> None:
    # The recordings ship beside the checkout (../shared); without them these tests fail
    # instead of skipping, so a run that decoded nothing cannot pass.
    assert FIXTURES.is_dir(), f"the recorded binlogs are missing: {FIXTURES}"


TAGGED = "binlog_transaction_with_GTID_TAG.000001"
TAGGED_UUID = "55778904-0299-11f1-b1b8-4ef0c4956feb"
# (file, SimpleBinlog messages test_mysql_recordings decodes from it)
SERVED = [
    ("transaction_compression.000001", 1),  # 8.0.32, zstd TRANSACTION_PAYLOAD
    (TAGGED, 1),  # 9.6.0, tagged GTIDs
    ("vector.binlog", 10),  # 9.0.1, VECTOR
]


def _settings(start: str = "current") -> CollectorSettings:
    return CollectorSettings(start=start, heartbeat_s=0.2, commit_interval_ms=0)


def _instance(standin: MySQLStandin) -> MySQLInstance:
    return MySQLInstance(
        name="standin",
        host="127.0.0.1",
        port=standin.port,
        user="cdc",
        password=SecretStr("standin-secret"),
    )


def _from_files(path: Path) -> list[SimpleBinlog]:
    publisher = MemoryPublisher()
    Collector(
        MySQLInstance(name="standin", host="127.0.0.1"),
        _settings(),
        publisher,
        CollectorMetrics(),
        source=FileSources([str(path)]),
        schemas=PositionalTableSchemas(no_server),
    ).run()
    return publisher.committed


class _Live:
    """The real collector on its network path, in a thread, publishing to memory."""

    def __init__(self, standin: MySQLStandin, publisher: MemoryPublisher, start: str) -> None:
        self.stop = threading.Event()
        self.publisher = publisher
        self.error: BaseException | None = None
        self._collector = Collector(
            _instance(standin), _settings(start), publisher, CollectorMetrics(), stop=self.stop
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._collector.run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.error = exc

    def wait_for(self, condition: Callable[[], bool], timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.error is None, self.error
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.02)

    def close(self) -> None:
        self.stop.set()
        self._thread.join(15)
        assert not self._thread.is_alive()


@pytest.fixture
def live() -> Iterator[Callable[..., _Live]]:
    started: list[tuple[_Live, MySQLStandin]] = []

    def start(
        name: str,
        options: StandinOptions | None = None,
        start: str = "current",
        publisher: MemoryPublisher | None = None,
    ) -> _Live:
        standin = MySQLStandin(Recording.load(FIXTURES / name), options)
        collector = _Live(standin, publisher or MemoryPublisher(), start)
        collector.standin = standin  # type: ignore[attr-defined]
        started.append((collector, standin))
        return collector

    yield start
    for collector, standin in started:
        collector.close()
        standin.close()


def _whole_file(name: str) -> MemoryPublisher:
    """A publisher whose stored position reads the whole file: after the GTID set before it
    (PREVIOUS_GTIDS; empty: every transaction), or, without GTIDs, from its first event."""
    recording = Recording.load(FIXTURES / name)
    file = "" if str(recording.executed) else name
    return MemoryPublisher(
        CollectorPosition("standin", str(recording.previous), OffsetState(), file=file, pos=4)
    )


@pytest.mark.parametrize(("name", "messages"), SERVED)
def test_live_mysql_path_publishes_what_the_files_path_publishes(live, name, messages) -> None:
    expected = _from_files(FIXTURES / name)
    assert len(expected) == messages
    collector = live(name, publisher=_whole_file(name))
    collector.wait_for(lambda: len(collector.publisher.committed) >= messages)
    time.sleep(0.3)  # nothing more arrives
    assert collector.publisher.committed == expected
    dump = collector.standin.dumps[0]
    assert dump.heartbeat_ns == 200_000_000


def test_flavour_and_version_come_from_the_handshake(live) -> None:
    collector = live(TAGGED, publisher=_whole_file(TAGGED))
    collector.wait_for(lambda: len(collector.publisher.committed) == 1)
    dump = collector.standin.dumps[0]
    assert dump.command == mysql_dump.COM_BINLOG_DUMP_GTID
    # 9.6: HEARTBEAT_V2 asked for; the GTID set sent in the tagged format.
    assert dump.flags & mysql_dump.USE_HEARTBEAT_EVENT_V2
    assert dump.gtids == f"{TAGGED_UUID}:1-13:mytag:1-2"


def test_start_current_takes_the_set_at_the_binlog_end_and_reads_nothing_older(live) -> None:
    """The set executed at the end SHOW BINARY LOG STATUS names, read from the file's events
    by a dump of its own (``collector.mysql_executed``), then the collector's GTID dump."""
    collector = live(TAGGED)
    collector.wait_for(lambda: collector.standin.heartbeats_sent >= 2)
    scan, dump = collector.standin.dumps[:2]
    assert (scan.command, scan.file, scan.pos) == (mysql_dump.COM_BINLOG_DUMP, TAGGED, 4)
    assert dump.gtids == f"{TAGGED_UUID}:1-13:mytag:1-3"
    assert collector.publisher.committed == []


def test_start_at_a_file_and_position_resumes_after_the_set_executed_there(live) -> None:
    """A MySQL server with GTIDs is read by GTID set: ``start: FILE:POS`` becomes the set
    executed at that transaction boundary, so the transaction after it is read."""
    recording = Recording.load(FIXTURES / TAGGED)
    tagged = next(e for e in recording.events if e.header.type == mev.GTID_TAGGED)
    collector = live(TAGGED, start=f"{TAGGED}:{tagged.offset}")
    collector.wait_for(lambda: len(collector.publisher.committed) == 1)
    assert collector.standin.dumps[-1].gtids == f"{TAGGED_UUID}:1-13:mytag:1-2"


def test_start_inside_a_transaction_is_refused_with_one_sentence(live) -> None:
    recording = Recording.load(FIXTURES / TAGGED)
    tagged = next(e for e in recording.events if e.header.type == mev.GTID_TAGGED)
    collector = live(TAGGED, start=f"{TAGGED}:{tagged.header.log_pos}")
    collector.wait_for(lambda: collector.error is not None)
    assert "is not a transaction boundary" in str(collector.error)


def test_resume_by_gtid_set_after_a_disconnect(live) -> None:
    """The stand-in drops the connection after the tagged transaction; the collector reconnects
    with the set that includes it, and the stand-in serves nothing twice."""
    collector = live(TAGGED, StandinOptions(drop_after_events=6), publisher=_whole_file(TAGGED))
    collector.wait_for(lambda: len(collector.standin.dumps) >= 2, timeout_s=30)
    collector.wait_for(lambda: collector.standin.heartbeats_sent >= 1)
    first, second = collector.standin.dumps[:2]
    assert first.gtids == f"{TAGGED_UUID}:1-13:mytag:1-2"
    assert second.gtids == f"{TAGGED_UUID}:1-13:mytag:1-3"
    assert len(collector.publisher.committed) == 1
    assert collector.publisher.positions[-1].gtid == f"{TAGGED_UUID}:1-13:mytag:1-3"


def test_resume_by_file_and_position_without_gtids(live) -> None:
    """vector.binlog was written with gtid_mode OFF: the collector resumes after a dropped
    connection from the file and position of the last transaction it committed."""
    name = "vector.binlog"
    expected = _from_files(FIXTURES / name)
    collector = live(name, StandinOptions(drop_after_events=9), start=f"{name}:4")
    collector.wait_for(lambda: len(collector.publisher.committed) >= len(expected), timeout_s=30)
    time.sleep(0.3)
    assert collector.publisher.committed == expected
    first, second = collector.standin.dumps[:2]
    assert (first.command, first.file, first.pos) == (mysql_dump.COM_BINLOG_DUMP, name, 4)
    assert second.command == mysql_dump.COM_BINLOG_DUMP and second.pos > 4


def test_a_purged_gtid_set_is_refused_with_the_servers_error(live) -> None:
    """A set lacking what the file's PREVIOUS_GTIDS say was written before: MySQL's 1236."""
    collector = live(TAGGED, start=f"{TAGGED_UUID}:1-13")
    collector.wait_for(lambda: collector.error is not None)
    assert "purged" in str(collector.error)


def test_heartbeats_keep_an_idle_connection(live) -> None:
    """Idle far longer than the silence limit of a 0.2 s heartbeat (5 × 0.2 + 5 s would be
    needed without them: here the limit is never reached because heartbeats arrive)."""
    collector = live(TAGGED, publisher=_whole_file(TAGGED))
    collector.wait_for(lambda: collector.standin.heartbeats_sent >= 10)
    assert len(collector.standin.dumps) == 1  # never reconnected


@pytest.mark.parametrize(
    ("text", "flavour", "version"),
    [
        ("8.0.36", "mysql", (8, 0, 36)),
        ("8.4.3-log", "mysql", (8, 4, 3)),
        ("5.7.44-standin", "mysql", (5, 7, 44)),
        ("9.1.0", "mysql", (9, 1, 0)),
        ("5.5.5-10.11.6-MariaDB-1:10.11.6+maria~ubu2204", "mariadb", (10, 11, 6)),
        ("11.4.2-MariaDB", "mariadb", (11, 4, 2)),
    ],
)
def test_server_version_from_the_handshake(text, flavour, version) -> None:
    server = mysql_dump.ServerVersion.parse(text)
    assert (server.flavour, server.version) == (flavour, version)
    modern = server.is_mysql and version >= (8, 2, 0)
    assert server.status_query == ("SHOW BINARY LOG STATUS" if modern else "SHOW MASTER STATUS")


def test_gtid_set_binary_form_is_what_mysql_writes() -> None:
    """The tagged PREVIOUS_GTIDS MySQL 9.6 wrote is the encoding of its set, byte for byte."""
    recording = Recording.load(FIXTURES / TAGGED)
    previous = next(e for e in recording.events if e.header.type == 35)
    body = previous.raw[19:-4]
    assert mysql_gtid.encode(recording.previous) == body
    untagged = mysql_gtid.GtidSet.parse(f"{TAGGED_UUID}:1-5:9")
    assert mysql_gtid.decode(mysql_gtid.encode(untagged)) == untagged
    assert mysql_gtid.encode(untagged)[:8] == (1).to_bytes(8, "little")


def test_positions_carry_the_mysql_gtid_set() -> None:
    position = CollectorPosition("t", f"{TAGGED_UUID}:1-13", OffsetState())
    after = position.after_transaction(f"{TAGGED_UUID}:mytag:3", "f", 9)
    assert after.gtid == f"{TAGGED_UUID}:1-13:mytag:3"
