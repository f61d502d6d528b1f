"""Helpers of the stream writer's integration tests: produce SimpleBinlog messages in Kafka
transactions (the writer reads read_committed), run the writer as a child process that can
be killed with SIGKILL (its JVM with it) or kill itself at a crash point, read its committed
progress and tables with a second engine (pyiceberg, the table's metadata file found in the
metastore; on HDFS through WebHDFS) while it runs, and query the lake from a Spark session of
its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from cdc_platform.config import Settings
from cdc_platform.hive_metastore import METADATA_LOCATION, table_parameter
from cdc_platform.kafka import admin_config, ensure_topic, producer_config
from cdc_platform.lake import LOGICAL_TABLE_COLUMN, PROGRESS_TABLE, RAW_TABLE, table_columns
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from simple_binlog.message import EventType, SimpleBinlog, Source
from stream_writer.writer import CRASH_ENV, FAULT_ENV
from tests.integration.lake.second_engine import pyiceberg_properties

ROOT = Path(__file__).resolve().parents[3]
QUERY_JOB = Path(__file__).resolve().parent / "query_lake.py"
SPARK_START_TIMEOUT_S = 300.0


def message(schema: str, table: str, row_id: int, execute_ms: int, offset: int) -> SimpleBinlog:
    return SimpleBinlog(
        binlog_offset=offset,
        execute_time=execute_ms,
        event_type=EventType.INSERT,
        schema_name=schema,
        table_name=table,
        source=Source.BINLOG,
        content={"id": row_id, "note": f"row {row_id}", "amount": f"{row_id}.25"},
        column_types={"id": "bigint(20)", "note": "varchar(64)", "amount": "decimal(12,2)"},
        primary_keys=("id",),
    )


def create_topic(settings: Settings, partitions: int = 3) -> str:
    name = f"cdc.test.sw_{uuid.uuid4().hex[:8]}"
    assert ensure_topic(settings.kafka, name, partitions=partitions)
    return name


def delete_topic(settings: Settings, topic: str) -> None:
    admin = AdminClient(admin_config(settings.kafka))
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)


def produce(settings: Settings, topic: str, records: Iterable[tuple[bytes, bytes]]) -> None:
    """Produce (key, value) records in one committed Kafka transaction, like the collector."""
    producer = Producer(
        producer_config(settings.kafka, "test-stream-writer", f"test-sw-{uuid.uuid4().hex}")
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    errors: list[str] = []
    for key, value in records:
        producer.produce(
            topic,
            key=key,
            value=value,
            on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
        )
        producer.poll(0)
    producer.commit_transaction(60)
    assert not errors, errors[:3]


def produce_aborted(settings: Settings, topic: str, records: Iterable[tuple[bytes, bytes]]) -> None:
    """Produce (key, value) records in a Kafka transaction that is then aborted, as a collector
    whose broker restarted under an open transaction leaves them: offsets a read_committed
    reader skips."""
    producer = Producer(
        producer_config(settings.kafka, "test-stream-writer", f"test-sw-{uuid.uuid4().hex}")
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(60) == 0
    producer.abort_transaction(60)


def produce_messages(settings: Settings, topic: str, messages: Iterable[SimpleBinlog]) -> None:
    produce(
        settings,
        topic,
        ((f"{m.schema_name}.{m.table_name}".encode(), m.encode()) for m in messages),
    )


@dataclass
class WriterEnv:
    """A writer's private lake (local folder or S3 prefix), database and settings, passed as
    environment overrides."""

    lake: Path  # the local lake folder (the checkpoint lives below it on every storage)
    database: str
    topic: str
    name: str
    overrides: dict[str, str]
    settings: Settings  # the test's settings with this lake: what the reader helpers use
    storage: str = "local"

    @classmethod
    def create(
        cls, tmp_path: Path, topic: str, base: Settings, storage: str = "local", **settings: object
    ) -> WriterEnv:
        database = f"sw_test_{uuid.uuid4().hex[:8]}"
        name = f"test-{uuid.uuid4().hex[:6]}"
        lake = tmp_path / "lake"
        from stack import hdfs

        location = {
            "local": str(lake),
            "s3": f"s3://{LOCAL_S3_BUCKET}/cdc-tests/{database}",
            "hdfs": f"{hdfs.uri()}/cdc-tests/{database}",
        }[storage]
        defaults: dict[str, object] = {
            "trigger_interval_s": 2,
            "max_offsets_per_trigger": 0,
            "metrics_port": 0,
            "lateness_budget_s": 3600,
            "collector_delay_s": 0,
            "kafka_delay_s": 0,
            "writer_delay_s": 0,
        }
        defaults.update(settings)
        overrides = {
            "CDC_MIRROR_SPARK__LAKE_DIR": str(lake),
            "CDC_MIRROR_LAKE__LOCATION": location,
            "CDC_MIRROR_STREAM_WRITER__DATABASE": database,
            **{f"CDC_MIRROR_STREAM_WRITER__{k.upper()}": str(v) for k, v in defaults.items()},
        }
        # On HDFS the second engine (pyiceberg) reads through the NameNode's WebHDFS API.
        webhdfs = hdfs.web_uri() if storage == "hdfs" else base.lake.webhdfs
        scoped = base.model_copy(
            update={
                "spark": base.spark.model_copy(update={"lake_dir": lake}),
                "lake": base.lake.model_copy(update={"location": location, "webhdfs": webhdfs}),
            }
        )
        return cls(lake, database, topic, name, overrides, scoped, storage)

    @property
    def checkpoint(self) -> Path:
        return self.lake / "_stream_writer" / self.name / "checkpoint"

    def rows(self, table: str, columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The committed rows of the logical table ``table`` (of the raw table, filtered by
        ``logicalTable``) or of ``PROGRESS_TABLE``, read by pyiceberg; none before a commit."""
        from pyiceberg.expressions import AlwaysTrue, EqualTo

        raw = table != PROGRESS_TABLE
        iceberg = iceberg_table(self.settings, self.database, RAW_TABLE if raw else table)
        if iceberg is None:
            return []
        where = EqualTo(LOGICAL_TABLE_COLUMN, table) if raw else AlwaysTrue()
        selected = columns or (tuple(name for name, _ in table_columns(table)) if raw else ("*",))
        scan = iceberg.scan(row_filter=where, selected_fields=selected)
        rows: list[dict[str, Any]] = scan.to_arrow().to_pylist()
        return rows

    def progress(self) -> dict[str, Any] | None:
        """The writer's committed progress row (``state`` decoded), or None."""
        rows = [r for r in self.rows(PROGRESS_TABLE) if r["writer"] == self.name]
        if not rows:
            return None
        row = max(rows, key=lambda r: r["committed_ms"])
        return {**row, "state": json.loads(row["state"])}

    def state(self) -> dict[str, Any] | None:
        progress = self.progress()
        return None if progress is None else progress["state"]

    def env(self, crash_at: str | None = None, fail_at: str | None = None) -> dict[str, str]:
        return {
            **os.environ,
            **self.overrides,
            **({CRASH_ENV: crash_at} if crash_at else {}),
            **({FAULT_ENV: fail_at} if fail_at else {}),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
        }


