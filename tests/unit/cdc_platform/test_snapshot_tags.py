"""``lake.webhdfs``, the NameNode's WebHDFS address the scheduler reads an hdfs:// lake's
snapshot tags through: an http(s) URL with a host and no password, kept without its
trailing slash; and a Derby metastore is refused in one sentence (only Spark reads the tags
then)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cdc_platform.config import Settings
from cdc_platform.lake_location import LakeSettings
from cdc_platform.snapshot_tags import TagsUnavailableError, metadata_locations


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
