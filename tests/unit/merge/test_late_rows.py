"""Pure rules of merges after late rows: where the changes start when the late rows cannot be
told (from the oldest raw day), the MERGE's key range over the day's and the re-taken changes, and the DELETEs an
earlier day's merge ignored as archiving (from its recorded decision)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest

from merge.archive import ArchiveDecision, ArchiveOverride, DeleteCounts, recorded_cut
from merge.hours import first_from, late_fallback, midnight_ms
from merge.job import (
    bounds_sql,
    merge_facts,
    overtaking_bounds,
    overtaking_where,
    stored_or_recorded,
)
from merge.snapshot import facts_property
from merge.transform import KeySpan, widen_span

UTC_ZONE = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")


def ms(year: int, month: int, day: int, hour: int = 0, zone: ZoneInfo = UTC_ZONE) -> int:
    return int(datetime(year, month, day, hour, tzinfo=zone).timestamp() * 1000)


@pytest.mark.parametrize("zone", [UTC_ZONE, BERLIN])
def test_late_fallback_is_the_midnight_of_the_day_before_the_start(zone: ZoneInfo) -> None:
    # A day (or a day's first hour) starts at its midnight: the day before is searched.
    assert late_fallback(midnight_ms(date(2026, 11, 21), zone), zone) == midnight_ms(
        date(2026, 11, 20), zone
    )
    # An hour inside a day: that day's midnight.
    assert late_fallback(ms(2026, 11, 21, 14, zone=zone), zone) == midnight_ms(
        date(2026, 11, 21), zone
    )
    # The day after a daylight-saving change (Berlin's 25-hour day, 2026-10-25).
    assert late_fallback(midnight_ms(date(2026, 10, 26), zone), zone) == midnight_ms(
        date(2026, 10, 25), zone
    )


@pytest.mark.parametrize("zone", [UTC_ZONE, BERLIN])
def test_a_first_snapshot_takes_every_older_raw_day(zone: ZoneInfo) -> None:
    # The table's first merge (a day or an hour) reads from the oldest raw day before it, so a
    # history replayed with its rows' own times, or days collected before, are in it.
    start = midnight_ms(date(2026, 11, 23), zone)
    assert first_from(start, zone, date(2026, 11, 16)) == midnight_ms(date(2026, 11, 16), zone)
    hour = ms(2026, 11, 23, 14, zone=zone)
    assert first_from(hour, zone, date(2026, 11, 23)) == start
    # Nothing older than its own changes: nothing more to take.
    assert first_from(start, zone, date(2026, 11, 23)) is None
    assert first_from(start, zone, None) is None


def test_changes_that_overtake_by_offset_are_those_merged_before_with_a_higher_offset() -> None:
    # A DELETE merged before (earlier time) with a higher offset than a change taken now wins
    # over it: the raw rows before the merge's start whose offset is at least the lowest taken.
    where = overtaking_where(1_795_000_000_000_001, ms(2026, 11, 21), date(2026, 11, 20))
    assert where == (
        f"dt <= '2026-11-20' AND executeTime < {ms(2026, 11, 21)} "
        "AND binlogOffset >= 1795000000000001"
    )


def test_the_overtaking_rows_read_and_the_file_test_use_the_same_bounds() -> None:
    # The metadata test (Iceberg's file statistics) and the read take the same terms, so a
    # read skipped because no file can match would have found nothing.
    bounds = overtaking_bounds(1_795_000_000_000_001, ms(2026, 11, 21), date(2026, 11, 20))
    assert bounds == [
        ("dt", "<=", "2026-11-20"),
        ("executeTime", "<", ms(2026, 11, 21)),
        ("binlogOffset", ">=", 1_795_000_000_000_001),
    ]
    assert bounds_sql(bounds) == overtaking_where(
        1_795_000_000_000_001, ms(2026, 11, 21), date(2026, 11, 20)
    )


def test_bounds_sql_quotes_text_and_refuses_an_unknown_operator() -> None:
    assert bounds_sql([("dt", "=", "it's"), ("executeTime", ">=", 5)]) == (
        "dt = 'it\\'s' AND executeTime >= 5"
    )
    with pytest.raises(ValueError, match="unknown operator"):
        bounds_sql([("dt", "!=", "x")])


def test_late_fallback_in_utc_is_plain_day_arithmetic() -> None:
    start = ms(2026, 11, 21)
    assert late_fallback(start, UTC_ZONE) == start - 86_400_000
    assert datetime.fromtimestamp(late_fallback(start, UTC_ZONE) / 1000, UTC).day == 20


@pytest.mark.parametrize("zone", [UTC_ZONE, BERLIN])
def test_late_fallback_reads_from_the_oldest_day_the_raw_table_holds(zone: ZoneInfo) -> None:
    # The raw snapshot of the merge before is unknown or expired: rows late for any day the
    # raw table still holds must be in, not only those of the day before.
    start = midnight_ms(date(2026, 11, 23), zone)
    assert late_fallback(start, zone, date(2026, 11, 16)) == midnight_ms(date(2026, 11, 16), zone)
    # An hour inside a day: from the oldest raw day too.
    hour = ms(2026, 11, 23, 14, zone=zone)
    assert late_fallback(hour, zone, date(2026, 11, 16)) == midnight_ms(date(2026, 11, 16), zone)
    # A raw table whose oldest day is the merged one: never later than the day before.
    assert late_fallback(start, zone, date(2026, 11, 23)) == midnight_ms(date(2026, 11, 22), zone)


def test_widen_span_covers_both_and_ignores_empty_ones() -> None:
    day = KeySpan(3, "o000010", "o000020")
    again = KeySpan(2, "o000002", "o000015")
    assert widen_span(day, again) == KeySpan(5, "o000002", "o000020")
    assert widen_span(day, KeySpan(0, None, None)) == day
    assert widen_span(KeySpan(0, None, None), again) == again
    # A NULL first key column in one span keeps the other's bound, and is counted.
    assert widen_span(KeySpan(1, None, None, 1), KeySpan(1, 5, 9)) == KeySpan(2, 5, 9, 1)


def test_recorded_cut_names_the_deletes_a_day_ignored() -> None:
    archiving = {"archiving": True, "timeColumn": "created_at", "cutoff": "2026-10-22"}
    assert recorded_cut(archiving) == ("created_at", date(2026, 10, 22))
    assert recorded_cut({**archiving, "archiving": False}) is None
    assert recorded_cut({**archiving, "cutoff": None}) is None
    assert recorded_cut({**archiving, "timeColumn": None}) is None
    assert recorded_cut({}) is None
    assert recorded_cut(None) is None


def test_merge_facts_carry_the_raw_snapshot_and_the_ignored_deletes() -> None:
    counts = DeleteCounts(deletes=13, old_deletes=12, increment=1)
    archiving = ArchiveDecision(
        True,
        "13 DELETEs exceed 7",
        counts,
        7,
        "created_at",
        date(2026, 10, 22),
        ArchiveOverride.NONE,
    )
    facts = merge_facts(42, archiving)
    assert facts["rawSnapshotId"] == 42
    # What a later merge taking the same changes again reads back: the same cut.
    assert recorded_cut(facts["archive"]) == ("created_at", date(2026, 10, 22))
    applied = ArchiveDecision(
        False, "rule ignored", counts, 7, "created_at", date(2026, 10, 22), ArchiveOverride.IGNORE
    )
    assert recorded_cut(merge_facts(None, applied)["archive"]) is None
    assert merge_facts(None, applied)["rawSnapshotId"] is None
    assert facts_property("dt-2026-11-21") == "cdc-mirror.merge.dt-2026-11-21"
    # Readiness, for a scheduler on any host (cdc_platform.snapshot_tags reads it).
    assert (facts["provisional"], facts["readiness"]) == (False, "ready")
    skipped = merge_facts(42, archiving, provisional=True)
    assert (skipped["provisional"], skipped["readiness"]) == (True, "skipped by operator")


def test_a_tag_without_stored_facts_falls_back_to_its_merge_record() -> None:
    """A tag set before merges stored their facts with it (a table merged by an earlier
    version): its merge record's archive decision keeps the day's ignored DELETEs ignored when
    a later merge takes its changes again; facts stored with the tag win over the record."""
    archiving = {"archiving": True, "timeColumn": "created_at", "cutoff": "2026-10-22"}
    record = {"rawSnapshotId": 7, "archive": {**archiving, "reason": "…"}, "rows": 3}
    facts = stored_or_recorded({}, record)
    assert facts["rawSnapshotId"] == 7
    assert recorded_cut(facts["archive"]) == ("created_at", date(2026, 10, 22))
    stored = {"rawSnapshotId": 9, "archive": {**archiving, "archiving": False}}
    assert stored_or_recorded(stored, record) == stored
    assert stored_or_recorded({}, None) == {}
    # A record without an archive decision: the decision is unknown (decided again), not "none".
    assert "archive" not in stored_or_recorded({}, {"rawSnapshotId": 7})
