"""Configuration: one YAML file plus environment overrides, validated once at start.

Settings are built in an entry point (``load_settings``) and passed down; nothing here runs at
import time. Every default points at the local stack (``cdc-mirror stack up``), so a fresh
checkout runs without a config file. Environment variables override the file, with ``__``
between nesting levels: ``CDC_MIRROR_KAFKA__PARTITIONS=24``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Self, TypeVar, get_args

import yaml
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretBytes,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from cdc_platform.governance_model import GovernanceSettings
from cdc_platform.hosts import is_loopback
from cdc_platform.lake_location import LOCAL_S3_PORT, LakeLocation, LakeSettings, parse_location
from simple_binlog.errors import ConfigError
from simple_binlog.patterns import check_pattern
from simple_binlog.routing import ShardRule

CONFIG_ENV_VAR = "CDC_MIRROR_CONFIG"
ENV_PREFIX = "CDC_MIRROR_"

# The local stack's own ports: away from the services' usual ports so a developer's
# MySQL, Kafka or Redis on this machine is never touched, and each below 32768: Linux hands
# out 32768-60999 as the local ports of outgoing connections, so a port of that range can be
# held by any client's connection at the moment its service restarts ("Address already in
# use"; it failed a CI run). The usual port behind a 2, gRPC ports behind a 1.
LOCAL_PORTS = {
    "mariadb": 23306,
    "kafka": 29092,
    "kafka_controller": 29093,
    "zookeeper": 22181,
    "redis": 26379,
    "postgresql": 25432,
    # Kudu's defaults (7051/8051 master, 7050/8050 tablet server) behind a 2, as above.
    "kudu_master": 27051,
    "kudu_master_web": 28051,
    "kudu_tserver": 27050,
    "kudu_tserver_web": 28050,
    # HDFS's (8020/9870 NameNode; 9866/9864/9867 DataNode) and SeaweedFS's (9333 master,
    # 8080 volume, 8888 filer, 8333 S3; each gRPC port at +10000), behind a 2 (gRPC a 1).
    "hdfs_namenode": 28020,
    "hdfs_namenode_http": 29870,
    "hdfs_datanode": 29866,
    "hdfs_datanode_http": 29864,
    "hdfs_datanode_ipc": 29867,
    "seaweedfs_master": 29333,
    "seaweedfs_master_grpc": 19333,
    "seaweedfs_volume": 28080,
    "seaweedfs_volume_grpc": 18080,
    "seaweedfs_filer": 28888,
    "seaweedfs_filer_grpc": 18888,
    "seaweedfs_s3": LOCAL_S3_PORT,
    "seaweedfs_s3_grpc": 18333,
}
# Passwords of the local stack only. Refused for any host that is not loopback.
LOCAL_PASSWORDS = frozenset({"cdc-local", "cdc-admin-local", "cdc-pg-local"})

GTID_POSITION = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")
FILE_POSITION = re.compile(r"^(?P<file>[\w.-]+):(?P<pos>\d+)$")
# A MySQL GTID set: "uuid:1-42", several uuids comma-separated, tagged GTIDs (MySQL 8.4+)
# "uuid:tag:1-3" or after the untagged intervals "uuid:1-5:tag:1-3". Checked before
# FILE_POSITION, which "uuid:42" would also match.
_UUID = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
_TAG = r":[A-Za-z_][A-Za-z0-9_]{0,31}"
_INTERVALS = r"(:\d+(-\d+)?)+"
_GTID_ENTRY = rf"{_UUID}({_TAG})?{_INTERVALS}({_TAG}{_INTERVALS})*"
MYSQL_GTID_SET = re.compile(rf"^{_GTID_ENTRY}(,\s*{_GTID_ENTRY})*$")


def is_gtid_start(value: str) -> bool:
    """Whether ``value`` is 'current', a MariaDB GTID position ("0-1-100", several domains
    comma-separated) or a MySQL GTID set ("uuid:1-42", tagged "uuid:tag:1-3"): the GTID
    starts every component accepts (a collector's start also takes a file position)."""
    return value == "current" or bool(GTID_POSITION.match(value) or MYSQL_GTID_SET.match(value))


TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
INSTANCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def check_patterns(value: list[str]) -> list[str]:
    """Validate include/exclude regexes (a pydantic validator's body: ValueError names one).

    Invalid or too costly patterns are refused (``simple_binlog.patterns``)."""
    for pattern in value:
        check_pattern(pattern)
    return value


# The address a component's /metrics and /health endpoints listen on (``metrics_host``):
# loopback unless a deployment opens it (then put it behind a network policy: the endpoint
# has no login). An IP literal or a host name; "0.0.0.0" (every interface) must be said.
METRICS_HOST = "127.0.0.1"
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")


def _bind_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not _HOST_NAME.fullmatch(value):
            raise ValueError("must be an IP address or a host name to listen on") from None
    return value


BindAddress = Annotated[str, AfterValidator(_bind_address)]


class _Section(BaseModel):
    # hide_input_in_errors: pydantic's error text never repeats a rejected value (a secret).
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class MySQLInstance(_Section):
    """One MySQL/MariaDB server whose row binlog is collected (one Kafka topic each).

    ``name`` and ``host`` are required: the built-in default instance (the local stack's
    MariaDB) applies only when the config lists no instances at all.
    """

    name: str
    host: str
    port: int = Field(LOCAL_PORTS["mariadb"], ge=1, le=65535)
    user: str = "cdc"
    password: SecretStr = SecretStr("cdc-local")
    # Send the password when the server asks for it in cleartext (mysql_clear_password, or
    # MariaDB's dialog/PAM) on a connection without TLS. Off: such a connection is refused
    # (cdc_platform.mysql_source), so a server the instance was redirected to learns nothing.
    allow_cleartext_password: bool = False
    # The real server's RSA public key (PEM text, or the path of a PEM file), pinned for
    # caching_sha2_password/sha256_password full authentication without TLS: the password
    # is encrypted with this key only, never with one the server sends. Empty: such an
    # authentication without TLS is refused (unless allow_cleartext_password).
    server_public_key: str = ""
    # The replication client's own server id: unique among the server's replicas.
    replica_server_id: int = Field(4101, ge=1, le=2**32 - 1)

    @field_validator("name")
    @classmethod
    def _name_is_topic_safe(cls, value: str) -> str:
        if not INSTANCE_NAME.match(value):
            raise ValueError("must be lowercase letters, digits, '_' or '-' (at most 63)")
        return value

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.password.get_secret_value() in LOCAL_PASSWORDS and not is_loopback(self.host):
            raise ValueError(
                f"instance {self.name!r} uses a local-stack default password for the "
                f"non-loopback host {self.host!r}; set a real password"
            )
        pem = self.server_public_key.strip()
        if pem.startswith("-----BEGIN"):  # PEM text: checked now (a file: when connecting)
            try:
                load_pem_public_key(pem.encode())
            except (ValueError, TypeError):
                raise ValueError(
                    f"instance {self.name!r}: server_public_key is not a PEM public key"
                ) from None
        return self


class KafkaSettings(_Section):
    bootstrap_servers: str = f"127.0.0.1:{LOCAL_PORTS['kafka']}"
    topic_prefix: str = "cdc.binlog."
    partitions: int = Field(6, ge=1, le=10_000)
    # Production: 3 replicas and min.insync.replicas=2; the single local broker allows 1/1.
    replication_factor: int = Field(1, ge=1, le=32)
    min_insync_replicas: int = Field(1, ge=1, le=32)
    # The largest message cdc-mirror sends; keep it at or below the broker's and the topics'
    # max.message.bytes (1048588 by default).
    max_message_bytes: int = Field(1_000_000, ge=10_000)
    # Extra librdkafka properties, e.g. security settings; never overrides acks/idempotence.
    # Kept out of repr/str: they may hold sasl.password or ssl.key.password.
    client_properties: dict[str, str] = Field(default_factory=dict, repr=False)

    @field_validator("topic_prefix")
    @classmethod
    def _prefix_is_topic_safe(cls, value: str) -> str:
        if value and not TOPIC_NAME.match(value):
            raise ValueError("may hold only letters, digits, '.', '_' and '-'")
        return value

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"min_insync_replicas ({self.min_insync_replicas}) cannot exceed "
                f"replication_factor ({self.replication_factor})"
            )
        return self


