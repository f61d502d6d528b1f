"""Active/standby collectors per MySQL instance, elected through ZooKeeper.

Every collector process of an instance joins the election; the winner increments the
instance's epoch (a ZooKeeper counter) and runs the collector until it stops, loses its
ZooKeeper session or is fenced, then steps down and rejoins as a standby.

Split brain is prevented by Kafka, not by timing: all collectors of an instance share one
``transactional.id``, so the new active's ``init_transactions`` fences the previous one. A
leader that was paused past its session and resumes can no longer commit anything (the broker
aborts its transaction); it finds out on its next commit, or earlier through its lost
ZooKeeper session, and steps down by itself.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from simple_binlog.config import ZooKeeperSettings
from simple_binlog.errors import ServiceUnavailableError

log = logging.getLogger(__name__)

LeaderWork = Callable[[threading.Event, int], None]


class LeaderElection:
    def __init__(self, settings: ZooKeeperSettings, instance: str, identifier: str | None = None):
        self._settings = settings
        self._instance = instance
        self.identifier = identifier or f"{socket.gethostname()}:{threading.get_native_id()}"
        self._base = f"{settings.root}/collectors/{instance}"
        self._client = KazooClient(hosts=settings.hosts, timeout=settings.session_timeout_s)
        self._lost = threading.Event()
        self._client.add_listener(self._on_state)

    def _on_state(self, state: KazooState) -> None:
        if state in (KazooState.LOST, KazooState.SUSPENDED):
            # SUSPENDED: the session may still be alive, but this process cannot know whether
            # a standby has taken over: stop publishing now, Kafka fencing covers the rest.
            log.warning("ZooKeeper session %s: stepping down", state)
            self._lost.set()

    def start(self) -> None:
        try:
            self._client.start(timeout=self._settings.session_timeout_s * 2)
        except KazooTimeoutError:
            raise ServiceUnavailableError(
                f"ZooKeeper at {self._settings.hosts} did not answer."
            ) from None

    def stop(self) -> None:
        self._client.stop()
        self._client.close()

    def run(self, work: LeaderWork, shutdown: threading.Event) -> None:
        """Stand by until elected, lead with ``work(stop, epoch)``, repeat until shutdown."""
        election = self._client.Election(f"{self._base}/election", self.identifier)
        while not shutdown.is_set():
            self._lost.clear()
            try:
                election.run(self._lead, work, shutdown)
            except KazooException as exc:
                log.warning("leader election interrupted (%s); rejoining", exc)
            if not shutdown.is_set():
                self._wait_for_session(shutdown)

    def _lead(self, work: LeaderWork, shutdown: threading.Event) -> None:
        counter = self._client.Counter(f"{self._base}/epoch")
        counter += 1
        epoch = int(counter.value)
        log.info(
            "%s is the active collector of %s (epoch %d)", self.identifier, self._instance, epoch
        )
        stop = threading.Event()

        def relay() -> None:
            while not stop.is_set():
                if shutdown.wait(0.2) or self._lost.is_set():
                    stop.set()

        watcher = threading.Thread(target=relay, daemon=True)
        watcher.start()
        try:
            work(stop, epoch)
        finally:
            stop.set()
            watcher.join()

    def _wait_for_session(self, shutdown: threading.Event) -> None:
        while not shutdown.is_set() and self._client.state != KazooState.CONNECTED:
            shutdown.wait(0.5)
        if self._client.state == KazooState.CONNECTED:
            return
