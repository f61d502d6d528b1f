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
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from collector.decoding import EventContext, fix_reader_quirks, messages_from_rows
from collector.metrics import CollectorMetrics
from collector.position import CollectorPosition
from collector.publisher import AbortedError, OversizedMessageError, Publisher
from collector.reader import SchemaCache, connect, server_position
from collector.schema import BinlogTableSchemas
from simple_binlog.config import CollectorSettings, MySQLInstance
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.offsets import OffsetGenerator, OffsetState

log = logging.getLogger(__name__)

# MySQL/MariaDB errors that no reconnect can cure.
_ACCESS_DENIED = {1045, 1044, 1227, 1142, 1143}
_BINLOG_GONE = {1236}
# Table and database DDL, whose tables' cached schemas must be dropped. Any other statement
# (CREATE USER, GRANT, …) just ends its transaction; its text is never logged.
_TABLE_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(?P<verb>ALTER|CREATE|DROP|RENAME|TRUNCATE)\s+(?:ONLINE\s+|IGNORE\s+|"
    r"OR\s+REPLACE\s+|TEMPORARY\s+)*(?P<object>TABLE|TABLES|DATABASE|SCHEMA)\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?`?(?P<name>[\w$]+)`?(?:\.`?(?P<table>[\w$]+)`?)?",
    re.I | re.S,
)


_ROWS_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)


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
        self._schemas = BinlogTableSchemas(SchemaCache(instance).get)
        self.committed: CollectorPosition | None = None
        # Set once the publisher is started (earlier owners fenced): publishing from here on.
        self.started = threading.Event()

    # -- outer loop: reconnects --------------------------------------------------------------
    def run(self) -> None:
        """Publish until stopped. Raises for what a restart cannot cure (fencing, config)."""
        fix_reader_quirks()
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
        rows_in_transaction = 0
        skip = 0
        reader = self._reader(start.gtid)
        try:
            for event in self._events(reader):
                if self._stop.is_set():
                    break
                if isinstance(event, MariadbGtidEvent):
                    gtid, rows_in_transaction = event.gtid, 0
                    skip = start.rows_to_skip(gtid)
                elif isinstance(event, _ROWS_EVENTS):
                    first = max(0, skip - rows_in_transaction)
                    rows_in_transaction += len(event.rows)
                    if first >= len(event.rows) or not self._filter(event.schema, event.table):
                        continue
                    progress = self._publish_rows(
                        event,
                        reader,
                        gtid,
                        rows_in_transaction - len(event.rows),
                        first,
                        offsets,
                        progress,
                    )
                elif isinstance(event, XidEvent) or (
                    isinstance(event, QueryEvent) and self._ends_transaction(event)
                ):
                    progress.position = progress.position.after_transaction(
                        gtid, reader.log_file, reader.log_pos
                    )
                    self._metrics.observe_event_time(self._instance.name, event.timestamp)
                    if (
                        time.monotonic() - progress.began
                        >= self._settings.commit_interval_ms / 1000
                    ):
                        progress = self._commit(progress)
                elif isinstance(event, HeartbeatLogEvent) and (progress.position != self.committed):
                    progress = self._commit(progress)
            # Stopped: whatever is not committed is aborted by the caller. A collector that
            # lost its leadership must not commit, and a restart resumes from the last commit.
        finally:
            reader.close()

    def _publish_rows(
        self,
        event: Any,
        reader: Any,
        gtid: str,
        rows_before: int,
        first: int,
        offsets: OffsetGenerator,
        progress: _Progress,
    ) -> _Progress:
        table = self._schemas.for_event(event)
        context = EventContext.of(event, reader, gtid)
        messages = messages_from_rows(
            type(event).__name__, event.rows, table, context, offsets, first_row=first
        )
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
            progress.position = progress.position.after_row(
                gtid, rows_before + index + 1, context.file, context.pos, message.binlog_offset
            )
            self._metrics.rows.labels(self._instance.name, table.schema, table.table).inc()
            if progress.rows >= self._settings.max_rows_per_transaction:
                progress = self._commit(progress)
        return progress

    def _commit(self, progress: _Progress) -> _Progress:
        position = progress.position
        self._publisher.commit(position)
        self.committed = position
        self._metrics.committed(self._instance.name, position)
        return _Progress(position)

    def _ends_transaction(self, event: Any) -> bool:
        """In a row binlog a query event is BEGIN, the COMMIT/ROLLBACK of non-transactional
        changes, or a DDL/DCL statement that is a transaction of its own."""
        query = event.query.strip()
        if query.upper() in ("BEGIN", "XA START", "XA END"):
            return False
        schema = event.schema if isinstance(event.schema, str) else event.schema.decode()
        match = _TABLE_DDL.match(query)
        if match:
            self._on_table_ddl(schema, match)
        return True

    def _on_table_ddl(self, schema: str, match: re.Match[str]) -> None:
        name, table = match.group("name"), match.group("table")
        if match.group("object").upper() in ("DATABASE", "SCHEMA"):
            self._schemas.forget(name)
            target = name
        elif table:
            self._schemas.forget(name, table)
            target = f"{name}.{table}"
        else:
            self._schemas.forget(schema, name)
            target = f"{schema}.{name}"
        # The statement's kind and target only: a DDL's text may carry literals worth hiding.
        log.info(
            "DDL: %s %s %s", match.group("verb").upper(), match.group("object").upper(), target
        )

    # -- the binlog connection -------------------------------------------------------------------
    def _reader(self, gtid: str) -> Any:
        return BinLogStreamReader(
            connection_settings={
                "host": self._instance.host,
                "port": self._instance.port,
                "user": self._instance.user,
                "password": self._instance.password.get_secret_value(),
                "connect_timeout": 10,
            },
            server_id=self._instance.replica_server_id,
            auto_position=gtid,
            blocking=True,
            slave_heartbeat=self._settings.heartbeat_s,
            is_mariadb=True,
            only_events=[
                MariadbGtidEvent,
                XidEvent,
                QueryEvent,
                HeartbeatLogEvent,
                WriteRowsEvent,
                UpdateRowsEvent,
                DeleteRowsEvent,
            ],
        )

    def _events(self, reader: Any) -> Iterator[Any]:
        try:
            yield from reader
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
