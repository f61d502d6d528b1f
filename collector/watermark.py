"""Watermark heartbeats: how the collector tells readers that a quiet source has moved on.

A heartbeat claims "every row change of this instance with an executeTime before T is
published" (``simple_binlog.control``). A binlog event's time is the second its *statement
started* (binlog event headers hold whole seconds), not when it was committed, so the
source's clock alone is not a safe T: a transaction begun at 23:59:50 and committed at
00:00:30 writes events stamped 23:59:50 after midnight. The claim is made safe in two steps:

1. **Probe** the source (``probe_source``): its clock, the start of its oldest open InnoDB
   transaction, the longest-running statement of any other session, then its binlog end
   position, in that order. T is the earliest of these times (``watermark_ms``), minus one
   second for the sources' whole-second resolution. Any event written to the binlog after
   the position was read belongs to a statement or transaction that was running when the
   times were read (so it is stamped ≥ T) or began afterwards (stamped ≥ the clock ≥ T).
2. **Publish** T only once the collector has read *and committed* the binlog up to the probed
   position (``HeartbeatSchedule.publishable``): everything written before the probe is then
   in Kafka, ahead of the heartbeat in every partition.

Not covered (documented in docs/simplebinlog.md): sessions that set ``@@timestamp`` by hand
(a replicated or piped stream from elsewhere) stamp events with any time they like; their
rows then arrive as late rows (written and counted, never dropped). Probing needs the PROCESS
privilege (to see other sessions); without it no heartbeat is published.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.reader import server_position
from simple_binlog.errors import CdcMirrorError

# Sessions whose TIME says nothing about the events they may still write are left out: idle
# ones (an open transaction of theirs is in INNODB_TRX), daemons, and binlog dump and replica
# I/O threads (readers). Everything else counts, replica SQL threads included (conservative).
PROBE_SQL = (
    "SELECT UNIX_TIMESTAMP(),"
    " (SELECT UNIX_TIMESTAMP(MIN(trx_started)) FROM information_schema.INNODB_TRX),"
    " (SELECT MAX(TIME) FROM information_schema.PROCESSLIST"
    "  WHERE ID <> CONNECTION_ID()"
    "  AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump', 'Binlog Dump GTID', 'Slave_IO'))"
)


@dataclass(frozen=True, slots=True)
class Probe:
    """What the source said at one moment: the heartbeat time it allows and where its binlog
    ended (the collector must have committed up to there before publishing it)."""

    watermark_ms: int
    source_time_ms: int
    file: str
    pos: int


def watermark_ms(
    now_s: float, oldest_transaction_s: float | None, longest_running_s: int | None
) -> int:
    """T of a probe: the earliest time an event written from now on can carry, in whole
    seconds (as binlog events are stamped), one second earlier for the truncation of
    ``trx_started`` and the process list's TIME."""
    earliest = now_s
    if oldest_transaction_s is not None:
        earliest = min(earliest, oldest_transaction_s)
    if longest_running_s is not None:
        earliest = min(earliest, now_s - longest_running_s)
    return (math.floor(earliest) - 1) * 1000


def probe_source(cursor: Any) -> Probe:
    """Ask the source (a connection of its own, not the binlog stream's). The times first,
    the binlog position last (see the module docstring for why that order is safe)."""
    # In UTC: trx_started is a DATETIME in the session's zone, which a DST change would skew.
    cursor.execute("SET time_zone = '+00:00'")
    cursor.execute(PROBE_SQL)
    row = cursor.fetchone()
    if row is None or len(row) != 3 or row[0] is None:
        raise CdcMirrorError(f"the source answered the watermark probe with {row!r}.")
    now, oldest, longest = row
    where = server_position(cursor)
    now_s = float(now)
    return Probe(
        watermark_ms=watermark_ms(
            now_s,
            None if oldest is None else float(oldest),
            None if longest is None else int(longest),
        ),
        source_time_ms=int(now_s * 1000),
        file=where.file,
        pos=where.pos,
    )


def binlog_reached(file: str, pos: int, target_file: str, target_pos: int) -> bool:
    """Whether binlog position (file, pos) is at or past (target_file, target_pos). Files of
    one server share a base name and differ in a numeric extension, which may grow a digit."""

    def order(name: str) -> tuple[int, str]:
        _base, _dot, number = name.rpartition(".")
        return (int(number), name) if number.isdigit() else (-1, name)

    if file == target_file:
        return pos >= target_pos
    return bool(file) and order(file) > order(target_file)


class HeartbeatSchedule:
    """When to probe the source and when a probe may be published. Pure; the clock is
    injected. One probe is pending at a time; a new one is taken ``interval_s`` after the
    last heartbeat was published (or the schedule began)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last = clock()
        self.pending: Probe | None = None

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        """A new period (from the web admin): the next probe is due ``value`` after the
        last heartbeat."""
        self._interval_s = value

    def wants_probe(self) -> bool:
        return self.pending is None and self._clock() - self._last >= self._interval_s

    def probed(self, probe: Probe) -> None:
        self.pending = probe

    def publishable(self, committed_file: str, committed_pos: int) -> Probe | None:
        """The pending probe, once the binlog is committed up to its position (it is then
        handed out once and the interval starts again)."""
        probe = self.pending
        if probe is None or not binlog_reached(
            committed_file, committed_pos, probe.file, probe.pos
        ):
            return None
        self.pending = None
        self._last = self._clock()
        return probe

    def failed(self) -> None:
        """A probe failed: try again an interval from now."""
        self.pending = None
        self._last = self._clock()

    def reset(self) -> None:
        """Forget a pending probe (the stream starts again; its position is re-read)."""
        self.pending = None
