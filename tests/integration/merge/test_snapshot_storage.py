"""Storage of a snapshot table over days with ``cdc-mirror maintain`` between them (docs/merge.md
"Cost and storage follow the change"): changes on random keys touch most data files every
day, and every retained day tag keeps the files its day referenced, so a maintenance that
rewrote every file with a delete would make the retained storage days × table size.

Measured from Iceberg's metadata: the distinct data and delete files main and every day tag
reference (``files VERSION AS OF``), against main's own data files, and main's live position
delete files and the data file each names (``delete_files``). On local disk and S3 (the
stack's SeaweedFS), HDFS as well with ``CDC_TEST_HDFS=1``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import pytest

from cdc_platform.config import Settings
from cdc_platform.lake_snapshots import day_tag
from merge.job import Merger, MergeRequest
from merge.maintenance import Maintainer, read_live_delete_files
from tests.integration.lake.conftest import TESTED_STORAGES
from tests.integration.merge.conftest import lake_on
from tests.integration.merge.harness import Shop, snapshot_rows
from tests.integration.merge.test_merge import (
    DAY1,
    assert_snapshot_equals_mysql,
    during,
    history,
)

ROWS_PER_SHARD = 200
CHANGED_FRACTION = 0.1  # of the rows, updated on random keys each day
CHANGE_DAYS = 3  # merged after DAY1, each followed by a maintenance run
# Retained data rows ≤ live rows × (1 + STORAGE_FACTOR × changed fraction × days): the
# bound docs/merge.md states (each changed row is written once by its merge, and at most once
# more when maintenance folds its file's deletes into it).
STORAGE_FACTOR = 2


@pytest.fixture(scope="module", params=TESTED_STORAGES)
def merge_stack(request: pytest.FixtureRequest, local_stack: Settings) -> Iterator[Settings]:
    yield from lake_on(local_stack, request.param)


@dataclass(frozen=True)
class Referenced:
    """Files main and the day tags reference, counted once each."""

    data_files: int
    data_bytes: int
    data_rows: int
    delete_bytes: int
    delete_files: int

    def text(self) -> str:
        return (
            f"{self.data_rows} data rows in {self.data_files} files of {self.data_bytes} B, "
            f"{self.delete_files} delete files of {self.delete_bytes} B"
        )


def referenced(spark: Any, name: str, versions: list[str]) -> Referenced:
    """The distinct files the snapshots ``versions`` (tags; "" for main) reference."""
    files: dict[str, tuple[int, int, int]] = {}
    for version in versions:
        at = f" VERSION AS OF '{version}'" if version else ""
        for row in spark.sql(
            f"SELECT file_path, content, file_size_in_bytes, record_count FROM {name}.files{at}"
        ).collect():
            files[row["file_path"]] = (
                row["content"],
                row["file_size_in_bytes"],
                row["record_count"],
            )
    data = [(size, rows) for content, size, rows in files.values() if content == 0]
    deletes = [size for content, size, _ in files.values() if content != 0]
    return Referenced(
        data_files=len(data),
        data_bytes=sum(size for size, _ in data),
        data_rows=sum(rows for _, rows in data),
        delete_bytes=sum(deletes),
        delete_files=len(deletes),
    )


def live_delete_files(spark: Any, name: str) -> dict[str, str | None]:
    """Main's position delete files: each one's path and the one data file it names (None
    when it names several)."""
    return {f.path: f.data_file for f in read_live_delete_files(spark, name)}


def data_files_with_two_deletes(deletes: dict[str, str | None]) -> int:
    """How many data files two delete files or more name (the ones maintain rewrites)."""
    return sum(1 for n in Counter(deletes.values()).values() if n > 1)


def assert_one_delete_file_per_data_file(spark: Any, name: str) -> None:
    """Reads apply at most one delete file per data file, and every delete file names one
    live data file (none left naming a folded one: total-position-deletes counts it)."""
    deletes = live_delete_files(spark, name)
    data = {row[0] for row in spark.sql(f"SELECT file_path FROM {name}.data_files").collect()}
    named = Counter(deletes.values())
    assert None not in named, deletes
    assert all(n == 1 for n in named.values()), named
    assert set(named) <= data, set(named) - data


def running_rows(merger: Merger, table: str) -> int:
    """Main's rows from Iceberg's running totals, as the merge counts them."""
    summary = merger.store.java_table(table).currentSnapshot().summary()
    return int(summary.get("total-records")) - int(summary.get("total-position-deletes") or 0)


def maintenance_keeping_every_day(settings: Settings) -> Settings:
    """``settings`` whose maintenance keeps every tagged day and expires every snapshot no tag
    or main needs (its files are gone: only what the tags and main reference stays)."""
    maintenance = settings.maintenance.model_copy(
        update={"snapshot_days": 365, "expire_after_hours": 0, "retain_snapshots": 1}
    )
    return settings.model_copy(update={"maintenance": maintenance})


def merged_history(
    spark: Any, shop: Shop, settings: Settings, rows_per_shard: int
) -> tuple[Merger, dict[str, int]]:
    """The shop's history merged as DAY1 (the snapshot's first day): its merger and rows."""
    merger = Merger(settings, spark)
    placed = history(shop, rows_per_shard)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))
    return merger, placed


def test_retained_storage_grows_with_the_change_not_with_days_times_table_size(
    spark: Any, shop: Shop
) -> None:
    settings = maintenance_keeping_every_day(shop.merge_settings(check=True, buckets=4))
    merger, placed = merged_history(spark, shop, settings, ROWS_PER_SHARD)
    name = merger.store.name(shop.table)
    maintainer = Maintainer(settings, spark, merger.config)
    live = len(placed)
    changed = int(live * CHANGED_FRACTION)
    days = [DAY1 + timedelta(days=n) for n in range(1, CHANGE_DAYS + 1)]
    per_day: list[str] = []
    day_rows: dict[date, dict[str, dict[str, str | None]]] = {}
    seen_deletes = set(live_delete_files(spark, name))
    written_by_merges = 0
    try:
        for day in days:
            shop.start_day(day)
            for order_no in shop.rng.sample(sorted(placed), changed):
                shop.update(placed[order_no], order_no)
            shop.write_raw(spark, day)
            result = merger.merge(MergeRequest(shop.table, day))
            # The snapshot's row total (Iceberg's running totals) stays exact after each
            # maintenance: the post-merge check and the merge's row count rely on it.
            assert result.rows == live, (day, result.rows, live)
            assert result.check is not None and result.check.ok, result.check
            day_rows[day] = snapshot_rows(spark, settings, shop.table, day)
            merged = live_delete_files(spark, name)
            written_by_merges += len(set(merged) - seen_deletes)
            report = maintainer.run([shop.table])
            assert not report.failed, report.failed
            maintained = live_delete_files(spark, name)
            # Maintain writes a delete file only for a data file two or more name (their
            # one), not a copy of a data file's only one: the copies follow the change.
            copies = set(maintained) - set(merged)
            assert len(copies) <= data_files_with_two_deletes(merged), (day, copies, merged)
            assert_one_delete_file_per_data_file(spark, name)
            seen_deletes |= set(merged) | set(maintained)
            tags = [day_tag(d) for d in [DAY1, *days] if d <= day]
            per_day.append(
                f"{day}: {referenced(spark, name, ['', *tags]).text()}, "
                f"{len(merged)} delete files before maintain, {len(copies)} written by it"
            )
        # A run over the unchanged table commits nothing: no delete file rewritten again.
        current = merger.store.state(shop.table).current
        again = maintainer.run([shop.table])
        assert not again.failed, again.failed
        assert merger.store.state(shop.table).current == current, again.steps
        assert running_rows(merger, shop.table) == live
        tags = [day_tag(d) for d in [DAY1, *days]]
        retained = referenced(spark, name, ["", *tags])
        table = referenced(spark, name, [""])
    finally:
        maintainer.close()
        merger.close()

    # Every day still reads as merged; main is MySQL.
    for day in days:
        assert snapshot_rows(spark, settings, shop.table, day) == day_rows[day]
    assert_snapshot_equals_mysql(spark, shop, merger, days[-1])
    bound = live * (1 + STORAGE_FACTOR * CHANGED_FRACTION * CHANGE_DAYS)
    figures = (
        f"{live} live rows, {changed} changed a day on random keys over {CHANGE_DAYS} days; "
        f"main: {table.text()}; main and {len(tags)} tags: {retained.text()} "
        f"(bytes ×{retained.data_bytes / table.data_bytes:.2f} of main's data); "
        f"after each maintain: {per_day}; {written_by_merges} delete files written by merges"
    )
    assert retained.data_rows <= bound, figures
    # Retained delete files follow the change too (docs/merge.md): each one a merge wrote,
    # and at most one rewritten per data file a merge gave a second one.
    assert retained.delete_files <= 2 * written_by_merges, figures
    # Reads stay cheap: after a run, at most one delete file per data file of main (a data
    # file's deletes rewritten into one; with deletes of half its rows it is rewritten).
    assert table.delete_files <= table.data_files, figures
    print(figures)


def merge_most_rows_changed(
    spark: Any, shop: Shop, merger: Merger, placed: dict[str, int], day: date
) -> None:
    """Three rows in five updated on ``day``, then the day merged."""
    shop.start_day(day)
    for order_no in shop.rng.sample(sorted(placed), len(placed) * 3 // 5):
        shop.update(placed[order_no], order_no)
    shop.write_raw(spark, day)
    merger.merge(MergeRequest(shop.table, day))


def test_maintain_rewrites_only_the_delete_files_that_pay_and_keeps_the_row_total(
    spark: Any, shop: Shop
) -> None:
    """Delete files naming several data files (written with partition granularity, as
    Iceberg's default for other engines) are rewritten into one per data file; a folded data
    file's delete files are dropped (its positions would stay in the running total); then a
    second run commits nothing. The snapshot equals MySQL and the running total its rows
    after each run."""
    settings = maintenance_keeping_every_day(shop.merge_settings(check=True, buckets=2))
    merger, placed = merged_history(spark, shop, settings, ROWS_PER_SHARD // 4)
    name = merger.store.name(shop.table)
    maintainer = Maintainer(settings, spark, merger.config)
    live = len(placed)
    inserted, scattered, folded_day = (DAY1 + timedelta(days=n) for n in (1, 2, 3))
    try:
        # New rows (a second data file in each bucket), some rows changed.
        shop.start_day(inserted)
        for _ in range(live // 2):
            shard = shop.rng.randrange(3)
            placed[shop.insert(shard, during(inserted, shop.rng))] = shard
        for order_no in shop.rng.sample(sorted(placed), live // 10):
            shop.update(placed[order_no], order_no)
        shop.write_raw(spark, inserted)
        merger.merge(MergeRequest(shop.table, inserted))
        assert not maintainer.run([shop.table]).failed
        live = len(placed)
        # Most rows changed, with delete files naming several data files each.
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.delete.granularity'='partition')")
        merge_most_rows_changed(spark, shop, merger, placed, scattered)
        assert None in live_delete_files(spark, name).values()
        assert not maintainer.run([shop.table]).failed
        assert_one_delete_file_per_data_file(spark, name)
        assert running_rows(merger, shop.table) == live
        assert_snapshot_equals_mysql(spark, shop, merger, scattered)
        # Most rows changed again, file-scoped: their files' deletes pass half their
        # rows, the files are folded, and their delete files dropped.
        spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES ('write.delete.granularity')")
        merge_most_rows_changed(spark, shop, merger, placed, folded_day)
        folded = maintainer.run([shop.table])
        assert not folded.failed, folded.failed
        compacted = [
            s.detail for s in folded.steps if s.action == "compact" and "_snap." in s.table
        ]
        assert compacted and not compacted[0].startswith("0 files rewritten"), compacted
        assert_one_delete_file_per_data_file(spark, name)
        assert running_rows(merger, shop.table) == live
        assert_snapshot_equals_mysql(spark, shop, merger, folded_day)
        # Nothing changed since: nothing is committed.
        current = merger.store.state(shop.table).current
        again = maintainer.run([shop.table])
        assert not again.failed, again.failed
        assert merger.store.state(shop.table).current == current, again.steps
        result = merger.merge(MergeRequest(shop.table, folded_day))
        assert result.rows == live and result.check is not None and result.check.ok, result
    finally:
        maintainer.close()
        merger.close()
