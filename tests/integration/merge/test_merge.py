"""The merge job against real services: MariaDB shards changed by a randomized workload, the
raw change layer in the stream writer's Iceberg table, Spark with the lake's Iceberg catalog
on the stack's PostgreSQL metastore (one session for this module), and each day's snapshot
(its Iceberg tag) compared with MySQL.

``CDC_TEST_MERGE_FULL=1`` makes the randomized workload ten times larger and adds the
widening test (a DECIMAL and an INT UNSIGNED column widened mid-stream; yesterday's tag
keeps its types, the dt view reads it widened).

A separate Spark process (the ``cdc-mirror merge`` command) writes a snapshot that this
module's session reads; ``test_sql_server.py`` reads one through Spark's Thrift server with
beeline, as downstream users do.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import StringType

from cdc_platform.iceberg import (
    LAYOUT_PROPERTY,
    LAYOUT_VERSION,
    OLDEST_LAYOUT_READ,
    IncompatibleTableError,
)
from cdc_platform.lake import RAW_TABLE, metastore_client
from cdc_platform.lake_snapshots import day_tag, days_view
from merge import records
from merge import snapshot as snapshot_module
from merge.archive import ArchiveOverride
from merge.job import Merger, MergeRequest, NotReadyError, merge_tables
from merge.maintenance import Maintainer
from merge.snapshot import ROW_GROUP_BYTES, SnapshotStore, facts_property
from simple_binlog.errors import ConfigError
from tests.integration.merge.harness import Shop, day_start, history_times, snapshot_rows
from tests.support.metastore_clients import record_metastore_clients
from tests.support.views import made_by_sql, session_part, session_settings

DAY1 = date(2026, 11, 20)
DAY2 = date(2026, 11, 21)
ROOT = Path(__file__).resolve().parents[3]
SPARK_TIMEOUT_S = 300.0
SCALE = 10 if os.environ.get("CDC_TEST_MERGE_FULL") == "1" else 1


def during(day: date, rng: random.Random) -> datetime:
    return datetime(day.year, day.month, day.day) + timedelta(
        seconds=rng.randint(3600, 80_000), microseconds=rng.randint(0, 999_999)
    )


def history(shop: Shop, rows_per_shard: int, old: bool = False) -> dict[str, int]:
    """Rows inserted before the stream starts (no messages): only the MOCK replay sees them."""
    placed: dict[str, int] = {}
    for shard in range(3):
        for _ in range(rows_per_shard):
            placed[shop.insert(shard, history_times(DAY1, shop.rng, old))] = shard
    shop.messages.clear()
    return placed


def random_day(shop: Shop, day: date, placed: dict[str, int], changes: int) -> None:
    """Inserts, several updates of one key, key changes, moves between shards, deletes."""
    rng = shop.rng
    for _ in range(changes):
        action = rng.random()
        if action < 0.3 or not placed:
            shard = rng.randrange(3)
            placed[shop.insert(shard, during(day, rng))] = shard
        elif action < 0.6:
            order_no = rng.choice(sorted(placed))
            for _ in range(rng.randint(1, 3)):  # the same key several times in a day
                shop.update(placed[order_no], order_no)
        elif action < 0.7:
            order_no = rng.choice(sorted(placed))
            renamed = shop.update(placed[order_no], order_no, shop.new_order_no())
            placed[renamed] = placed.pop(order_no)
        elif action < 0.85:
            # The same key moves to another shard: deleted there, inserted here.
            order_no = rng.choice(sorted(placed))
            shard = placed[order_no]
            shop.delete(shard, order_no)
            target = (shard + 1) % 3
            shop.insert(target, during(day, rng), order_no)
            placed[order_no] = target
        else:
            order_no = rng.choice(sorted(placed))
            shop.delete(placed.pop(order_no), order_no)


def merged_first_day(spark: Any, shop: Shop, merger: Merger, changes: int) -> dict[str, int]:
    """History replayed as MOCK rows, ``changes`` random changes on DAY1, DAY1 merged; returns
    where each key lives (for the next day's changes)."""
    placed = history(shop, 10)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    random_day(shop, DAY1, placed, changes)
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))
    return placed


def assert_snapshot_equals_mysql(spark: Any, shop: Shop, merger: Merger, day: date) -> None:
    snapshot = snapshot_rows(spark, merger.settings, shop.table, day)
    mysql = shop.mysql_rows()
    assert sorted(snapshot) == sorted(mysql)
    differing = [key for key in mysql if snapshot[key] != mysql[key]]
    assert not differing, (differing[:3], [(snapshot[k], mysql[k]) for k in differing[:2]])


