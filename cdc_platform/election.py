"""One active process among several, elected through ZooKeeper (kazoo's ``Election``
recipe): the collectors of an instance and the schedulers use it.

Every process of a group joins the election under ``<base>/election``; the winner increments
the group's epoch (a ZooKeeper counter at ``<base>/epoch``) and runs its work until it stops,
loses its ZooKeeper session or the work returns, then steps down and rejoins as a standby.
Each round uses a new ZooKeeper session: after a lost session the old client's lock state
cannot be trusted (it may still believe it holds the lock).

What keeps a paused former leader from acting is the caller's business: the collector is
fenced by Kafka's transactional id, the scheduler stops its running job when ``stop`` is set
(a lost or suspended session sets it at once).
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import CancelledError, KazooException
from kazoo.handlers.threading import KazooTimeoutError

from cdc_platform.config import ZooKeeperSettings
from cdc_platform.retry import RetryCancelled, RetryPolicy
from simple_binlog.errors import RetriableError, ServiceUnavailableError

log = logging.getLogger(__name__)

# ZooKeeper away: connect again about every second (jittered), until shutdown.
_RECONNECT = RetryPolicy(first_delay_s=1.0, max_delay_s=1.0)


def _log_retry(exc: RetriableError, delay_s: float) -> None:
    log.warning("%s Retrying in %.1f s.", exc, delay_s)


LeaderWork = Callable[[threading.Event, int], None]


class LeaderElection:
    """The election of one group: ``base`` is its ZooKeeper path, ``what`` names the role in
    log lines ("the active collector of local", "the active scheduler")."""

    def __init__(
        self,
        settings: ZooKeeperSettings,
        base: str,
        what: str,
        identifier: str | None = None,
    ) -> None:
        self._settings = settings
        self._base = base
        self._what = what
        self.identifier = identifier or f"{socket.gethostname()}:{threading.get_native_id()}"
        # A ZooKeeper session is live now (a standby's readiness).
        self.connected = False
        # This process leads now (set while its work runs).
        self.leading = False

    def _connect(self, lost: threading.Event) -> KazooClient:
        client = KazooClient(hosts=self._settings.hosts, timeout=self._settings.session_timeout_s)

        def on_state(state: KazooState) -> None:
            if state in (KazooState.LOST, KazooState.SUSPENDED):
                # SUSPENDED: the session may still be alive, but this process cannot know
                # whether a standby has taken over: stop publishing now; Kafka fencing covers
                # what is already in flight.
                log.warning("ZooKeeper session %s: stepping down", state)
                self.connected = False
                lost.set()

        client.add_listener(on_state)
        try:
            client.start(timeout=self._settings.session_timeout_s * 2)
        except KazooTimeoutError:
            client.close()
            raise ServiceUnavailableError(
                f"ZooKeeper at {self._settings.hosts} did not answer."
            ) from None
        return client

    def run(self, work: LeaderWork, shutdown: threading.Event) -> None:
        """Stand by until elected, lead with ``work(stop, epoch)``, repeat until shutdown."""
        while not shutdown.is_set():
            lost = threading.Event()
            try:
                client = _RECONNECT.call(
                    functools.partial(self._connect, lost), stop=shutdown, on_retry=_log_retry
                )
            except RetryCancelled:
                continue
            self.connected = not lost.is_set()
            election = client.Election(f"{self._base}/election", self.identifier)
            # A standby waits inside the election: cancel it on shutdown so it exits at once.
            round_over = threading.Event()

            def cancel_on_shutdown(
                election: Any = election, done: threading.Event = round_over
            ) -> None:
                while not done.wait(0.2):
                    if shutdown.is_set():
                        election.cancel()
                        return

            canceller = threading.Thread(target=cancel_on_shutdown, daemon=True)
            canceller.start()
            try:
                election.run(self._lead, client, work, shutdown, lost)
            except (KazooException, CancelledError) as exc:
                if not shutdown.is_set():
                    log.warning("leader election interrupted (%s); rejoining", exc)
            finally:
                round_over.set()
                self.connected = False
                canceller.join()
                client.stop()
                client.close()

    def _lead(
        self,
        client: KazooClient,
        work: LeaderWork,
        shutdown: threading.Event,
        lost: threading.Event,
    ) -> None:
        if lost.is_set():
            return
        counter = client.Counter(f"{self._base}/epoch")
        counter += 1
        epoch = int(counter.value)
        log.info("%s is %s (epoch %d)", self.identifier, self._what, epoch)
        stop = threading.Event()

        def relay() -> None:
            while not stop.is_set():
                if shutdown.wait(0.1) or lost.is_set():
                    stop.set()

        watcher = threading.Thread(target=relay, daemon=True)
        watcher.start()
        self.leading = True
        try:
            work(stop, epoch)
        finally:
            self.leading = False
            stop.set()
            watcher.join()
