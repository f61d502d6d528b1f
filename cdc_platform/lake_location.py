"""Where the lake lives: one setting, three forms, parsed and checked here and nowhere else.

* a local path (``/data/lake`` or ``file:///data/lake``; relative paths are taken from the
  working directory): the embedded default, ``<stack.home>/lake``;
* ``hdfs://host:port/path``: an HDFS NameNode;
* ``s3://bucket/path``: an S3 bucket, reached with the ``lake.s3`` settings (endpoint, region,
  path-style addressing, access keys), which may also come from the AWS variables.

Pure: nothing here opens a connection. Secrets are ``SecretStr`` and never appear in a
message of this module.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from cdc_platform.hosts import is_loopback_url

StorageKind = Literal["local", "hdfs", "s3"]

# The local stack's S3 endpoint (SeaweedFS; config.LOCAL_PORTS names the same port) and its
# identity, whose secret is refused for any endpoint off this machine.
LOCAL_S3_PORT = 28333
LOCAL_S3_ACCESS_KEY = "cdc-local"
LOCAL_S3_SECRET_KEY = "cdc-s3-local"  # noqa: S105 - the local stack's, like LOCAL_PASSWORDS
# The bucket the local stack creates when the lake is not on S3 (the S3 tests use it).
LOCAL_S3_BUCKET = "cdc-lake"

# S3's bucket naming rules (3-63 lowercase letters, digits, dots and hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


class S3Settings(BaseModel):
    """How the lake reaches an ``s3://`` location. Defaults: the local stack's SeaweedFS.

    Each value set here (in the file or as ``CDC_MIRROR_LAKE__S3__…``) wins; one left unset is
    taken from the AWS variables when exported (``resolve_s3_access``), else the default. For
    AWS: ``endpoint: null`` (the region's own endpoint) and ``path_style: false``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    endpoint: str | None = f"http://127.0.0.1:{LOCAL_S3_PORT}"
    region: str = "us-east-1"
    path_style: bool = True
    access_key_id: SecretStr | None = SecretStr(LOCAL_S3_ACCESS_KEY)
    secret_access_key: SecretStr | None = SecretStr(LOCAL_S3_SECRET_KEY)

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.username or parts.password:
            raise ValueError("must not carry credentials; set access_key_id/secret_access_key")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _local_keys_stay_local(self) -> Self:
        secret = self.secret_access_key
        if (
            secret is not None
            and secret.get_secret_value() == LOCAL_S3_SECRET_KEY
            and not is_loopback_url(self.endpoint)
        ):
            raise ValueError(
                "the local stack's S3 secret key is set for an endpoint that is not on this "
                "machine; set the real keys"
            )
        return self


class LakeSettings(BaseModel):
    """The lake's location (one setting; see the module) and how to reach it."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    # None: the local folder ``spark.lake_dir`` (default ``<stack.home>/lake``).
    location: str | None = Field(None, repr=False)  # kept out of errors: a URL may hold a key
    s3: S3Settings = Field(default_factory=S3Settings)
    # The Iceberg catalog's name in Spark SQL (``lake.<database>.<table>``).
    catalog: str = Field("lake", pattern=r"^[a-z][a-z0-9_]{0,62}$")
    # An hdfs:// lake: the NameNode's WebHDFS address (``http://namenode:9870``), through which
    # the processes without Spark (the scheduler's read of the snapshot tags) read its metadata
    # files. None: through libhdfs (pyarrow; the Hadoop client's native library).
    webhdfs: str | None = None

    @field_validator("webhdfs")
    @classmethod
    def _webhdfs_is_http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.password:
            raise ValueError("must be an http:// or https:// URL with a host and no password")
        return value.rstrip("/")

    @field_validator("location")
    @classmethod
    def _location_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_location(value, Path("/"))  # the ValueError names what is wrong
        return value


@dataclass(frozen=True)
class LakeLocation:
    """A parsed lake location. ``uri`` is what Spark, Hadoop and Iceberg are given."""

    kind: StorageKind
    uri: str  # file:///abs/path, hdfs://host:port/path, s3://bucket/path (no trailing /)
    host: str = ""  # hdfs: the NameNode's host; s3: the bucket
    port: int | None = None  # hdfs only

    @property
    def bucket(self) -> str:
        if self.kind != "s3":
            raise ValueError(f"{self.uri} is not an S3 location")
        return self.host

    @property
    def local_path(self) -> Path:
        if self.kind != "local":
            raise ValueError(f"{self.uri} is not a local path")
        return Path(self.uri.removeprefix("file://"))

    def child(self, *parts: str) -> str:
        """The URI of a path below the location (``child('db.db', 't')``)."""
        return "/".join([self.uri, *parts])

    def __str__(self) -> str:
        return self.uri


def parse_location(text: str, base: Path) -> LakeLocation:
    """Parse a lake location; ``base`` anchors a relative local path. ValueError if invalid."""
    value = text.strip()
    if not value:
        raise ValueError("the lake location is empty")
    scheme = urlsplit(value).scheme.lower() if "://" in value else ""
    if scheme and "@" in urlsplit(value).netloc:
        # Checked first, so no message below ever repeats a password written into the URL.
        raise ValueError(
            f"the {scheme}:// lake location must not carry credentials; for S3 set "
            "lake.s3.access_key_id and lake.s3.secret_access_key"
        )
    if scheme in ("", "file"):
        return _local(value, base)
    if scheme == "hdfs":
        return _hdfs(value)
    if scheme in ("s3", "s3a"):
        return _s3(value)
    raise ValueError(
        f"the lake location {value!r} has the unsupported scheme '{scheme}://'; use a local "
        "path, hdfs://host:port/path or s3://bucket/path"
    )


def _local(value: str, base: Path) -> LakeLocation:
    if value.startswith("file:"):
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"the lake location {value!r} names a remote host in a file:// URL")
        value = parts.path
    if ".." in value.split("/"):
        raise ValueError(f"the lake location {value!r} must not contain '..'")
    path = Path(value) if Path(value).is_absolute() else base / value
    return LakeLocation("local", "file://" + posixpath.normpath(str(path)))


def _hdfs(value: str) -> LakeLocation:
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"the lake location {value!r} has an invalid port") from None
    if not parts.hostname or not _HOST.match(parts.hostname) or port is None:
        raise ValueError(
            f"the lake location {value!r} must name the NameNode as hdfs://host:port/path"
        )
    path = _clean_path(value, parts.path)
    return LakeLocation("hdfs", f"hdfs://{parts.hostname}:{port}{path}", parts.hostname, port)


def _s3(value: str) -> LakeLocation:
    parts = urlsplit(value)
    bucket = parts.netloc
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ValueError(
            f"the lake location {value!r} must be s3://bucket/path with a valid bucket name "
            "(3-63 lowercase letters, digits, '.' or '-')"
        )
    path = _clean_path(value, parts.path)
    return LakeLocation("s3", f"s3://{bucket}{path}", bucket)


def _clean_path(value: str, path: str) -> str:
    segments = [s for s in path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise ValueError(f"the lake location {value!r} must not contain '.' or '..'")
    return "".join(f"/{s}" for s in segments)


@dataclass(frozen=True)
class S3Access:
    """What a client needs to reach S3: resolved from the settings, then the environment."""

    endpoint: str | None
    region: str
    path_style: bool
    access_key_id: SecretStr | None
    secret_access_key: SecretStr | None

    def secrets(self) -> tuple[str, ...]:
        """The values no message may contain."""
        return tuple(
            s.get_secret_value()
            for s in (self.access_key_id, self.secret_access_key)
            if s is not None and s.get_secret_value()
        )


def resolve_s3_access(settings: S3Settings, env: Mapping[str, str]) -> S3Access:
    """The S3 settings to use: a value set in the configuration wins; one left at its default
    is taken from the AWS variables when exported (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``),
    else the default (the local stack)."""
    chosen = settings.model_fields_set

    def pick(field: str, *names: str) -> str | None:
        if field not in chosen:
            for name in names:
                if env.get(name):
                    return env[name]
        value = getattr(settings, field)
        return value.get_secret_value() if isinstance(value, SecretStr) else value

    return S3Access(
        endpoint=pick("endpoint", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
        region=pick("region", "AWS_REGION", "AWS_DEFAULT_REGION") or settings.region,
        path_style=settings.path_style,
        access_key_id=_secret(pick("access_key_id", "AWS_ACCESS_KEY_ID")),
        secret_access_key=_secret(pick("secret_access_key", "AWS_SECRET_ACCESS_KEY")),
    )


def _secret(value: str | None) -> SecretStr | None:
    return SecretStr(value) if value else None


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret replaced by ``***`` (for messages built from driver text)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