def test_snapshot_equals_mysql_after_randomized_days_and_rerun_is_idempotent(
    spark: Any, shop: Shop
) -> None:
    settings = shop.merge_settings(buckets=4)
    merger = Merger(settings, spark)
    placed = history(shop, 20 * SCALE)
    shop.start_day(DAY1)
    random_day(shop, DAY1, placed, 15 * SCALE)  # changes before the history read …
    shop.mock_replay(shop._second + 400)  # … are in the MOCK rows, with older offsets
    shop._second += 400
    random_day(shop, DAY1, placed, 60 * SCALE)
    shop.write_raw(spark, DAY1)

    first = merger.merge(MergeRequest(shop.table, DAY1))
    assert first.rows == len(shop.mysql_rows())
    assert_snapshot_equals_mysql(spark, shop, merger, DAY1)
    assert first.check is not None
    assert first.check.ok, first.check.to_json()

    shop.start_day(DAY2)
    random_day(shop, DAY2, placed, 80 * SCALE)
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    assert (first.mode, second.mode) == ("first", "merge")
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    # Yesterday's tag is untouched by today's merge; the plain table is today.
    state = merger.store.state(shop.table)
    assert state.days == {DAY1: first.snapshot_id, DAY2: second.snapshot_id}
    assert state.current == second.snapshot_id
    day1_rows = snapshot_rows(spark, settings, shop.table, DAY1)
    assert len(day1_rows) == first.rows

    rows_before = snapshot_rows(spark, settings, shop.table, DAY2)
    again = merger.merge(MergeRequest(shop.table, DAY2))
    assert again.mode == "re-merge"
    assert again.snapshot_id != second.snapshot_id
    state = merger.store.state(shop.table)
    assert state.days == {DAY1: first.snapshot_id, DAY2: again.snapshot_id}
    assert state.current == again.snapshot_id
    assert snapshot_rows(spark, settings, shop.table, DAY2) == rows_before
    assert snapshot_rows(spark, settings, shop.table, DAY1) == day1_rows
    record = records.read_json(records.merge_record_path(settings.lake_dir, shop.table, str(DAY2)))
    assert record is not None
    assert record["snapshotId"] == again.snapshot_id
    assert record["rows"] == len(rows_before) == again.rows
    assert record["checkOk"] is True
    # Downstream SQL of the old dt layout: the same rows through the days view.
    view = days_view(settings, shop.table)
    counted = {
        row["dt"]: row["n"]
        for row in spark.sql(f"SELECT dt, count(*) AS n FROM {view} GROUP BY dt").collect()
    }
    assert counted == {str(DAY1): len(day1_rows), str(DAY2): len(rows_before)}


def test_added_column_mid_day_is_null_for_older_rows(spark: Any, shop: Shop) -> None:
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    placed = history(shop, 5)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))

    shop.start_day(DAY2)
    untouched, changed_before, changed_after = sorted(placed)[:3]
    shop.update(placed[changed_before], changed_before)
    shop.on_every_shard(
        "ALTER TABLE `{schema}`.`{table}` ADD COLUMN channel VARCHAR(16) NOT NULL "
        "DEFAULT 'web', ADD COLUMN score INT NULL"
    )
    shop.update(placed[changed_after], changed_after)
    fresh = shop.insert(1, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    result = merger.merge(MergeRequest(shop.table, DAY2))

    assert result.schema.added == ["channel", "score"]
    snapshot = {
        row["order_no"]: row.asDict()
        for row in spark.sql(
            f"SELECT order_no, channel, score FROM {merger.store.name(shop.table)}"
        ).collect()
    }
    assert snapshot[untouched]["channel"] is None  # carried over from before the column
    assert snapshot[changed_before]["channel"] is None  # its change predates the column
    assert snapshot[changed_after]["channel"] == "web"
    assert snapshot[fresh]["channel"] == "web"
    assert {row["score"] for row in snapshot.values()} == {None}
    # Yesterday read through the dt view has the new column, NULL: downstream queries of
    # the old layout do not break (its tag keeps yesterday's own columns).
    old = spark.sql(
        f"SELECT count(*) AS n, count(channel) AS c FROM {days_view(settings, shop.table)} "
        f"WHERE dt = '{DAY1}'"
    ).first()
    assert old is not None
    assert (old["n"], old["c"]) == (15, 0)


def test_archive_deletes_are_ignored_recorded_and_overridable(spark: Any, shop: Shop) -> None:
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    old_rows = history(shop, 10, old=True)
    recent_rows = history(shop, 2)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))

    shop.start_day(DAY2)
    shop.insert(0, during(DAY2, shop.rng))  # the day's increment: 1 insert
    for order_no, shard in sorted(old_rows.items())[:25]:
        shop.delete(shard, order_no)  # 25 old rows archived: more than 7 × 1
    recent = sorted(recent_rows)[0]
    shop.delete(recent_rows[recent], recent)  # a real delete of a recent row
    shop.write_raw(spark, DAY2)

    archived = merger.merge(MergeRequest(shop.table, DAY2))
    assert archived.archive.archiving
    assert archived.archive.ignored_deletes == 25
    kept = snapshot_rows(spark, settings, shop.table, DAY2)
    assert set(sorted(old_rows)[:25]) <= set(kept)  # archived rows stay in the snapshot
    assert recent not in kept  # the recent delete still applied
    record = records.read_json(records.merge_record_path(settings.lake_dir, shop.table, str(DAY2)))
    assert record is not None
    assert record["archive"]["archiving"] is True
    assert record["archive"]["deletes"] == 26
    assert record["archive"]["oldDeletes"] == 25
    assert record["archive"]["threshold"] == 7

    applied = merger.merge(MergeRequest(shop.table, DAY2, ArchiveOverride.IGNORE))
    assert not applied.archive.archiving
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    record = records.read_json(records.merge_record_path(settings.lake_dir, shop.table, str(DAY2)))
    assert record is not None
    assert record["archive"]["override"] == "ignore"


