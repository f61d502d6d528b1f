"""A failed commit loses and repeats nothing, on local disk and S3 (SeaweedFS).

The writer's raw commit, then (the batch run again) its progress commit, fails inside
Iceberg's commit (``CDC_STREAM_WRITER_FAIL_AT``, once per process: the writer jar's
FaultPoint.java, in the table operations' commit), as when the storage fails under the new
metadata file: the commit's manifests are written, its metadata file is not. Each time the
writer stops with one sentence naming the batch, the commit and the JVM's cause (no py4j
traceback before it); the jar says it failed the commit; the failed table keeps its previous
snapshot (its metadata file unchanged) and references none of the manifests the failed commit
wrote, the progress is not advanced, and Spark's checkpoint records no commit of the batch, so
a restarted writer runs it again. Afterwards every Kafka message is in the lake exactly once
(counts and topic/partition/offset identity), read from a Spark session of its own.
"""

from __future__ import annotations

import random
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

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
    assert_each_message_once,
    catch_up_and_stop,
    caught_up,
    end_offsets,
    iceberg_table,
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


def folder_names(io: Any, folder: str) -> set[str]:
    """The names of the files in ``folder``, through pyiceberg's FileIO ``io`` (pyarrow's file
    systems on local disk and S3, fsspec's on HDFS)."""
    if hasattr(io, "fs_by_scheme"):
        from pyarrow.fs import FileSelector

        scheme, netloc, path = io.parse_location(folder)
        infos = io.fs_by_scheme(scheme, netloc).get_file_info(FileSelector(path))
        return {info.base_name for info in infos}
    parts = urlsplit(folder)
    listed = io.get_fs(parts.scheme, parts.hostname).ls(folder, detail=False)
    return {PurePosixPath(path).name for path in listed}


def unreferenced_manifests(env: WriterEnv) -> set[str]:
    """The raw table's manifest lists and manifests (``metadata/*.avro``) that none of its
    snapshots references: what a commit that failed after writing them left."""
    table = iceberg_table(env.settings, env.database, RAW_TABLE)
    referenced = set()
    for snapshot in table.snapshots():
        referenced.add(PurePosixPath(snapshot.manifest_list).name)
        referenced.update(PurePosixPath(m.manifest_path).name for m in snapshot.manifests(table.io))
    avro = {
        n for n in folder_names(table.io, f"{table.location()}/metadata") if n.endswith(".avro")
    }
    return avro - referenced


def fails_at(env: WriterEnv, writer: WriterProcess, point: str, commit: str) -> int:
    """Wait for ``writer`` to stop at its failing commit (``point``, the writer's words for it:
    ``commit``); returns the failed batch's id. The jar failed it, inside Iceberg's commit;
    the operator reads one sentence, no py4j traceback."""
    code = writer.wait_killed(WAIT_S)
    log = writer.log_file.read_text(errors="replace")
    [failed] = checkpoint_planned(env) - checkpoint_commits(env)
    sentence = (
        f"the stream writer's query failed: batch {failed}'s {commit} to the lake at "
        f"{env.settings.lake_location.uri} failed: "
        "org.apache.iceberg.exceptions.RuntimeIOException: Failed to write the new metadata "
        "file of the table at "
    )
    [line] = [line for line in log.splitlines() if sentence in line]
    assert code != 0 and line.endswith(f"({FAULT_ENV}={point}))"), writer.diagnostics()
    assert f"{FAULT_ENV}={point}: the writer jar fails the commit of the table at " in log
    assert "exception while executing the Python Proxy" not in log, writer.diagnostics()
    return failed


@pytest.mark.parametrize("storage", STORAGES)
def test_a_failed_raw_or_progress_commit_leaves_the_previous_snapshot_and_the_batch_unread(
    local_stack: Settings, remote_storage: set[str], topic: str, tmp_path: Path, storage: str
) -> None:
    env = WriterEnv.create(tmp_path, topic, local_stack, storage, trigger_interval_s=1)
    produced = produce_phase(local_stack, topic, 1)
    with LakeRun(env, tmp_path) as run:
        catch_up_and_stop(env, run.writer, WAIT_S, "the first batches")
        raw_before, progress_before = lake_heads(env)
        state_before = env.state()
        done_before = checkpoint_commits(env)
        assert raw_before and progress_before and done_before
        assert unreferenced_manifests(env) == set()

        produced += produce_phase(local_stack, topic, 1 + PER_PHASE)
        failed = fails_at(env, run.restart_writer(fail_at="raw-commit"), "raw-commit", "raw commit")
        # Neither table moved, and the batch is still to be done. The failed commit had
        # written its manifest list and manifests (left for orphan removal): it failed inside.
        assert lake_heads(env) == (raw_before, progress_before)
        left = unreferenced_manifests(env)
        assert any(n.startswith("snap-") for n in left), left
        assert any(not n.startswith("snap-") for n in left), left
        assert env.state() == state_before
        assert checkpoint_commits(env) == done_before

        # The same batch again: its raw commit is made, its progress commit fails.
        again = fails_at(
            env, run.restart_writer(fail_at="progress-commit"), "progress-commit", "progress commit"
        )
        assert again == failed
        raw_now, progress_now = lake_heads(env)
        assert raw_now != raw_before and progress_now == progress_before
        assert env.state() == state_before
        assert checkpoint_commits(env) == done_before

        writer = run.restart_writer()
        ends = end_offsets(local_stack, topic)
        # Spark writes the batch's commits/N after the writer's progress commit: wait for
        # both (caught up alone raced with it under load).
        wait_until(
            lambda: caught_up(env, ends) and failed in checkpoint_commits(env),
            WAIT_S,
            "the writer to catch up and Spark to mark the failed batch done",
            writer.diagnostics,
        )
        result = run.query_and_drop()
        assert writer.stop() == 0, writer.diagnostics()

    assert_each_message_once(result, produced)
    assert len(produced) == 2 * PER_PHASE
