"""``cdc-mirror collector run``: wiring the collector's parts for one MySQL instance."""

from __future__ import annotations

import faulthandler
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc_platform.config import MySQLInstance, Settings
from cdc_platform.control import register
from cdc_platform.observability import Probe, serve_observability
from cdc_platform.retry import RetryPolicy
from collector.binlog_files import (
    BinlogFileError,
    BinlogFiles,
    PositionalTableSchemas,
    expand_paths,
)
from collector.decoding import TableSchema
from collector.ha import LeaderElection
from collector.metrics import CollectorMetrics
from collector.native import decoder_name, log_decoder
from collector.position import CollectorPosition
from collector.publisher import FencedError, KafkaPublisher, ProducerLostError
from collector.remote_config import RemoteConfigRuntime, start_remote_config
from collector.service import Collector, StoppedTables, tune_gc
from governance.source import GovernanceRuntime, start_governance
from simple_binlog.errors import CdcMirrorError, ContractError

log = logging.getLogger(__name__)


class _Status:
    """What /health reports: 'standby', 'starting' (elected, fencing earlier owners) or
    'active' (publishing)."""

    def __init__(
        self,
        remote: RemoteConfigRuntime | None = None,
        election: LeaderElection | None = None,
    ) -> None:
        self.leading = False
        self.epoch = 0
        self.collector: Collector | None = None
        self.remote = remote
        self.election = election  # None: no HA, this process leads alone

    @property
    def role(self) -> str:
        if not self.leading:
            return "standby"
        started = self.collector is not None and self.collector.started.is_set()
        return "active" if started else "starting"

    def ready(self) -> Probe:
        """/health/ready: publishing, or standing by with a live ZooKeeper session (a healthy
        follower that takes over when the leader goes); not ready while elected but not yet
        publishing (fencing earlier owners, Kafka away) or without a session."""
        role = self.role
        if role == "active":
            return Probe(True, f"active: publishing (epoch {self.epoch})")
        if role == "starting":
            return Probe(False, "elected; fencing earlier owners and reading the position")
        if self.election is None:
            return Probe(False, "not publishing")
        if self.election.connected:
            return Probe(True, "standby: following the election with a live ZooKeeper session")
        return Probe(False, "standby without a ZooKeeper session: reconnecting")

    def to_json(self) -> dict[str, Any]:
        committed = self.collector.committed if self.collector else None
        health: dict[str, Any] = {
            "role": self.role,
            "epoch": self.epoch,
            "committed": committed.to_json() if committed else None,
            "decoder": decoder_name(),
        }
        if self.remote is not None:
            active = self.collector if self.leading else None
            version = active.config_version if active is not None else None
            switched = active.switched_at if active is not None else None
            health["config"] = {
                "source": "webui",
                "version": version if version is not None else self.remote.current.version,
                "switchedAt": switched.to_json() if switched else None,
            }
        return health


def _start_sources(
    settings: Settings,
    instance_name: str,
    config_file: Path | None,
    metrics: CollectorMetrics,
    shutdown: threading.Event,
) -> tuple[MySQLInstance, RemoteConfigRuntime | None, GovernanceRuntime | None]:
    """The instance's settings, their web admin poller (None: from the file) and the policy
    set in force; raises (one sentence) when any of them cannot be had."""
    # collector.config_source 'webui': connection and filters from the web admin, polled; a
    # deleted instance sets shutdown, and the process stops with the poller's sentence.
    remote = (
        start_remote_config(settings, instance_name, metrics, on_deleted=shutdown.set)
        if settings.collector.config_source == "webui"
        else None
    )
    try:
        instance = remote.current.instance if remote else settings.instance(instance_name)
        # The policy set first: without the configured policies nothing may be published, so
        # a missing one stops here, before any election (one sentence, from start_governance).
        if remote is not None and settings.governance.source == "webui":
            governance = remote.start_governance()  # the same reply: one poller, one etag
        else:
            governance = start_governance(settings, instance.name, config_file)
    except BaseException:
        if remote is not None:
            remote.close()
        raise
    if remote is not None:
        remote.start_polling()
    return instance, remote, governance


