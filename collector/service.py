"""The collector's main loop: row binlog → SimpleBinlog → Kafka, exactly once.

Reading resumes from the last committed ``CollectorPosition`` (a GTID position, plus the rows
already published of a transaction that was split). Rows are added to an open Kafka
transaction; the transaction is committed, together with the position after its last row,
when it holds ``max_rows_per_transaction`` rows, or at the end of a MySQL transaction once
``commit_interval_ms`` has passed since the previous commit began — and, when nothing
follows that transaction, as soon as the interval is over (an idle timer, not the next
binlog heartbeat), so commit → readable stays near the interval. Counted from the previous
commit's start, not its return, the interval bounds the commits to one per interval and a
slow commit is not followed by a whole interval more: the rows read while it ran are
committed as soon as it returns and the interval is over. A MySQL transaction is never published
partly unless it alone exceeds the row limit, and then its position says which row comes
next. Any failure aborts the open transaction and resumes from the last committed position,
so a reader sees each row change once, in binlog order, with the same binlogOffsets.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any

import pymysql

from cdc_platform.config import (
    FILE_POSITION,
    MYSQL_GTID_SET,
    CollectorSettings,
    MySQLInstance,
    TableMirror,
)
from cdc_platform.retry import RetryCancelled, RetryPolicy
from collector import binlog_events as ev
from collector.binlog_stream import BinlogStream, mysql_executed_at
from collector.decoding import TableSchema
from collector.event_source import EventSource, SourceFactory
from collector.metrics import CollectorMetrics
from collector.mysql_dump import ServerVersion, binary_log_status
from collector.mysql_gtid import GtidSet
from collector.position import CollectorPosition
from collector.preflight import Preflight, Subject, read_snapshot
from collector.publisher import AbortedError, OversizedMessageError, Publisher
from collector.reader import SchemaCache, connect, server_position
from collector.remote_config import (
    CONNECTION,
    PASSWORD,
    STOPPED,
    ConfigDiff,
    RemoteConfig,
    RemoteConfigRuntime,
    diff_configs,
)
from collector.row_decoder import TableDecoders
from collector.schema import BinlogTableSchemas
from collector.watermark import HeartbeatSchedule, probe_source
from collector.work import (
    EventDecoder,
    Heartbeat,
    RowChanges,
    SchemaChange,
    TransactionEnd,
    WorkItem,
)
from governance.policy import Governance
from governance.source import GovernanceRuntime
from simple_binlog.control import WatermarkHeartbeat
from simple_binlog.errors import (
    CdcMirrorError,
    ConfigError,
    RetriableError,
    ServiceUnavailableError,
)
from simple_binlog.offsets import OffsetState
from simple_binlog.patterns import compile_pattern
from simple_binlog.routing import ShardRouter, ShardRule

log = logging.getLogger(__name__)

# Rows decoded ahead of the publishing loop (each other work item counts as one): enough to
# keep decoding through a Kafka commit (tens of ms) at full speed, and a bounded ~40 MB.
_PREFETCH_ROWS = 20_000
# How often the publishing loop looks up from an empty queue (to commit, or to stop).
_IDLE_POLL_S = 0.1


# A batch handed over by the reader ends with a transaction or holds this many rows.
_BATCH_ROWS = 1_000
# Events received already are gathered into one hand-over for at most this long (a burst of
# small transactions costs one hand-over, not one each); then what is gathered goes, so a
# reader that is behind (a busy binlog, a starved CPU) does not hold complete transactions.
_GATHER_S = 0.005


class _Idle:
    """Nothing arrived for a while: a moment to commit what is complete."""


IDLE = _Idle()


# MySQL/MariaDB errors that no reconnect can cure.
_ACCESS_DENIED = {1045, 1044, 1227, 1142, 1143}
_BINLOG_GONE = {1236}


def tune_gc() -> None:
    """Fewer and cheaper cyclic garbage collections, for a process that runs a collector.

    Called by the entry point, not at import. The collector allocates several objects per row
    and holds up to ``_PREFETCH_ROWS`` rows of them between its threads; they are freed by
    reference counting (they form no cycles), yet with the default thresholds the cyclic
    collector runs every 700 allocations and its older generations walk every live object
    again, the libraries' included. Objects made at start-up are moved out of its sight and a
    young collection waits for 50,000 allocations (the prefetch queue holds about that many).
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