class ZooKeeperSettings(_Section):
    hosts: str = f"127.0.0.1:{LOCAL_PORTS['zookeeper']}"
    root: str = "/cdc-mirror"
    session_timeout_s: float = Field(6.0, gt=0)


class RedisSettings(_Section):
    url: SecretStr = SecretStr(f"redis://127.0.0.1:{LOCAL_PORTS['redis']}/0")
    key_prefix: str = "cdc"


class PostgresSettings(_Section):
    """The PostgreSQL server of the stack: the real-time warehouse and the Hive metastore."""

    host: str = "127.0.0.1"
    port: int = Field(LOCAL_PORTS["postgresql"], ge=1, le=65535)
    user: str = "cdc"
    password: SecretStr = SecretStr("cdc-pg-local")
    warehouse_db: str = "cdc_warehouse"
    metastore_db: str = "hive_metastore"

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.password.get_secret_value() in LOCAL_PASSWORDS and not is_loopback(self.host):
            raise ValueError(
                f"postgres uses a local-stack default password for the non-loopback host "
                f"{self.host!r}; set a real password"
            )
        return self


class SparkSettings(_Section):
    master: str = "local[2]"
    # Shared Hive metastore: 'postgres' (several Spark processes at once) or 'derby'
    # (embedded, one process at a time; only for a quick look).
    metastore: Literal["postgres", "derby"] = "postgres"
    lake_dir: Path | None = None  # default: <stack.home>/lake
    shuffle_partitions: int = Field(4, ge=1)