def test_table_without_key_fails_alone_and_unready_day_is_refused(spark: Any, shop: Shop) -> None:
    keyless = Shop(
        settings=shop.settings,
        prefix=f"{shop.prefix}k",
        lake=shop.lake,
        raw_database=shop.raw_database,
        writer=shop.writer,
    )
    keyless.create(
        "CREATE TABLE `{schema}`.`{table}` (order_no VARCHAR(32), created_at DATETIME(6))"
    )
    try:
        settings = shop.merge_settings([shop.mirror(), keyless.mirror(key=None)], check=False)
        merger = Merger(settings, spark)
        history(shop, 3)
        shop.start_day(DAY1)
        shop.mock_replay(shop._second)
        shop.write_raw(spark, DAY1)
        outcomes = merge_tables(
            merger,
            [MergeRequest(keyless.table, DAY1), MergeRequest(shop.table, DAY1)],
        )
        assert outcomes[0].result is None
        assert outcomes[0].error is not None
        assert "has no key" in outcomes[0].error
        assert outcomes[1].result is not None
        assert outcomes[1].result.rows == 9

        with pytest.raises(NotReadyError, match=f"has not marked {DAY2} ready"):
            merger.merge(MergeRequest(shop.table, DAY2, wait_ready_s=0))
        shop.mark_ready(DAY2 + timedelta(days=1))
        with pytest.raises(Exception, match=f"snapshot of {shop.table} for {DAY2} is missing"):
            merger.merge(MergeRequest(shop.table, DAY2 + timedelta(days=1)))
        # The operator's override merges a day that is not ready, and the record says so.
        provisional = merger.merge(MergeRequest(shop.table, DAY2, skip_readiness=True))
        assert (provisional.rows, provisional.readiness) == (9, "skipped by operator")
        assert provisional.to_json()["readiness"] == "skipped by operator"
        # Stored with the tag too: a scheduler on any host reads it (cdc_platform.snapshot_tags).
        facts = merger.store.merge_facts(shop.table, day_tag(DAY2))
        assert (facts["provisional"], facts["readiness"]) == (True, "skipped by operator")
        assert merger.store.merge_facts(shop.table, day_tag(DAY1))["provisional"] is False
    finally:
        keyless.drop()
    with pytest.raises(ConfigError, match="no table mirror named"):
        merger.merge(MergeRequest("nope", DAY1))


def _merge_command(config: Path, shop: Shop, day: date, log_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "cdc-mirror"),
            "--config",
            str(config),
            "merge",
            "--table",
            shop.table,
            "--dt",
            str(day),
        ],
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=log_file.open("wb"),
        text=True,
        start_new_session=True,  # the JVM is in the same group, killed with it
    )


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.05)


def test_command_in_another_process_and_a_killed_merge_leaves_the_previous_state(
    spark: Any, shop: Shop, tmp_path: Path
) -> None:
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    placed = merged_first_day(spark, shop, merger, 20)
    shop.start_day(DAY2)
    random_day(shop, DAY2, placed, 30)
    shop.write_raw(spark, DAY2)
    config = shop.write_config(tmp_path / "merge.yaml")

    # Another Spark process writes the snapshot; this module's session reads it.
    command = _merge_command(config, shop, DAY2, tmp_path / "merge-1.log")
    out, _ = command.communicate(timeout=SPARK_TIMEOUT_S)
    assert command.returncode == 0, (tmp_path / "merge-1.log").read_text()[-3000:]
    assert f"{shop.table} {DAY2}: " in out
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    published = merger.store.state(shop.table).days[DAY2]
    before = snapshot_rows(spark, settings, shop.table, DAY2)

    # The same merge again, killed (with its JVM) once it has started writing data files.
    data = shop.lake / f"{settings.merge.database}.db" / shop.table / "data"
    written = set(data.rglob("*.parquet"))
    killed = _merge_command(config, shop, DAY2, tmp_path / "merge-2.log")
    _wait_for(
        lambda: bool(set(data.rglob("*.parquet")) - written), SPARK_TIMEOUT_S, "new data files"
    )
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert merger.store.state(shop.table).days[DAY2] == published
    assert snapshot_rows(spark, settings, shop.table, DAY2) == before

    # The next merge finishes the job (what the killed one wrote is never referenced:
    # `cdc-mirror maintain` removes such orphan files).
    again = merger.merge(MergeRequest(shop.table, DAY2))
    assert snapshot_rows(spark, settings, shop.table, DAY2) == before
    assert merger.store.state(shop.table).days[DAY2] == again.snapshot_id != published


