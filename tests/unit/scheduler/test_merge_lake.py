"""The scheduler's view of the lake (``MergeLake.snapshot_tags``): the snapshot tables' tags,
less the days their merge facts (else merge's records) call provisional, plus the days of records without a tag; when
the tags cannot be read it says why once, goes by merge's records, and does not try again
every pass."""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from cdc_platform.config_store import ConfigSnapshot
from cdc_platform.snapshot_tags import SnapshotTags, TagsUnavailableError
from merge import records
from scheduler import jobs
from scheduler.jobs import MergeLake

DAY1, DAY2, DAY3 = date(2026, 11, 23), date(2026, 11, 24), date(2026, 11, 25)


class Reader:
    def __init__(self, answer: dict[str, SnapshotTags] | Exception) -> None:
        self.answer = answer
        self.asked = 0

    def tags(self, tables: list[str]) -> dict[str, SnapshotTags]:
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def lake(tmp_path: Path, reader: Reader) -> MergeLake:
    settings = Settings().model_copy(
        update={"spark": Settings().spark.model_copy(update={"lake_dir": tmp_path})}
    )
    for day, readiness in ((DAY1, "ready"), (DAY2, "skipped by operator")):
        path = records.merge_record_path(settings.lake_dir, "orders", day.isoformat())
        records.write_json(path, {"readiness": readiness})
    return MergeLake(settings, ConfigSnapshot, reader)  # type: ignore[arg-type]


def test_tags_less_provisional_days_plus_the_records_days(tmp_path: Path) -> None:
    hours = {(DAY3, 4): 7}
    reader = Reader({"orders": SnapshotTags({DAY2: 5, DAY3: 6}, hours), "users": SnapshotTags()})
    found = lake(tmp_path, reader).snapshot_tags(["orders", "users"])
    # DAY2's tag is a provisional merge's (--skip-readiness); DAY1 has a record, no tag.
    assert found["orders"] == SnapshotTags({DAY1: 0, DAY3: 6}, hours)
    assert found["users"] == SnapshotTags()


def test_a_tags_merge_facts_tell_provisional_merges_before_the_local_records(
    tmp_path: Path,
) -> None:
    # DAY1 was merged provisionally on another host (its facts say so; this host's record
    # says ready), DAY2 merged again once ready elsewhere (its facts say ready; this host's
    # record still says provisional), DAY3's tag has no facts (an earlier version) and no
    # record: merged.
    tags = SnapshotTags({DAY1: 4, DAY2: 5, DAY3: 6}, provisional={DAY1: True, DAY2: False})
    found = lake(tmp_path, Reader({"orders": tags})).snapshot_tags(["orders"])
    assert found["orders"] == SnapshotTags({DAY2: 5, DAY3: 6})


def test_tags_not_readable_are_said_once_and_not_tried_every_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = Reader(TagsUnavailableError("the metadata file x cannot be read here: no libhdfs."))
    merge_lake = lake(tmp_path, reader)
    now = [1000.0]
    monkeypatch.setattr(jobs.time, "monotonic", lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="scheduler.jobs"):
        for _ in range(3):
            assert merge_lake.snapshot_tags(["orders"]) == {"orders": SnapshotTags({DAY1: 0})}
        now[0] += jobs.TAGS_RETRY_S
        merge_lake.snapshot_tags(["orders"])
    assert reader.asked == 2
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("the metadata file x cannot be read here: no libhdfs. The scheduler")
