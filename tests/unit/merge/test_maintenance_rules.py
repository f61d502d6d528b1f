"""Pure rules of ``cdc-mirror maintain``: how much of a raw table's lineage it keeps for the
next merges' search for late rows, which days are past their retention, and which position
delete files it rewrites."""

from __future__ import annotations

from datetime import date

from merge.maintenance import (
    LiveDeleteFile,
    delete_files_to_rewrite,
    expired_days,
    lineage_to,
    raw_buckets,
)

# A raw table's main: 1 ← 2 ← 3 ← 4 ← 5 (5 current), as the writer's appends leave it.
PARENTS = {5: 4, 4: 3, 3: 2, 2: 1, 1: None}


def test_lineage_reaches_back_to_the_oldest_raw_snapshot_a_merge_read() -> None:
    # The newest day's merge read 4, the day before's read 2: 5, 4, 3 and 2 stay.
    assert lineage_to(5, PARENTS.get, {4, 2}) == 4
    assert lineage_to(5, PARENTS.get, {5}) == 1


def test_lineage_keeps_nothing_extra_when_no_merge_read_a_snapshot_on_it() -> None:
    assert lineage_to(5, PARENTS.get, set()) == 0
    assert lineage_to(5, PARENTS.get, {99}) == 0  # expired before, or not main's
    assert lineage_to(None, PARENTS.get, {4}) == 0  # no commit yet


def test_lineage_stops_where_it_is_cut_or_loops() -> None:
    assert lineage_to(5, {5: 4, 4: None}.get, {4, 2}) == 2  # 2 is gone: 5 and 4 stay
    assert lineage_to(5, {5: 4, 4: 5}.get, {4}) == 2


def test_expired_days_keep_the_day_at_the_retention_edge() -> None:
    days = [date(2026, 11, d) for d in (1, 2, 3)]
    assert expired_days(days, date(2026, 11, 10), 8) == [date(2026, 11, 1)]


def test_only_delete_files_a_rewrite_pays_for_are_rewritten() -> None:
    live = {"a.parquet", "b.parquet", "c.parquet"}
    single = LiveDeleteFile("d1", (0,), "a.parquet")
    two_of_b = [LiveDeleteFile("d2", (0,), "b.parquet"), LiveDeleteFile("d3", (0,), "b.parquet")]
    dangling = LiveDeleteFile("d4", (1,), "gone.parquet")  # its data file was folded
    several = LiveDeleteFile("d5", (1,), None)  # partition granularity: may name a gone file
    beside_several = LiveDeleteFile("d6", (1,), "c.parquet")  # d5 may name c.parquet too
    chosen = delete_files_to_rewrite([single, *two_of_b, dangling, several, beside_several], live)
    assert [f.path for f in chosen] == ["d2", "d3", "d4", "d5", "d6"]


def test_a_table_whose_data_files_have_one_delete_file_each_rewrites_nothing() -> None:
    live = {"a.parquet", "b.parquet"}
    files = [LiveDeleteFile("d1", (0,), "a.parquet"), LiveDeleteFile("d2", (0,), "b.parquet")]
    assert delete_files_to_rewrite(files, live) == []


def test_a_partition_of_another_spec_with_equal_values_is_another_partition() -> None:
    # (spec id, values): spec 0's bucket 1 holds a partition-scoped delete file, spec 1's
    # bucket 1 a data file's only one, left alone.
    several = LiveDeleteFile("d1", (0, 1), None)
    other_spec = LiveDeleteFile("d2", (1, 1), "a.parquet")
    assert delete_files_to_rewrite([several, other_spec], {"a.parquet"}) == [several]


def test_raw_buckets_reads_the_bucket_count_of_each_bucketed_source_field() -> None:
    # As Iceberg prints a spec's transforms: the raw table's (dt, bucket(8, logicalTable)).
    assert raw_buckets([("identity", 21), ("bucket[8]", 20)]) == {20: 8}
    assert raw_buckets([("identity", 20), ("identity", 21)]) == {}
    assert raw_buckets([("bucket[16]", 3), ("truncate[4]", 4)]) == {3: 16}
