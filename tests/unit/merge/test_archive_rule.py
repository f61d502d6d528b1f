"""Pure: the archive-delete rule and its recorded decision."""

from __future__ import annotations

from datetime import date

import pytest

from cdc_platform.config import ArchiveDeleteRule, TableMirror
from merge.archive import ArchiveOverride, DeleteCounts, decide, threshold, time_column
from simple_binlog.errors import ConfigError

DT = date(2026, 11, 21)
RULE = ArchiveDeleteRule()


def test_threshold_is_the_smaller_limit() -> None:
    assert threshold(RULE, 100) == 700
    assert threshold(RULE, 10_000_000) == 5_000_000
    assert threshold(ArchiveDeleteRule(increment_factor=2.5), 10) == 25


def test_many_old_deletes_are_archiving() -> None:
    decision = decide(
        RULE, "created_at", DT, DeleteCounts(deletes=800, old_deletes=790, increment=100)
    )
    assert decision.archiving
    assert decision.ignored_deletes == 790
    assert decision.cutoff == date(2026, 10, 22)
    record = decision.to_json()
    assert record["archiving"] is True
    assert record["threshold"] == 700
    assert record["ignoredDeletes"] == 790
    assert record["cutoff"] == "2026-10-22"
    assert record["override"] == "none"
    assert "800 DELETEs exceed 700" in str(record["reason"])


def test_few_deletes_apply() -> None:
    decision = decide(
        RULE, "created_at", DT, DeleteCounts(deletes=700, old_deletes=700, increment=100)
    )
    assert not decision.archiving
    assert decision.ignored_deletes == 0


def test_many_deletes_of_recent_rows_apply() -> None:
    decision = decide(
        RULE, "created_at", DT, DeleteCounts(deletes=10_000, old_deletes=0, increment=1)
    )
    assert not decision.archiving


def test_absolute_limit_applies_to_big_tables() -> None:
    counts = DeleteCounts(deletes=5_000_001, old_deletes=5_000_001, increment=10_000_000)
    assert decide(RULE, "created_at", DT, counts).archiving
    counts = DeleteCounts(deletes=5_000_000, old_deletes=5_000_000, increment=10_000_000)
    assert not decide(RULE, "created_at", DT, counts).archiving


def test_overrides() -> None:
    counts = DeleteCounts(deletes=800, old_deletes=790, increment=100)
    ignored = decide(RULE, "created_at", DT, counts, ArchiveOverride.IGNORE)
    assert not ignored.archiving
    assert ignored.to_json()["override"] == "ignore"
    small = DeleteCounts(deletes=3, old_deletes=2, increment=100)
    forced = decide(RULE, "created_at", DT, small, ArchiveOverride.FORCE)
    assert forced.archiving
    assert forced.ignored_deletes == 2


def test_no_time_column_never_fires_and_cannot_be_forced() -> None:
    counts = DeleteCounts(deletes=800, old_deletes=0, increment=0)
    decision = decide(RULE, None, DT, counts)
    assert not decision.archiving
    assert "no time column" in decision.reason
    with pytest.raises(ConfigError, match="needs a time column"):
        decide(RULE, None, DT, counts, ArchiveOverride.FORCE)


def test_time_column_defaults_to_check_column() -> None:
    mirror = TableMirror(db_prefix="a", table_prefix="b", check_column="created_at")
    assert time_column(mirror) == "created_at"
    mirror = TableMirror(
        db_prefix="a",
        table_prefix="b",
        check_column="created_at",
        archive_delete=ArchiveDeleteRule(time_column="updated_at"),
    )
    assert time_column(mirror) == "updated_at"


def test_without_old_deletes_the_increment_is_not_needed() -> None:
    decision = decide(
        RULE, "created_at", DT, DeleteCounts(deletes=10_000, old_deletes=0, increment=None)
    )
    assert not decision.archiving
    record = decision.to_json()
    assert record["increment"] is None
    assert record["threshold"] is None


def test_old_deletes_without_a_counted_increment_are_a_bug_not_a_guess() -> None:
    with pytest.raises(ValueError, match="increment"):
        decide(RULE, "created_at", DT, DeleteCounts(deletes=10, old_deletes=10, increment=None))
