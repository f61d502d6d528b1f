"""``lake.webhdfs``, the NameNode's WebHDFS address the scheduler reads an hdfs:// lake's
snapshot tags through: an http(s) URL with a host and no password, kept without its
trailing slash; a Derby metastore is refused in one sentence (only Spark reads the tags
then); and a day's readiness read from the merge facts stored with its tag."""

from __future__ import annotations

import json
from datetime import date

import pytest
from pydantic import ValidationError

from cdc_platform.config import Settings
from cdc_platform.lake_location import LakeSettings
from cdc_platform.lake_snapshots import FACTS_PREFIX
from cdc_platform.snapshot_tags import SnapshotTags, TagsUnavailableError, metadata_locations


def test_webhdfs_is_an_http_url_without_a_password() -> None:
    assert LakeSettings(webhdfs="http://nn:9870/").webhdfs == "http://nn:9870"
    assert LakeSettings().webhdfs is None
    for bad in ("hdfs://nn:8020", "nn:9870", "http://user:secret@nn:9870"):
        with pytest.raises(ValidationError, match="http:// or https:// URL"):
            LakeSettings(webhdfs=bad)


def test_a_derby_metastore_cannot_tell_the_tags_without_spark() -> None:
    base = Settings()
    settings = base.model_copy(
        update={"spark": base.spark.model_copy(update={"metastore": "derby"})}
    )
    with pytest.raises(TagsUnavailableError, match="with a Derby metastore only Spark"):
        metadata_locations(settings, "ods_snapshot")


def test_a_days_readiness_comes_from_the_merge_facts_stored_with_its_tag() -> None:
    # The facts are table properties of the same metadata file the tags are read from.
    tags = SnapshotTags.of(
        [("dt-2026-11-23", 1), ("dt-2026-11-24", 2), ("dt-2026-11-25", 3), ("hr-2026-11-25-04", 4)],
        {
            (FACTS_PREFIX + "dt-2026-11-23"): json.dumps({"provisional": False}),
            (FACTS_PREFIX + "dt-2026-11-24"): json.dumps({"provisional": True}),
            (FACTS_PREFIX + "hr-2026-11-25-04"): json.dumps({"provisional": True}),
            "write.format.default": "parquet",
        },
    )
    day1, day2, day3 = date(2026, 11, 23), date(2026, 11, 24), date(2026, 11, 25)
    assert tags.days == {day1: 1, day2: 2, day3: 3}
    # DAY3's tag has no facts (merged by an earlier version): not named, its record decides.
    assert tags.provisional == {day1: False, day2: True}


def test_facts_that_say_nothing_of_readiness_are_left_to_the_record() -> None:
    tags = SnapshotTags.of(
        [("dt-2026-11-23", 1), ("dt-2026-11-24", 2)],
        {
            (FACTS_PREFIX + "dt-2026-11-23"): json.dumps({"rawSnapshotId": 7}),
            (FACTS_PREFIX + "dt-2026-11-24"): "not json",
        },
    )
    assert tags.provisional == {}
    assert SnapshotTags.of([("dt-2026-11-23", 1)]).provisional == {}