def metadata_location(settings: Settings, database: str, table: str) -> str | None:
    """The table's current metadata file, as the Hive metastore (PostgreSQL) records it."""
    locations = table_parameter(
        settings, database, METADATA_LOCATION, table=table, what="the test's read of the lake"
    )
    return (locations or {}).get(table.lower())


def iceberg_table(settings: Settings, database: str, table: str) -> Any:
    """pyiceberg's view of a lake table (None when the metastore does not know it)."""
    from pyiceberg.table import StaticTable

    location = metadata_location(settings, database, table)
    if location is None:
        return None
    return StaticTable.from_metadata(location, pyiceberg_properties(settings))


class WriterProcess:
    """``python -m stream_writer.job`` in its own process group (SIGKILL reaches the JVM)."""

    def __init__(
        self,
        env: WriterEnv,
        log_file: Path,
        *extra: str,
        by_topic: bool = True,
        crash_at: str | None = None,
        fail_at: str | None = None,
    ) -> None:
        """``by_topic``: read ``env.topic`` (else the instances of the configuration);
        ``crash_at``: the crash point where the writer kills itself (``CRASH_ENV``);
        ``fail_at``: the commit that fails instead of being made (``FAULT_ENV``)."""
        self.log_file = log_file
        self._log = log_file.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stream_writer.job",
                *(["--topic", env.topic] if by_topic else []),
                "--name",
                env.name,
                *extra,
            ],
            cwd=ROOT,
            env=env.env(crash_at, fail_at),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def diagnostics(self) -> str:
        tail = self.log_file.read_text(errors="replace").splitlines()[-40:]
        return f"writer exit code {self.proc.poll()}\n" + "\n".join(tail)

    def wait_killed(self, timeout_s: float) -> int:
        """Wait for a writer that kills itself; returns its exit code."""
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError("the writer did not kill itself\n" + self.diagnostics()) from None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of its group still alive
        self._log.close()
        return code

    def kill9(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._log.close()

    def stop(self, timeout_s: float = 120.0) -> int:
        # SIGTERM to the Python driver only, as a supervisor stopping the main process does:
        # the driver stops the query and then its JVM.
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(
                "the writer did not stop on SIGTERM\n" + self.diagnostics()
            ) from None
        self._log.close()
        return code


class LakeRun:
    """A test's writer process and Hive database, cleaned up whatever the test does: on
    leaving, the writer is killed if still running, and the database is dropped unless the
    test's final query (``query_and_drop``) dropped it."""

    def __init__(
        self, env: WriterEnv, tmp_path: Path, by_topic: bool = True, crash_at: str | None = None
    ) -> None:
        self.env = env
        self._tmp = tmp_path
        self.writer = WriterProcess(
            env, tmp_path / "writer.log", by_topic=by_topic, crash_at=crash_at
        )
        self._dropped = False

    def restart_writer(
        self, crash_at: str | None = None, fail_at: str | None = None
    ) -> WriterProcess:
        self.writer = WriterProcess(
            self.env, self._tmp / "writer.log", crash_at=crash_at, fail_at=fail_at
        )
        return self.writer

    def query_and_drop(self) -> dict[str, Any]:
        """Every table read from a Spark session of its own, then the database dropped."""
        result = query_lake(self.env, self._tmp / "query.log", drop=True)
        self._dropped = True
        return result

    def skip_drop(self) -> None:
        """Leave the database alone (a writer that could not reach the lake made none)."""
        self._dropped = True

    def __enter__(self) -> LakeRun:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.writer.proc.poll() is None:
            self.writer.kill9()
        if not self._dropped:
            query_lake(self.env, self._tmp / "drop.log", drop=True)


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, diagnostics: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        details = diagnostics()
        if details.startswith("writer exit code ") and not details.startswith(
            "writer exit code None"
        ):
            raise AssertionError(f"the writer stopped while waiting for {what}\n" + details)
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting for {what}\n" + diagnostics()
            )
        # Polling interval of a condition with a deadline, not a synchronisation; each poll
        # reads the lake's metadata (pyiceberg), so not too often on a loaded machine.
        time.sleep(1.0)


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """The last stable offset of each partition (what a caught-up writer's nextOffset is)."""
    from confluent_kafka import Consumer, TopicPartition

    from cdc_platform.kafka import consumer_config

    consumer = Consumer(consumer_config(settings.kafka, f"test-sw-ends-{uuid.uuid4().hex}"))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.topics[topic].partitions
        }
    finally:
        consumer.close()


