"""Exactly once for every reader of the lake's raw Iceberg table, on local disk and S3
(SeaweedFS), with the writer killed (SIGKILL of its process group, JVM included, by the
writer itself at a named crash point: ``CDC_STREAM_WRITER_CRASH_AT``) before a batch's raw
commit, inside it (its manifests written, not yet the table's swap: the writer jar kills the
writer), between the raw commit and the progress commit, and after both. After the kill between
the two commits the writer also loses its Spark checkpoint: a fresh checkpoint resumes from the
offsets committed in the lake (the raw table's own commit is ahead of the progress). A new
table appears mid-stream. Afterwards every Kafka message is in the lake exactly once (counts
and topic/partition/offset identity), read from a Spark session of its own while the writer
runs (through each logical table's view and the raw table), and by pyiceberg.

HDFS is not in the list: the crash points do not depend on the storage beyond its commit,
and each storage costs a few writer starts (``CDC_TEST_HDFS=1`` adds it).
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from stream_writer.writer import CRASH_ENV, CRASH_POINTS
from tests.integration.stream_writer.conftest import STORAGES
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    caught_up,
    end_offsets,
    message,
    produce_messages,
    wait_until,
)

PER_PHASE = 200
# 2024-03-01T00:00:00Z; one message a minute spans days.
START_MS = 1_709_251_200_000
# Tables of the stream: two shards of one logical table and a plain one; billing arrives
# after the first kill.
TABLES = [("shop_00", "orders_00"), ("shop_01", "orders_01"), ("crm", "users")]
NEW_TABLE = ("billing", "invoices")
WAIT_S = 600.0


@pytest.mark.parametrize("storage", STORAGES)
def test_each_message_exactly_once_after_kill9_at_every_commit_point(
    local_stack: Settings, remote_storage: set[str], topic: str, tmp_path: Path, storage: str
) -> None:
    env = WriterEnv.create(
        tmp_path,
        topic,
        local_stack,
        storage,
        max_offsets_per_trigger=PER_PHASE,
        trigger_interval_s=1,
    )
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
    with LakeRun(env, tmp_path, crash_at=CRASH_POINTS[0]) as run:
        writer = run.writer
        for index, point in enumerate(CRASH_POINTS):
            if index:
                writer = run.restart_writer(crash_at=point)
            code = writer.wait_killed(WAIT_S)
            log = writer.log_file.read_text(errors="replace")
            assert code == -9 and f"{CRASH_ENV}={point}: the writer kills itself" in log, (
                writer.diagnostics()
            )
            if point == "before-progress":
                shutil.rmtree(env.checkpoint)  # resumes from the lake's offsets alone
            produce_phase([*TABLES, NEW_TABLE])
        writer = run.restart_writer()

        ends = end_offsets(local_stack, topic)
        wait_until(
            lambda: caught_up(env, ends), WAIT_S, "the writer to catch up", writer.diagnostics
        )
        # A second engine (pyiceberg; on HDFS through WebHDFS) sees the same committed rows
        # as Spark below.
        by_pyiceberg = Counter(
            (row["kafkaPartition"], row["kafkaOffset"])
            for table in ("shop_orders", "crm_users", "billing_invoices")
            for row in env.rows(table, ("kafkaPartition", "kafkaOffset"))
        )
        # Queried while the writer still runs, from a Spark session of its own.
        result = run.query_and_drop()
        assert writer.proc.poll() is None, writer.diagnostics()
        assert writer.stop() == 0, writer.diagnostics()

    progress = result.pop("_cdc_writer_progress")
    assert set(result) == {"shop_orders", "crm_users", "billing_invoices"}
    rows = [row for table in result.values() for row in table["rows"]]
    coordinates = Counter((r[0], r[1]) for r in rows)
    duplicates = [c for c, n in coordinates.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} Kafka messages written more than once"
    assert coordinates == by_pyiceberg
    written = Counter((r[5], r[6], r[7]) for r in rows)
    expected = Counter((m.schema_name, m.table_name, m.content["id"]) for m in produced)
    assert written == expected
    assert len(rows) == len(produced) == PER_PHASE * (len(CRASH_POINTS) + 1)
    assert all(r[4] == topic for r in rows)
    # The raw table's newest commit records offsets above every row it holds and no further
    # than the writer read; the progress row records where the writer stands.
    final = {f"{topic}:{p}": end for p, end in ends.items() if end > 0}
    for table, content in result.items():
        recorded = content["offsets"]
        for partition, offset, *_ in content["rows"]:
            assert offset < recorded[f"{topic}:{partition}"], (table, partition, offset)
        assert all(recorded[key] <= end for key, end in final.items() if key in recorded)
    [(writer_name, _batch, _ready, state)] = progress["rows"]
    assert writer_name == env.name
    committed = {f"{p['topic']}:{p['partition']}": p["nextOffset"] for p in state["partitions"]}
    assert {key: offset for key, offset in committed.items() if offset > 0} == final
    print(json.dumps({"storage": storage, "rows": len(rows)}))
