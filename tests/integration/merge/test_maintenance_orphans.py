"""``cdc-mirror maintain`` removes what a failed commit left, and nothing a snapshot references,
on local disk (an S3 object's modification time cannot be set back: nothing there is old
enough to remove within a test).

The stream writer's raw commit, then (the batch run again) its progress commit, fails inside
Iceberg's commit (``CDC_STREAM_WRITER_FAIL_AT``, as tests/integration/stream_writer/
test_failed_commit.py makes it): each leaves data files, manifests and a manifest list that no
snapshot references. The writer then catches up. Every file of the two tables' folders is aged
past ``maintenance.orphan_after_hours`` (referenced or not: every referenced file is a
candidate Iceberg must keep), and the command runs in a process of its own. Afterwards the
failed commits' files are gone, every file a snapshot or metadata file references
(``all_files``, ``all_manifests``, the snapshots' manifest lists, the metadata log) is still
there, and the lake holds every Kafka message exactly once (counts and identity).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from cdc_platform.config import Settings
from cdc_platform.lake import PROGRESS_TABLE, RAW_TABLE
from tests.integration.merge.test_maintenance import run_maintain as maintain_process
from tests.integration.stream_writer import conftest as writer_fixtures
from tests.integration.stream_writer.harness import (
    LakeRun,
    WriterEnv,
    assert_each_message_once,
    catch_up_and_stop,
    iceberg_table,
)
from tests.integration.stream_writer.test_failed_commit import (
    PER_PHASE,
    START_MS,
    WAIT_S,
    fails_at,
    produce_phase,
)

topic = writer_fixtures.topic  # the stream writer tests' fixture: a topic of the test's own

TABLES = (RAW_TABLE, PROGRESS_TABLE)
AGE = timedelta(days=10)  # beyond orphan_after_hours (72 by default, at most a few days)


def local_path(uri: str) -> Path:
    """A local file's path from Iceberg's ``file:`` URI (or a bare path)."""
    return Path(urlsplit(uri).path)


def table_folder(env: WriterEnv, table: str) -> Path:
    return local_path(iceberg_table(env.settings, env.database, table).location())


def folder_files(env: WriterEnv, table: str) -> set[Path]:
    """The files of the table's folder that orphan removal considers: not the hidden ones
    (Hadoop's ``.crc`` files beside each file on local disk; Iceberg skips names starting with
    ``.`` or ``_``)."""
    return {
        Path(root, name)
        for root, _dirs, names in os.walk(table_folder(env, table))
        for name in names
        if not name.startswith((".", "_"))
    }


def referenced_files(env: WriterEnv, table: str) -> set[Path]:
    """Every file the table's metadata references, through Iceberg's metadata tables (read by
    pyiceberg): the data and delete files of every snapshot, every snapshot's manifests and
    manifest list, the current metadata file and those of its log."""
    iceberg = iceberg_table(env.settings, env.database, table)
    inspect = iceberg.inspect
    uris = set(inspect.all_files().column("file_path").to_pylist())
    uris |= set(inspect.all_manifests().column("path").to_pylist())
    uris |= {snapshot.manifest_list for snapshot in iceberg.snapshots()}
    uris |= set(inspect.metadata_log_entries().column("file").to_pylist())
    uris.add(iceberg.metadata_location)
    return {local_path(uri) for uri in uris}


def age(files: set[Path], modified: datetime) -> None:
    seconds = modified.timestamp()
    for path in files:
        os.utime(path, (seconds, seconds))


def run_maintain(env: WriterEnv, tmp_path: Path) -> list[str]:
    """``cdc-mirror maintain`` on the writer's lake, in a process of its own; its lines."""
    config = tmp_path / "maintain.yaml"
    # The raw days kept: the test's messages are of 2024 (the retention would delete them).
    first_day = datetime.fromtimestamp(START_MS / 1000, UTC).date()
    raw_days = (datetime.now(UTC).date() - first_day).days + 1
    document = {
        "spark": {"lake_dir": str(env.lake)},
        "lake": {"location": env.settings.lake.location, "catalog": env.settings.lake.catalog},
        "stream_writer": {"database": env.database},
        # A snapshot database of the test's own (none is made): the raw and progress tables'
        # steps are what the test is about.
        "merge": {"database": f"{env.database}_snap", "check": False},
        "stack": {"home": str(env.settings.stack.home.resolve())},
        "maintenance": {"raw_days": raw_days},
        "tables": [
            {"db_prefix": "shop", "table_prefix": "orders", "key": ["id"], "targets": ["hive"]}
        ],
    }
    config.write_text(yaml.safe_dump(document))
    return maintain_process(config)


def test_maintain_removes_what_failed_commits_left_and_keeps_every_referenced_file(
    local_stack: Settings, topic: str, tmp_path: Path
) -> None:
    env = WriterEnv.create(tmp_path, topic, local_stack, "local", trigger_interval_s=1)
    produced = produce_phase(local_stack, topic, 1)
    with LakeRun(env, tmp_path) as run:
        catch_up_and_stop(env, run.writer, WAIT_S, "the first batches")
        before = {table: folder_files(env, table) for table in TABLES}

        # A batch whose raw commit fails, then (run again) whose progress commit fails.
        produced += produce_phase(local_stack, topic, 1 + PER_PHASE)
        fails_at(env, run.restart_writer(fail_at="raw-commit"), "raw-commit", "raw commit")
        fails_at(
            env, run.restart_writer(fail_at="progress-commit"), "progress-commit", "progress commit"
        )
        left = {
            table: folder_files(env, table) - before[table] - referenced_files(env, table)
            for table in TABLES
        }
        catch_up_and_stop(env, run.restart_writer(), WAIT_S, "the writer to catch up")

        referenced = {table: referenced_files(env, table) for table in TABLES}
        for table in TABLES:
            # The failed commit's data files, manifest and manifest list, referenced by no
            # snapshot even after the batch was committed again.
            orphans = left[table]
            assert not orphans & referenced[table], table
            names = {(path.parent.name, path.name) for path in orphans}
            assert any(folder == "metadata" and n.startswith("snap-") for folder, n in names), (
                table,
                names,
            )
            assert any(
                folder == "metadata" and n.endswith(".avro") and not n.startswith("snap-")
                for folder, n in names
            ), (table, names)
            assert any(n.endswith(".parquet") for _, n in names), (table, names)
            # Every referenced file exists: the check below can tell one deleted.
            assert referenced[table] <= folder_files(env, table), table

        # Every file old enough to be removed if no snapshot referenced it.
        aged = {table: folder_files(env, table) for table in TABLES}
        age(aged[RAW_TABLE] | aged[PROGRESS_TABLE], datetime.now(UTC) - AGE)
        lines = run_maintain(env, tmp_path)
        for table in TABLES:
            step = f"{env.database}.{table}: remove orphans: "
            [line] = [line for line in lines if step in line]
            assert f"{step}0 orphan files" not in line, lines

        for table in TABLES:
            after = folder_files(env, table)
            assert referenced[table] <= after, (table, sorted(referenced[table] - after))
            assert not left[table] & after, (table, sorted(left[table] & after))
            # Nothing unreferenced and old stays (the failed commits' files were all of it).
            assert not (aged[table] - referenced[table]) & after, table
        result = run.query_and_drop()

    assert_each_message_once(result, produced)
    assert len(produced) == 2 * PER_PHASE
