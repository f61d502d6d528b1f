"""Mirror processes and a Kafka topic of test messages (helpers of the mirror tests)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cdc_platform.config import Settings
from cdc_platform.kafka import consumer_config, ensure_topic, producer_config
from simple_binlog.message import SimpleBinlog
from simple_binlog.routing import partition_key

ROOT = Path(__file__).resolve().parents[3]


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.2
) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@dataclass
class MirrorScene:
    """A unique topic prefix, consumer group, Redis prefix and warehouse schema."""

    settings: Settings
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def topic_prefix(self) -> str:
        return f"mt{self.tag}."

    @property
    def topic(self) -> str:
        return f"{self.topic_prefix}local"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "CDC_MIRROR_KAFKA__TOPIC_PREFIX": self.topic_prefix,
            # A killed member's partitions move on after this, not after the 45 s default.
            "CDC_MIRROR_KAFKA__CLIENT_PROPERTIES": json.dumps({"session.timeout.ms": "6000"}),
            "CDC_MIRROR_REDIS__KEY_PREFIX": self.settings.redis.key_prefix,
            "CDC_MIRROR_MIRROR__WAREHOUSE_SCHEMA": self.settings.mirror.warehouse_schema,
            "CDC_MIRROR_MIRROR__GROUP_PREFIX": f"mt{self.tag}",
            "CDC_MIRROR_TABLES": json.dumps([t.model_dump() for t in self.settings.tables]),
            **extra,
        }

    def publish(self, messages: Iterable[SimpleBinlog], raw: Iterable[bytes] = ()) -> int:
        ensure_topic(self.settings.kafka, self.topic)
        producer = Producer(producer_config(self.settings.kafka, client_id="mirror-test"))
        count = 0
        for message in messages:
            producer.produce(
                self.topic,
                key=partition_key(message.schema_name, message.table_name),
                value=message.encode(),
            )
            count += 1
            if count % 5000 == 0:
                producer.flush(30)
        for payload in raw:
            producer.produce(self.topic, key=b"shop_00.orders_00", value=payload)
        assert producer.flush(30) == 0
        return count

    def read_topic(self, topic: str, expected: int, timeout_s: float = 30) -> list[dict]:
        """Records of ``topic`` that concern this scene's topic (shared dead-letter topics)."""
        consumer = Consumer(
            consumer_config(self.settings.kafka, group_id=f"mt-read-{uuid.uuid4().hex[:6]}")
        )
        consumer.subscribe([topic])
        found: list[dict] = []
        deadline = time.monotonic() + timeout_s
        try:
            while len(found) < expected and time.monotonic() < deadline:
                for record in consumer.consume(num_messages=100, timeout=0.5):
                    if record.error() is None and record.value():
                        document = json.loads(record.value())
                        if document.get("topic") == self.topic:
                            found.append(document)
        finally:
            consumer.close()
        return found

    def committed_lag(self, target: str) -> int:
        """Messages of the topic not yet committed by the target's consumer group."""
        consumer = Consumer(consumer_config(self.settings.kafka, group_id=f"mt{self.tag}.{target}"))
        try:
            metadata = consumer.list_topics(self.topic, timeout=10)
            partitions = [
                TopicPartition(self.topic, p) for p in metadata.topics[self.topic].partitions
            ]
            committed = consumer.committed(partitions, timeout=10)
            lag = 0
            for tp in committed:
                _, high = consumer.get_watermark_offsets(tp, timeout=10)
                lag += high - max(tp.offset, 0)
            return lag
        finally:
            consumer.close()


@dataclass
class MirrorProcess:
    env: dict[str, str]
    target: str
    log: Path
    metrics_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        command = [
            sys.executable,
            "-m",
            "cdc_mirror",
            "mirror",
            "run",
            "--target",
            self.target,
            "--metrics-port",
            str(self.metrics_port),
        ]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return -9
        return self.process.returncode


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()
