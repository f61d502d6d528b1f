"""The chaos suite's pipeline: every component a real ``cdc-mirror`` process with names of its
own (instance → topic, ZooKeeper root and transactional id; stream writer name, lake, Hive
databases; warehouse schema; Redis prefix; consumer groups; metrics ports), so nothing
collides with another test or the demo on the shared stack.
"""

from __future__ import annotations

import json
import random
import re
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from cdc_mirror.processes import Component, Supervisor, config_env, free_port, wait_until
from cdc_platform.config import Settings
from cdc_platform.kafka import consumer_config
from simple_binlog.naming import topic_name

ROOT = Path(__file__).resolve().parents[2]
MIRROR_TARGETS = ("redis", "warehouse")


def scrape_sum(port: int, metric: str) -> float | None:
    """The sum of a Prometheus counter's samples, or None while the endpoint does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    pattern = re.compile(rf"^{metric}(?:_total)?(?:\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(text))


@dataclass
class ChaosNames:
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def instance(self) -> str:
        return f"chaos{self.tag}"

    @property
    def db_prefix(self) -> str:
        return f"chaos{self.tag}_ordercenter"

    @property
    def table(self) -> str:
        return f"{self.db_prefix}_orderinfo"


@dataclass
class ChaosPipeline:
    base: Settings
    tmp: Path
    start_gtid: str
    names: ChaosNames = field(default_factory=ChaosNames)
    supervisor: Supervisor = field(default_factory=Supervisor)
    collector_ports: tuple[int, int] = field(default_factory=lambda: (free_port(), free_port()))
    writer_port: int = field(default_factory=free_port)
    mirror_ports: dict[str, int] = field(
        default_factory=lambda: {target: free_port() for target in MIRROR_TARGETS}
    )

    # -- configuration ------------------------------------------------------------------------
    def overrides(self) -> dict[str, Any]:
        source = self.base.instances[0]
        tag = self.names.tag
        return {
            "instances": [
                {
                    "name": self.names.instance,
                    "host": source.host,
                    "port": source.port,
                    "user": source.user,
                    "password": source.password.get_secret_value(),
                    # Unique among the server's replicas (other tests run collectors too).
                    "replica_server_id": random.randrange(20_000, 2**31),
                }
            ],
            "kafka": {"partitions": 3},
            "zookeeper": {"root": f"/cdc-chaos-{tag}", "session_timeout_s": 4},
            "redis": {"key_prefix": f"chaos{tag}"},
            "spark": {"lake_dir": str(self.tmp / "lake"), "shuffle_partitions": 2},
            "collector": {
                "include": [rf"{self.names.db_prefix}_\d+\..*"],
                "start": self.start_gtid,
                "reconnect_backoff_max_s": 5,
            },
            "stream_writer": {
                "name": f"chaos{tag}",
                "database": f"chaos{tag}_raw",
                "trigger_interval_s": 5,
                "target_file_mb": 16,
            },
            "merge": {"database": f"chaos{tag}_snap", "writer": f"chaos{tag}"},
            "mirror": {
                "group_prefix": f"chaos{tag}",
                "warehouse_schema": f"chaos{tag}",
                "batch_size": 2000,
            },
            "tables": [
                {
                    "instance": self.names.instance,
                    "db_prefix": self.names.db_prefix,
                    "table_prefix": "orderinfo",
                }
            ],
        }

    @property
    def env(self) -> dict[str, str]:
        return config_env(self.overrides())

    def settings(self) -> Settings:
        return Settings(**self.overrides())

    @property
    def topic(self) -> str:
        return topic_name(self.settings().kafka, self.names.instance)

    # -- components ---------------------------------------------------------------------------
    def _component(
        self, name: str, args: list[str], health: str | None = None, **env: str
    ) -> Component:
        return Component(
            name, args, {**self.env, **env}, self.tmp / "logs" / f"{name}.log", health, cwd=ROOT
        )

    def build(self) -> None:
        add = self.supervisor.add
        instance = self.names.instance
        for letter, port in zip("ab", self.collector_ports, strict=True):
            add(
                self._component(
                    f"collector-{letter}",
                    ["collector", "run", "--instance", instance, "--metrics-port", str(port)],
                    f"http://127.0.0.1:{port}/health",
                )
            )
        add(
            self._component(
                "stream-writer",
                [
                    "stream-writer",
                    "run",
                    "--instance",
                    instance,
                    "--metrics-port",
                    str(self.writer_port),
                ],
            )
        )
        # A killed member's partitions move on after 6 s, not after the 45 s default.
        consumer_properties = json.dumps({"session.timeout.ms": "6000"})
        for target, port in self.mirror_ports.items():
            add(
                self._component(
                    f"mirror-{target}",
                    [
                        "mirror",
                        "run",
                        "--target",
                        target,
                        "--instance",
                        instance,
                        "--metrics-port",
                        str(port),
                    ],
                    CDC_MIRROR_KAFKA__CLIENT_PROPERTIES=consumer_properties,
                )
            )

    @property
    def collectors(self) -> list[Component]:
        return [self.supervisor[f"collector-{letter}"] for letter in "ab"]

    def component(self, name: str) -> Component:
        return self.supervisor[name]

    # -- observations -------------------------------------------------------------------------
    def role(self, collector: Component) -> str | None:
        health = collector.health() if collector.running else None
        return str(health["role"]) if isinstance(health, dict) else None

    def active_collector(self) -> Component | None:
        active = [c for c in self.collectors if self.role(c) == "active"]
        return active[0] if len(active) == 1 else None

    def committed(self, collector: Component) -> str | None:
        health = collector.health() if collector.running else None
        committed = health.get("committed") if isinstance(health, dict) else None
        return str(committed["gtid"]) if isinstance(committed, dict) else None

    def writer_rows(self) -> float | None:
        return scrape_sum(self.writer_port, "cdc_stream_writer_rows")

    def mirror_rows(self, target: str) -> float | None:
        return scrape_sum(self.mirror_ports[target], "cdc_mirror_rows")

    def writer_state(self) -> dict[str, Any] | None:
        state_file = (
            self.tmp
            / "lake"
            / "_stream_writer"
            / f"chaos{self.names.tag}"
            / "checkpoint"
            / "cdc_progress.json"
        )
        if not state_file.is_file():
            return None
        state: dict[str, Any] = json.loads(state_file.read_text())
        return state

    def writer_days(self) -> list[str]:
        """The days (``dt``) the stream writer wrote rows of the table for."""
        state = self.writer_state() or {}
        return sorted(state.get("tableDays", {}).get(self.names.table, []))

    def writer_caught_up(self, ends: dict[int, int]) -> bool:
        """Whether the writer's batches reached ``ends`` (partition → offset after the last
        message; transaction markers after it need not be read)."""
        state = self.writer_state()
        if state is None:
            return False
        next_offsets = {
            p["partition"]: p["nextOffset"] for p in state["partitions"] if p["topic"] == self.topic
        }
        return all(next_offsets.get(p, 0) >= end for p, end in ends.items() if end > 0)

    def mirror_lag(self, target: str, ends: dict[int, int]) -> int:
        """Messages before ``ends`` the target's consumer group has not committed. ``ends``
        are data offsets: a transactional topic ends with a commit marker, which a consumer
        skips and never commits past."""
        settings = self.settings()
        group = f"chaos{self.names.tag}.{target}"
        consumer = Consumer(consumer_config(settings.kafka, group_id=group))
        try:
            committed = consumer.committed(
                [TopicPartition(self.topic, p) for p in ends], timeout=10
            )
            return sum(max(ends[tp.partition] - max(tp.offset, 0), 0) for tp in committed)
        finally:
            consumer.close()

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> float:
        return wait_until(condition, timeout_s, what, poll_s=0.25)
