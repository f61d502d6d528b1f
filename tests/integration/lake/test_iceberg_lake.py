"""The lake's Iceberg catalog on local disk, HDFS and S3: a v2 table in the shared metastore,
appends that record the Kafka offsets they cover (the writer's exactly-once resume point),
the rows read back by a second engine (pyiceberg), and bad locations refused in one sentence.
"""

from __future__ import annotations

import uuid

import pytest

from cdc_platform.config import LOCAL_PORTS
from cdc_platform.iceberg import (
    KafkaOffsets,
    LakeAccessError,
    LakeCatalog,
    LakeUnreachableError,
)
from cdc_platform.lake_location import LOCAL_S3_BUCKET
from stack.process import port_open
from tests.integration.lake.conftest import STORAGES, Lake, LakeSpark, with_lake
from tests.integration.lake.second_engine import pyiceberg_properties

COLUMNS = (("id", "BIGINT"), ("name", "STRING"), ("kafkaOffset", "BIGINT"), ("dt", "STRING"))


def _rows(lake: Lake, first: int, count: int) -> object:
    spark = lake.catalog.spark
    data = [(i, f"row-{i}", i, "2026-11-25") for i in range(first, first + count)]
    return spark.createDataFrame(data, "id BIGINT, name STRING, kafkaOffset BIGINT, dt STRING")


def test_append_commits_offsets_and_a_restart_resumes_from_them(lake: Lake) -> None:
    catalog, ns = lake.catalog, lake.namespace
    catalog.create_table(ns, "orders", COLUMNS, partitioned_by=("dt",))
    assert catalog.committed_offsets(ns, "orders") is None

    first = KafkaOffsets({("cdc.local.shop", 0): 3})
    catalog.append(_rows(lake, 0, 3), ns, "orders", first)  # type: ignore[arg-type]
    assert catalog.committed_offsets(ns, "orders") == first

    second = KafkaOffsets({("cdc.local.shop", 0): 5, ("cdc.local.shop", 1): 2})
    catalog.append(_rows(lake, 3, 4), ns, "orders", second)  # type: ignore[arg-type]

    # A maintenance commit records no offsets; the resume point is passed through it.
    name = catalog.name(ns, "orders")
    catalog.spark.sql(
        f"CALL {catalog.catalog}.system.rewrite_data_files(table => '{ns}.orders', "
        "options => map('min-input-files', '1'))"
    ).collect()
    # What a restarted writer sees: a fresh catalog object, the table read anew.
    restarted = LakeCatalog.open(catalog.spark, lake.settings)
    assert restarted.committed_offsets(ns, "orders") == second
    ids = [row.id for row in catalog.spark.sql(f"SELECT id FROM {name} ORDER BY id").collect()]
    assert ids == list(range(7))
    version = catalog.spark.sql(f"SHOW TBLPROPERTIES {name} ('format-version')").collect()
    assert version[0].value == "2"
    metadata = catalog.metadata_location(ns, "orders")
    assert f"{ns}.db/orders/metadata/" in metadata and metadata.endswith(".metadata.json")


@pytest.mark.parametrize("kind", STORAGES)
def test_a_second_engine_reads_the_same_rows(lake_spark: LakeSpark, kind: str) -> None:
    """pyiceberg opens the table from its metadata file, with the storage's own FileIO
    properties (on HDFS through WebHDFS: ``second_engine``)."""
    from pyiceberg.table import StaticTable

    settings = lake_spark.settings[kind]
    catalog = LakeCatalog.open(lake_spark.spark, settings)
    ns = f"lk_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(ns)
    try:
        catalog.create_table(ns, "orders", COLUMNS)
        offsets = KafkaOffsets({("cdc.local.shop", 0): 4})
        lake = Lake(catalog, ns, settings)
        catalog.append(_rows(lake, 10, 4), ns, "orders", offsets)  # type: ignore[arg-type]
        table = StaticTable.from_metadata(
            catalog.metadata_location(ns, "orders"), pyiceberg_properties(settings)
        )
        rows = table.scan().to_arrow().sort_by("id").to_pylist()
        spark_rows = catalog.spark.sql(
            f"SELECT * FROM {catalog.name(ns, 'orders')} ORDER BY id"
        ).collect()
        assert rows == [row.asDict() for row in spark_rows]
        assert [r["name"] for r in rows] == ["row-10", "row-11", "row-12", "row-13"]
        summary = table.current_snapshot().summary  # type: ignore[union-attr]
        assert KafkaOffsets.decode(summary["cdc-mirror.kafka-offsets"]) == offsets
    finally:
        catalog.drop_namespace(ns)


def _closed_port() -> int:
    port = 29999
    assert not port_open(port), "the test needs a port nothing listens on"
    return port


BAD = ["hdfs-unreachable", "s3-unreachable", "s3-missing-bucket", "s3-wrong-secret"]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_location_is_refused_in_one_sentence(lake_spark: LakeSpark, case: str) -> None:
    base = lake_spark.settings["s3"]
    wrong_secret = f"wrong-{uuid.uuid4().hex}"
    settings, error, cause = {
        "hdfs-unreachable": (
            with_lake(base, f"hdfs://127.0.0.1:{_closed_port()}/lake", "lake_bad"),
            LakeUnreachableError,
            "nothing answers there",
        ),
        "s3-unreachable": (
            with_lake(
                base,
                f"s3://{LOCAL_S3_BUCKET}/lake",
                "lake_bad",
                endpoint=f"http://127.0.0.1:{_closed_port()}",
            ),
            LakeUnreachableError,
            "nothing answers there",
        ),
        "s3-missing-bucket": (
            with_lake(base, "s3://cdc-no-such-bucket/lake", "lake_bad"),
            LakeAccessError,
            "the bucket cdc-no-such-bucket does not exist",
        ),
        "s3-wrong-secret": (
            with_lake(
                base,
                f"s3://{LOCAL_S3_BUCKET}/lake",
                "lake_bad",
                secret_access_key=__import__("pydantic").SecretStr(wrong_secret),
            ),
            LakeAccessError,
            "credentials were refused",
        ),
    }[case]
    with pytest.raises(error) as raised:
        LakeCatalog.open(lake_spark.spark, settings)
    message = str(raised.value)
    location = settings.lake_location.uri
    assert message == f"the lake at {location} cannot be used: {message.split(': ', 1)[1]}"
    assert cause in message
    assert message.count(".") <= location.count(".") + 2  # one sentence
    assert "\n" not in message
    for secret in (wrong_secret, settings.lake.s3.secret_access_key.get_secret_value()):  # type: ignore[union-attr]
        assert secret not in message
    assert raised.value.__cause__ is None


def test_an_unwritable_local_location_is_refused(lake_spark: LakeSpark) -> None:
    settings = with_lake(lake_spark.settings["local"], "/dev/null/lake", "lake_bad")
    with pytest.raises(LakeAccessError) as raised:
        LakeCatalog.open(lake_spark.spark, settings)
    assert str(raised.value) == (
        "the lake at file:///dev/null/lake cannot be used: Not a directory."
    )
    assert LOCAL_PORTS["seaweedfs_s3"] != 29999
