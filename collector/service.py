"""The collector's main loop: row binlog → SimpleBinlog → Kafka, exactly once.

Reading resumes from the last committed ``CollectorPosition`` (a GTID position, plus the rows
already published of a transaction that was split). Rows are added to an open Kafka
transaction; the transaction is committed, together with the position after its last row,
when it holds ``max_rows_per_transaction`` rows, or at the end of a MySQL transaction once
``commit_interval_ms`` has passed since it began. A MySQL transaction is never published
partly unless it alone exceeds the row limit, and then its position says which row comes
next. Any failure aborts the open transaction and resumes from the last committed position,
so a reader sees each row change once, in binlog order, with the same binlogOffsets.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pymysql

from collector import binlog_events as ev
from collector.binlog_stream import BinlogStream
from collector.ddl import TRANSACTION_STARTS, TableDdl, parse_table_ddl
from collector.decoding import EventContext, TableSchema, build_messages
from collector.metrics import CollectorMetrics
from collector.position import CollectorPosition
from collector.publisher import AbortedError, OversizedMessageError, Publisher
from collector.reader import SchemaCache, connect, server_position
from collector.row_decoder import Row, TableDecoders
from collector.schema import BinlogTableSchemas
from simple_binlog.config import CollectorSettings, MySQLInstance
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.message import EventType
from simple_binlog.offsets import OffsetGenerator, OffsetState

log = logging.getLogger(__name__)

# MySQL/MariaDB errors that no reconnect can cure.
_ACCESS_DENIED = {1045, 1044, 1227, 1142, 1143}
_BINLOG_GONE = {1236}


class TableFilter:
    """Include/exclude regexes on ``schema.table``."""

    def __init__(self, include: list[str], exclude: list[str]) -> None:
        self._include = [re.compile(p) for p in include]
        self._exclude = [re.compile(p) for p in exclude]
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, schema: str, table: str) -> bool:
        key = (schema, table)
        decision = self._cache.get(key)
        if decision is None:
            name = f"{schema}.{table}"
            decision = any(p.fullmatch(name) for p in self._include) and not any(
                p.fullmatch(name) for p in self._exclude
            )
            self._cache[key] = decision
        return decision


@dataclass
class _Progress:
    """What has been added to the open Kafka transaction but not committed yet."""

    position: CollectorPosition
    rows: int = 0
    began: float = field(default_factory=time.monotonic)


class Collector:
    def __init__(
        self,
        instance: MySQLInstance,
        settings: CollectorSettings,
        publisher: Publisher,
        metrics: CollectorMetrics,
        stop: threading.Event | None = None,
        epoch: int = 0,
    ) -> None:
        self._instance = instance
        self._settings = settings
        self._publisher = publisher
        self._metrics = metrics
        self._stop = stop or threading.Event()
        self._epoch = epoch
        self._filter = TableFilter(settings.include, settings.exclude)
        self._lookup = SchemaCache(instance)
        self._schemas = BinlogTableSchemas(self._lookup.get)
        self._decoders = TableDecoders(self._schemas, self._filter)
        self._rows_children: dict[tuple[str, str], Any] = {}
        self.committed: CollectorPosition | None = None
        # Set once the publisher is started (earlier owners fenced): publishing from here on.
        self.started = threading.Event()

    # -- outer loop: reconnects --------------------------------------------------------------
    def run(self) -> None:
        """Publish until stopped. Raises for what a restart cannot cure (fencing, config)."""
        self.committed = self._publisher.start() or self._initial_position()
        if self._stop.is_set():
            # Paused while fencing its predecessor and no longer the leader: publish nothing.
            self._publisher.close()
            return
        self.started.set()
        self._metrics.role.labels(self._instance.name).set(1)
        log.info(
            "collector %s resumes after GTID %s (rows done %d of %s)",
            self._instance.name,
            self.committed.gtid,
            self.committed.rows_done,
            self.committed.partial or "-",
        )
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._stream(self.committed)
                backoff = 0.5
            except AbortedError as exc:
                log.warning("%s; resuming from the last committed position", exc)
                self._publisher.abort()
            except ServiceUnavailableError as exc:
                self._publisher.abort()
                log.warning("%s Retrying in %.1f s.", exc, backoff)
                self._metrics.errors.labels(self._instance.name, "unavailable").inc()
                if self._stop.wait(backoff):
                    break
                backoff = min(backoff * 2, self._settings.reconnect_backoff_max_s)
        self._publisher.close()

    def _initial_position(self) -> CollectorPosition:
        start = self._settings.start
        if start == "current":
            with connect(self._instance) as connection, connection.cursor() as cursor:
                gtid = server_position(cursor).gtid
        else:
            gtid = start
        return CollectorPosition(self._instance.name, gtid, OffsetState(), epoch=self._epoch)

    # -- inner loop: one binlog connection -----------------------------------------------------
    def _stream(self, start: CollectorPosition) -> None:
        offsets = OffsetGenerator(start.offset_state)
        progress = _Progress(start)
        gtid = ""
        rows_in_transaction = 0  # rows of collected tables seen in this MySQL transaction
        skip = 0
        stream = BinlogStream(
            self._instance, self._instance.replica_server_id, start.gtid, self._settings.heartbeat_s
        )
        try:
            for header, body in self._events(stream):
                if self._stop.is_set():
                    break
                kind = header.type
                if kind in ev.ROWS_EVENTS:
                    decoder = self._decoders.for_rows(body)
                    if decoder is None:
                        continue
                    images = decoder.rows(body, kind)
                    first = max(0, skip - rows_in_transaction)
                    rows_in_transaction += len(images)
                    if first >= len(images):
                        continue
                    context = EventContext(
                        header.server_id, stream.log_file, stream.log_pos, header.timestamp, gtid
                    )
                    progress = self._publish_rows(
                        decoder.schema,
                        EventType(ev.ROWS_EVENTS[kind]),
                        images,
                        context,
                        rows_in_transaction - len(images),
                        first,
                        offsets,
                        progress,
                    )
                elif kind == ev.TABLE_MAP:
                    self._decoders.on_table_map(body)
                elif kind == ev.MARIADB_GTID:
                    gtid, rows_in_transaction = ev.mariadb_gtid(body, header.server_id), 0
                    skip = start.rows_to_skip(gtid)
                elif kind == ev.XID:
                    progress = self._end_transaction(progress, gtid, stream, header)
                elif kind == ev.QUERY:
                    progress = self._on_query(body, header, stream, gtid, offsets, progress)
                elif kind == ev.HEARTBEAT and progress.position != self.committed:
                    progress = self._commit(progress)
                elif kind in ev.MARIADB_COMPRESSED:
                    raise ConfigError(
                        f"MySQL instance {self._instance.name!r} writes compressed binlog events "
                        "(log_bin_compress=ON), which the collector does not read; turn it off."
                    )
            # Stopped: whatever is not committed is aborted by the caller. A collector that
            # lost its leadership must not commit, and a restart resumes from the last commit.
        finally:
            stream.close()

    def _publish_rows(
        self,
        table: TableSchema,
        event_type: EventType,
        images: list[tuple[Row | None, Row]],
        context: EventContext,
        rows_before: int,
        first: int,
        offsets: OffsetGenerator,
        progress: _Progress,
    ) -> _Progress:
        messages = build_messages(event_type, images[first:], table, context, offsets, first)
        gtid = context.gtid or ""
        for index, message in enumerate(messages, start=first):
            try:
                self._publisher.add(message)
            except OversizedMessageError as exc:
                if self._settings.on_oversized == "stop":
                    raise CdcMirrorError(
                        f"a row of {table.schema}.{table.table} at {context.file}:{context.pos} "
                        f"is too large for Kafka ({exc}); collection stopped."
                    ) from None
                self._publisher.dead_letter(message, str(exc))
                self._metrics.dead_letters.labels(self._instance.name).inc()
            progress.rows += 1
            if progress.rows >= self._settings.max_rows_per_transaction:
                progress.position = progress.position.after_row(
                    gtid, rows_before + index + 1, context.file, context.pos, message.binlog_offset
                )
                progress = self._commit(progress)
        if messages:
            # The position after the event's last row, built once per event, not per row.
            progress.position = progress.position.after_row(
                gtid,
                rows_before + first + len(messages),
                context.file,
                context.pos,
                messages[-1].binlog_offset,
            )
        self._rows_metric(table).inc(len(messages))
        return progress

    def _rows_metric(self, table: TableSchema) -> Any:
        key = (table.schema, table.table)
        child = self._rows_children.get(key)
        if child is None:
            child = self._metrics.rows.labels(self._instance.name, table.schema, table.table)
            self._rows_children[key] = child
        return child

    def _commit(self, progress: _Progress) -> _Progress:
        position = progress.position
        self._publisher.commit(position)
        self.committed = position
        self._metrics.committed(self._instance.name, position)
        return _Progress(position)

    def _on_query(
        self,
        body: bytes,
        header: ev.EventHeader,
        stream: BinlogStream,
        gtid: str,
        offsets: OffsetGenerator,
        progress: _Progress,
    ) -> _Progress:
        """BEGIN, or a statement that ends a transaction (COMMIT of non-transactional
        changes, DDL, DCL); table and database DDL is published."""
        query = ev.query_event(body)
        if query.query.strip().upper() in TRANSACTION_STARTS:
            return progress
        ddl = parse_table_ddl(query.query, query.schema)
        if ddl is not None:
            self._on_table_ddl(ddl, header, stream, gtid, offsets)
        return self._end_transaction(progress, gtid, stream, header)

    def _end_transaction(
        self, progress: _Progress, gtid: str, stream: BinlogStream, header: ev.EventHeader
    ) -> _Progress:
        """A MySQL transaction ended (XID, or a query event: COMMIT of non-transactional
        changes, DDL, DCL): commit if the open Kafka transaction is old enough."""
        progress.position = progress.position.after_transaction(
            gtid, stream.log_file, stream.log_pos
        )
        self._metrics.observe_event_time(self._instance.name, header.timestamp)
        if time.monotonic() - progress.began >= self._settings.commit_interval_ms / 1000:
            return self._commit(progress)
        return progress

    def _on_table_ddl(
        self,
        ddl: TableDdl,
        header: ev.EventHeader,
        stream: BinlogStream,
        gtid: str,
        offsets: OffsetGenerator,
    ) -> None:
        # Schemas looked up in information_schema may have changed with any DDL (RENAME
        # moves tables across databases): forget them all; DDL is rare.
        self._lookup.clear()
        self._schemas.forget_all()
        self._decoders.forget()
        # The statement's kind and target only: the text may carry literals worth hiding.
        log.info("DDL: %s %s %s", ddl.verb, ddl.object, ddl.target)
        if not self._filter(ddl.schema, ddl.table or ""):
            return
        record = {
            "version": 1,
            # Where the DDL falls among the rows: after the row with this offset. It takes no
            # offset of its own, so row offsets do not depend on which DDL is published.
            "afterBinlogOffset": offsets.state.last_offset,
            "executeTime": header.timestamp * 1000,
            **ddl.to_json(),
            "position": {
                "serverId": header.server_id,
                "file": stream.log_file,
                "pos": stream.log_pos,
                "gtid": gtid,
            },
        }
        self._publisher.schema_change(ddl.target, record)
        self._metrics.schema_changes.labels(self._instance.name).inc()

    # -- the binlog connection -------------------------------------------------------------------
    def _events(self, stream: BinlogStream) -> Iterator[tuple[ev.EventHeader, bytes]]:
        try:
            yield from stream
        except pymysql.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            message = exc.args[-1] if exc.args else str(exc)
            name = self._instance.name
            if code in _ACCESS_DENIED:
                raise ConfigError(
                    f"MySQL instance {name!r} refused the collector's user "
                    f"{self._instance.user!r} ({message}); it needs REPLICATION SLAVE, "
                    "REPLICATION CLIENT and SELECT."
                ) from None
            if code in _BINLOG_GONE:
                raise ConfigError(
                    f"MySQL instance {name!r} no longer has the binlog at the stored position "
                    f"({message}); the changes in between are lost to the binlog: run a "
                    "history replay ('cdc-mirror replay') and restart the collector from the "
                    "current position."
                ) from None
            raise ServiceUnavailableError(
                f"the binlog stream of MySQL instance {name!r} broke ({message})."
            ) from None


Runner = Callable[[threading.Event, int], None]
