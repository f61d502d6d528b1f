"""A PySpark job reads a topic with Spark's Kafka source and writes a Hive table; a second
Spark session queries that table while the first session is still open.

Each Spark session runs in a process of its own (one Python process holds one SparkContext):
tests/integration/spark_jobs/kafka_to_hive.py writes the table, prints ``READY <rows>`` and
keeps its session open until its stdin is closed; tests/integration/spark_jobs/query_hive.py
queries the table meanwhile. Both embed a Hive metastore client backed by the stack's
PostgreSQL database, so neither locks the other out (an embedded Derby metastore would).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from cdc_platform.config import Settings
from cdc_platform.kafka import admin_config, ensure_topic, producer_config
from simple_binlog.message import EventType, SimpleBinlog, Source

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent / "spark_jobs"
DATABASE = "cdc_test"
MESSAGES = 2_000
TABLES = (("shop", "orders"), ("shop", "customers"), ("billing", "invoices"))
# 2024-03-01T00:00:00Z in milliseconds; the messages span three days (three partitions).
START_MS = 1_709_251_200_000
STEP_MS = 3 * 24 * 3600 * 1000 // MESSAGES
SPARK_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 120.0


class SparkJob:
    """A Spark job in a child process: stdout read line by line, stderr kept in a file."""

    def __init__(self, script: str, args: list[str], log_file: Path) -> None:
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
        }
        self.log_file = log_file
        self._stderr = log_file.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(JOBS / script), *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.stdout: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def diagnostics(self) -> str:
        self._stderr.flush()
        tail = self.log_file.read_text(errors="replace").splitlines()[-60:]
        return (
            f"{self.log_file.name}: exit code {self.proc.poll()}\n"
            "--- stdout ---\n" + "\n".join(self.stdout[-20:]) + "\n"
            "--- stderr (tail) ---\n" + "\n".join(tail)
        )

    def wait_for(self, prefix: str, timeout_s: float = SPARK_TIMEOUT_S) -> str:
        """The rest of the first stdout line starting with ``prefix``; fails on exit/timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(remaining, 0.0))
            except queue.Empty:
                pytest.fail(f"no '{prefix}' within {timeout_s:.0f}s\n{self.diagnostics()}")
            if line is None:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
                pytest.fail(f"exited before printing '{prefix}'\n{self.diagnostics()}")
            self.stdout.append(line)
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def finish(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Close stdin (the job's signal to stop) and wait for the exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"did not exit within {timeout_s:.0f}s\n{self.diagnostics()}")

    def close(self) -> None:
        """Best effort: stop the process if it still runs (its JVM exits with it)."""
        if self.proc.poll() is None:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._stderr.close()


def _message(offset: int) -> SimpleBinlog:
    schema, table = TABLES[offset % len(TABLES)]
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=START_MS + offset * STEP_MS,
        event_type=EventType.INSERT,
        schema_name=schema,
        table_name=table,
        source=Source.BINLOG,
        content={"id": offset, "name": f"row-{offset}", "amount": f"{offset}.50"},
        column_types={"id": "bigint", "name": "varchar(64)", "amount": "decimal(12,2)"},
        primary_keys=("id",),
    )


@pytest.fixture
def topic(local_stack: Settings) -> Iterator[str]:
    name = f"cdc.test.spark_{uuid.uuid4().hex[:8]}"
    assert ensure_topic(local_stack.kafka, name)
    yield name
    admin = AdminClient(admin_config(local_stack.kafka))
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)


def _produce(settings: Settings, topic: str) -> list[SimpleBinlog]:
    messages = [_message(offset) for offset in range(1, MESSAGES + 1)]
    errors: list[str] = []

    def on_delivery(error, _msg) -> None:
        if error is not None:
            errors.append(str(error))

    producer = Producer(producer_config(settings.kafka, "test-spark-hive"))
    for message in messages:
        producer.produce(
            topic,
            key=f"{message.schema_name}.{message.table_name}".encode(),
            value=message.encode(),
            on_delivery=on_delivery,
        )
        producer.poll(0)
    assert producer.flush(60) == 0, "messages left undelivered after 60 s"
    assert not errors, errors[:5]
    return messages


def test_second_spark_session_queries_hive_table_while_first_is_open(
    local_stack: Settings, topic: str, tmp_path: Path
) -> None:
    messages = _produce(local_stack, topic)
    expected_per_table = Counter(f"{m.schema_name}.{m.table_name}" for m in messages)
    expected_days = sorted(
        {datetime.fromtimestamp(m.execute_time / 1000, UTC).strftime("%Y-%m-%d") for m in messages}
    )
    table = f"binlog_{topic.rsplit('_', 1)[-1]}"

    writer = SparkJob("kafka_to_hive.py", [topic, DATABASE, table], tmp_path / "writer.log")
    reader: SparkJob | None = None
    dropped = False
    try:
        written = writer.wait_for("READY")
        assert int(written) == MESSAGES, writer.diagnostics()
        assert writer.proc.poll() is None, f"the writer's session closed\n{writer.diagnostics()}"

        reader = SparkJob("query_hive.py", [DATABASE, table, "--drop"], tmp_path / "reader.log")
        result = json.loads(reader.wait_for("RESULT"))
        # The first session stayed open the whole time the second one used the metastore.
        assert writer.proc.poll() is None, f"the writer's session closed\n{writer.diagnostics()}"
        dropped = reader.wait_for("DROPPED") == ""
        assert reader.finish() == 0, reader.diagnostics()
        assert writer.finish() == 0, writer.diagnostics()
        writer.wait_for("STOPPED", timeout_s=30)

        assert result["count"] == MESSAGES, result
        assert result["distinct_offsets"] == MESSAGES, result
        assert result["with_content"] == MESSAGES, result
        assert result["per_table"] == dict(expected_per_table), result
        assert result["partitions"] == [f"dt={day}" for day in expected_days], result
    finally:
        for job in (writer, reader):
            if job is not None:
                job.close()
        if not dropped:
            _drop_best_effort(table, tmp_path)


def _drop_best_effort(table: str, tmp_path: Path) -> None:
    """After a failure: drop the test table with a Spark session of its own."""
    cleaner = SparkJob("query_hive.py", [DATABASE, table, "--drop-only"], tmp_path / "drop.log")
    try:
        cleaner.proc.wait(timeout=SPARK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass
    finally:
        cleaner.close()