class CollectorSettings(_Section):
    """How the binlog collector reads, filters and publishes."""

    # Regexes matched against "schema.table"; a table is collected if it matches an include
    # pattern and no exclude pattern.
    include: list[str] = Field(default_factory=lambda: [r".*"])
    exclude: list[str] = Field(
        default_factory=lambda: [r"(mysql|information_schema|performance_schema|sys)\..*"]
    )
    # A Kafka transaction holds at most this many rows; a larger MySQL transaction is split.
    max_rows_per_transaction: int = Field(10_000, ge=1)
    # Small MySQL transactions are grouped into one Kafka transaction; one is committed once
    # this long has passed since the previous commit began (at most 20 Kafka transactions a
    # second), and a transaction no other follows as soon as that is over. Commit → readable
    # is about this plus a commit (~10-20 ms on an idle machine).
    commit_interval_ms: int = Field(50, ge=0)
    heartbeat_s: float = Field(1.0, gt=0)
    # While the source is quiet, the leading collector publishes a watermark heartbeat at
    # most this often (simple_binlog.control), so the lake's days become ready with time
    # alone; 0 publishes none. Needs the PROCESS privilege (collector/watermark.py).
    watermark_heartbeat_s: float = Field(10.0, ge=0)
    # A row larger than Kafka's maximum message size: record it in the dead-letter topic and
    # go on, or stop with an error.
    on_oversized: Literal["dead-letter", "stop"] = "dead-letter"
    # Where an instance without a stored position starts: "current" (the server's current
    # position), a GTID position such as "0-1-1234" (several domains: "0-1-5,1-2-9"), a
    # MySQL GTID set such as "uuid:1-42" (tagged, MySQL 8.4+: "uuid:1-42:tag:1-3"), or a
    # binlog file and position such as "mariadb-bin.000042:4".
    start: str = "current"
    metrics_port: int = Field(29100, ge=0, le=65535)
    # Where /metrics and /health listen (cdc_platform.observability); loopback by default.
    metrics_host: BindAddress = METRICS_HOST
    reconnect_backoff_max_s: float = Field(30.0, gt=0)
    # Where the instance's connection, start position (when no position is stored),
    # include/exclude filters and shard rules come from: this file, or the web admin
    # ('webui': GET /api/collector-config/<instance> at governance.webui's url with its
    # collector token, polled; a change applies live, see collector/remote_config.py).
    config_source: Literal["file", "webui"] = "file"

    @field_validator("start")
    @classmethod
    def _start_is_a_position(cls, value: str) -> str:
        if is_gtid_start(value) or FILE_POSITION.match(value):
            return value
        raise ValueError(
            "must be 'current', a GTID position like '0-1-1234' (MariaDB) or "
            "'3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42' (MySQL; tagged: 'uuid:tag:1-3'), or "
            "a binlog file and position like 'mariadb-bin.000042:4'"
        )

    @field_validator("include", "exclude")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        return check_patterns(value)


class ValidationSettings(_Section):
    """How ``cdc-mirror validate`` reads the source (docs/validation.md)."""

    # MySQL connections a chunk is hashed on at once: the chunk is cut at middle keys into
    # that many parts (each at least 1,000 rows), one statement each, their sums added; each
    # part uses one of the server's cores. 1: one connection, one statement per chunk.
    source_connections: int = Field(2, ge=1, le=16)
    # Processes that read and hash the Redis documents of a chunk of 10,000 keys or more (each
    # its own Redis connection; started at the first such chunk): the Redis side's per-key
    # work bounds a validation against Redis. 0: in the validating process.
    redis_workers: int = Field(2, ge=0, le=16)


class ReplaySettings(_Section):
    """How ``cdc-mirror replay`` reads history from MySQL and publishes it as MOCK rows."""

    # Rows per chunk: one keyset SELECT, one Kafka transaction (rows + progress).
    batch_size: int = Field(10_000, ge=1, le=1_000_000)
    # Rows per second read from MySQL, all tables of a run together (0: unlimited).
    rate_limit: float = Field(0.0, ge=0)
    # Pause while the server's Threads_running exceeds this (0: never pause for load).
    max_threads_running: int = Field(32, ge=0)
    # When reading a replica: pause while Seconds_Behind_Master exceeds this.
    max_replica_lag_s: int = Field(30, ge=0)
    # How often a paused replay looks at the server again.
    pause_poll_s: float = Field(2.0, gt=0)
    # Condition text (--where) longer than this is refused before parsing.
    max_condition_chars: int = Field(4_000, ge=1)
    # Reader processes per run; tables (shards) are dealt out to them round robin.
    workers: int = Field(1, ge=1, le=64)
    # Let the server build each row's content as JSON (JSON_OBJECT) in the wire form, instead
    # of decoding and re-encoding every value in Python; tables with GEOMETRY use Python.
    server_json: bool = True


_COLUMN_NAME = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
MirrorTarget = Literal["hive", "warehouse", "redis", "kudu"]
# A table mirror's targets when it names none. Kudu is opted into per table (``targets:``).
ALL_TARGETS: tuple[MirrorTarget, ...] = ("hive", "warehouse", "redis")
# What the scheduler may validate (``cdc-mirror validate --target``; ``lake``: the current
# state of a mirror to ``hive``), and what it validates when a table mirror names none: the
# stores hashed by their own engine or read cheaply, not the lake (Spark) nor Kudu (a scan
# hashed in Python), which a table opts into (``validation_targets``).
ValidationTarget = Literal["warehouse", "redis", "kudu", "lake"]
VALIDATION_TARGETS: tuple[ValidationTarget, ...] = ("warehouse", "redis", "kudu", "lake")
DEFAULT_VALIDATION_TARGETS: tuple[ValidationTarget, ...] = ("warehouse", "redis")


class ArchiveDeleteRule(_Section):
    """When a day's DELETEs are archiving (old rows moved out of MySQL), not real deletes.

    They are archiving when their count exceeds ``min_deletes`` or ``increment_factor`` × the
    day's inserts, and the deleted rows are older than ``older_than_days`` by ``time_column``.
    """

    min_deletes: int = Field(5_000_000, ge=1)
    increment_factor: float = Field(7.0, gt=0)
    older_than_days: int = Field(30, ge=0)
    time_column: str | None = None  # default: the table's check_column


class TableRetention(_Section):
    """A table's own retention for ``cdc-mirror maintain`` (None: ``maintenance.*``)."""

    snapshot_days: int | None = Field(None, ge=1)
    raw_days: int | None = Field(None, ge=1)
    # Hour tags (``snapshots: hourly``) of days older than this many days are dropped.
    hourly_days: int | None = Field(None, ge=1)


