"""The Iceberg catalog's pure parts: the Spark settings per storage, the offsets a commit
records, the one table of storage errors, and which tables this version may use."""

from __future__ import annotations

import pytest

from cdc_platform.config import Settings
from cdc_platform.iceberg import (
    LAYOUT_PROPERTY,
    LAYOUT_VERSION,
    KafkaOffsets,
    LakeAccessError,
    LakeUnreachableError,
    catalog_conf,
    incompatibility,
    list_text,
    map_lake_error,
    stamp,
    storage_for,
)
from cdc_platform.lake_location import LakeSettings, parse_location


def _settings(location: str | None) -> Settings:
    return Settings(lake=LakeSettings(location=location))


def test_the_catalog_is_iceberg_v2_in_the_hive_metastore_on_each_storage() -> None:
    for location in ("/data/lake", "hdfs://nn:8020/lake", "s3://cdc-lake/lake"):
        conf = catalog_conf("lake", storage_for(_settings(location), env={}))
        assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
        assert conf["spark.sql.catalog.lake.type"] == "hive"
        assert conf["spark.sql.catalog.lake.table-default.format-version"] == "2"
        assert conf["spark.hadoop.iceberg.engine.hive.lock-enabled"] == "false"
        assert conf["spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes"] == "false"
        assert conf["spark.sql.catalog.lake.warehouse"] == parse_location(location, BASE).uri


BASE = __import__("pathlib").Path("/")


def test_s3_gets_s3fileio_and_s3a_for_the_metastore() -> None:
    conf = catalog_conf("lake", storage_for(_settings("s3://cdc-lake/lake"), env={}))
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.s3.endpoint"] == "http://127.0.0.1:28333"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    local = catalog_conf("lake", storage_for(_settings(None), env={}))
    assert not any("s3" in key for key in local)


def test_hdfs_asks_again_soon_after_closing_a_file_and_waits_as_long_in_all() -> None:
    # A file's close asks the NameNode whether its last block is reported, sleeping between
    # asks (doubling): 400 ms at first by default, per file. The lake asks again within a
    # few ms (the DataNode reports a finalised block at once; a merge closes its files one
    # after another), as long in all as the default's 12.4 s, so a slow report still closes
    # the file.
    conf = catalog_conf("lake", storage_for(_settings("hdfs://nn:8020/lake"), env={}))
    prefix = "spark.hadoop.dfs.client.block.write.locateFollowingBlock"
    first = int(conf[f"{prefix}.initial.delay.ms"])
    retries = int(conf[f"{prefix}.retries"])
    assert first <= 5
    assert first * (2**retries - 1) >= 400 * (2**5 - 1)
    local = catalog_conf("lake", storage_for(_settings(None), env={}))
    assert not any("dfs." in key for key in local)


def test_offsets_round_trip_in_a_stable_form() -> None:
    offsets = KafkaOffsets({("b", 1): 7, ("a", 0): 0, ("b", 0): 12})
    assert offsets.encode() == '{"a":{"0":0},"b":{"0":12,"1":7}}'
    assert KafkaOffsets.decode(offsets.encode()) == offsets


@pytest.mark.parametrize(
    "text", ["not json", "[]", '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": -1}}']
)
def test_malformed_offsets_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="offset"):
        KafkaOffsets.decode(text)


S3 = parse_location("s3://cdc-lake/lake", BASE)


@pytest.mark.parametrize(
    ("chain", "error", "cause"),
    [
        (
            "java.net.ConnectException: Connection refused",
            LakeUnreachableError,
            "nothing answers there",
        ),
        ("java.net.UnknownHostException: nn1", LakeUnreachableError, "does not resolve"),
        (
            "org.apache.hadoop.fs.s3a.UnknownStoreException: s3a://cdc-lake",
            LakeAccessError,
            "the bucket cdc-lake does not exist",
        ),
        (
            "S3Exception: The request signature we calculated does not match "
            "(Service: S3, Status Code: 403) SignatureDoesNotMatch key=AKIAX secret=s3cr3t",
            LakeAccessError,
            "credentials were refused",
        ),
    ],
)
def test_storage_failures_map_to_one_sentence(
    chain: str, error: type[Exception], cause: str
) -> None:
    mapped = map_lake_error(S3, chain, ("s3cr3t", "AKIAX"))
    assert isinstance(mapped, error)
    assert str(mapped).startswith("the lake at s3://cdc-lake/lake cannot be used: ")
    assert cause in str(mapped) and "s3cr3t" not in str(mapped)


def test_an_unknown_failure_is_not_mapped() -> None:
    assert map_lake_error(S3, "AnalysisException: TABLE_OR_VIEW_NOT_FOUND", ()) is None


def test_a_table_this_version_created_is_compatible() -> None:
    assert incompatibility(stamp(), 2) is None
    assert stamp()[LAYOUT_PROPERTY] == str(LAYOUT_VERSION)


def test_a_raw_table_partitioned_by_logical_table_layout_2_is_still_read() -> None:
    # Layout 2 (a partition per logical table) is read, written and maintained by this one.
    assert incompatibility({LAYOUT_PROPERTY: "2"}, 2) is None
    assert incompatibility({LAYOUT_PROPERTY: "1"}, 2) is not None


@pytest.mark.parametrize(
    ("properties", "format_version", "cause"),
    [
        ({LAYOUT_PROPERTY: str(LAYOUT_VERSION + 1)}, 2, "written by a newer version of cdc-mirror"),
        ({LAYOUT_PROPERTY: "0"}, 2, "written by another version of cdc-mirror"),
        ({LAYOUT_PROPERTY: "1"}, 2, "written by another version of cdc-mirror"),
        ({LAYOUT_PROPERTY: "x"}, 2, "written by another version of cdc-mirror"),
        ({}, 2, "not created by cdc-mirror"),
        ({LAYOUT_PROPERTY: str(LAYOUT_VERSION)}, 1, "an Iceberg format version 1 table"),
        ({LAYOUT_PROPERTY: str(LAYOUT_VERSION)}, 3, "an Iceberg format version 3 table"),
    ],
)
def test_a_table_of_another_layout_or_format_is_refused_with_its_cause(
    properties: dict[str, str], format_version: int, cause: str
) -> None:
    found = incompatibility(properties, format_version)
    assert found is not None and cause in found
    assert "\n" not in found and not found.endswith(".")  # the caller ends the sentence


def test_a_list_passes_to_the_writer_jar_as_one_text_each_item_marked() -> None:
    # ProgressCommit.fromListText: "" is the empty list, each item follows a U+001F.
    assert list_text([]) == ""
    assert list_text([""]) == "\x1f"
    assert list_text(["2026-11-01", "2026-11-02"]) == "\x1f2026-11-01\x1f2026-11-02"
    with pytest.raises(ValueError, match="U\\+001F"):
        list_text(["a\x1fb"])
