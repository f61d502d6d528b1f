"""A failed commit loses and repeats nothing, on local disk and S3 (SeaweedFS).

The writer's raw commit, then (the batch run again) its progress commit, fails: an error
instead of the commit (``CDC_STREAM_WRITER_FAIL_AT``, once per process), as when the catalog
refuses the commit or the storage fails under it. Each time the writer stops with one
sentence; the failed table keeps its previous snapshot (its metadata file unchanged), the
progress is not advanced, and Spark's checkpoint records no commit of the batch, so a
restarted writer runs it again. Afterwards every Kafka message is in the lake exactly once
(counts and topic/partition/offset identity), read from a Spark session of its own.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake import PROGRESS_TABLE, RAW_TABLE
from simple_binlog.message import SimpleBinlog
from stream_writer.writer import FAULT_ENV
from tests.integration.stream_writer.conftest import STORAGES
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    WriterProcess,
    caught_up,
    end_offsets,
    message,
    metadata_location,
    produce_messages,
    wait_until,
)

PER_PHASE = 50
START_MS = 1_709_251_200_000  # 2024-03-01T00:00:00Z; one message a minute
TABLES = [("shop_00", "orders_00"), ("shop_01", "orders_01"), ("crm", "users")]
WAIT_S = 600.0


def produce_phase(settings: Settings, topic: str, first_id: int) -> list[SimpleBinlog]:
    rng = random.Random(first_id)
    batch = []
    for row_id in range(first_id, first_id + PER_PHASE):
        schema, table = TABLES[rng.randrange(len(TABLES))]
        batch.append(message(schema, table, row_id, START_MS + row_id * 60_000, row_id))
    produce_messages(settings, topic, batch)
    return batch


def checkpoint_commits(env: WriterEnv) -> set[int]:
    """The batches Spark's checkpoint records as done (``commits/<batch id>``)."""
    folder = env.checkpoint / "commits"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def checkpoint_planned(env: WriterEnv) -> set[int]:
    """The batches Spark planned (``offsets/<batch id>``): started, done or not."""
    return {int(p.name) for p in (env.checkpoint / "offsets").iterdir() if p.name.isdigit()}


def lake_heads(env: WriterEnv) -> tuple[str | None, str | None]:
    """The raw and progress tables' current metadata files, as the metastore records them."""
    return (
        metadata_location(env.settings, env.database, RAW_TABLE),
        metadata_location(env.settings, env.database, PROGRESS_TABLE),
    )


def fails_at(env: WriterEnv, writer: WriterProcess, point: str) -> int:
    """Wait for ``writer`` to stop at its failing commit; returns the failed batch's id."""
    code = writer.wait_killed(WAIT_S)
    log = writer.log_file.read_text(errors="replace")
    [failed] = checkpoint_planned(env) - checkpoint_commits(env)
    sentence = (
        f"the stream writer's query failed: batch {failed}'s {point} to the lake at "
        f"{env.settings.lake_location.uri} failed ({FAULT_ENV}={point})."
    )
    assert code != 0 and sentence in log, writer.diagnostics()
    return failed


@pytest.mark.parametrize("storage", STORAGES)
def test_a_failed_raw_or_progress_commit_leaves_the_previous_snapshot_and_the_batch_unread(
    local_stack: Settings, remote_storage: set[str], topic: str, tmp_path: Path, storage: str
) -> None:
    env = WriterEnv.create(tmp_path, topic, local_stack, storage, trigger_interval_s=1)
    produced = produce_phase(local_stack, topic, 1)
    with LakeRun(env, tmp_path) as run:
        ends = end_offsets(local_stack, topic)
        wait_until(
            lambda: caught_up(env, ends), WAIT_S, "the first batches", run.writer.diagnostics
        )
        assert run.writer.stop() == 0, run.writer.diagnostics()
        raw_before, progress_before = lake_heads(env)
        state_before = env.state()
        done_before = checkpoint_commits(env)
        assert raw_before and progress_before and done_before

        produced += produce_phase(local_stack, topic, 1 + PER_PHASE)
        failed = fails_at(env, run.restart_writer(fail_at="raw-commit"), "raw-commit")
        # Neither table moved, and the batch is still to be done.
        assert lake_heads(env) == (raw_before, progress_before)
        assert env.state() == state_before
        assert checkpoint_commits(env) == done_before

        # The same batch again: its raw commit is made, its progress commit fails.
        again = fails_at(env, run.restart_writer(fail_at="progress-commit"), "progress-commit")
        assert again == failed
        raw_now, progress_now = lake_heads(env)
        assert raw_now != raw_before and progress_now == progress_before
        assert env.state() == state_before
        assert checkpoint_commits(env) == done_before

        writer = run.restart_writer()
        ends = end_offsets(local_stack, topic)
        wait_until(
            lambda: caught_up(env, ends), WAIT_S, "the writer to catch up", writer.diagnostics
        )
        assert failed in checkpoint_commits(env)
        result = run.query_and_drop()
        assert writer.stop() == 0, writer.diagnostics()

    result.pop(PROGRESS_TABLE)
    rows = [row for table in result.values() for row in table["rows"]]
    coordinates = Counter((r[4], r[0], r[1]) for r in rows)
    assert [c for c, n in coordinates.items() if n > 1] == []
    written = Counter((r[5], r[6], r[7]) for r in rows)
    assert written == Counter((m.schema_name, m.table_name, m.content["id"]) for m in produced)
    assert len(rows) == len(produced) == 2 * PER_PHASE