class TableMirror(_Section):
    """One logical (shard-merged) table and where it is mirrored.

    ``ordercenter_00..99`` × ``orderinfo_00..99`` of ``instance`` form the logical table
    ``ordercenter_orderinfo`` (names by the shard rules). Every downstream component reads
    this: the stream writer and merge (Hive), the mirror (warehouse, Redis), the web admin.
    """

    instance: str = "local"
    db_prefix: str
    table_prefix: str
    targets: list[MirrorTarget] = Field(default_factory=lambda: list(ALL_TARGETS))
    # The key of the snapshot and of the mirrors; default: MySQL's primary key. May differ
    # from MySQL's (e.g. a business key unique across shards).
    key: list[str] | None = None
    # Creation-time column for the daily checks against MySQL (counts per day).
    check_column: str | None = None
    archive_delete: ArchiveDeleteRule = ArchiveDeleteRule()
    # ``daily``: a snapshot (tag) per day; ``hourly``: one per closed hour as well, the day's
    # tag at its last hour (merge/hours.py, docs/merge.md).
    snapshots: Literal["daily", "hourly"] = "daily"
    # How long `cdc-mirror maintain` keeps this table's day tags and raw days (None: the
    # maintenance section's defaults).
    retention: TableRetention = TableRetention()
    # Redis: expire values after this many seconds (None: never); store only these columns.
    redis_ttl_s: int | None = Field(None, ge=1)
    redis_columns: list[str] | None = None
    # Warehouse: a DELETE removes the row ('hard', with a tombstone record) or flags it.
    warehouse_delete: Literal["hard", "soft"] = "hard"
    # False: kept in the configuration but stopped (the web admin's *Disable*): the snapshot
    # the components read leaves it out, as if removed, until it is enabled again
    # (cdc_platform.config_store.snapshot_tables).
    enabled: bool = True
    # The scheduler validates the mirror's targets against MySQL every this many hours
    # (cdc-mirror validate); None: once after each day's merge (tables mirrored to Hive).
    validation_every_h: float | None = Field(None, gt=0, le=24 * 366)
    # What the scheduler's validation of this mirror does (docs/validation.md): 'off' it is
    # never validated by the scheduler; 'report' the differences are recorded and alerted on;
    # 'repair' also re-publishes the differing keys through the stream as MOCK events (as
    # `cdc-mirror validate --repair`) when there are at most validation_repair_max_keys of
    # them, and only reports (alerts) above: a mass difference wants a person first.
    validation: Literal["off", "report", "repair"] = "report"
    validation_repair_max_keys: int = Field(1000, ge=1, le=1_000_000)
    # The targets the scheduler validates (None: the warehouse and Redis among the mirror's);
    # each must be a target of the mirror ('lake': of its 'hive').
    validation_targets: list[ValidationTarget] | None = None

    @field_validator("key", "redis_columns")
    @classmethod
    def _column_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must name at least one column, or be left out")
        for name in value:
            if not _COLUMN_NAME.match(name):
                raise ValueError(f"{name!r} is not a column name")
        return value

    @field_validator("check_column")
    @classmethod
    def _column_name(cls, value: str | None) -> str | None:
        if value is not None and not _COLUMN_NAME.match(value):
            raise ValueError(f"{value!r} is not a column name")
        return value

    @model_validator(mode="after")
    def _hourly(self) -> Self:
        if self.snapshots == "hourly" and "hive" not in self.targets:
            raise ValueError("hourly snapshots need the table mirrored to Hive (targets: hive)")
        if self.retention.hourly_days is not None and self.snapshots != "hourly":
            raise ValueError("retention.hourly_days applies only to snapshots: hourly")
        return self

    @model_validator(mode="after")
    def _validated_targets(self) -> Self:
        if self.validation_targets is not None:
            if not self.validation_targets:
                raise ValueError(
                    "validation_targets must name at least one target (or set validation: off)"
                )
            stores = {*self.targets, *(["lake"] if "hive" in self.targets else [])}
            foreign = [t for t in self.validation_targets if t not in stores]
            if foreign:
                raise ValueError(
                    f"validation_targets: {', '.join(foreign)} is not a target of this mirror "
                    "('lake' needs hive)"
                )
        return self

    @property
    def scheduled_validation_targets(self) -> list[ValidationTarget]:
        """The targets the scheduler validates: none when ``validation`` is off, else the
        chosen ones, else the defaults among the mirror's targets (possibly none)."""
        if self.validation == "off":
            return []
        if self.validation_targets is not None:
            return [t for t in VALIDATION_TARGETS if t in self.validation_targets]
        return [t for t in DEFAULT_VALIDATION_TARGETS if t in self.targets]

    @property
    def name(self) -> str:
        return f"{self.db_prefix}_{self.table_prefix}".lower()


class ScrapeTarget(_Section):
    """A component's Prometheus endpoint that the web admin scrapes for its charts."""

    name: str
    url: str

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value