def test_rows_late_for_an_older_day_reach_every_later_merge_and_tags_stay(
    spark: Any, shop: Shop
) -> None:
    """Changes of DAY1 reach the lake after DAY1 and DAY2 were merged: a new key, an update
    of a key that stays, and an update of a key that DAY2 deleted (older than that DELETE).
    DAY3's merge takes every change from the earliest late row on: its tag and the current
    table have the insert and the update and not the deleted key; DAY1's and DAY2's tags stay
    as merged. DAY2 is an archiving day: its ignored DELETEs, taken again, stay ignored."""
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    day3 = DAY2 + timedelta(days=1)
    archived = history(shop, 4, old=True)  # 12 rows from 60 days ago, archived on DAY2
    placed = history(shop, 2)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    for shard in range(3):
        placed[shop.insert(shard, during(DAY1, shop.rng))] = shard
    # At DAY1 23:00, three changes whose messages reach the lake only after DAY2's merge.
    stays, gone = sorted(placed)[:2]
    shop._second, shop._seq = day_start(DAY1) + 23 * 3600, 0
    late_new = shop.insert(1, datetime(2026, 11, 20, 23))
    shop.update(placed[stays], stays)
    shop.update(placed[gone], gone)
    held_back = shop.messages[-3:]
    del shop.messages[-3:]
    shop.write_raw(spark, DAY1)
    first = merger.merge(MergeRequest(shop.table, DAY1))
    day1_rows = snapshot_rows(spark, settings, shop.table, DAY1)
    assert late_new not in day1_rows

    # DAY2: the key updated late is deleted (a recent row: the DELETE applies), the old rows
    # are archived (12 DELETEs of old rows > 7 × 1 insert: ignored, kept in the snapshot).
    shop.start_day(DAY2)
    shop.delete(placed.pop(gone), gone)
    for order_no, shard in sorted(archived.items()):
        shop.delete(shard, order_no)
    placed[shop.insert(2, during(DAY2, shop.rng))] = 2
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    assert second.archive.archiving and second.archive.ignored_deletes == len(archived)
    assert second.late_from is None
    day2_rows = snapshot_rows(spark, settings, shop.table, DAY2)
    assert gone not in day2_rows and set(archived) <= set(day2_rows)

    # The late changes of DAY1 are committed now (the writer counts them late for DAY1).
    shop.messages.extend(held_back)
    shop.write_raw(spark, DAY1, ready=False)
    shop.mark_ready(DAY1, late_rows={shop.table: 3})
    shop.start_day(day3)
    shop.update(placed[sorted(placed)[-1]], sorted(placed)[-1])
    shop.write_raw(spark, day3)
    # What the next merge decides by is stored with the tags in the lake, not only in the
    # merge records (local files, audit only): a merge on another host, without them, sees it.
    facts = merger.store.merge_facts(shop.table, day_tag(DAY2))
    assert facts["rawSnapshotId"] == second.raw_snapshot_id is not None
    assert facts["archive"]["archiving"] is True
    shutil.rmtree(settings.lake_dir / "_merge")
    third = merger.merge(MergeRequest(shop.table, day3))

    assert (third.mode, third.late_from) == ("merge", "2026-11-20T23")
    assert not third.archive.archiving
    assert third.check is not None and third.check.ok, third.check.to_json()
    mysql = shop.mysql_rows()
    expected = {**mysql, **{key: day2_rows[key] for key in archived}}
    day3_rows = snapshot_rows(spark, settings, shop.table, day3)
    assert day3_rows == expected
    assert day3_rows[late_new] == mysql[late_new]
    assert day3_rows[stays] == mysql[stays] != day2_rows[stays]
    assert gone not in day3_rows  # the late UPDATE did not bring the deleted key back
    current = spark.table(merger.store.name(shop.table)).select("order_no").collect()
    assert sorted(row["order_no"] for row in current) == sorted(expected)
    # The tags already published stay as they were merged.
    state = merger.store.state(shop.table)
    assert state.days == {
        DAY1: first.snapshot_id,
        DAY2: second.snapshot_id,
        day3: third.snapshot_id,
    }
    assert state.current == third.snapshot_id
    assert snapshot_rows(spark, settings, shop.table, DAY1) == day1_rows
    assert snapshot_rows(spark, settings, shop.table, DAY2) == day2_rows
    # The next day has them too, without taking the late rows again.
    day4 = day3 + timedelta(days=1)
    shop.start_day(day4)
    shop.insert(0, during(day4, shop.rng))
    shop.write_raw(spark, day4)
    fourth = merger.merge(MergeRequest(shop.table, day4))
    assert (fourth.late_from, fourth.changes) == (None, 1)
    expected = {**shop.mysql_rows(), **{key: day2_rows[key] for key in archived}}
    assert snapshot_rows(spark, settings, shop.table, day4) == expected


