"""A quiet instance's days become ready by time alone, and no store sees a heartbeat.

Real MariaDB, Kafka, collector (a process, watermark heartbeats every second) and stream
writer (a process). Three rows are written with the source's clock set two days back
(``SET TIMESTAMP``), so their day ``D`` ends long before now; then the source is quiet. Rows
alone would leave ``D`` open forever (the last row is at noon of ``D``); the collector's
heartbeats carry the source's time past midnight, so the writer declares ``D`` ready, and
``D + 1``, a day without any row, as well. The mirror's consumer (an in-memory applier: the
path every target shares) and the lake see the three rows and nothing else: no heartbeat
row, no dead letter.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_platform.config import Settings, TableMirror
from cdc_platform.kafka import consumer_config, read_to_end
from collector.reader import server_position
from mirror.applier import ApplyResult, MemoryApplier
from mirror.consumer import MirrorConsumer
from mirror.metrics import MirrorMetrics
from mirror.plan import ChangeRouter
from simple_binlog.control import decode_heartbeat, is_control, is_heartbeat
from simple_binlog.routing import ShardRouter
from stream_writer.layout import next_midnight_ms
from tests.integration.collector.harness import CollectorProcess, admin
from tests.integration.stream_writer.harness import LakeRun, WriterEnv, wait_until

WAIT_S = 300.0
LATENESS_S = 60


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _RecordingApplier(MemoryApplier):
    """The in-memory applier, remembering every change it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, tuple]] = []
        self.lock = threading.Lock()

    def apply_batch(self, changes) -> ApplyResult:  # type: ignore[no-untyped-def]
        changes = list(changes)
        with self.lock:
            self.seen += [(c.table, c.shard, c.key) for c in changes]
            return super().apply_batch(changes)


def _committed_at_least(settings: Settings, group: str, ends: dict[int, int], topic: str) -> bool:
    consumer = Consumer(consumer_config(settings.kafka, group_id=group))
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
        return all(tp.offset >= ends[tp.partition] for tp in committed)
    finally:
        consumer.close()


def _heartbeats(settings: Settings, topic: str) -> dict[int, list]:
    found: dict[int, list] = {}
    for record in read_to_end(
        settings.kafka, topic, group_id=f"test-hb-{uuid.uuid4().hex[:8]}", idle_timeout_s=30
    ):
        if is_heartbeat(record.key):
            found.setdefault(record.partition, []).append(
                (record.offset, decode_heartbeat(record.value))
            )
    return found