class WebUISettings(_Section):
    """The web admin: its own database, listen address, secrets and metric scraping."""

    # Any SQLAlchemy URL; default: SQLite at <stack.home>/webui.sqlite. A secret: it may
    # carry a database password.
    database_url: SecretStr | None = None
    host: str = "127.0.0.1"
    port: int = Field(29200, ge=0, le=65535)
    # Master secret for signing session cookies and encrypting stored MySQL passwords. When
    # unset it is read from ``secret_key_file`` (default <stack.home>/webui.key), which is
    # created with mode 0600 on first start.
    secret_key: SecretStr | None = None
    secret_key_file: Path | None = None
    session_lifetime_s: int = Field(8 * 3600, ge=60)
    # API tokens expire: a new token lives token_default_lifetime_days unless its creator asks
    # for another lifetime, which may not exceed token_max_lifetime_days.
    token_default_lifetime_days: int = Field(90, ge=1)
    token_max_lifetime_days: int = Field(365, ge=1)
    # Send cookies only over HTTPS; turn on whenever the admin is served behind TLS.
    secure_cookies: bool = False
    # A fresh install creates this admin at start when no user exists yet.
    initial_admin_user: str = "admin"
    initial_admin_password: SecretStr | None = None
    scrape_targets: list[ScrapeTarget] = Field(
        default_factory=lambda: [
            ScrapeTarget(name="collector", url="http://127.0.0.1:29100/metrics"),
            ScrapeTarget(name="stream_writer", url="http://127.0.0.1:29102/metrics"),
            ScrapeTarget(name="mirror", url="http://127.0.0.1:29110/metrics"),
        ]
    )
    scrape_interval_s: float = Field(15.0, gt=0)
    sample_retention_days: int = Field(14, ge=1)
    # Replays requested in the admin: queued for a replay worker process (`cdc-mirror
    # replay-worker`, which runs mock_replay and publishes to Kafka), or simulated in-process
    # (publishes nothing; for trying the admin without Kafka).
    replays: Literal["mock_replay", "simulated"] = "mock_replay"
    # Count the collectors' governance detections (cdc.binlog.<instance>.detections) per hour
    # for the Detections chart; off: the chart shows what was counted before.
    count_detections: bool = True
    # The Components page marks a process stale when its last heartbeat is older than this.
    component_stale_s: float = Field(30.0, gt=0)
    # (secret_key's minimum length is checked by the web admin at start: a validator here
    # would echo the rejected value in the config error.)

    @model_validator(mode="after")
    def _token_lifetimes(self) -> Self:
        if self.token_default_lifetime_days > self.token_max_lifetime_days:
            raise ValueError("token_default_lifetime_days must not exceed token_max_lifetime_days")
        return self


class MirrorSettings(_Section):
    """How ``cdc-mirror mirror run`` consumes the stream and applies it to Redis/the warehouse."""

    # Consumer group: "<group_prefix>.<target>" (one group per target, scaled by partitions).
    group_prefix: str = "cdc-mirror"
    # A batch is applied max_wait_ms after its first message arrived, or when it holds
    # batch_size messages, whichever first (a fast stream fills batches at once).
    batch_size: int = Field(5_000, ge=1, le=1_000_000)
    max_wait_ms: int = Field(20, ge=1)
    # Redis: how long a DELETE's tombstone is kept; an event older than the delete replayed
    # after this could bring the row back, so keep it above the longest replay window.
    tombstone_ttl_s: int = Field(7 * 86_400, ge=1)
    # Redis: keys per Lua script call (each call is atomic and blocks Redis while it runs).
    redis_keys_per_call: int = Field(2_000, ge=1, le=100_000)
    # PostgreSQL schema of the warehouse tables (one per deployment).
    warehouse_schema: str = "cdc_mirror"
    # Each warehouse table keeps a stored row hash PostgreSQL computes on every write
    # (``_cdc_row_hash``), which validation sums instead of hashing each row; it costs the
    # warehouse's writes (bench: mirror.warehouse_row_hash). false: tables go without it (a
    # present one is dropped) and validation hashes their rows.
    warehouse_row_hash: bool = True
    metrics_port: int = Field(29110, ge=0, le=65535)
    # Where /metrics and /health listen (cdc_platform.observability); loopback by default.
    metrics_host: BindAddress = METRICS_HOST

    @field_validator("warehouse_schema")
    @classmethod
    def _schema_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
            raise ValueError("must be lowercase letters, digits and '_' (at most 63)")
        return value


class KuduSettings(_Section):
    """The Kudu target (``targets: [kudu]`` on a table mirror): where its masters are and how
    its tables are made. The local stack runs one master and one tablet server (test
    binaries); a deployment points ``masters`` at its own Kudu cluster."""

    masters: list[str] = Field(
        default_factory=lambda: [f"127.0.0.1:{LOCAL_PORTS['kudu_master']}"], min_length=1
    )
    # Kudu table name = prefix + logical table name.
    table_prefix: str = "cdc_mirror."
    # Tables are hash-partitioned on the whole key into this many tablets (Kudu needs >= 2).
    hash_buckets: int = Field(4, ge=2, le=1024)
    # Replicas of each tablet: 1 on the local stack, 3 (or 5) on a real cluster.
    replicas: int = Field(1, ge=1, le=7)
    # How long one client call (a batch's scan or flush, a DDL) may take before it fails.
    operation_timeout_s: float = Field(30.0, gt=0)
    # The Java client's jars (a folder); default: <stack.home>/jars/kudu, resolved by the stack.
    client_jars: Path | None = None
    jvm_heap: str = "512m"

    @field_validator("masters")
    @classmethod
    def _host_ports(cls, value: list[str]) -> list[str]:
        for master in value:
            if not re.fullmatch(r"[A-Za-z0-9.-]+:\d{1,5}", master):
                raise ValueError(f"{master!r} is not host:port")
        return value

    @field_validator("table_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{0,100}", value):
            raise ValueError("must be letters, digits, '_', '.', ':' or '-' (at most 100)")
        return value

    @field_validator("replicas")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError("must be odd (Raft needs a majority)")
        return value

    @field_validator("jvm_heap")
    @classmethod
    def _heap(cls, value: str) -> str:
        if not re.fullmatch(r"\d+[kmg]", value):
            raise ValueError("must be a JVM size such as 512m or 2g")
        return value


