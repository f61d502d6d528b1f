"""Where the collector's binlog events come from: the one thing that differs between collecting
from a server (``collector.binlog_stream.BinlogStream``, the replication protocol) and from
archived binlog files (``collector.binlog_files.BinlogFiles``, ``cdc-mirror collect
--from-files``). Everything after it — event parsing, row decoding, schema handling, offsets,
publishing — is the same code (``collector.work``, ``collector.service``).

Lifecycle: the collector opens a source at its committed position (``SourceFactory.open``),
iterates it from one reader thread, and calls ``close`` (from another thread) when it stops;
``close`` must wake a reader blocked in the iteration. A source is ``finite`` when its
iteration ending means "everything is read" (files), not "the connection ended" (a server:
the collector reconnects).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from collector.binlog_events import EventHeader
from collector.position import CollectorPosition


class EventSource(Protocol):
    """Raw events in binlog order, checksums cut off, MySQL's compressed transactions expanded;
    ``log_file``/``log_pos``: the file and the end position of the last event handed out."""

    log_file: str
    log_pos: int
    # False while events already read hold another transaction end after the last one
    # handed out (the reader may gather work up to it without waiting).
    drained: bool
    finite: bool

    def __iter__(self) -> Iterator[tuple[EventHeader, bytes]]: ...

    def close(self) -> None: ...


class SourceFactory(Protocol):
    def open(self, start: CollectorPosition) -> EventSource:
        """A source of the events after ``start`` (the whole transaction ``start.partial``
        names, if any: the decoder skips its rows already published)."""
        ...

    def initial_gtid(self) -> str:
        """The GTID position to start from when nothing is stored yet."""
        ...
