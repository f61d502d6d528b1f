"""The GTID set a MySQL server had executed at one binlog file and position.

MariaDB translates a binlog position itself (``BINLOG_GTID_POS``); MySQL has no such function,
and ``gtid_executed`` read beside ``SHOW BINARY LOG STATUS`` is a set of another moment: a
transaction committing in between lands in one and not the other, and a reader that stops at
the position and resumes after the set then reads it twice or never. So the set is computed
the way the server itself would: the file's PREVIOUS_GTIDS plus the GTID of every transaction
that ends at or before the position, from the file's own events (``executed_at``, pure), read
through a dump of that file from its start (``collector.binlog_stream.mysql_executed_at``).
"""

from __future__ import annotations

from collections.abc import Iterable

from collector import binlog_events as ev
from collector import mysql_events as mev
from collector.mysql_gtid import Gtid, GtidSet

_OPENS = (mev.GTID, mev.GTID_TAGGED, mev.ANONYMOUS_GTID)
_SKIPPED = (ev.HEARTBEAT, mev.HEARTBEAT_V2)


def _begins_transaction(header: ev.EventHeader, body: bytes) -> bool:
    if header.type in _OPENS:
        return True
    return header.type == ev.QUERY and ev.query_event(body).query.strip().upper() == "BEGIN"


def executed_at(events: Iterable[tuple[ev.EventHeader, bytes]], pos: int) -> str | None:
    """The GTID set executed at byte ``pos`` of the binlog file whose events (from its first,
    compressed transactions expanded) are ``events``; None when ``pos`` is not the end of a
    whole transaction (or of the file's header events) in that file.

    Stops reading at the first event that reaches ``pos`` with no transaction open, so a dump
    of the file being written is not read past the position asked for. The events of an
    expanded TRANSACTION_PAYLOAD all carry the payload's end as their position."""
    executed = GtidSet()
    pending: Gtid | None = None
    open_transaction = False
    for header, body in events:
        kind = header.type
        if kind in _SKIPPED or header.log_pos == 0:  # heartbeats, the dump's first ROTATE
            continue
        if kind == ev.ROTATE:  # the file's last event: the next ones are another file's
            at_end = header.log_pos == pos and not open_transaction
            return str(executed) if at_end else None
        if kind == mev.PREVIOUS_GTIDS:
            executed = GtidSet.parse(mev.previous_gtids(body))
        elif _begins_transaction(header, body):
            if kind in _OPENS:
                text = mev.gtid_text(kind, body)
                pending = Gtid.parse(text) if text else None
            open_transaction = True
        elif open_transaction and mev.ends_transaction(header, body):
            if pending is not None:
                executed = executed.add(pending)
            pending, open_transaction = None, False
        if header.log_pos > pos:
            return None
        if header.log_pos == pos and not open_transaction:
            return str(executed)
    return None