class StreamWriterSettings(_Section):
    """The lake writer (Kafka → the raw Iceberg table ``<database>._cdc_changes``, a view per
    logical table), PySpark."""

    # Names the writer's checkpoint, its progress row (``_cdc_writer_progress``) and its raw
    # commits; default: the instances it reads, joined with '+'.
    name: str | None = None
    database: str = "ods_binlog_source"
    trigger_interval_s: float = Field(30.0, gt=0)
    # At most this many Kafka messages per micro-batch (0: no limit).
    max_offsets_per_trigger: int = Field(2_000_000, ge=0)
    checkpoint_dir: Path | None = None  # default: <lake>/_stream_writer/<name>/checkpoint
    # A table's rows of one batch are split into files of about this size (hot tables get
    # several files, quiet tables one).
    target_file_mb: float = Field(64.0, gt=0)
    # The calendar day ``dt`` of executeTime, and midnight for readiness, in this zone.
    time_zone: str = "UTC"
    # A day is ready when every partition's watermark passed midnight + this budget …
    lateness_budget_s: float = Field(900.0, ge=0)
    # … and now > midnight + collector delay + Kafka delay + writer delay (the seed's rule).
    collector_delay_s: float = Field(60.0, ge=0)
    kafka_delay_s: float = Field(60.0, ge=0)
    writer_delay_s: float = Field(120.0, ge=0)
    metrics_port: int = Field(29102, ge=0, le=65535)
    # Where /metrics and /health listen (cdc_platform.observability); loopback by default.
    metrics_host: BindAddress = METRICS_HOST
    # Dead-lettered messages logged per batch (all are written and counted).
    dead_letter_log_samples: int = Field(3, ge=0)

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not a known time zone") from None
        return value

    @field_validator("name")
    @classmethod
    def _path_safe(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9_+-]{1,100}", value):
            raise ValueError("must be lowercase letters, digits, '_', '+' or '-'")
        return value

    @field_validator("database")
    @classmethod
    def _hive_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,99}", value):
            raise ValueError("must be a Hive name: lowercase letters, digits and '_'")
        return value


class MergeSettings(_Section):
    """The daily snapshot merge (``cdc-mirror merge``): raw layer → ``<database>.<table>``."""

    database: str = "ods_snapshot"
    file_format: Literal["parquet", "orc"] = "parquet"
    # The stream writer whose readiness records say a day is complete; default: the writer of
    # every configured instance (the stream writer's own default name).
    writer: str | None = None
    # How long a merge waits for the day's readiness record before failing (0: look once).
    wait_ready_s: float = Field(0.0, ge=0)
    ready_poll_s: float = Field(10.0, gt=0)
    # Compare the new snapshot with MySQL's daily counts after each merge.
    check: bool = True
    # Snapshot tables are Iceberg tables partitioned by bucket(buckets, first key column),
    # files sorted by key and written in about file_size_mb pieces (merge.snapshot).
    buckets: int = Field(8, ge=1, le=4096)
    file_size_mb: int = Field(32, ge=1)
    # How a day's changes are applied by MERGE INTO: 'merge-on-read' writes the changed rows
    # and delete files (cost follows the change wherever the keys are); 'copy-on-write'
    # rewrites every file holding a changed key (faster reads, cost follows the files touched).
    write_mode: Literal["merge-on-read", "copy-on-write"] = "merge-on-read"
    # While it runs, a merge serves /metrics and /health on metrics_host:metrics_port (0: not;
    # a port in use is logged and skipped: a merge never fails for its metrics). Each run
    # also writes its results to metrics_textfile (default <lake>/_merge/cdc_merge.prom) for
    # node-exporter's textfile collector, so the last run's verdicts outlive the process.
    metrics_host: BindAddress = METRICS_HOST
    metrics_port: int = Field(29103, ge=0, le=65535)
    metrics_textfile: Path | None = None

    @field_validator("database")
    @classmethod
    def _hive_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,99}", value):
            raise ValueError("must be a Hive name: lowercase letters, digits and '_'")
        return value


class MaintenanceSettings(_Section):
    """``cdc-mirror maintain``: Iceberg's table maintenance of the lake (merge.maintenance).

    Retention defaults here; a table mirror may set its own (``tables[].retention``).
    """

    # Day tags of the snapshot tables (dt-YYYY-MM-DD) older than this many days are dropped.
    snapshot_days: int = Field(35, ge=1)
    # Raw change rows (ods_binlog_source) of days older than this are deleted.
    raw_days: int = Field(35, ge=1)
    # Hour tags of tables with hourly snapshots are dropped once their day is older than this.
    hourly_days: int = Field(3, ge=1)
    # Snapshots no branch or tag needs any more are expired once older than this; the
    # newest retain_snapshots of every table's main branch are always kept.
    expire_after_hours: float = Field(24.0, ge=0)
    retain_snapshots: int = Field(5, ge=1)
    # Compaction target of the raw layer's (and snapshots') files.
    target_file_mb: int = Field(128, ge=1)
    # Files in a table's folder that no snapshot references are removed once older than this
    # (a running writer's or merge's new files are younger; Iceberg refuses under 24 h).
    orphan_after_hours: float = Field(72.0, ge=24)


class SqlServerSettings(_Section):
    """Who may log in to ``cdc-mirror sql-server`` (HiveServer2). Unset: no login is checked,
    and the server then listens on loopback only.
    """

    # One user and password (HiveServer2 CUSTOM authentication, checked against a salted hash
    # in the server); set the password through CDC_MIRROR_SQL_SERVER__PASSWORD.
    user: str | None = None
    password: SecretStr | None = None
    # Or the directory's users (HiveServer2 LDAP authentication), e.g. ldaps://ldap.corp:636.
    ldap_url: str | None = None
    ldap_base_dn: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.user is None) != (self.password is None):
            raise ValueError("user and password are set together")
        if self.password is not None and not self.password.get_secret_value():
            raise ValueError("the password is empty")
        if self.user is not None and self.ldap_url is not None:
            raise ValueError("set either user and password or ldap_url, not both")
        return self

    @property
    def authenticates(self) -> bool:
        return self.user is not None or self.ldap_url is not None


