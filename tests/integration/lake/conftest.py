"""Fixtures of the lake tests: the stack's HDFS and SeaweedFS, each started once per test
session by the same code as ``cdc-mirror stack up``, and ONE Spark session for the package
holding an Iceberg catalog per storage (``lake_local``, ``lake_hdfs``, ``lake_s3``), so the
tests parametrised over the storages share it. Each test gets a namespace of its own, dropped
with its files afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdc_platform.config import Settings
from cdc_platform.iceberg import LakeCatalog, catalog_conf, iceberg_jars, storage_for
from cdc_platform.lake_location import LOCAL_S3_BUCKET

STORAGES = ("local", "hdfs", "s3")
# The storages of the slower storage-parametrised tests elsewhere (merge, maintenance, the
# writer's crash points): local disk and S3 (SeaweedFS) in every run, HDFS as well with
# CDC_TEST_HDFS=1 (or its older name CDC_TEST_STREAM_WRITER_HDFS=1).
HDFS_ASKED = "1" in (os.environ.get("CDC_TEST_HDFS"), os.environ.get("CDC_TEST_STREAM_WRITER_HDFS"))
TESTED_STORAGES = ("local", "s3", *(("hdfs",) if HDFS_ASKED else ()))
SERVICES = {"local": [], "s3": ["seaweedfs"], "hdfs": ["hdfs-namenode", "hdfs-datanode"]}


def storage_services(settings: Settings, kinds: Iterable[str]) -> Iterator[Settings]:
    """The stack's services of the storages ``kinds``, started once (as ``stack up``) and
    stopped afterwards only if started here and the session asks to
    (``CDC_MIRROR_TESTS_STOP_STACK=1``, as ``./run tests`` does)."""
    names = [name for kind in kinds for name in SERVICES[kind]]
    if not names:  # local disk: nothing to start (no names would mean every service)
        yield settings
        return
    yield from _services(settings, names)


def _services(settings: Settings, names: list[str]) -> Iterator[Settings]:
    from stack.manager import LocalStack

    stack = LocalStack(settings)
    done = stack.up(names)
    yield settings
    started_here = [name for name, what in done.items() if what == "started"]
    if started_here and os.environ.get("CDC_MIRROR_TESTS_STOP_STACK") == "1":
        stack.down(started_here)


@pytest.fixture(scope="session")
def hdfs_service(local_stack: Settings) -> Iterator[Settings]:
    """The stack's NameNode and DataNode (``stack up hdfs-namenode hdfs-datanode``)."""
    yield from _services(local_stack, ["hdfs-namenode", "hdfs-datanode"])


@pytest.fixture(scope="session")
def s3_service(local_stack: Settings) -> Iterator[Settings]:
    """The stack's SeaweedFS S3 endpoint with the tests' bucket (``stack up seaweedfs``)."""
    yield from _services(local_stack, ["seaweedfs"])


def with_lake(settings: Settings, location: str, catalog: str, **s3: Any) -> Settings:
    """``settings`` with the lake at ``location`` under the Spark catalog name ``catalog``."""
    lake = settings.lake.model_copy(
        update={
            "location": location,
            "catalog": catalog,
            "s3": settings.lake.s3.model_copy(update=s3),
        }
    )
    return settings.model_copy(update={"lake": lake})


def storage_settings(settings: Settings, kind: str, local_root: Path, tag: str) -> Settings:
    from stack import hdfs

    location = {
        "local": str(local_root / tag),
        "hdfs": f"{hdfs.uri()}/cdc-tests/{tag}",
        "s3": f"s3://{LOCAL_S3_BUCKET}/cdc-tests/{tag}",
    }[kind]
    found = with_lake(settings, location, f"lake_{kind}")
    if kind == "hdfs":  # what the processes without Spark read its metadata through
        webhdfs = found.lake.model_copy(update={"webhdfs": hdfs.web_uri()})
        found = found.model_copy(update={"lake": webhdfs})
    return found


@dataclass
class LakeSpark:
    spark: Any
    settings: dict[str, Settings]  # storage kind → settings whose lake is there


@pytest.fixture(scope="package")
def lake_spark(
    local_stack: Settings,
    hdfs_service: Settings,
    s3_service: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LakeSpark]:
    from cdc_platform.spark import build_session

    iceberg_jars(local_stack.stack.home.resolve() / "jars")
    root = tmp_path_factory.mktemp("lake")
    tag = uuid.uuid4().hex[:8]
    by_kind = {kind: storage_settings(local_stack, kind, root, tag) for kind in STORAGES}
    conf: dict[str, str] = {}
    for settings in by_kind.values():
        conf.update(catalog_conf(settings.lake.catalog, storage_for(settings)))
    scoped = local_stack.model_copy(
        update={"spark": local_stack.spark.model_copy(update={"lake_dir": root / "hive"})}
    )
    session = build_session(scoped, "cdc-mirror-lake-tests", extra_conf=conf)
    yield LakeSpark(session, by_kind)
    session.stop()


@dataclass
class Lake:
    catalog: LakeCatalog
    namespace: str
    settings: Settings


@pytest.fixture(params=STORAGES)
def lake(request: pytest.FixtureRequest, lake_spark: LakeSpark) -> Iterator[Lake]:
    """A namespace of its own in the lake on each storage."""
    settings = lake_spark.settings[request.param]
    catalog = LakeCatalog.open(lake_spark.spark, settings)
    namespace = f"lk_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(namespace)
    yield Lake(catalog, namespace, settings)
    catalog.drop_namespace(namespace)