@dataclass(frozen=True)
class StoppedTables:
    """Table mirrors of the instance that are disabled or removed in the web admin, by
    logical name, and the shard rules that say which physical tables are theirs."""

    names: frozenset[str] = frozenset()
    rules: tuple[ShardRule, ...] = (ShardRule(),)

    @classmethod
    def of(cls, config: RemoteConfig) -> StoppedTables:
        return cls(config.stopped_tables, config.shard_rules)

    @classmethod
    def from_file(
        cls, tables: Iterable[TableMirror], instance: str, rules: Iterable[ShardRule]
    ) -> StoppedTables:
        """The config file's mirrors of ``instance`` with ``enabled: false``."""
        names = frozenset(t.name for t in tables if t.instance == instance and not t.enabled)
        return cls(names, tuple(rules) or (ShardRule(),))


class TableFilter:
    """Which tables are published: include/exclude regexes on ``schema.table`` (on RE2: an
    admin's pattern costs linear time), less the physical tables of stopped table mirrors.

    A stopped mirror's tables are left out as an excluded table is: its rows are neither
    decoded nor published and its DDL is not published, while every transaction still
    ends (``TransactionEnd``), so the committed position and the watermark heartbeats go on
    advancing when all of a transaction's rows were left out. A physical table that no shard
    rule routes belongs to no mirror and is never stopped."""

    def __init__(
        self, include: list[str], exclude: list[str], stopped: StoppedTables | None = None
    ) -> None:
        self._include = [compile_pattern(p) for p in include]
        self._exclude = [compile_pattern(p) for p in exclude]
        self._stopped = stopped.names if stopped is not None else frozenset()
        self._router = ShardRouter(list(stopped.rules)) if stopped and stopped.names else None
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, schema: str, table: str) -> bool:
        key = (schema, table)
        decision = self._cache.get(key)
        if decision is None:
            name = f"{schema}.{table}"
            decision = (
                any(p.fullmatch(name) for p in self._include)
                and not any(p.fullmatch(name) for p in self._exclude)
                and not self._is_stopped(schema, table)
            )
            self._cache[key] = decision
        return decision

    def _is_stopped(self, schema: str, table: str) -> bool:
        if self._router is None:
            return False
        try:
            return self._router.route(schema, table).name in self._stopped
        except ConfigError:  # routed by no rule (or to no usable name): no mirror's table
            return False


class _ConfigSwitch(Exception):  # control flow inside Collector, never escapes
    """Leave the binlog stream to apply ``config``; everything read is committed."""

    def __init__(self, config: RemoteConfig, diff: ConfigDiff) -> None:
        super().__init__(f"switch to config version {config.version}")
        self.config = config
        self.diff = diff


class _Progress:
    """What has been added to the open Kafka transaction but not committed yet.

    ``position`` is where a restart would resume if this were committed now. After a rows
    event it is "after that event's last row" (``CollectorPosition.after_row``); that
    position is only worked out when read, since the transaction's end usually follows at
    once and replaces it (a single-row transaction then builds one position, not two).
    """

    __slots__ = ("_after_rows", "_position", "began", "event_second", "rows", "rows_by_table")

    def __init__(self, position: CollectorPosition, began: float | None = None) -> None:
        self._position = position
        # (gtid, rows done, file, pos, last offset) of the last rows event added, if any.
        self._after_rows: tuple[str, int, str, int, int] | None = None
        self.rows = 0
        # Where commit_interval_ms counts from: the start of the commit before (or now).
        self.began = time.monotonic() if began is None else began
        self.event_second = 0  # event time of the last MySQL transaction ended in it
        # Rows added per table (the metric's child): counted once at the commit, so an
        # aborted transaction counts nothing and a single-row transaction costs no metric
        # update.
        self.rows_by_table: dict[Any, int] = {}

    @property
    def position(self) -> CollectorPosition:
        if self._after_rows is not None:
            self._position = self._position.after_row(*self._after_rows)
            self._after_rows = None
        return self._position

    @position.setter
    def position(self, position: CollectorPosition) -> None:
        self._position, self._after_rows = position, None

    def rows_added(self, gtid: str, rows_done: int, file: str, pos: int, offset: int) -> None:
        """A rows event's rows are added: ``rows_done`` rows of ``gtid``, the last offset."""
        self._after_rows = (gtid, rows_done, file, pos, offset)

    def transaction_ended(self, gtid: str, file: str, pos: int) -> None:
        after_rows = self._after_rows
        if after_rows is None:
            self._position = self._position.after_transaction(gtid, file, pos)
        else:  # the same as after_row(...).after_transaction(...), without the middle one
            self._position = self._position.after_transaction(gtid, file, pos, after_rows[4])
            self._after_rows = None