class SchedulerSettings(_Section):
    """``cdc-mirror scheduler``: merges each table's days as they become ready, catches up
    missed days in order, retries failures with back-off, runs validation and maintenance
    after a day's merge; one active scheduler, elected through ZooKeeper."""

    # How often the active scheduler looks for ready days and re-run requests.
    tick_s: float = Field(30.0, gt=0)
    # Days before today considered for catching up (a table's days before its first merge
    # are never merged); first_day: never merge a day before it.
    catch_up_days: int = Field(7, ge=1, le=366)
    first_day: date | None = None
    # Failed merges are retried after first_retry_s, doubling to max_retry_s (with jitter),
    # at most max_attempts times in all; then the day waits for a re-run from the web admin.
    first_retry_s: float = Field(60.0, gt=0)
    max_retry_s: float = Field(3600.0, gt=0)
    max_attempts: int = Field(5, ge=1)
    # A merge that finds its day or hour not ready yet (the stream writer's watermark has not
    # passed it: exit code NOT_READY) waits: tried again after not_ready_retry_s, neither red
    # nor counted as an attempt, until max_wait_ready_h after the day or hour closed; from then
    # on it counts as failed (red: CdcSchedulerRedDay), with the back-off above.
    not_ready_retry_s: float = Field(120.0, gt=0)
    max_wait_ready_h: float = Field(3.0, gt=0)
    # One merge, validation or maintenance run may take this long before it is stopped.
    job_timeout_s: float = Field(4 * 3600.0, gt=0)
    # After a day's merge, validate the table's warehouse and Redis mirrors against MySQL
    # (cdc-mirror validate).
    validation: bool = True
    # The table maintenance command run after a day's merge, as an argument list with
    # {table} and {dt} filled in; empty: maintenance is not scheduled.
    maintenance_command: list[str] = Field(default_factory=list)
    metrics_host: BindAddress = METRICS_HOST
    metrics_port: int = Field(29104, ge=0, le=65535)


class ConfigStoreSettings(_Section):
    """Where components read instances, table mirrors and shard rules
    (``cdc_platform.config_store``): this file (``file``, re-read when it changes) or the web
    admin's database through its API (``webui``, polled with ETags)."""

    source: Literal["file", "webui"] = "file"
    webui_url: str = "http://127.0.0.1:29200"
    # A web admin token of role 'component' (reads the table configuration, no secrets).
    token: SecretStr | None = None
    # By instance name, a web admin token of role 'source_reader' made for that instance: its
    # snapshot carries that instance's MySQL password (only), for the commands that read
    # MySQL themselves (cdc-mirror validate and its repair; cdc_platform.config_store
    # .load_source_snapshot). Each read is audited under the token's name.
    source_tokens: dict[str, SecretStr] = Field(default_factory=dict)
    # A change reaches a running component within this (plus one batch).
    poll_interval_s: float = Field(2.0, gt=0, le=5)
    timeout_s: float = Field(5.0, gt=0)
    # Every process registers itself (kind, instance, host, pid, version) with the web admin's
    # component registry and renews it this often (cdc_platform.control; source 'webui' only).
    heartbeat_s: float = Field(5.0, gt=0, le=60)

    def component_token(self) -> SecretStr:
        """``token``, which source ``webui`` needs; ConfigError when it is missing."""
        if self.token is None:
            raise ConfigError(
                "config_store.source 'webui' needs config_store.token (a web admin token of "
                "role 'component') and config_store.webui_url."
            )
        return self.token


class StackSettings(_Section):
    """Where the local stack keeps its binaries' state, data and logs."""

    home: Path = Path("var/stack")
    admin_user: str = "cdc_admin"
    admin_password: SecretStr = SecretStr("cdc-admin-local")
    start_timeout_s: float = Field(120.0, gt=0)


