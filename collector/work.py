"""Raw binlog events → the collector's work items, in binlog order.

``EventDecoder`` holds everything that depends only on the order of the events: the GTID of
the current transaction, the table maps and their row decoders, the rows already published
of a split transaction (skipped after a restart), and the offset generator. Its output —
rows as SimpleBinlog messages, transaction ends, schema changes, heartbeats — is what the
publishing loop (``collector.service``) commits to Kafka. The two run in separate threads,
so decoding goes on while a Kafka transaction commits; nothing here touches Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from collector import binlog_events as ev
from collector import mysql_events as mev
from collector.ddl import TRANSACTION_STARTS, TableDdl, parse_table_ddl
from collector.decoding import EventContext, TableSchema, build_messages
from collector.position import CollectorPosition
from collector.row_decoder import TableDecoders
from simple_binlog.errors import ConfigError, ContractError
from simple_binlog.message import EventType, SimpleBinlog
from simple_binlog.offsets import OffsetGenerator

log = logging.getLogger(__name__)


# Not frozen: one of these is made per rows event and per MySQL transaction, and a frozen
# dataclass's __init__ costs several times a plain one's. Nothing changes them after creation.
@dataclass(slots=True)
class RowChanges:
    """The messages of one rows event, from its row ``first`` on (earlier rows of a split
    transaction were published before a restart)."""

    messages: list[SimpleBinlog]
    table: TableSchema
    context: EventContext
    rows_before: int  # rows of collected tables in this MySQL transaction before the event
    first: int


@dataclass(slots=True)  # not frozen, as RowChanges
class TransactionEnd:
    gtid: str
    file: str
    pos: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class SchemaChange:
    key: str
    record: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The server is idle: a good moment to commit what is open. ``file``/``pos``: where the
    stream stood (the server had nothing after it to send)."""

    file: str = ""
    pos: int = 0


WorkItem = RowChanges | TransactionEnd | SchemaChange | Heartbeat


class Positioned(Protocol):
    """Where the stream stands: the file and the end position of the last event read."""

    log_file: str
    log_pos: int


