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
from tests.integration.merge.test_merge import DAY1, assert_snapshot_equals_mysql, history

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


def test_retained_storage_grows_with_the_change_not_with_days_times_table_size(
    spark: Any, shop: Shop
) -> None:
    settings = maintenance_keeping_every_day(shop.merge_settings(check=True, buckets=4))
    merger = Merger(settings, spark)
    placed = history(shop, ROWS_PER_SHARD)
    shop.start_day(DAY1)
    shop.mock_replay(shop._second)
    shop.write_raw(spark, DAY1)
    merger.merge(MergeRequest(shop.table, DAY1))
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