class Collector:
    def __init__(
        self,
        instance: MySQLInstance,
        settings: CollectorSettings,
        publisher: Publisher,
        metrics: CollectorMetrics,
        stop: threading.Event | None = None,
        epoch: int = 0,
        governance: GovernanceRuntime | None = None,
        updates: RemoteConfigRuntime | None = None,
        config: RemoteConfig | None = None,
        source: SourceFactory | None = None,
        schemas: BinlogTableSchemas | None = None,
        stopped: StoppedTables | None = None,
    ) -> None:
        """``updates`` and ``config`` (``collector.config_source: webui``): newer configs
        from the web admin, and the one ``instance`` and ``settings`` come from. ``source``:
        where events come from instead of the instance's binlog stream (archived binlog
        files), and ``schemas`` how their tables are described when no server is asked.
        ``stopped``: the disabled table mirrors of a config file (with ``config``, its
        own ``stopped_tables`` are used)."""
        self._source = source
        self._instance = instance
        self._settings = settings
        self._publisher = publisher
        self._metrics = metrics
        self._stop = stop or threading.Event()
        self._epoch = epoch
        if config is not None:
            stopped = StoppedTables.of(config)
        self._filter = TableFilter(settings.include, settings.exclude, stopped)
        self._lookup = SchemaCache(instance)
        self._schemas = schemas or BinlogTableSchemas(self._lookup.get)
        self._decoders = TableDecoders(self._schemas, self._filter)
        self._rows_children: dict[tuple[str, str], Any] = {}
        self._unhandled_children: dict[int, Any] = {}
        # Detection and column policies (governance), applied to every row
        # before it is added; a new policy set is swapped in between MySQL transactions.
        self._governance = governance
        self._policies: Governance | None = governance.current if governance else None
        self._updates = updates
        self._config = config
        self._waiting_logged: int | None = None  # the config version said to wait, once
        self._connection_switched = False  # the last live switch changed host/user/password
        self._preflight = Preflight()  # the startup checks, at every connect
        self.committed: CollectorPosition | None = None
        # Where the last live config switch resumed reading (None: no switch yet).
        self.switched_at: CollectorPosition | None = None
        # Set once the publisher is started (earlier owners fenced): publishing from here on.
        self.started = threading.Event()
        # Watermark heartbeats while the source is quiet (collector/watermark.py); the probe's
        # connection is kept between probes. None: none are published (off, or refused).
        self._heartbeats: HeartbeatSchedule | None = (
            HeartbeatSchedule(settings.watermark_heartbeat_s)
            if settings.watermark_heartbeat_s > 0 and source is None
            else None
        )
        self._heartbeats_refused = False  # the user lacks PROCESS: none, whatever the period
        self._probe_connection: Any = None

    # -- outer loop: reconnects --------------------------------------------------------------
    def run(self) -> None:
        """Publish until stopped. Raises for what a restart cannot cure (fencing, config)."""
        stored = self._start_publisher()
        if self._stop.is_set():
            # Paused while fencing its predecessor and no longer the leader (or stopped while
            # Kafka was away): publish nothing.
            self._publisher.close()
            return
        self.committed = stored or self._initial_position()
        self.started.set()
        self._metrics.role.labels(self._instance.name).set(1)
        log.info(
            "collector %s resumes after GTID %s (rows done %d of %s)",
            self._instance.name,
            self.committed.gtid,
            self.committed.rows_done,
            self.committed.partial or "-",
        )
        if self._updates is not None:
            self._updates.collector_active = True
        try:
            self._run_streams()
        finally:
            self._close_probe()
            if self._updates is not None:
                self._updates.collector_active = False
        self._publisher.close()

    def _start_publisher(self) -> CollectorPosition | None:
        """Fence earlier owners and read the stored position; while Kafka does not answer
        (e.g. a broker restarting as this collector takes over), wait and retry, keeping the
        leadership, instead of exiting."""

        def failed(exc: RetriableError, delay_s: float) -> None:
            self._publisher.close()
            self._unavailable(exc, delay_s)

        try:
            policy = self._retry_policy()
            return policy.call(self._publisher.start, stop=self._stop, on_retry=failed)
        except RetryCancelled:
            return None

    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(first_delay_s=0.5, max_delay_s=self._settings.reconnect_backoff_max_s)

    def _unavailable(self, exc: RetriableError, delay_s: float) -> None:
        log.warning("%s Retrying in %.1f s.", exc, delay_s)
        self._metrics.errors.labels(self._instance.name, "unavailable").inc()

    def _run_streams(self) -> None:

        def failed(exc: RetriableError, delay_s: float) -> None:
            self._publisher.abort()
            self._unavailable(exc, delay_s)

        while not self._stop.is_set():
            try:
                # Kafka or MySQL away: the policy waits and streams again; a round that
                # ends without such an error starts the back-off afresh.
                self._retry_policy().call(self._stream_round, stop=self._stop, on_retry=failed)
            except RetryCancelled:
                break

    def _stream_round(self) -> None:
        """Stream from the committed position until stopped or an error; what needs no
        waiting (a config switch, a bad switched connection, an aborted transaction) is
        handled here, a ``RetriableError`` goes to the retry policy."""
        assert self.committed is not None
        self._apply_waiting_config()
        while not self._stop.is_set():
            try:
                self._stream(self.committed)
                return
            except _ConfigSwitch as switch:
                self._apply(switch.config, switch.diff)
                return
            except ConfigError as exc:
                if not self._connection_switched or self._config is None:
                    raise
                # A connection switched to live that MySQL refuses (e.g. a mistyped password
                # in the web admin): keep the leadership and wait for a corrected config
                # rather than stop every collector of the instance.
                self._publisher.abort()
                self._metrics.errors.labels(self._instance.name, "config").inc()
                log.error("%s Waiting for a corrected config from the web admin.", exc)
                newer = self._wait_for_newer_config()
                if newer is not None:
                    self._apply(newer, diff_configs(self._config, newer))
                return
            except AbortedError as exc:
                # At once, without back-off (and without starting it afresh).
                log.warning("%s; resuming from the last committed position", exc)
                self._publisher.abort()

    # -- live config changes (collector.config_source: webui) ---------------------------------
    @property
    def config_version(self) -> int | None:
        """The web admin's config version in force (None: config from the file)."""
        return self._config.version if self._config is not None else None

    def _newer_config(self) -> RemoteConfig | None:
        if self._updates is None:
            return None
        latest = self._updates.latest
        return latest if latest is not self._config else None

    def _apply_waiting_config(self) -> None:
        """Before (re)connecting: a newer config that arrived while the source could not be
        read (e.g. the instance pointed at a promoted replica after its primary died) is put
        in force at the committed position; a filter change waits for a split transaction's
        end, as at a boundary."""
        newer = self._newer_config()
        if newer is None or self._config is None or self.committed is None:
            return
        diff = diff_configs(self._config, newer)
        if self.committed.partial is None or not diff.filters_changed:
            self._apply(newer, diff)

    def _wait_for_newer_config(self) -> RemoteConfig | None:
        while not self._stop.wait(0.5):
            newer = self._newer_config()
            if newer is not None:
                return newer
        return None

    def _at_boundary(self, progress: _Progress) -> _Progress:
        """Between MySQL transactions: put a newer config in force. One that changes what
        is read (connection, filters) leaves the stream after committing everything read, so
        the committed position is a transaction boundary and no split transaction is ever
        resumed under other filters than it began with."""
        newer = self._newer_config()
        if newer is None or self._config is None:
            return progress
        diff = diff_configs(self._config, newer)
        if not diff.needs_switch:
            self._settings = newer.collector  # the same filters; e.g. only the GTID start
            self._in_force(newer)
            log.info(
                "collector %s: config version %d in force (changed: %s; no switch needed)",
                self._instance.name,
                newer.version,
                diff.describe(),
            )
            return progress
        if progress.position != self.committed:
            progress = self._commit(progress)
        raise _ConfigSwitch(newer, diff)

    def _apply(self, config: RemoteConfig, diff: ConfigDiff) -> None:
        """Read from the committed position with ``config``: a new connection, filter and
        schema cache; the same leadership, epoch, publisher and offset state."""
        self._instance = config.instance
        self._settings = config.collector
        self._filter = TableFilter(
            config.collector.include, config.collector.exclude, StoppedTables.of(config)
        )
        self._lookup = SchemaCache(config.instance)
        self._schemas = BinlogTableSchemas(self._lookup.get)
        self._decoders = TableDecoders(self._schemas, self._filter)
        self._in_force(config)
        if self._heartbeats is not None:
            # Perhaps another server now (a promoted replica): its binlog positions are not
            # comparable with the pending probe's, nor is the probe's connection still right.
            self._heartbeats.reset()
        self._close_probe()
        self.switched_at = self.committed
        self._connection_switched = CONNECTION in diff.changed or PASSWORD in diff.changed
        at = self.committed.gtid if self.committed else "-"
        log.info(
            "collector %s switched to config version %d at GTID %s without a restart "
            "(changed: %s; epoch %d)",
            config.instance.name,
            config.version,
            at,
            diff.describe(),
            self._epoch,
        )
        if diff.filters_changed:
            log.info(
                "collector %s: tables newly included are collected from GTID %s on (their "
                "earlier rows need a history replay: 'cdc-mirror replay'); tables newly "
                "excluded are no longer collected from there",
                config.instance.name,
                at,
            )
        if STOPPED in diff.changed:
            log.info(
                "collector %s: table mirrors stopped (disabled or removed in the web admin) "
                "from GTID %s on: %s; their changes from there are not published until they "
                "are enabled again (then an initial load fills the gap)",
                config.instance.name,
                at,
                ", ".join(sorted(config.stopped_tables)) or "none",
            )

    def _in_force(self, config: RemoteConfig) -> None:
        self._config = config
        self._follow_heartbeat_period(config.collector.watermark_heartbeat_s)
        self._metrics.config_version.labels(self._instance.name).set(config.version)
        self._metrics.config_reloads.labels(self._instance.name).inc()

    def _initial_position(self) -> CollectorPosition:
        if self._source is not None:
            gtid = self._source.initial_gtid()
            return CollectorPosition(self._instance.name, gtid, OffsetState(), epoch=self._epoch)
        start = self._settings.start
        file_position = FILE_POSITION.match(start)
        file, pos = "", 0
        if start == "current":
            with connect(self._instance) as connection, connection.cursor() as cursor:
                here = server_position(cursor)
            gtid = here.gtid
            if not gtid:  # a MySQL server without GTIDs is read by file and position
                file, pos = here.file, here.pos
        elif MYSQL_GTID_SET.match(start):
            gtid = str(GtidSet.parse(start))
        elif file_position:
            file, pos = file_position.group("file"), int(file_position.group("pos"))
            gtid = self._gtid_at(file, pos)
        else:
            gtid = start
        return CollectorPosition(
            self._instance.name, gtid, OffsetState(), file=file, pos=pos, epoch=self._epoch
        )

    def _gtid_at(self, file: str, pos: int) -> str:
        """The GTID position of a binlog file and position, as the dump resumes from it:
        MariaDB's BINLOG_GTID_POS, MySQL's set computed from the file's events
        (``collector.mysql_executed``); either is missing when the position is not a
        transaction boundary of a binlog the server still has. A MySQL server without GTIDs
        is read from the file and position themselves ("")."""
        gtid: str | None
        with connect(self._instance) as connection, connection.cursor() as cursor:
            server = ServerVersion.of(connection)
            if server.is_mysql:
                status = binary_log_status(cursor, server)
                if status is None or not status.gtid:
                    return ""
                try:
                    gtid = mysql_executed_at(connection, file, pos)
                except pymysql.MySQLError as exc:
                    if exc.args[0] not in _BINLOG_GONE:
                        raise
                    gtid = None  # the file is not (or no longer) in the server's binlog
            else:
                cursor.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
                row = cursor.fetchone()
                gtid = None if row is None or row[0] is None else str(row[0])
        if gtid is None:
            raise ConfigError(
                f"collector.start {file}:{pos} is not a transaction boundary in a binlog that "
                f"MySQL instance {self._instance.name!r} still has; give a position from "
                "SHOW BINARY LOGS / SHOW BINLOG EVENTS, or a GTID position."
            )
        return gtid

    # -- inner loop: one binlog connection -----------------------------------------------------
    def _stream(self, start: CollectorPosition) -> None:  # noqa: PLR0912 - one branch per item
        progress = _Progress(start)
        if self._governance is not None:
            if self._governance.batch is not None:
                self._governance.batch.reset()  # detections of an aborted transaction
            if start.partial is None:
                self._policies = self._governance.at_boundary()
        stream: EventSource
        if self._source is not None:
            stream = self._source.open(start)
        else:
            self._check_server(start)
            stream = BinlogStream(
                self._instance,
                self._instance.replica_server_id,
                start.gtid,
                self._settings.heartbeat_s,
                start.file,
                start.pos,
                start.partial is not None,
            )
        decoder = EventDecoder(
            start,
            self._decoders,
            self._filter,
            self._forget_schemas,
            self._instance.name,
            self._count_unhandled,
        )
        interval = self._settings.commit_interval_ms / 1000

        def idle_after() -> float:
            """How long to wait for more before committing what is complete."""
            if progress.position is self.committed or progress.position.partial is not None:
                return _IDLE_POLL_S
            return min(_IDLE_POLL_S, max(0.0, progress.began + interval - time.monotonic()))

        for item in self._prefetched(
            decoder.items(self._events(stream), stream), stream, idle_after
        ):
            if isinstance(item, RowChanges):
                progress = self._publish_rows(item, progress)
            elif isinstance(item, TransactionEnd):
                progress = self._end_transaction(progress, item)
            elif isinstance(item, SchemaChange):
                self._publisher.schema_change(item.key, item.record)
                self._metrics.schema_changes.labels(self._instance.name).inc()
            elif item is IDLE:
                # Nothing more arrived: commit the transactions that are complete once the
                # interval is over, rather than wait for the next one or a heartbeat.
                if (
                    progress.position != self.committed
                    and progress.position.partial is None
                    and time.monotonic() - progress.began >= interval
                ):
                    progress = self._commit(progress)
                if self.committed is not None and progress.position == self.committed:
                    self._heartbeat_tick(self.committed.file, self.committed.pos)
            elif isinstance(item, Heartbeat):  # the server is idle
                if progress.position != self.committed:
                    progress = self._commit(progress)
                # Everything up to where the stream stands is committed now.
                self._heartbeat_tick(item.file, item.pos)
                if progress.position.partial is None:
                    progress = self._at_boundary(progress)
        if stream.finite and not self._stop.is_set():
            # Every event of a finite source (binlog files) is read: commit what is open.
            if progress.position != self.committed:
                self._commit(progress)
            self._stop.set()
        # Stopped: whatever is not committed is aborted by the caller. A collector that lost
        # its leadership must not commit, and a restart resumes from the last commit.

    def _heartbeat_tick(self, file: str, pos: int) -> None:
        """Nothing is open and the binlog is committed up to (file, pos): publish the pending
        probe's heartbeat if that covers its position, else probe the source when due."""
        schedule = self._heartbeats
        if schedule is None:
            return
        probe = schedule.publishable(file, pos)
        if probe is not None:
            assert self.committed is not None
            self._publisher.heartbeat(
                WatermarkHeartbeat(
                    self._instance.name, probe.watermark_ms, probe.source_time_ms, file, pos
                )
            )
            self._publisher.commit(self.committed)  # the heartbeat's own transaction
            self._metrics.watermark_heartbeats.labels(self._instance.name).inc()
            return
        if not schedule.wants_probe():
            return
        try:
            if self._probe_connection is None:
                self._probe_connection = connect(
                    self._instance, autocommit=True, read_timeout=30, write_timeout=30
                )
            with self._probe_connection.cursor() as cursor:
                schedule.probed(probe_source(cursor))
        except (pymysql.MySQLError, CdcMirrorError) as exc:
            self._close_probe()
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            if code in _ACCESS_DENIED:
                # Without PROCESS, other sessions' transactions are invisible: a heartbeat
                # could claim a time whose rows are still to come. Publish none.
                self._heartbeats = None
                self._heartbeats_refused = True
                log.error(
                    "collector %s publishes no watermark heartbeats: its user %r cannot see "
                    "the source's open transactions (%s); grant it PROCESS. Quiet days become "
                    "ready only when rows arrive.",
                    self._instance.name,
                    self._instance.user,
                    exc.args[-1] if exc.args else exc,
                )
            else:
                schedule.failed()
                log.warning(
                    "collector %s: probing the source for a watermark heartbeat failed (%s); "
                    "trying again in %.0f s",
                    self._instance.name,
                    exc,
                    self._settings.watermark_heartbeat_s,
                )

    def _follow_heartbeat_period(self, interval_s: float) -> None:
        """The watermark heartbeat period of a config put in force (the web admin's instance
        setting): from now on; 0 stops them."""
        if interval_s <= 0 or self._source is not None or self._heartbeats_refused:
            if self._heartbeats is not None:
                self._heartbeats = None
                self._close_probe()
            return
        if self._heartbeats is None:
            self._heartbeats = HeartbeatSchedule(interval_s)
        else:
            self._heartbeats.interval_s = interval_s

    def _close_probe(self) -> None:
        connection, self._probe_connection = self._probe_connection, None
        if connection is not None:
            with contextlib.suppress(pymysql.MySQLError, OSError):
                connection.close()

    def _prefetched(  # noqa: PLR0915 - the reader thread's loop and the caller's, together
        self, items: Iterator[WorkItem], stream: EventSource, idle_after: Callable[[], float]
    ) -> Iterator[WorkItem | _Idle]:
        """``items`` produced by a reader thread, a bounded queue ahead of the caller.

        Reading and decoding the binlog goes on while the caller waits for Kafka (a
        transaction commit takes tens of milliseconds). The reader hands items over in
        batches that end with a MySQL transaction (or hold ``_BATCH_ROWS`` rows of a large
        one): rows are not committable before their transaction ends, so holding them back
        until then costs no latency, and a single-row transaction costs one hand-over
        instead of two. Transactions whose events are received already (``stream.drained``
        false) are gathered into the same batch: nothing waits on the network meanwhile, and
        a burst of small transactions is one hand-over. When nothing has arrived for
        ``idle_after()`` seconds, ``IDLE`` is yielded so the caller can commit what is
        complete without waiting for more. The reader's errors are raised here, in order;
        leaving the loop (stop, error, abort) closes the stream and ends the reader.
        """
        # SimpleQueue: its put and get cost a fraction of Queue's (no Python-level locks).
        # It is unbounded, so the reader holds back while the queue is full.
        queue: SimpleQueue[tuple[list[WorkItem], int] | BaseException | None] = SimpleQueue()
        done = threading.Event()

        # Rows handed over and taken: each counter is written by one thread only.
        handed, taken = [0], [0]

        def hand_over(entry: tuple[list[WorkItem], int] | BaseException | None) -> bool:
            while handed[0] - taken[0] >= _PREFETCH_ROWS:
                if done.wait(0.001):
                    return False
            handed[0] += entry[1] if isinstance(entry, tuple) else 1
            queue.put(entry)
            return not done.is_set()

        def read() -> None:
            batch: list[WorkItem] = []
            weight = 0
            gathering_since = 0.0
            try:
                for item in items:
                    if not batch:
                        gathering_since = time.monotonic()
                    batch.append(item)
                    if isinstance(item, RowChanges):
                        weight += len(item.messages)
                        if weight < _BATCH_ROWS:
                            continue
                    else:
                        weight += 1
                        # A DDL's transaction end follows at once; and while more events are
                        # received already, they are gathered without waiting, for a while.
                        if isinstance(item, SchemaChange) or (
                            not stream.drained
                            and weight < _BATCH_ROWS
                            and time.monotonic() - gathering_since < _GATHER_S
                        ):
                            continue
                    if not hand_over((batch, weight)):
                        return
                    batch, weight = [], 0
                if batch and not hand_over((batch, weight)):
                    return
                hand_over(None)  # the server ended the stream
            except BaseException as exc:  # noqa: BLE001 - re-raised by the consuming thread
                if batch and not hand_over((batch, weight)):
                    return
                hand_over(exc)

        reader = threading.Thread(target=read, name="binlog-reader", daemon=True)
        reader.start()
        try:
            while not self._stop.is_set():
                try:
                    # Only an empty queue makes the idle timeout worth working out.
                    entry = queue.get(timeout=idle_after()) if queue.empty() else queue.get()
                except Empty:
                    yield IDLE
                    continue
                if entry is None:
                    return
                if isinstance(entry, BaseException):
                    raise entry
                batch, weight = entry
                taken[0] += weight
                yield from batch
        finally:
            done.set()
            stream.close()  # unblocks a reader waiting on the socket
            reader.join(10)

    def _check_server(self, start: CollectorPosition) -> None:
        """The startup checks (``collector.preflight``) before the binlog dump is opened."""
        with connect(self._instance) as connection, connection.cursor() as cursor:
            snapshot = read_snapshot(cursor)
        subject = Subject(
            self._instance.name,
            self._instance.replica_server_id,
            start.gtid,
            tuple(self._settings.include),
        )
        self._preflight.check(snapshot, subject)

    def _count_unhandled(self, kind: int) -> None:
        child = self._unhandled_children.get(kind)
        if child is None:
            child = self._metrics.unhandled_events.labels(self._instance.name, str(kind))
            self._unhandled_children[kind] = child
        child.inc()

    def _forget_schemas(self) -> None:
        """After any DDL: schemas looked up in information_schema may have changed (RENAME
        moves tables across databases), so all are forgotten; DDL is rare."""
        self._lookup.clear()
        self._schemas.forget_all()
        self._decoders.forget()

    def _publish_rows(self, changes: RowChanges, progress: _Progress) -> _Progress:
        table, context, messages = changes.table, changes.context, changes.messages
        gtid = context.gtid or ""
        if self._policies is not None:
            # Before the message leaves: masked, hashed or dropped columns never reach Kafka.
            messages = [self._policies.apply(message) for message in messages]
        counter = self._rows_metric(table)
        counted = 0  # rows of this event counted in a transaction committed already
        add = self._publisher.add
        for index, message in enumerate(messages, start=changes.first):
            try:
                add(message)
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
                    gtid,
                    changes.rows_before + index + 1,
                    context.file,
                    context.pos,
                    message.binlog_offset,
                )
                added = index + 1 - changes.first
                progress.rows_by_table[counter] = (
                    progress.rows_by_table.get(counter, 0) + added - counted
                )
                counted = added
                progress = self._commit(progress)
        if messages:
            # The position after the event's last row, once per event, not per row.
            progress.rows_added(
                gtid,
                changes.rows_before + changes.first + len(messages),
                context.file,
                context.pos,
                messages[-1].binlog_offset,
            )
        progress.rows_by_table[counter] = (
            progress.rows_by_table.get(counter, 0) + len(messages) - counted
        )
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
        batch = self._governance.batch if self._governance is not None else None
        detections = batch.drain() if batch is not None and len(batch) else []
        if detections:
            # In the rows' transaction: the detections are published exactly once with them.
            self._publisher.detections(detections)
        started = time.monotonic()
        self._publisher.commit(position)
        self.committed = position
        for counter, rows in progress.rows_by_table.items():
            counter.inc(rows)
        self._connection_switched = False  # the connection in force works
        if position.partial is not None and self._updates is not None:
            self._say_switch_waits(position)
        self._metrics.committed(self._instance.name, position)
        if detections:
            self._metrics.count_detections(detections)
        if self._policies is not None:
            self._metrics.count_truncated(self._instance.name, self._policies.detectors)
        if progress.event_second:
            # Delay as of the last committed transaction: what readers can see.
            self._metrics.observe_event_time(self._instance.name, progress.event_second)
        return _Progress(position, began=started)

    def _say_switch_waits(self, position: CollectorPosition) -> None:
        newer = self._newer_config()
        if newer is not None and self._waiting_logged != newer.version:
            self._waiting_logged = newer.version
            log.info(
                "collector %s: config version %d waits for the end of the split MySQL "
                "transaction %s (%d rows published under the filters in force)",
                self._instance.name,
                newer.version,
                position.partial,
                position.rows_done,
            )

    def _end_transaction(self, progress: _Progress, end: TransactionEnd) -> _Progress:
        """A MySQL transaction ended: commit if the open Kafka transaction is old enough."""
        progress.transaction_ended(end.gtid, end.file, end.pos)
        progress.event_second = end.timestamp
        if self._governance is not None:
            policies = self._governance.at_boundary()
            if policies is not self._policies:  # a new set: rarely, so the gauge is set here
                if self._policies is not None:  # what the old set truncated since the commit
                    self._metrics.count_truncated(self._instance.name, self._policies.detectors)
                self._policies = policies
                self._metrics.governance_version.labels(self._instance.name).set(
                    self._governance.version
                )
        if self._updates is not None and self._updates.latest is not self._config:
            progress = self._at_boundary(progress)
        if time.monotonic() - progress.began >= self._settings.commit_interval_ms / 1000:
            return self._commit(progress)
        return progress

    # -- the binlog connection -------------------------------------------------------------------
    def _events(self, stream: EventSource) -> Iterator[tuple[ev.EventHeader, bytes]]:
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
