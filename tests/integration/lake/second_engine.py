"""The lake's tables read by a second engine, pyiceberg, on every storage.

pyiceberg's own FileIO for ``hdfs://`` is pyarrow's HadoopFileSystem, which needs libhdfs
(the JNI library of a Hadoop binary distribution): neither Maven Central (the
``hadoop-hdfs-native-client`` jar holds no native code), Debian nor pyarrow's wheels (nor
any PyPI package found) ship it, and the stack runs HDFS from the Hadoop client minicluster
jar, without one. So on HDFS the
files are read through the NameNode's WebHDFS API (``lake.webhdfs``, as the scheduler reads
the snapshot tags), with fsspec's WebHDFS client under pyiceberg's fsspec FileIO.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.typedef import Properties

from cdc_platform.config import Settings
from cdc_platform.iceberg import storage_for

WEBHDFS_PROPERTY = "cdc-test.webhdfs"


class WebHdfsFileIO(FsspecFileIO):
    """pyiceberg's fsspec FileIO with ``hdfs://`` paths read through WebHDFS (the address in
    the ``cdc-test.webhdfs`` property); fsspec's WebHDFS takes the path from the URI and
    follows the NameNode's redirect to the DataNode holding each block."""

    def __init__(self, properties: Properties) -> None:
        super().__init__(properties)
        self._scheme_to_fs["hdfs"] = _webhdfs


def _webhdfs(properties: Properties) -> Any:
    from fsspec.implementations.webhdfs import WebHDFS

    address = urlsplit(properties[WEBHDFS_PROPERTY])
    return WebHDFS(host=address.hostname, port=address.port, use_https=address.scheme == "https")


def pyiceberg_properties(settings: Settings) -> dict[str, str]:
    """pyiceberg's FileIO properties for the lake of ``settings``: the storage's own (S3's
    endpoint and keys), or the WebHDFS FileIO above on HDFS (``lake.webhdfs`` must be set)."""
    properties = {
        key: value
        for key, value in storage_for(settings).file_io_properties().items()
        if key != "io-impl"  # Java's FileIO class; pyiceberg picks its own by scheme
    }
    if settings.lake_location.kind == "hdfs":
        webhdfs = settings.lake.webhdfs
        assert webhdfs, "reading HDFS without libhdfs needs lake.webhdfs"
        properties["py-io-impl"] = f"{WebHdfsFileIO.__module__}.{WebHdfsFileIO.__qualname__}"
        properties[WEBHDFS_PROPERTY] = webhdfs
    return properties