def test_a_row_late_for_an_older_day_survives_maintenance_between_merges(
    spark: Any, shop: Shop
) -> None:
    """`cdc-mirror maintain` runs between DAY2's merge and DAY3's and expires every raw
    snapshot it may (``expire_after_hours`` 0, one retained), after a change of DAY1 reached
    the lake late: it keeps the raw snapshot DAY2's merge read (its tag's facts name it) and
    the commits since, so DAY3's merge still finds the late row and has it."""
    settings = shop.merge_settings()
    maintenance = settings.maintenance.model_copy(
        update={"expire_after_hours": 0, "retain_snapshots": 1, "raw_days": 365}
    )
    merger = Merger(settings, spark)
    day3 = DAY2 + timedelta(days=1)
    history(shop, 2)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    shop.insert(0, during(DAY1, shop.rng))
    # At DAY1 23:00, a new row whose message reaches the lake only after DAY2's merge.
    shop._second, shop._seq = day_start(DAY1) + 23 * 3600, 0
    late_new = shop.insert(1, datetime(2026, 11, 20, 23))
    held_back = shop.messages[-1:]
    del shop.messages[-1:]
    shop.write_raw(spark, DAY1)
    first = merger.merge(MergeRequest(shop.table, DAY1))
    shop.start_day(DAY2)
    shop.insert(2, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    assert late_new not in snapshot_rows(spark, settings, shop.table, DAY2)

    shop.messages.extend(held_back)
    shop.write_raw(spark, DAY1, ready=False)
    shop.mark_ready(DAY1, late_rows={shop.table: 1})
    shop.start_day(day3)
    shop.insert(0, during(day3, shop.rng))
    shop.write_raw(spark, day3)
    report = Maintainer(
        settings.model_copy(update={"maintenance": maintenance}), spark, merger.config
    ).run([shop.table])
    assert not report.failed, report.failed
    raw = f"{settings.lake.catalog}.{shop.raw_database}.{RAW_TABLE}"
    kept = {
        row["snapshot_id"]
        for row in spark.sql(f"SELECT snapshot_id FROM {raw}.snapshots").collect()
    }
    # The raw snapshots the next merge (DAY3) and a re-run of DAY2 search from stay.
    assert {first.raw_snapshot_id, second.raw_snapshot_id} <= kept

    third = merger.merge(MergeRequest(shop.table, day3))
    assert third.late_from == "2026-11-20T23"
    day3_rows = snapshot_rows(spark, settings, shop.table, day3)
    assert late_new in day3_rows
    assert day3_rows == shop.mysql_rows()


def test_an_archiving_day_whose_tag_has_no_stored_facts_keeps_its_deletes_ignored(
    spark: Any, shop: Shop
) -> None:
    """DAY2's tag carries no merge facts (set before merges stored them with the tag, as after
    an upgrade) and its merge record is not on this host: DAY3's merge cannot tell which raw
    rows arrived late and takes every change again from the oldest raw day (DAY1), so a row
    late for DAY1, committed after DAY2's merge, is in. DAY2 was an archiving day; its ignored
    DELETEs must stay ignored (the rule decided again on them), not delete the archived rows
    from DAY3's tag and the current table. (With the record on this host its decision comes
    from there: unit test.)"""
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    day3 = DAY2 + timedelta(days=1)
    archived = history(shop, 4, old=True)  # 12 rows from 60 days ago, archived on DAY2
    history(shop, 2)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    shop.insert(0, during(DAY1, shop.rng))
    # At DAY1 23:00, a new row whose message reaches the lake only after DAY2's merge.
    shop._second, shop._seq = day_start(DAY1) + 23 * 3600, 0
    late_new = shop.insert(1, datetime(2026, 11, 20, 23))
    held_back = shop.messages[-1:]
    del shop.messages[-1:]
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))
    shop.start_day(DAY2)
    for order_no, shard in sorted(archived.items()):
        shop.delete(shard, order_no)
    shop.insert(2, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    assert second.archive.archiving and second.archive.ignored_deletes == len(archived)
    day2_rows = snapshot_rows(spark, settings, shop.table, DAY2)
    assert set(archived) <= set(day2_rows)
    spark.sql(
        f"ALTER TABLE {merger.store.name(shop.table)} "
        f"UNSET TBLPROPERTIES ('{facts_property(day_tag(DAY2))}')"
    )
    assert merger.store.merge_facts(shop.table, day_tag(DAY2)) == {}
    shutil.rmtree(settings.lake_dir / "_merge")
    shop.messages.extend(held_back)
    shop.write_raw(spark, DAY1, ready=False)
    shop.mark_ready(DAY1, late_rows={shop.table: 1})
    shop.start_day(day3)
    shop.insert(1, during(day3, shop.rng))
    shop.write_raw(spark, day3)
    third = merger.merge(MergeRequest(shop.table, day3))
    assert third.late_from == "2026-11-20T00"  # every change again from the oldest raw day
    # DAY2 taken again (from its midnight, or from an older day's: where the merge cannot
    # tell the late rows apart, it takes every change from there on again).
    assert third.late_from is not None and third.late_from <= "2026-11-21T00"
    assert not third.archive.archiving
    day3_rows = snapshot_rows(spark, settings, shop.table, day3)
    assert late_new in day3_rows
    assert set(archived) <= set(day3_rows), sorted(set(archived) - set(day3_rows))
    assert day3_rows == {**shop.mysql_rows(), **{key: day2_rows[key] for key in archived}}
    current = spark.table(merger.store.name(shop.table)).select("order_no").collect()
    assert sorted(row["order_no"] for row in current) == sorted(day3_rows)


def _stamp_last(shop: Shop, execute: datetime) -> None:
    """The last recorded change carries ``execute`` (UTC) as its binlog time and keeps its
    offset: a server's clock stepped back, or the clocks of two instances differ."""
    shop.messages[-1]["executeTime"] = int(execute.replace(tzinfo=UTC).timestamp() * 1000)


def test_a_delete_with_a_higher_offset_but_an_earlier_time_is_never_undone(
    spark: Any, shop: Shop
) -> None:
    """Binlog times are not monotonic in offset order (docs/simplebinlog.md): which day a
    change belongs to is its executeTime's, which change wins is its offset.

    * ``moved``: updated at DAY2 00:00:02, then deleted by a change whose time reads DAY1
      23:59:59 (a higher offset, so DAY1's change). DAY1's tag lacks the key; DAY2's merge,
      which takes the UPDATE (older offset), must not bring it back.
    * ``late``: updated at DAY1 23:00 by a change that reaches the lake only after DAY2's
      merge, then deleted by a change whose time reads DAY1 22:00 (higher offset, on time).
      DAY3's merge takes the late UPDATE (every change from DAY1 23:00 on): it must not bring
      the key back either."""
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    day3 = DAY2 + timedelta(days=1)
    history(shop, 2)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    moved, late, kept = (shop.insert(shard, during(DAY1, shop.rng)) for shard in range(3))
    shop._second, shop._seq = day_start(DAY1) + 23 * 3600, 0
    shop.update(1, late)
    held_back = shop.messages.pop()
    shop.delete(1, late)
    _stamp_last(shop, datetime(2026, 11, 20, 22))
    shop._second, shop._seq = day_start(DAY2) + 2, 0
    shop.update(0, moved)
    update_on_day2 = shop.messages.pop()
    shop.delete(0, moved)
    _stamp_last(shop, datetime(2026, 11, 20, 23, 59, 59))
    shop.write_raw(spark, DAY1)
    first = merger.merge(MergeRequest(shop.table, DAY1))
    day1_rows = snapshot_rows(spark, settings, shop.table, DAY1)
    assert kept in day1_rows and moved not in day1_rows and late not in day1_rows

    shop.start_day(DAY2)
    shop.messages.append(update_on_day2)
    shop.insert(2, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    day2_rows = snapshot_rows(spark, settings, shop.table, DAY2)
    assert moved not in day2_rows, "the UPDATE older than the DELETE brought the key back"
    assert day2_rows == shop.mysql_rows()

    shop.messages.append(held_back)
    shop.write_raw(spark, DAY1, ready=False)
    shop.mark_ready(DAY1, late_rows={shop.table: 1})
    shop.start_day(day3)
    shop.insert(0, during(day3, shop.rng))
    shop.write_raw(spark, day3)
    third = merger.merge(MergeRequest(shop.table, day3))
    assert third.late_from == "2026-11-20T23"
    day3_rows = snapshot_rows(spark, settings, shop.table, day3)
    assert late not in day3_rows, "the late UPDATE brought back a key a newer DELETE removed"
    assert day3_rows == shop.mysql_rows()
    assert third.check is not None and third.check.ok, third.check.to_json()
    state = merger.store.state(shop.table)
    assert state.days == {
        DAY1: first.snapshot_id,
        DAY2: second.snapshot_id,
        day3: third.snapshot_id,
    }
    assert snapshot_rows(spark, settings, shop.table, DAY1) == day1_rows


def test_a_first_merge_of_a_later_day_has_the_rows_of_the_days_before(
    spark: Any, shop: Shop
) -> None:
    """History replayed and changes collected on DAY1 (rows of the raw partition DAY1), the
    table's first merge run for DAY2: its snapshot has every change before DAY2's end, the
    replayed rows and DAY1's changes included."""
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    history(shop, 3)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop._second += 400
    placed = {shop.insert(shard, during(DAY1, shop.rng)): shard for shard in range(3)}
    gone = sorted(placed)[0]
    shop.delete(placed.pop(gone), gone)
    shop.write_raw(spark, DAY1)
    shop.start_day(DAY2)
    changed = sorted(placed)[-1]
    shop.update(placed[changed], changed)
    shop.insert(0, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)

    result = merger.merge(MergeRequest(shop.table, DAY2))
    assert result.mode == "first"
    day2_rows = snapshot_rows(spark, settings, shop.table, DAY2)
    assert len(day2_rows) == 3 * 3 + 3 - 1 + 1
    assert day2_rows == shop.mysql_rows()
    assert result.check is not None and result.check.ok, result.check.to_json()


def test_the_check_is_stalled_by_the_previous_tag_without_local_records(
    spark: Any, shop: Shop
) -> None:
    stalled_without_local_records(spark, shop)


def stalled_without_local_records(spark: Any, shop: Shop) -> None:
    """The check's ``stalled`` flag (snapshot counts unchanged since the previous check while
    MySQL's moved) compares with the check stored with the previous day's tag in the lake, so
    a merge on another host, or with the lake on HDFS/S3, sees it: the local records are
    deleted before DAY2's merge (``test_merge_remote.py`` runs it on the remote storages)."""
    settings = shop.merge_settings()
    merger = Merger(settings, spark)
    merged_first_day(spark, shop, merger, 10)
    # MySQL moves on a day both checks cover; the change never reaches the lake.
    shop.insert(0, during(DAY1, shop.rng))
    shop.messages.clear()
    shutil.rmtree(settings.lake_dir / "_merge")
    shop.start_day(DAY2)
    shop.insert(1, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))
    assert second.check is not None
    assert second.check.stalled, second.check.to_json()
    assert second.check.mismatches == [DAY1]
    record = records.read_json(
        records.check_record_path(settings.lake_dir, shop.table, "2026-11-21")
    )
    assert record is not None and record["stalled"] is True


def test_a_day_shares_the_files_it_did_not_change(spark: Any, shop: Shop) -> None:
    """Storage and cost follow the change: the next day's tag references every data file of
    the day before and adds only the changed rows (merge-on-read)."""
    settings = shop.merge_settings(check=False, buckets=2)
    merger = Merger(settings, spark)
    placed = history(shop, 10)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop.write_raw(spark, DAY1)
    first = merger.merge(MergeRequest(shop.table, DAY1))

    shop.start_day(DAY2)
    lowest = sorted(placed)[0]
    shop.update(placed[lowest], lowest)
    shop.insert(2, during(DAY2, shop.rng), "zz-new")
    shop.write_raw(spark, DAY2)
    second = merger.merge(MergeRequest(shop.table, DAY2))

    name = merger.store.name(shop.table)

    def data_files(day: date) -> set[str]:
        rows = spark.sql(
            f"SELECT file_path FROM {name}.files VERSION AS OF '{day_tag(day)}' WHERE content = 0"
        ).collect()
        return {row["file_path"] for row in rows}

    assert data_files(DAY1) < data_files(DAY2)
    assert second.files_kept == first.files == len(data_files(DAY1))
    summary = spark.sql(
        f"SELECT summary FROM {name}.snapshots WHERE snapshot_id = {second.snapshot_id}"
    ).first()
    assert summary is not None
    assert summary["summary"]["added-records"] == "2"  # the updated row and the new one
    assert (first.rows, second.rows) == (30, 31)
    # Row groups small enough that a MERGE's key-range condition skips most of a file.
    properties = merger.store.java_table(shop.table).properties()
    assert properties.get("write.parquet.row-group-size-bytes") == str(ROW_GROUP_BYTES)
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)


