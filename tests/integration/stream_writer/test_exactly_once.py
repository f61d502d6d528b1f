"""Exactly once for every reader of the Hive tables, with the writer killed (SIGKILL of its
process group, JVM included) at different points of a batch: while staging files, after the
batch manifest (the commit point) but before the state update, and after a batch committed.
A new table appears mid-stream, and the tables are queried from a separate Spark session
while the writer runs.

CI runs 2 kills; ``CDC_TEST_STREAM_WRITER_FULL=1`` runs 10 (and more messages).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path

from cdc_platform.config import Settings
from stream_writer.layout import FileName
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    caught_up,
    end_offsets,
    message,
    produce_messages,
    wait_until,
)

FULL = os.environ.get("CDC_TEST_STREAM_WRITER_FULL") == "1"
KILLS = 10 if FULL else 2
PER_PHASE = 1_500 if FULL else 700
# 2024-03-01T00:00:00Z; one message a minute spans days.
START_MS = 1_709_251_200_000
PHASES = ("staging", "manifest", "committed")
# Tables of the stream: two shards of one logical table and a plain one; billing arrives
# after the first kill.
TABLES = [("shop_00", "orders_00"), ("shop_01", "orders_01"), ("crm", "users")]
NEW_TABLE = ("billing", "invoices")
WAIT_S = 240.0


def _staging_batches(env: WriterEnv) -> set[int]:
    root = env.lake / "_stream_writer" / env.name / "_staging"
    if not root.exists():
        return set()
    return {int(p.name.split("-")[0]) for p in root.iterdir() if p.name[0].isdigit()}


def _manifests(env: WriterEnv) -> set[int]:
    directory = env.checkpoint / "cdc_batches"
    if not directory.exists():
        return set()
    return {int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit()}


def _last_batch(env: WriterEnv) -> int:
    state = env.state()
    return -1 if state is None else int(state["lastBatch"])


def _at_phase(env: WriterEnv, phase: str, committed_before: int) -> bool:
    last = _last_batch(env)
    if phase == "staging":
        return any(b > last for b in _staging_batches(env)) and not any(
            b > last for b in _manifests(env)
        )
    if phase == "manifest":
        return any(b > last for b in _manifests(env))
    return last > committed_before


def test_each_message_exactly_once_after_repeated_kill9(
    local_stack: Settings, topic: str, tmp_path: Path
) -> None:
    env = WriterEnv.create(tmp_path, topic, max_offsets_per_trigger=400, trigger_interval_s=1)
    rng = random.Random(5)
    produced = []
    next_id = 1

    def produce_phase(tables: list[tuple[str, str]]) -> None:
        nonlocal next_id
        batch = []
        for _ in range(PER_PHASE):
            schema, table = tables[rng.randrange(len(tables))]
            batch.append(message(schema, table, next_id, START_MS + next_id * 60_000, next_id))
            next_id += 1
        produce_messages(local_stack, topic, batch)
        produced.extend(batch)

    produce_phase(TABLES)
    kills: list[tuple[str, bool]] = []
    with LakeRun(env, tmp_path) as run:
        writer = run.writer
        for kill in range(KILLS):
            phase = PHASES[kill % len(PHASES)]
            committed_before = _last_batch(env)
            deadline = time.monotonic() + WAIT_S
            # Poll finely: the manifest phase lasts only as long as the renames and the
            # metastore calls of one batch.
            while not _at_phase(env, phase, committed_before):
                assert writer.proc.poll() is None, writer.diagnostics()
                assert time.monotonic() < deadline, (
                    f"kill {kill}: the writer never reached {phase}\n{writer.diagnostics()}"
                )
                time.sleep(0.01)
            writer.kill9()
            kills.append((phase, _last_batch(env) < max(_manifests(env), default=-1)))
            produce_phase([*TABLES, NEW_TABLE])
            writer = run.restart_writer()

        ends = end_offsets(local_stack, topic)
        wait_until(
            lambda: caught_up(env, ends), WAIT_S, "the writer to catch up", writer.diagnostics
        )
        # The staging write goes through Hadoop's raw local filesystem: the lake holds the
        # data files and markers only, no checksum files beside them.
        lake_files = list((env.lake / f"{env.database}.db").rglob("*"))
        assert any(p.suffix == ".parquet" for p in lake_files)
        assert not [p for p in lake_files if p.name.endswith(".crc")]
        # Queried while the writer still runs, from a Spark session of its own.
        result = run.query_and_drop()
        assert writer.proc.poll() is None, writer.diagnostics()
        assert writer.stop() == 0, writer.diagnostics()

    assert len(kills) == KILLS
    rows = [row for table in result.values() for row in table["rows"]]
    assert "dead_letter" not in result
    assert set(result) == {"shop_orders", "crm_users", "billing_invoices"}
    coordinates = Counter((r[0], r[1]) for r in rows)
    duplicates = [c for c, n in coordinates.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} Kafka messages written more than once"
    written = Counter((r[5], r[6], r[7]) for r in rows)
    expected = Counter((m.schema_name, m.table_name, m.content["id"]) for m in produced)
    assert written == expected
    # Every row is inside the offset range its file name announces.
    for partition, offset, _binlog, _dt, file, *_ in rows:
        assert FileName.parse(file).holds(topic, partition, offset), (file, partition, offset)
    # Partitions registered for every day of each table.
    for table, content in result.items():
        days = sorted({r[3] for r in content["rows"]})
        assert content["partitions"] == [f"dt={d}" for d in days], table
    print(json.dumps({"kills": kills}))