def run_collector(
    settings: Settings,
    instance_name: str,
    metrics_port: int,
    ha: bool,
    config_file: Path | None = None,
) -> None:
    # python-mysql-replication logs its whole configuration at INFO on every connect.
    logging.getLogger("pymysqlreplication").setLevel(logging.WARNING)
    # httpx logs every request at INFO: one line per config poll (every few seconds).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # `kill -USR1 <pid>` prints every thread's stack: what a stuck collector is waiting for.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    metrics = CollectorMetrics()
    shutdown = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: shutdown.set())
    instance, remote, governance = _start_sources(
        settings, instance_name, config_file, metrics, shutdown
    )
    election = LeaderElection(settings.zookeeper, instance.name) if ha else None
    status = _Status(remote, election)
    if governance is not None:
        metrics.governance_version.labels(instance.name).set(governance.version)
    server = (
        serve_observability(
            settings.collector.metrics_host,
            metrics_port,
            metrics.registry,
            "collector",
            status.ready,
            health=status.to_json,
        )
        if metrics_port
        else None
    )
    metrics.role.labels(instance.name).set(0)
    # The web admin's component registry shows this process and whether it leads.
    heartbeat = register(
        settings,
        "collector",
        instance.name,
        role=lambda: "active" if status.leading else "standby",
    )
    log_decoder()
    metrics.native_decoder.labels(instance.name).set(decoder_name() == "native")

    def start_collector(stop: threading.Event, epoch: int) -> Collector:
        publisher = KafkaPublisher(settings.kafka, instance.name)
        # A standby kept the newest config while it waited, and asks once more now: a change
        # made since its last poll (a mirror disabled, a filter) that the collector before
        # it put in force is in force from its first transaction. Unreachable: the one kept.
        if remote is not None:
            remote.poll_once()
        config = remote.current if remote is not None else None
        status.collector = Collector(
            config.instance if config else instance,
            config.collector if config else settings.collector,
            publisher,
            metrics,
            stop=stop,
            epoch=epoch,
            governance=governance,
            updates=remote,
            config=config,
            stopped=StoppedTables.from_file(settings.tables, instance.name, settings.shard_rules),
        )
        return status.collector

    def lead(stop: threading.Event, epoch: int) -> None:
        status.leading, status.epoch = True, epoch
        metrics.epoch.labels(instance.name).set(epoch)
        try:
            lead_until_stepped_down(
                lambda: start_collector(stop, epoch),
                stop,
                count_error=lambda kind: metrics.errors.labels(instance.name, kind).inc(),
                elected=election is not None,
                backoff=RetryPolicy(max_delay_s=settings.collector.reconnect_backoff_max_s),
            )
        finally:
            status.leading = False
            metrics.role.labels(instance.name).set(0)

    tune_gc()  # after start-up: what it made is frozen out of the collector's sight
    try:
        if election is not None:
            election.run(lead, shutdown)
        else:
            lead(shutdown, 0)
    finally:
        heartbeat.close()
        if server is not None:
            server.close()
        if governance is not None:
            governance.close()
        if remote is not None:
            remote.close()
    if remote is not None and remote.failure is not None:
        raise remote.failure


def lead_until_stepped_down(
    start_collector: Callable[[], Collector],
    stop: threading.Event,
    *,
    count_error: Callable[[str], object],
    elected: bool,
    backoff: RetryPolicy,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run collectors while this process leads: until ``stop``, a fencing, or an error a new
    collector cannot cure.

    A producer that librdkafka declared unusable without a fencing is replaced the way a
    restart would: a new collector starts a new producer (fencing the dead one's open
    transaction) and resumes from the position Kafka holds as committed. Under an election
    the process steps down instead: the election's next round (a new epoch, perhaps another
    process) does the same, and nothing here can fence a leader elected meanwhile.
    """
    lost_in_a_row = 0
    while not stop.is_set():
        started = clock()
        try:
            start_collector().run()
            return
        except FencedError as exc:
            log.warning("%s", exc)
            count_error("fenced")
            return
        except ProducerLostError as exc:
            count_error("producer_lost")
            if elected:
                log.warning("%s Stepping down: the next active collector resumes.", exc)
                return
            # One that ran for a while starts the back-off afresh; one lost at once waits
            # longer each time (a broker that keeps failing it is not hammered).
            lost_in_a_row = 1 if clock() - started > backoff.max_delay_s else lost_in_a_row + 1
            delay_s = backoff.delay(lost_in_a_row)
            log.warning(
                "%s A new producer resumes from the last committed position in %.1f s.",
                exc,
                delay_s,
            )
            stop.wait(delay_s)


class FileSources:
    """``cdc-mirror collect --from-files``: the collector's events from archived binlog files
    (``collector.binlog_files``) instead of the instance's binlog stream."""

    def __init__(self, paths: list[str]) -> None:
        self._paths = expand_paths(paths)
        self.last: BinlogFiles | None = None

    def open(self, start: CollectorPosition) -> BinlogFiles:
        self.last = BinlogFiles(self._paths, start)
        return self.last

    def initial_gtid(self) -> str:
        return BinlogFiles(self._paths).initial_previous_gtids()


def _no_server(schema: str, table: str) -> TableSchema:
    raise ContractError(f"{schema}.{table}: no server is asked for table schemas (--offline).")


def collect_files(
    settings: Settings,
    instance_name: str,
    paths: list[str],
    offline: bool = False,
    config_file: Path | None = None,
) -> CollectorPosition | None:
    """Publish the row changes of binlog files to the instance's topic, exactly as the live
    collector would have (the same messages, offsets and committed positions), resuming after
    the position stored in Kafka; returns the position committed last. ``offline``: no
    server is asked for table schemas (names and types from the table maps, ``@1``, ``@2``, …
    where the files carry no names)."""
    logging.getLogger("pymysqlreplication").setLevel(logging.WARNING)
    metrics = CollectorMetrics()
    instance = settings.instance(instance_name)
    governance = start_governance(settings, instance.name, config_file)
    sources = FileSources(paths)
    collector = Collector(
        instance,
        settings.collector,
        KafkaPublisher(settings.kafka, instance.name),
        metrics,
        governance=governance,
        source=sources,
        schemas=PositionalTableSchemas(_no_server) if offline else None,
        stopped=StoppedTables.from_file(settings.tables, instance.name, settings.shard_rules),
    )
    try:
        collector.run()
    except BinlogFileError:
        raise
    except CdcMirrorError as exc:
        if sources.last is None or not sources.last.event_path:
            raise
        raise BinlogFileError(f"binlog file {sources.last.where()}: {exc}") from None
    finally:
        if governance is not None:
            governance.close()
    return collector.committed