def test_the_dt_view_gets_each_new_day_by_its_stored_text_and_new_columns_by_sql(
    spark: Any, shop: Shop
) -> None:
    """A day that keeps the view's columns changes only the view's stored text (one metastore
    call, no CREATE VIEW that drops it for a moment): the view then shows exactly the tagged
    days, each with its tag's rows, in the table's columns; a day that adds a column makes the
    view again by SQL."""
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    placed = history(shop, 5)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))
    view = days_view(settings, shop.table)
    database = settings.merge.database + "_dt"
    client = metastore_client(spark)

    def mark_record() -> None:
        # A parameter of the stored record that only a change of the record keeps.
        record = client.getTable(database, shop.table)
        record.getParameters().put("cdc-test.kept", "yes")
        client.alter_table(database, shop.table, record)

    def record_kept() -> bool:
        return client.getTable(database, shop.table).getParameters().get("cdc-test.kept") == "yes"

    def assert_view_shows(days: list[date]) -> None:
        table_columns = [
            (f.name, f.dataType) for f in spark.table(merger.store.name(shop.table)).schema
        ]
        shown = spark.table(view).schema
        assert [(f.name, f.dataType) for f in shown] == [*table_columns, ("dt", StringType())]
        for day in days:
            rows = {
                row["order_no"]: row.asDict()
                for row in spark.sql(f"SELECT * FROM {view} WHERE dt = '{day}'").collect()
            }
            tagged = spark.sql(
                f"SELECT * FROM {merger.store.name(shop.table)} VERSION AS OF '{day_tag(day)}'"
            ).collect()
            # The tag's rows, NULL in the columns added after it was merged.
            expected = {
                row["order_no"]: {
                    **{f.name: None for f in shown},
                    **row.asDict(),
                    "dt": str(day),
                }
                for row in tagged
            }
            assert rows == expected
        found = {row["dt"] for row in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()}
        assert found == {str(day) for day in days}

    assert_view_shows([DAY1])
    mark_record()

    shop.start_day(DAY2)
    changed = sorted(placed)[0]
    shop.update(placed[changed], changed)
    shop.insert(1, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    merger.merge(MergeRequest(shop.table, DAY2))
    assert record_kept()  # its text changed in place: the view was not made again
    assert_view_shows([DAY1, DAY2])
    merger.merge(MergeRequest(shop.table, DAY2))  # again: the same text, left as it is
    assert record_kept()
    assert_view_shows([DAY1, DAY2])

    day3 = DAY2 + timedelta(days=1)
    shop.start_day(day3)
    shop.on_every_shard("ALTER TABLE `{schema}`.`{table}` ADD COLUMN channel VARCHAR(16) NULL")
    shop.insert(2, during(day3, shop.rng))
    shop.write_raw(spark, day3)
    merger.merge(MergeRequest(shop.table, day3))
    assert not record_kept()  # another column: made again by SQL
    assert_view_shows([DAY1, DAY2, day3])


def merge_second_day(spark: Any, shop: Shop, merger: Merger) -> None:
    """One new row merged as DAY2."""
    shop.start_day(DAY2)
    shop.insert(1, during(DAY2, shop.rng))
    shop.write_raw(spark, DAY2)
    merger.merge(MergeRequest(shop.table, DAY2))


def test_a_tag_dropped_while_the_view_is_refreshed_is_not_left_in_the_view(
    spark: Any, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cdc-mirror maintain`` may drop an expired day's tag, and rewrite the dt view, between
    a merge's load of the table and its store of the view's text: the view must not end up
    naming the dropped tag (every reader of the dt view would fail until the next refresh)."""
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    merged_first_day(spark, shop, merger, 0)
    merge_second_day(spark, shop, merger)

    store = merger.store
    loaded = store.java_table(shop.table)  # the merge's load: both days tagged
    maintainer = SnapshotStore(spark, settings)  # maintain's, another process's
    store_text = snapshot_module.replace_view_text
    raced: list[bool] = []

    def maintain_lands_first(*args: Any) -> bool:
        if not raced:
            raced.append(True)
            spark.sql(f"ALTER TABLE {store.name(shop.table)} DROP TAG `{day_tag(DAY1)}`")
            maintainer.refresh_days_view(shop.table)
        return bool(store_text(*args))

    monkeypatch.setattr(snapshot_module, "replace_view_text", maintain_lands_first)
    store.refresh_days_view(shop.table, loaded)

    assert raced
    view = days_view(settings, shop.table)
    shown = [row["dt"] for row in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()]
    assert shown == [str(DAY2)]


def test_closing_the_merger_closes_every_metastore_client_of_its_view_refresh(
    spark: Any, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view refresh's metastore clients (one per thread) are closed when the merge run
    closes its Merger, the client of a thread that has ended too: with a ``thrift://``
    metastore each would keep its socket open."""
    made = record_metastore_clients(monkeypatch)
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    merged_first_day(spark, shop, merger, 0)  # the dt view refreshed on this thread
    with ThreadPoolExecutor(1) as other:  # and on a thread that ends before the close
        other.submit(merger.store.refresh_days_view, shop.table).result()
    assert len(made) == 2
    assert [client.closed for client in made] == [0, 0]

    merger.close()

    assert [client.closed for client in made] == [1, 1]
    view = days_view(settings, shop.table)  # the store makes a client again when used
    merger.store.refresh_days_view(shop.table)
    assert [row["dt"] for row in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()] == [
        str(DAY1)
    ]
    merger.close()
    assert [client.closed for client in made] == [1, 1, 1]


def test_a_view_refreshed_under_other_sql_settings_runs_with_them(spark: Any, shop: Shop) -> None:
    """A dt view refreshed by its stored text (its columns unchanged) in a session with other
    SQL settings (here its time zone) is stored with them, as ``CREATE OR REPLACE VIEW`` in
    that session would store it: a view runs with the settings stored with it, and keeping
    those of its creation would read differently from the same view made again."""
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    merged_first_day(spark, shop, merger, 0)  # the view made in the session's UTC
    database = settings.merge.database + "_dt"
    client = metastore_client(spark)
    try:
        with session_settings(spark, {"spark.sql.session.timeZone": "Asia/Tokyo"}):
            merger.store.refresh_days_view(shop.table)  # the same text: no CREATE VIEW

            stored = session_part(client, database, shop.table)
            text = client.getTable(database, shop.table).getViewExpandedText()
            assert stored["view.sqlConfig.spark.sql.session.timeZone"] == "Asia/Tokyo"
            assert stored == made_by_sql(spark, client, database, text)
    finally:
        client.close()
        merger.close()


def test_a_view_stored_from_a_table_loaded_before_a_new_day_keeps_that_day(
    spark: Any, shop: Shop
) -> None:
    """``cdc-mirror maintain`` refreshing the dt view from the table as it loaded it before a
    merge tagged a new day, and storing it after the merge's own refresh, must not leave the
    view without that day (its rows would be missing until the next refresh)."""
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    merged_first_day(spark, shop, merger, 0)
    maintainer = SnapshotStore(spark, settings)  # maintain's, another process's
    loaded_before = maintainer.java_table(shop.table)  # only DAY1 tagged
    merge_second_day(spark, shop, merger)

    maintainer.refresh_days_view(shop.table, loaded_before)  # stored last

    view = days_view(settings, shop.table)
    shown = {row["dt"] for row in spark.sql(f"SELECT DISTINCT dt FROM {view}").collect()}
    assert shown == {str(DAY1), str(DAY2)}


@pytest.mark.skipif(SCALE == 1, reason="heavier variant: CDC_TEST_MERGE_FULL=1")
def test_widened_column_keeps_old_partitions_readable(spark: Any, shop: Shop) -> None:
    settings = shop.merge_settings(check=False)
    merger = Merger(settings, spark)
    placed = history(shop, 4)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))
    day1_before = snapshot_rows(spark, settings, shop.table, DAY1)

    shop.start_day(DAY2)
    shop.on_every_shard(
        "ALTER TABLE `{schema}`.`{table}` MODIFY amount DECIMAL(16,4) NOT NULL, "
        "MODIFY qty BIGINT UNSIGNED NOT NULL"
    )
    changed = sorted(placed)[0]
    shop.update(placed[changed], changed)
    shop.write_raw(spark, DAY2)
    result = merger.merge(MergeRequest(shop.table, DAY2))

    assert result.schema.widened == {
        "amount": ("decimal(12,2)", "decimal(16,4)"),
        "qty": ("bigint", "decimal(20,0)"),
    }
    types = dict(spark.table(merger.store.name(shop.table)).dtypes)
    assert (types["amount"], types["qty"]) == ("decimal(16,4)", "decimal(20,0)")
    assert_snapshot_equals_mysql(spark, shop, merger, DAY2)
    # Yesterday's tag keeps its own types; the dt view reads it widened, values equal.
    assert snapshot_rows(spark, settings, shop.table, DAY1) == day1_before
    widened = {
        row["order_no"]: (str(row["amount"]), str(row["qty"]))
        for row in spark.sql(
            f"SELECT order_no, amount, qty FROM {days_view(settings, shop.table)} "
            f"WHERE dt = '{DAY1}'"
        ).collect()
    }
    assert widened == {k: (f"{r['amount']}00", r["qty"]) for k, r in day1_before.items()}


