"""Faults and what recovery from each looks like, the fault table, and the Redis sampler that
checks no value ever goes back.

Each fault is injected, then its recovery is waited for with a deadline (never a sleep): the
table records how long the pipeline took to be whole again. A component that exits on its own
during the run (not killed by us) is restarted by ``Watchdog`` and counted, as a process
supervisor (systemd, Kubernetes) would do in production.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from cdc_mirror.processes import Component
from stack.manager import LocalStack
from tests.e2e.pipeline import ChaosPipeline

log = logging.getLogger(__name__)

# A restarted stream writer needs a new Spark session and a first batch: minutes when loaded.
RECOVERY_TIMEOUT_S = 360.0


@dataclass
class FaultRecord:
    fault: str
    how: str
    recovered_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.recovered_s) + len(self.failures)


class FaultTable:
    def __init__(self) -> None:
        self.records: dict[str, FaultRecord] = {}
        self.crashes: dict[str, int] = {}

    def record(self, fault: str, how: str) -> FaultRecord:
        return self.records.setdefault(fault, FaultRecord(fault, how))

    @property
    def ok(self) -> bool:
        return all(not r.failures for r in self.records.values())

    def render(self) -> str:
        header = ("fault", "injected", "recovered", "recovery s (min/median/max)", "outcome")
        lines: list[tuple[str, ...]] = [header]
        for record in self.records.values():
            times = sorted(record.recovered_s)
            spread = (
                f"{times[0]:.1f} / {times[len(times) // 2]:.1f} / {times[-1]:.1f}" if times else "-"
            )
            outcome = "ok" if not record.failures else "; ".join(record.failures[:2])
            lines.append((record.fault, str(record.count), str(len(times)), spread, outcome))
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = [
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            for line in lines
        ]
        text.insert(1, "  ".join("-" * width for width in widths))
        crashes = ", ".join(f"{name} ×{n}" for name, n in sorted(self.crashes.items())) or "none"
        text.append(f"components that exited on their own and were restarted: {crashes}")
        return "\n".join(text)


class Watchdog(threading.Thread):
    """Restarts components that exited on their own (not ones the chaos loop holds down)."""

    def __init__(self, pipeline: ChaosPipeline, table: FaultTable) -> None:
        super().__init__(name="chaos-watchdog", daemon=True)
        self.pipeline = pipeline
        self.table = table
        self.stop = threading.Event()
        self.held: set[str] = set()  # components a fault is handling right now
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            with self.lock:
                for name, component in self.pipeline.supervisor.components.items():
                    if name in self.held or component.running or component.process is None:
                        continue
                    log.warning("%s exited with %s; restarting it", name, component.returncode)
                    self.table.crashes[name] = self.table.crashes.get(name, 0) + 1
                    component.start()

    def hold(self, name: str) -> _Held:
        return _Held(self, name)


class _Held:
    def __init__(self, watchdog: Watchdog, name: str) -> None:
        self.watchdog, self.name = watchdog, name

    def __enter__(self) -> None:
        with self.watchdog.lock:
            self.watchdog.held.add(self.name)

    def __exit__(self, *_: object) -> None:
        with self.watchdog.lock:
            self.watchdog.held.discard(self.name)


class Faults:
    """The faults of the suite. Each returns the seconds until the pipeline was whole again."""

    def __init__(self, pipeline: ChaosPipeline, watchdog: Watchdog, session_timeout_s: float):
        self.pipeline = pipeline
        self.watchdog = watchdog
        self.session_timeout_s = session_timeout_s

    # -- helpers ------------------------------------------------------------------------------
    def _active(self) -> Component:
        p = self.pipeline
        p.wait(lambda: p.active_collector() is not None, RECOVERY_TIMEOUT_S, "an active collector")
        active = p.active_collector()
        assert active is not None
        return active

    def _commits_advance(self, collector: Component, since: str | None) -> bool:
        now = self.pipeline.committed(collector)
        return now is not None and now != since and self.pipeline.role(collector) == "active"

    def _new_active_commits(self, previous: Component, started: float) -> float:
        """Wait until another collector is active and commits; seconds since ``started``."""
        p = self.pipeline
        other = next(c for c in p.collectors if c is not previous)
        baseline = p.committed(other)
        p.wait(
            lambda: self._commits_advance(other, baseline),
            RECOVERY_TIMEOUT_S,
            f"{other.name} to take over and commit",
        )
        return time.monotonic() - started

    # -- the faults ---------------------------------------------------------------------------
    def kill_active_collector(self) -> float:
        active = self._active()
        with self.watchdog.hold(active.name):
            started = time.monotonic()
            active.kill()
            took = self._new_active_commits(active, started)
            active.start()
        self.pipeline.wait(
            lambda: self.pipeline.role(active) == "standby",
            RECOVERY_TIMEOUT_S,
            f"{active.name} to rejoin as standby",
        )
        return took

    def kill_standby_collector(self) -> float:
        active = self._active()
        standby = next(c for c in self.pipeline.collectors if c is not active)
        with self.watchdog.hold(standby.name):
            started = time.monotonic()
            standby.kill()
            standby.start()
        # Held only while killed: should the restarted process exit, the watchdog restarts it
        # (and counts the crash) instead of the fault waiting for a process that is gone.
        self.pipeline.wait(
            lambda: self.pipeline.role(standby) == "standby",
            RECOVERY_TIMEOUT_S,
            f"{standby.name} to rejoin as standby",
        )
        assert self.pipeline.role(active) == "active", "the active collector lost its role"
        return time.monotonic() - started

    def pause_active_collector(self) -> float:
        """SIGSTOP past the ZooKeeper session timeout: the standby takes over; on SIGCONT the
        old leader finds its session gone (and its producer fenced) and steps down."""
        active = self._active()
        with self.watchdog.hold(active.name):
            started = time.monotonic()
            active.pause()
            try:
                took = self._new_active_commits(active, started)
                # Stay paused well past the timeout even if the takeover was quick.
                self.pipeline.wait(
                    lambda: time.monotonic() - started > 2 * self.session_timeout_s,
                    RECOVERY_TIMEOUT_S,
                    "the pause to outlast the session",
                )
            finally:
                active.resume()
            self.pipeline.wait(
                lambda: self.pipeline.role(active) == "standby",
                RECOVERY_TIMEOUT_S,
                f"{active.name} to step down to standby after the pause",
            )
        return took

    def kill_stream_writer(self) -> float:
        writer = self.pipeline.component("stream-writer")
        with self.watchdog.hold(writer.name):
            started = time.monotonic()
            writer.kill()
            writer.start()
        self.pipeline.wait(
            lambda: (self.pipeline.writer_rows() or 0) > 0,
            RECOVERY_TIMEOUT_S,
            "the restarted stream writer to write rows",
        )
        return time.monotonic() - started

    def _kill_mirror(self, target: str) -> float:
        mirror = self.pipeline.component(f"mirror-{target}")
        with self.watchdog.hold(mirror.name):
            started = time.monotonic()
            mirror.kill()
            mirror.start()
        self.pipeline.wait(
            lambda: (self.pipeline.mirror_rows(target) or 0) > 0,
            RECOVERY_TIMEOUT_S,
            f"the restarted {target} mirror to apply rows",
        )
        return time.monotonic() - started

    def kill_mirror_redis(self) -> float:
        return self._kill_mirror("redis")

    def kill_mirror_warehouse(self) -> float:
        return self._kill_mirror("warehouse")

    def _restart_service(self, name: str) -> float:
        """Stop and start one shared service; recovered when the active collector commits
        again and the consumers have applied rows since."""
        p = self.pipeline
        service = LocalStack(p.base).select([name])[0]
        started = time.monotonic()
        assert service.down() == "stopped", f"{name} did not stop"
        assert service.up() == "started", f"{name} did not start"
        writer_before = p.writer_rows() or 0
        mirror_before = {t: p.mirror_rows(t) or 0 for t in p.mirror_ports}
        active = self._active()
        baseline = p.committed(active)
        p.wait(
            lambda: (a := p.active_collector()) is not None and self._commits_advance(a, baseline),
            RECOVERY_TIMEOUT_S,
            f"commits after the {name} restart",
        )
        p.wait(
            lambda: (
                (p.writer_rows() or 0) != writer_before
                and all((p.mirror_rows(t) or 0) != mirror_before[t] for t in p.mirror_ports)
            ),
            RECOVERY_TIMEOUT_S,
            f"the consumers to move after the {name} restart",
        )
        return time.monotonic() - started

    def restart_kafka(self) -> float:
        return self._restart_service("kafka")

    def restart_mariadb(self) -> float:
        return self._restart_service("mariadb")


FAULT_HOW: dict[str, str] = {
    "kill_active_collector": "SIGKILL of the collector /health calls active; restarted",
    "kill_standby_collector": "SIGKILL of the standby collector; restarted",
    "pause_active_collector": "SIGSTOP of the active collector for 2× the ZooKeeper session "
    "timeout, then SIGCONT",
    "kill_stream_writer": "SIGKILL of the stream writer's process group (its JVM too); restarted",
    "kill_mirror_redis": "SIGKILL of the Redis mirror; restarted",
    "kill_mirror_warehouse": "SIGKILL of the warehouse mirror; restarted",
    "restart_kafka": "the local stack's Kafka broker stopped and started",
    "restart_mariadb": "the local stack's MariaDB stopped and started",
}
RESTART_FAULTS = ("restart_kafka", "restart_mariadb")


def run_fault(faults: Faults, name: str, table: FaultTable) -> None:
    record = table.record(name, FAULT_HOW[name])
    action: Callable[[], float] = getattr(faults, name)
    log.info("chaos: injecting %s", name)
    try:
        record.recovered_s.append(action())
    except (AssertionError, Exception) as exc:  # noqa: BLE001 - recorded, reported at the end
        record.failures.append(" ".join(str(exc).split())[:300])
        log.error("chaos: %s did not recover: %s", name, exc)


class RedisSampler(threading.Thread):
    """Reads a set of keys throughout the run; a key's stored binlogOffset must never
    decrease, and a key once set must not vanish (tombstones keep their offset)."""

    def __init__(self, url: str, pattern: str, keys: int = 300, every_s: float = 0.2) -> None:
        super().__init__(name="chaos-redis-sampler", daemon=True)
        self.client = redis.Redis.from_url(url, socket_timeout=10)
        self.pattern = pattern
        self.want = keys
        self.every_s = every_s
        self.stop = threading.Event()
        self.seen: dict[bytes, bytes] = {}
        self.reads = 0
        self.regressions: list[str] = []
        self.fatal: BaseException | None = None

    def run(self) -> None:
        try:
            cursor = 0
            while not self.stop.wait(self.every_s):
                if len(self.seen) < self.want:
                    cursor, found = self.client.scan(cursor, match=self.pattern, count=500)
                    for key in found[: self.want - len(self.seen)]:
                        self.seen.setdefault(key, b"")
                self._sample()
            self._sample()
        except BaseException as exc:  # reported by the test
            self.fatal = exc
            raise

    def _sample(self) -> None:
        keys = list(self.seen)
        if not keys:
            return
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.getrange(key, 12, 31)
        for key, offset in zip(keys, pipe.execute(), strict=True):
            self.reads += 1
            before = self.seen[key]
            if before and not offset:
                self.regressions.append(f"{key.decode()} vanished after offset {before.decode()}")
            elif offset < before:
                self.regressions.append(
                    f"{key.decode()} went back from {before.decode()} to {offset.decode()}"
                )
            if offset:
                self.seen[key] = max(before, offset)