@pytest.mark.timeout(900)
def test_a_quiet_instance_becomes_ready_by_heartbeats_and_no_store_sees_one(
    local_stack: Settings, tmp_path: Path
) -> None:
    db = f"hbq{uuid.uuid4().hex[:8]}"  # no '_<digits>' suffix: the shard rules keep the name
    prefix = f"thb{uuid.uuid4().hex[:6]}."
    instance = local_stack.instances[0].name
    topic = f"{prefix}{instance}"
    today = datetime.now(UTC).date()
    day = today - timedelta(days=2)
    quiet_day = today - timedelta(days=1)
    noon_of_day = int(datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp())
    with admin(local_stack) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {db}")
        cursor.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        start = server_position(cursor)
    kafka = local_stack.kafka.model_copy(update={"topic_prefix": prefix})
    env = {
        **os.environ,
        "CDC_MIRROR_KAFKA__TOPIC_PREFIX": prefix,
        "CDC_MIRROR_COLLECTOR__START": start.gtid,
        "CDC_MIRROR_COLLECTOR__INCLUDE": f'["{db}\\\\..*"]',
        "CDC_MIRROR_COLLECTOR__HEARTBEAT_S": "0.5",
        "CDC_MIRROR_COLLECTOR__WATERMARK_HEARTBEAT_S": "1",
    }
    collector = CollectorProcess(env, _free_port(), tmp_path / "collector.log")
    writer_env = WriterEnv.create(
        tmp_path,
        topic,
        local_stack,
        lateness_budget_s=LATENESS_S,
        trigger_interval_s=1,
        time_zone="UTC",
    )
    stop = threading.Event()
    applier = _RecordingApplier()
    metrics = MirrorMetrics("redis")
    group_prefix = f"thb{uuid.uuid4().hex[:6]}"
    tables = [TableMirror(db_prefix=db, table_prefix="t")]
    consumer = MirrorConsumer(
        kafka,
        local_stack.mirror.model_copy(update={"group_prefix": group_prefix, "max_wait_ms": 50}),
        "redis",
        [instance],
        ChangeRouter(tables, ShardRouter(list(local_stack.shard_rules)), "redis"),
        applier,
        metrics,
        stop,
    )
    thread = threading.Thread(target=consumer.run)
    try:
        collector.start()
        collector.wait_for(lambda: (collector.health() or {}).get("committed"), "the collector")
        with admin(local_stack) as conn, conn.cursor() as cursor:
            # The source's clock two days back for these rows: their day ended long ago.
            cursor.execute("SET TIMESTAMP = %s", (noon_of_day,))
            for row_id in (1, 2, 3):
                cursor.execute(f"INSERT INTO {db}.t VALUES (%s, %s)", (row_id, f"row {row_id}"))
            cursor.execute("SET TIMESTAMP = DEFAULT")
        thread.start()
        with LakeRun(writer_env, tmp_path) as run:

            def ready_days() -> list[str]:
                state = writer_env.state()
                return [] if state is None else list(state["readyDays"])

            wait_until(
                lambda: {day.isoformat(), quiet_day.isoformat()} <= set(ready_days()),
                WAIT_S,
                f"days {day} (rows at noon only) and {quiet_day} (no rows) to be ready",
                lambda: run.writer.diagnostics() + "\n" + collector.log.read_text()[-3000:],
            )
            state = writer_env.state()
            assert state is not None
            today_midnight = next_midnight_ms(quiet_day.isoformat(), ZoneInfo("UTC"))
            assert state["globalWatermarkMs"] >= today_midnight + LATENESS_S * 1000, state
            assert not {today.isoformat()} & set(state["readyDays"])  # today is still open

            heartbeats = _heartbeats(local_stack, topic)
            partitions = local_stack.kafka.partitions
            assert sorted(heartbeats) == list(range(partitions)), heartbeats.keys()
            newest_ms = 0
            for beats in heartbeats.values():
                for _offset, beat in beats:
                    assert beat.instance == instance
                    assert beat.watermark_ms <= beat.source_time_ms - 1000
                    newest_ms = max(newest_ms, beat.watermark_ms)
            assert newest_ms >= state["globalWatermarkMs"]
            # The mirror consumer reads past at least these heartbeats (committed offsets).
            ends = {p: max(o for o, _ in beats) + 1 for p, beats in heartbeats.items()}
            wait_until(
                lambda: _committed_at_least(local_stack, f"{group_prefix}.redis", ends, topic),
                120,
                "the mirror consumer to read past the heartbeats",
                lambda: "",
            )
            result = run.query_and_drop()
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(60)
        collector.stop()
        with admin(local_stack) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {db}")

    # The mirrors' path: the three rows, nothing else, no dead letter, nothing skipped.
    logical = f"{db}_t"
    assert sorted(applier.seen) == [(logical, f"{db}.t", (i,)) for i in (1, 2, 3)]
    assert len(applier.rows(logical)) == 3
    assert metrics.dead_letters._value.get() == 0
    assert metrics.skipped._value.get() == 0
    # The lake: the table's three rows of day D; no heartbeat table, no dead letter (and the
    # writer's progress table, which declared the days ready).
    progress = result.pop("_cdc_writer_progress")
    [(_writer, _batch, ready_days_column, _state)] = progress["rows"]
    assert {day.isoformat(), quiet_day.isoformat()} <= set(ready_days_column)
    assert sorted(result) == [logical], sorted(result)
    rows = result[logical]["rows"]
    assert sorted(r[7] for r in rows) == [1, 2, 3]
    assert {r[3] for r in rows} == {day.isoformat()}
    assert not any(is_control(r[5].encode()) for r in rows)