def test_a_table_of_a_newer_layout_stops_merge_and_maintenance_before_they_read(
    spark: Any, shop: Shop
) -> None:
    """The raw table as a newer cdc-mirror left it: the merge and ``maintain`` each stop with
    one sentence naming the table's location and the cause, and change nothing."""
    settings = shop.merge_settings(check=False, buckets=2)
    merger = Merger(settings, spark)
    shop.start_day(DAY1)
    shop.insert(0, during(DAY1, shop.rng))
    shop.write_raw(spark, DAY1)
    raw = shop.lake_catalog(spark).name(shop.raw_database, RAW_TABLE)
    newer = LAYOUT_VERSION + 1
    spark.sql(f"ALTER TABLE {raw} SET TBLPROPERTIES ('{LAYOUT_PROPERTY}'='{newer}')")
    raw_before = spark.sql(f"SELECT snapshot_id FROM {raw}.snapshots").collect()
    where = settings.lake_location.child(f"{shop.raw_database}.db", RAW_TABLE)
    sentence = (
        f"the lake table {shop.raw_database}.{RAW_TABLE} at {where} cannot be used: it "
        f"was written by a newer version of cdc-mirror ({LAYOUT_PROPERTY} {newer}; this "
        f"version reads {OLDEST_LAYOUT_READ} to {LAYOUT_VERSION})."
    )
    with pytest.raises(IncompatibleTableError) as merging:
        merger.merge(MergeRequest(shop.table, DAY1))
    assert str(merging.value) == sentence
    assert not merger.store.exists(shop.table)  # nothing merged
    with pytest.raises(IncompatibleTableError) as maintaining:
        Maintainer(settings, spark, merger.config).run()
    assert str(maintaining.value) == sentence
    assert spark.sql(f"SELECT snapshot_id FROM {raw}.snapshots").collect() == raw_before
