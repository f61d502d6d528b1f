"""Shared pieces of the collector tests: a test database, collector processes, the topic."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer

from cdc_platform.config import Settings
from cdc_platform.kafka import consumer_config
from collector.position import parse_gtid
from collector.reader import ServerPosition, read_range, server_position
from simple_binlog.control import is_control
from simple_binlog.message import SimpleBinlog, decode_message
from simple_binlog.naming import topic_name
from simple_binlog.offsets import OffsetGenerator
from tests.integration.mariadb_admin import admin_connection as admin

ROOT = Path(__file__).resolve().parents[3]


def reached(gtid_position: str | None, target: str) -> bool:
    """Whether a GTID position includes every domain's sequence of ``target``."""
    if not gtid_position:
        return False
    have = {parse_gtid(g)[0]: parse_gtid(g)[2] for g in gtid_position.split(",")}
    return all(have.get(parse_gtid(g)[0], -1) >= parse_gtid(g)[2] for g in target.split(","))


@dataclass
class CollectorProcess:
    env: dict[str, str]
    port: int
    log: Path
    ha: bool = False
    instance: str | None = None  # --instance; default: the CLI's ('local')
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> CollectorProcess:
        command = [
            sys.executable,
            "-m",
            "cdc_mirror",
            "collector",
            "run",
            "--metrics-port",
            str(self.port),
        ]
        if not self.ha:
            command.append("--no-ha")
        if self.instance is not None:
            command += ["--instance", self.instance]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )
        return self

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            return r.read().decode()

    def committed_gtid(self) -> str | None:
        health = self.health()
        committed = health and health["committed"]
        return committed["gtid"] if committed and committed["partial"] is None else None

    def wait_for(self, condition, what: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        # A process that dies during the wait fails it at once; one killed before may be
        # waited on for a condition about the others (failover).
        was_alive = self.alive()
        while time.monotonic() < deadline:
            if condition():
                return
            if was_alive and self.process is not None and self.process.poll() is not None:
                raise AssertionError(
                    f"the collector exited ({self.process.returncode}) while waiting for "
                    f"{what}; log tail:\n{self.log.read_text()[-6000:]}"
                )
            time.sleep(0.1)
        if self.alive():
            self.signal(signal.SIGUSR1)  # the collector prints its threads' stacks
            time.sleep(1)
        raise AssertionError(
            f"timed out waiting for {what}; log tail:\n{self.log.read_text()[-6000:]}"
        )


@dataclass
class CollectorScene:
    settings: Settings
    db: str
    prefix: str
    start: ServerPosition
    env: dict[str, str]
    tmp: Path
    processes: list[CollectorProcess] = field(default_factory=list)

    def collector(
        self, port: int, ha: bool = False, name: str = "collector", instance: str | None = None
    ) -> CollectorProcess:
        process = CollectorProcess(self.env, port, self.tmp / f"{name}.log", ha, instance)
        self.processes.append(process)
        return process

    def position_now(self) -> ServerPosition:
        with admin(self.settings) as conn, conn.cursor() as cursor:
            return server_position(cursor)

    def expected(self, stop: ServerPosition) -> list[SimpleBinlog]:
        """What a clean, uninterrupted read of the binlog range yields."""
        return list(
            read_range(
                self.settings.instances[0], self.start.gtid, stop, OffsetGenerator(), [self.db]
            )
        )

    def received(self, at_least: int) -> list[SimpleBinlog]:
        kafka = self.settings.kafka.model_copy(update={"topic_prefix": self.prefix})
        consumer = Consumer(consumer_config(kafka, group_id=f"test-{uuid.uuid4().hex[:8]}"))
        consumer.subscribe([topic_name(kafka, self.settings.instances[0].name)])
        messages: list[SimpleBinlog] = []
        # Read while messages keep coming: give up after 60 s without a new one.
        deadline = time.monotonic() + 60
        try:
            while len(messages) < at_least and time.monotonic() < deadline:
                batch = [
                    decode_message(r.value())
                    for r in consumer.consume(5000, 1.0)
                    if r.error() is None and not is_control(r.key())
                ]
                if batch:
                    messages += batch
                    deadline = time.monotonic() + 60
            # One more poll: nothing beyond what is expected may arrive.
            messages += [
                decode_message(r.value())
                for r in consumer.consume(100, 3.0)
                if r.error() is None and not is_control(r.key())
            ]
        finally:
            consumer.close()
        return messages


def assert_exactly_once(received: list[SimpleBinlog], expected: list[SimpleBinlog]) -> None:
    def identity(message: SimpleBinlog) -> tuple:
        return (
            message.binlog_offset,
            message.table_name,
            message.event_type,
            tuple(sorted(message.content.items())),
        )

    got, wanted = Counter(map(identity, received)), Counter(map(identity, expected))
    duplicated = [(i, n) for i, n in got.items() if n > 1]
    missing = sorted(wanted - got)
    unexpected = sorted(got - wanted)
    assert not (duplicated or missing or unexpected), (
        f"{len(received)} received, {len(expected)} expected; duplicated {duplicated[:3]}, "
        f"missing {missing[:3]} ({len(missing)}), unexpected {unexpected[:3]} ({len(unexpected)}); "
        f"positions of the first unexpected: "
        f"{[m.position for m in received if unexpected and identity(m) == unexpected[0]]}"
    )
    per_table: dict[str, list[int]] = {}
    for message in received:
        per_table.setdefault(message.table_name, []).append(message.binlog_offset)
    expected_per_table: dict[str, list[int]] = {}
    for message in expected:
        expected_per_table.setdefault(message.table_name, []).append(message.binlog_offset)
    assert per_table == expected_per_table  # binlog order within each table