class Settings(BaseSettings):
    """The whole configuration. Sections mirror the components that read them."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    instances: list[MySQLInstance] = Field(
        default_factory=lambda: [MySQLInstance(name="local", host="127.0.0.1")]
    )
    kafka: KafkaSettings = KafkaSettings()
    zookeeper: ZooKeeperSettings = ZooKeeperSettings()
    redis: RedisSettings = RedisSettings()
    postgres: PostgresSettings = PostgresSettings()
    spark: SparkSettings = SparkSettings()
    # Where the lake lives: a local path, hdfs:// or s3:// (cdc_platform.lake_location).
    lake: LakeSettings = LakeSettings()
    collector: CollectorSettings = CollectorSettings()
    stream_writer: StreamWriterSettings = StreamWriterSettings()
    merge: MergeSettings = MergeSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    replay: ReplaySettings = ReplaySettings()
    validation: ValidationSettings = ValidationSettings()
    mirror: MirrorSettings = MirrorSettings()
    kudu: KuduSettings = KuduSettings()
    stack: StackSettings = StackSettings()
    sql_server: SqlServerSettings = SqlServerSettings()
    config_store: ConfigStoreSettings = ConfigStoreSettings()
    webui: WebUISettings = WebUISettings()
    shard_rules: list[ShardRule] = Field(default_factory=lambda: [ShardRule()])
    # The logical tables mirrored downstream of Kafka (Hive snapshot, warehouse, Redis).
    tables: list[TableMirror] = Field(default_factory=list)
    # Plaintext detection, column policies, standardisation (governance).
    governance: GovernanceSettings = GovernanceSettings()

    @field_validator("instances")
    @classmethod
    def _unique_instances(cls, value: list[MySQLInstance]) -> list[MySQLInstance]:
        names = [i.name for i in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"instance names must be unique; repeated: {', '.join(duplicates)}")
        if not value:
            raise ValueError("at least one MySQL instance is required")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_file = os.environ.get(CONFIG_ENV_VAR)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if yaml_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)

    @model_validator(mode="after")
    def _tables_known(self) -> Self:
        known = {i.name for i in self.instances}
        seen: set[str] = set()
        for table in self.tables:
            if table.instance not in known:
                raise ValueError(
                    f"table {table.name!r} names the unknown instance {table.instance!r}"
                )
            if table.name in seen:
                raise ValueError(f"table {table.name!r} is configured twice")
            seen.add(table.name)
        self.governance.check_keys({t.name: t.key for t in self.tables if t.key})
        return self

    def table(self, name: str) -> TableMirror:
        return named_table(self.tables, name)

    def instance(self, name: str) -> MySQLInstance:
        return named_instance(self.instances, name)

    @property
    def lake_dir(self) -> Path:
        return (self.spark.lake_dir or self.stack.home / "lake").resolve()

    @property
    def lake_location(self) -> LakeLocation:
        """``lake.location`` parsed; unset, the local folder ``lake_dir``."""
        return parse_location(self.lake.location or str(self.lake_dir), Path.cwd())


def _field_path(location: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in location:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(root)"


def _holds_secret(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_holds_secret(argument) for argument in get_args(annotation))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (alone, in a list or dict, or optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        model = _model_in(argument)
        if model is not None:
            return model
    return None


def is_secret_field(model: type[BaseModel], location: tuple[int | str, ...]) -> bool:
    """Whether the value at ``location`` may be a secret: a SecretStr field, one kept out of
    repr (e.g. Kafka's client properties), or a place the model does not know (to be safe)."""
    current: type[BaseModel] | None = model
    for part in location:
        if current is None:
            return False
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return True
        if not field.repr or _holds_secret(field.annotation):
            return True
        current = _model_in(field.annotation)
    return False


def describe_problem(problem: ErrorDetails, model: type[BaseModel] | None = None) -> str:
    """One sentence naming one bad field (one item of ``ValidationError.errors()``).

    The rejected value is shown only for a setting that holds no secret (``model``: what was
    validated, default ``Settings``).
    """
    field = _field_path(tuple(problem["loc"]))
    message = str(problem["msg"]).removeprefix("Value error, ")
    if problem["type"] == "missing":
        return f"config field '{field}' is required but missing."
    if problem["type"] == "extra_forbidden":
        return f"config field '{field}' is not a known setting."
    sentence = f"config field '{field}' is invalid: {message}"
    if "input" in problem and not isinstance(problem["input"], dict | list):
        secret = is_secret_field(model or Settings, tuple(problem["loc"]))
        shown = "***" if secret else repr(problem["input"])
        sentence += f" (got {shown})"
    return sentence + "."


def describe_validation_problems(
    error: ValidationError, model: type[BaseModel] | None = None
) -> list[str]:
    """Every problem of ``error``, one sentence each (``describe_problem``)."""
    return [describe_problem(problem, model) for problem in error.errors()]


def describe_validation_error(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One sentence naming the first bad field, e.g. for ``kafka.partitions: 'abc'``, and how
    many more there are."""
    problems = describe_validation_problems(error, model)
    sentence = problems[0].removesuffix(".")
    more = len(problems) - 1
    if more:
        sentence += f"; and {more} more problem{'s' if more > 1 else ''}"
    return sentence + "."


def load_settings(config_file: Path | str | None = None) -> Settings:
    """Read the YAML file (argument, else $CDC_MIRROR_CONFIG) with environment overrides.

    Raises ConfigError with one sentence naming the bad field.
    """
    path = str(config_file) if config_file is not None else os.environ.get(CONFIG_ENV_VAR)
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"config file {path} does not exist.")
    previous = os.environ.get(CONFIG_ENV_VAR)
    try:
        if path is not None:
            os.environ[CONFIG_ENV_VAR] = path
        return Settings()
    except ValidationError as exc:
        raise ConfigError(
            describe_validation_error(exc), describe_validation_problems(exc)
        ) from None
    except (ValueError, yaml.YAMLError) as exc:  # YAML syntax errors are not ValueErrors
        reason = " ".join(str(exc).split())
        raise ConfigError(f"config file {path} cannot be read: {reason}") from None
    finally:
        if path is not None:
            if previous is None:
                os.environ.pop(CONFIG_ENV_VAR, None)
            else:
                os.environ[CONFIG_ENV_VAR] = previous


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def named_table(tables: Iterable[_N], name: str) -> _N:
    """The table mirror called ``name`` (the settings' or a configuration snapshot's);
    ConfigError naming the configured ones otherwise."""
    found = list(tables)
    for candidate in found:
        if candidate.name == name:
            return candidate
    known = ", ".join(t.name for t in found) or "none"
    raise ConfigError(f"no table mirror named {name!r} in the config (configured: {known})")


def named_instance(instances: Iterable[_N], name: str) -> _N:
    """The MySQL instance called ``name``; ConfigError naming the known ones otherwise."""
    found = list(instances)
    for candidate in found:
        if candidate.name == name:
            return candidate
    known = ", ".join(i.name for i in found) or "none"
    raise ConfigError(f"no MySQL instance named {name!r} in the config (known: {known})")
