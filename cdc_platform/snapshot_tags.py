"""Which days and hours of the snapshot tables are merged, told by their Iceberg tags without
Spark: what the scheduler asks once a pass, so a day or hour merged outside it (``cdc-mirror
merge`` by hand, or before its run history was lost) is not merged again nor shown behind.

A day is merged when its tag ``dt-YYYY-MM-DD`` exists on the table, an hour when its tag
``hr-YYYY-MM-DD-HH`` does (``cdc_platform.lake_snapshots``: merge sets them); a day tag's
merge facts (the table property ``FACTS_PREFIX`` + tag) say whether that merge was
provisional (``--skip-readiness``). The tags are
read from the table's current metadata file, the one the Hive metastore points at
(``metadata_location`` among the table's parameters), through pyiceberg's FileIO with the
storage's own properties (``LakeStorage.file_io_properties``): one query of the metastore for
every table of the database, then one read of a table's metadata file only when it changed
since the last look (``SnapshotTagReader`` keeps the tags of each metadata file it read).

On HDFS the metadata file is read through the NameNode's WebHDFS API when ``lake.webhdfs``
names it, else by pyiceberg through pyarrow's libhdfs (the Hadoop client's native library,
``ARROW_LIBHDFS_DIR``); where neither works, or with a Derby metastore, the tags cannot be
told without Spark and the reader says so (``TagsUnavailableError``).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from urllib.parse import quote, urlsplit

import httpx

from cdc_platform.config import Settings
from cdc_platform.hive_metastore import METADATA_LOCATION, table_parameter
from cdc_platform.iceberg import storage_for
from cdc_platform.lake_location import scrub
from cdc_platform.lake_snapshots import FACTS_PREFIX, tag_day, tag_hour
from simple_binlog.errors import CdcMirrorError


class TagsUnavailableError(CdcMirrorError):
    """The snapshot tables' tags cannot be read without Spark here (a Derby metastore, or a
    storage this process cannot reach)."""


@dataclass(frozen=True, slots=True)
class SnapshotTags:
    """The merged days and hours a snapshot table's tags name, each with the time its tagged
    snapshot was committed (Unix ms): a tag on a snapshot newer than a failed run was set by
    a merge after it."""

    days: Mapping[date, int] = field(default_factory=dict)
    hours: Mapping[tuple[date, int], int] = field(default_factory=dict)  # (day, hour) → ms
    # Days whose tag's merge facts say whether the merge was provisional (``--skip-readiness``:
    # before the day was ready); a day without such facts (a merge by an earlier version) is
    # not named: its merge record, where there is one, tells.
    provisional: Mapping[date, bool] = field(default_factory=dict)

    @classmethod
    def of(
        cls, tags: Iterable[tuple[str, int]], properties: Mapping[str, str] | None = None
    ) -> SnapshotTags:
        """From a table's tags (name, its snapshot's commit time) and its properties (the
        merge facts stored per tag, ``FACTS_PREFIX``); other references (``main``, branches)
        and tags of another form are ignored."""
        days: dict[date, int] = {}
        hours: dict[tuple[date, int], int] = {}
        provisional: dict[date, bool] = {}
        for name, committed_ms in tags:
            day = tag_day(name)
            if day is not None:
                days[day] = committed_ms
                said = _provisional(name, properties or {})
                if said is not None:
                    provisional[day] = said
                continue
            hour = tag_hour(name)
            if hour is not None:
                hours[hour] = committed_ms
        return cls(days, hours, provisional)


def _provisional(tag: str, properties: Mapping[str, str]) -> bool | None:
    """What the merge facts stored with ``tag`` say of its readiness (None: nothing, or not
    readable: the merge record decides)."""
    text = properties.get(FACTS_PREFIX + tag)
    if text is None:
        return None
    try:
        facts = json.loads(text)
    except ValueError:
        return None
    said = facts.get("provisional") if isinstance(facts, dict) else None
    return said if isinstance(said, bool) else None


def metadata_locations(settings: Settings, database: str) -> dict[str, str]:
    """Table name → its current metadata file, for every Iceberg table of ``database`` the
    Hive metastore (PostgreSQL) knows. TagsUnavailableError with a Derby metastore."""
    locations = table_parameter(
        settings,
        database,
        METADATA_LOCATION,
        what="the read of the snapshot tables' metadata locations",
    )
    if locations is None:
        raise TagsUnavailableError(
            "the snapshot tables' tags are read from the Hive metastore's PostgreSQL database; "
            "with a Derby metastore only Spark can read them."
        )
    return locations


class SnapshotTagReader:
    """The tags of the snapshot tables (``settings.merge.database``), read as the module says;
    the tags of each metadata file read are kept, so an unchanged table costs no read."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._storage = storage_for(settings)
        self._read: dict[str, SnapshotTags] = {}  # metadata file → its tags
        self._lock = threading.Lock()

    def tags(self, tables: Iterable[str]) -> dict[str, SnapshotTags]:
        """The tags of each of ``tables`` (none for a table not created yet).
        TagsUnavailableError when they cannot be read here; the metastore's errors as
        ``cdc_platform.warehouse`` maps them."""
        locations = metadata_locations(self._settings, self._settings.merge.database)
        found: dict[str, SnapshotTags] = {}
        with self._lock:
            current: dict[str, SnapshotTags] = {}
            for table in tables:
                location = locations.get(table.lower())
                if location is None:
                    found[table] = SnapshotTags()
                    continue
                tags = self._read.get(location)
                if tags is None:
                    tags = self._read_tags(location)
                current[location] = found[table] = tags
            self._read = current  # forget the files no table points at any more
        return found

    def _read_tags(self, location: str) -> SnapshotTags:
        try:
            from pyiceberg.io import load_file_io  # noqa: PLC0415 - the lake's (spark) extra
            from pyiceberg.serializers import (  # noqa: PLC0415
                Compressor,
                FromByteStream,
                FromInputFile,
            )
            from pyiceberg.table.refs import SnapshotRefType  # noqa: PLC0415
        except ImportError:
            raise TagsUnavailableError(
                "the snapshot tables' tags need pyiceberg, which is not installed "
                "(pip install 'cdc-mirror[spark]')."
            ) from None
        # pyiceberg's FileIO picks its own implementation by scheme: Java's io-impl is not one.
        properties = {
            key: value
            for key, value in self._storage.file_io_properties().items()
            if key != "io-impl"
        }
        webhdfs = self._settings.lake.webhdfs
        try:
            if webhdfs is not None and urlsplit(location).scheme == "hdfs":
                compression = Compressor.get_compressor(location)
                stream = io.BytesIO(_webhdfs_file(webhdfs, location))
                metadata = FromByteStream.table_metadata(stream, compression=compression)
            else:
                file_io = load_file_io(properties, location)
                metadata = FromInputFile.table_metadata(file_io.new_input(location))
        except (OSError, ValueError, httpx.HTTPError) as exc:
            cause = scrub(str(exc), self._storage.secrets())
            raise TagsUnavailableError(
                f"the snapshot tables' metadata file {location} cannot be read here: {cause}"
            ) from None
        committed = {snapshot.snapshot_id: snapshot.timestamp_ms for snapshot in metadata.snapshots}
        return SnapshotTags.of(
            (
                (name, committed.get(ref.snapshot_id, 0))
                for name, ref in metadata.refs.items()
                if ref.snapshot_ref_type == SnapshotRefType.TAG
            ),
            metadata.properties,
        )


def _webhdfs_file(webhdfs: str, location: str) -> bytes:
    """The bytes of the HDFS file ``location`` through the NameNode's WebHDFS REST API (``OPEN``
    answers with a redirect to a DataNode holding the file)."""
    path = quote(urlsplit(location).path)
    answer = httpx.get(
        f"{webhdfs}/webhdfs/v1{path}", params={"op": "OPEN"}, follow_redirects=True, timeout=30
    )
    answer.raise_for_status()
    return answer.content
