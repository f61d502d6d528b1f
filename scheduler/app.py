"""``cdc-mirror scheduler``: one process per host; ZooKeeper elects the active one
(``cdc_platform.election``, path ``<zookeeper.root>/scheduler``), the others stand by.

The active scheduler reads the table mirrors from the configuration store (live), keeps its
run history in the web admin (``config_store.source: webui``; with the file store the history
lives in the process), registers itself in the component registry with its role, and serves
/metrics and the probes on ``scheduler.metrics_host:metrics_port``. A lost ZooKeeper session
stops the running job at once: the standby that takes over starts it again.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path

from cdc_platform.config import Settings, ZooKeeperSettings
from cdc_platform.config_store import ConfigSnapshot, watch_config
from cdc_platform.control import AdminControl, MemoryRunStore, RunStore, open_control, register
from cdc_platform.election import LeaderElection
from cdc_platform.observability import Probe, serve_observability
from scheduler.jobs import CommandJobs, MergeLake
from scheduler.plan import HourClosing
from scheduler.service import Scheduler

log = logging.getLogger(__name__)


def election_base(settings: ZooKeeperSettings) -> str:
    return f"{settings.root}/scheduler"


def run_store(settings: Settings) -> RunStore:
    control = open_control(settings)
    if isinstance(control, AdminControl):
        return control
    log.warning(
        "config_store.source is 'file': the run history is kept in this process only (the "
        "web admin's Runs page needs config_store.source 'webui')."
    )
    return MemoryRunStore()


def run_elected(
    scheduler: Scheduler,
    election: LeaderElection,
    shutdown: threading.Event,
) -> None:
    """Stand by, lead when elected (ticking until the session or the process ends), repeat."""

    def lead(stop: threading.Event, epoch: int) -> None:
        log.info("scheduler %s leads (epoch %d)", scheduler.identifier, epoch)
        scheduler.lead(stop)

    election.run(lead, shutdown)


def run_scheduler(settings: Settings, config_file: Path | None = None) -> None:
    shutdown = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: shutdown.set())
    watch = watch_config(settings, config_file)

    def config() -> ConfigSnapshot:
        watch.take()  # the scheduler's safe point: between two runs
        return watch.current

    identifier = f"{socket.gethostname()}:{os.getpid()}"
    runs = run_store(settings)
    scheduler = Scheduler(
        settings.scheduler,
        lambda: list(config().tables_for("hive")),
        MergeLake(settings, config),
        CommandJobs(settings, config, config_file),
        runs,
        identifier,
        closing=HourClosing.of(settings.stream_writer),
    )
    election = LeaderElection(
        settings.zookeeper, election_base(settings.zookeeper), "the active scheduler", identifier
    )

    def ready() -> Probe:
        if election.leading:
            return Probe(True, f"active: {scheduler.doing}")
        if election.connected:
            return Probe(True, "standby with a live ZooKeeper session")
        return Probe(False, "no ZooKeeper session")

    port = settings.scheduler.metrics_port
    server = (
        serve_observability(
            settings.scheduler.metrics_host, port, scheduler.metrics.registry, "scheduler", ready
        )
        if port
        else None
    )
    heartbeat = register(
        settings,
        "scheduler",
        role=lambda: "active" if election.leading else "standby",
        detail=lambda: scheduler.doing if election.leading else "",
    )
    try:
        run_elected(scheduler, election, shutdown)
    finally:
        heartbeat.close()
        if server is not None:
            server.close()
        runs.close()
        watch.close()