class EventDecoder:
    def __init__(
        self,
        start: CollectorPosition,
        decoders: TableDecoders,
        include: Callable[[str, str], bool],
        on_ddl: Callable[[], None],
        instance: str,
        count_unhandled: Callable[[int], None] | None = None,
    ) -> None:
        """``count_unhandled``: told the type of each event the decoder does not read (the
        collector's metric); each type is also logged once."""
        self._start = start
        self._count_unhandled = count_unhandled
        self._unhandled_logged: set[int] = set()
        self._decoders = decoders
        self._include = include
        self._on_ddl = on_ddl
        self._instance = instance
        self._offsets = OffsetGenerator(start.offset_state)
        # Rows of collected tables seen in the current MySQL transaction, and how many of
        # them were published before a restart (the position inside a split transaction).
        self._rows_in_transaction = 0
        self._skip = 0

    def items(  # noqa: PLR0912 - one branch per event type, in order of frequency
        self, events: Iterable[tuple[ev.EventHeader, bytes]], where: Positioned
    ) -> Iterator[WorkItem]:
        gtid = ""
        for header, body in events:
            kind = header.type
            if kind in ev.ROWS_EVENTS:
                changes = self._row_changes(header, body, where, gtid)
                if changes is not None:
                    yield changes
            elif kind == ev.TABLE_MAP:
                self._decoders.on_table_map(body)
            elif kind == ev.MARIADB_GTID:
                gtid, self._rows_in_transaction = ev.mariadb_gtid(body, header.server_id), 0
                self._skip = self._start.rows_to_skip(gtid)
            elif kind == ev.XID:
                yield TransactionEnd(gtid, where.log_file, where.log_pos, header.timestamp)
            elif kind == ev.QUERY:
                query = ev.query_event(body)
                if query.query.strip().upper() in TRANSACTION_STARTS:
                    continue
                if mev.is_statement_dml(query.query):
                    self._unhandled(kind, "a data change written as a statement")
                ddl = parse_table_ddl(query.query, query.schema)
                if ddl is not None:
                    change = self._schema_change(ddl, header, where, gtid)
                    if change is not None:
                        yield change
                # COMMIT of non-transactional changes, DDL, DCL: each ends a transaction.
                yield TransactionEnd(gtid, where.log_file, where.log_pos, header.timestamp)
            elif kind == ev.HEARTBEAT:
                yield Heartbeat(where.log_file, where.log_pos)
            elif kind in ev.MARIADB_COMPRESSED:
                raise ConfigError(
                    f"MySQL instance {self._instance!r} writes compressed binlog events "
                    "(log_bin_compress=ON), which the collector does not read; turn it off."
                )
            elif kind in mev.MYSQL_GTIDS:
                gtid, self._rows_in_transaction = mev.gtid_text(kind, body), 0
                self._skip = self._start.rows_to_skip(gtid)
            elif kind == mev.HEARTBEAT_V2:
                yield Heartbeat(where.log_file, where.log_pos)
            elif kind == mev.XA_PREPARE:
                # The first phase of an XA transaction ends here (its rows precede it).
                yield TransactionEnd(gtid, where.log_file, where.log_pos, header.timestamp)
            elif kind not in mev.IGNORED:
                self._unhandled(kind, mev.unreadable_changes(kind))

    def _unhandled(self, kind: int, changes: str | None) -> None:
        """An event the decoder does not read: counted, logged once per type; if it holds
        row changes (``changes`` says how), collection stops rather than skip them."""
        if self._count_unhandled is not None:
            self._count_unhandled(kind)
        if changes is not None:
            raise ContractError(
                f"MySQL instance {self._instance!r} wrote {changes} (binlog event type "
                f"{kind}), which the collector cannot read; collection stopped rather than "
                "skip row changes (the source needs binlog_format=ROW)."
            )
        if kind not in self._unhandled_logged:
            self._unhandled_logged.add(kind)
            log.warning(
                "MySQL instance %r: binlog event type %d is not read by the collector and "
                "skipped (it carries no row changes the collector knows of); counted in "
                "cdc_collector_unhandled_events",
                self._instance,
                kind,
            )

    def _row_changes(
        self, header: ev.EventHeader, body: bytes, where: Positioned, gtid: str
    ) -> RowChanges | None:
        decoder = self._decoders.for_rows(body)
        if decoder is None:
            return None  # a table the filter excludes
        if header.type == ev.PARTIAL_UPDATE_ROWS:
            images: list[Any] = mev.partial_update_rows(decoder, body)
        else:
            images = decoder.rows(body, header.type)
        first = max(0, self._skip - self._rows_in_transaction)
        self._rows_in_transaction += len(images)
        if first >= len(images):
            return None  # published before a restart
        context = EventContext(
            header.server_id, where.log_file, where.log_pos, header.timestamp, gtid
        )
        messages = build_messages(
            EventType(ev.ROWS_EVENTS[header.type]),
            images[first:],
            decoder.schema,
            context,
            self._offsets,
            first,
        )
        rows_before = self._rows_in_transaction - len(images)
        return RowChanges(messages, decoder.schema, context, rows_before, first)

    def _schema_change(
        self, ddl: TableDdl, header: ev.EventHeader, where: Positioned, gtid: str
    ) -> SchemaChange | None:
        self._on_ddl()
        # The statement's kind and target only: the text may carry literals worth hiding.
        log.info("DDL: %s %s %s", ddl.verb, ddl.object, ddl.target)
        if not self._include(ddl.schema, ddl.table or ""):
            return None
        record = {
            "version": 1,
            # Where the DDL falls among the rows: after the row with this offset. It takes no
            # offset of its own, so row offsets do not depend on which DDL is published.
            "afterBinlogOffset": self._offsets.state.last_offset,
            "executeTime": header.timestamp * 1000,
            **ddl.to_json(),
            "position": {
                "serverId": header.server_id,
                "file": where.log_file,
                "pos": where.log_pos,
                "gtid": gtid,
            },
        }
        return SchemaChange(ddl.target, record)