def caught_up(env: WriterEnv, ends: dict[int, int]) -> bool:
    state = env.state()
    if state is None:
        return False
    next_offsets = {
        p["partition"]: p["nextOffset"] for p in state["partitions"] if p["topic"] == env.topic
    }
    return all(next_offsets.get(p, 0) >= end for p, end in ends.items() if end > 0)


def catch_up_and_stop(env: WriterEnv, writer: WriterProcess, timeout_s: float, what: str) -> None:
    """Wait for ``writer`` to commit every message of its topic (``what``: the wait's name in
    a timeout's message), then stop it; it must exit 0."""
    ends = end_offsets(env.settings, env.topic)
    wait_until(lambda: caught_up(env, ends), timeout_s, what, writer.diagnostics)
    assert writer.stop() == 0, writer.diagnostics()


def query_lake(env: WriterEnv, log_file: Path, drop: bool) -> dict[str, Any]:
    """Run tests/integration/stream_writer/query_lake.py in a Spark process of its own."""
    args = [sys.executable, str(QUERY_JOB), env.database] + (["--drop"] if drop else [])
    with log_file.open("wb") as log:
        done = subprocess.run(
            args,
            cwd=ROOT,
            env=env.env(),
            stdout=subprocess.PIPE,
            stderr=log,
            timeout=SPARK_START_TIMEOUT_S,
            check=False,
        )
    lines = [ln for ln in done.stdout.decode().splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"query job failed ({done.returncode})\n" + "\n".join(
        log_file.read_text(errors="replace").splitlines()[-40:]
    )
    return json.loads(lines[0].removeprefix("RESULT "))


def assert_each_message_once(result: dict[str, Any], produced: list[SimpleBinlog]) -> None:
    """The logical tables of ``query_lake``'s ``result`` hold every ``produced`` message
    once: no Kafka coordinate (topic, partition, offset) twice, and the rows' (schema, table,
    id) are those of the messages, each as often."""
    rows = [
        row for name, table in result.items() if name != PROGRESS_TABLE for row in table["rows"]
    ]
    coordinates = Counter((r[4], r[0], r[1]) for r in rows)
    assert [c for c, n in coordinates.items() if n > 1] == []
    written = Counter((r[5], r[6], r[7]) for r in rows)
    expected = Counter((m.schema_name, m.table_name, m.content["id"]) for m in produced)
    assert written == expected, ("missing", expected - written, "extra", written - expected)
    assert len(rows) == len(produced)
