"""The admin database: SQLAlchemy 2 models. The schema itself is owned by the Alembic
migrations in ``webui/migrations`` (run at start); keep both in step."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

ROLES = ("admin", "viewer", "collector", "component")


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}  # noqa: RUF012


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))  # admin | viewer
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    disabled: Mapped[bool] = mapped_column(default=False)


class ApiToken(Base):
    """A bearer token for automation; its role is fixed at creation. Only the hash is kept.

    A token works until ``expires_at``, until it is revoked, and only while its owner's
    account (``created_by``, a user name) is enabled; disabling the account revokes it. A
    collector token reads the config of its one ``instance`` and nothing else.
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The first characters, so a person can tell tokens apart without the secret part.
    display_prefix: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(16))  # admin | viewer | collector | component
    created_by: Mapped[str] = mapped_column(String(64))  # the owning user's name
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked: Mapped[bool] = mapped_column(default=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    instance: Mapped[str | None] = mapped_column(String(63), nullable=True)  # collectors only


class LoginSession(Base):
    """Server-side session: the cookie holds the signed id; the table holds its hash."""

    __tablename__ = "login_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    csrf_token: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    user: Mapped[User] = relationship(lazy="joined")


class Instance(Base):
    __tablename__ = "instances"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    user: Mapped[str] = mapped_column(String(64))
    password_encrypted: Mapped[str] = mapped_column(Text)  # Fernet, never plain
    # Send the password when the server asks for it in cleartext without TLS (default off;
    # cdc_platform.mysql_source refuses such a connection otherwise).
    allow_cleartext_password: Mapped[bool] = mapped_column(default=False)
    # The server's RSA public key (PEM text, or the path of a PEM file on the host that
    # connects), pinned for RSA full authentication without TLS; "" pins none.
    server_public_key: Mapped[str] = mapped_column(Text, nullable=True, default="")
    gtid_start: Mapped[str] = mapped_column(String(4096))  # "current" or a GTID position
    include: Mapped[list[Any]] = mapped_column(JSON)
    exclude: Mapped[list[Any]] = mapped_column(JSON)
    shard_rules: Mapped[list[Any]] = mapped_column(JSON)
    collector_group: Mapped[str] = mapped_column(String(64))
    topic: Mapped[str] = mapped_column(String(249))
    # The leading collector's watermark heartbeat period (issue 22, item 6); None: the
    # collector's own ``collector.watermark_heartbeat_s``.
    watermark_heartbeat_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Bumped on every change to the instance or its table mirrors; the collectors' etag.
    version: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TableMirrorRow(Base):
    __tablename__ = "table_mirrors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="RESTRICT"))
    # The whole cdc_platform.config.TableMirror as JSON (minus ``instance``): one schema for
    # the file config and the admin, validated by the same model.
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    instance: Mapped[Instance] = relationship(lazy="joined")


class AuditEntry(Base):
    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    actor: Mapped[str] = mapped_column(String(80))
    action: Mapped[str] = mapped_column(String(32))
    object_type: Mapped[str] = mapped_column(String(32))
    object_name: Mapped[str] = mapped_column(String(200))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class MetricSample(Base):
    __tablename__ = "metric_samples"
    __table_args__ = (
        Index("ix_metric_samples_name_at", "name", "at"),
        # A series' samples read from the index alone (charts: migration 0011). MySQL/MariaDB
        # index at most 3072 bytes: the labels by their first 255 characters.
        Index(
            "ix_metric_samples_series_values",
            "name",
            "labels",
            "at",
            "value",
            mysql_length={"labels": 255},
            mariadb_length={"labels": 255},
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float)  # unix seconds
    target: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    labels: Mapped[str] = mapped_column(String(1000))  # sorted "k=v,k=v"
    value: Mapped[float] = mapped_column(Float)


# --- governance (issue 10) ----------------------------------------------------------------


class GovernanceState(Base):
    """The one row of policy-set-wide settings; ``version`` grows with every governance
    change and is served to the collectors (their etag changes with it)."""

    __tablename__ = "governance_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    enabled: Mapped[bool] = mapped_column(default=False)
    default_action: Mapped[str] = mapped_column(String(8))
    builtin_detectors: Mapped[list[Any]] = mapped_column(JSON)
    version: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DetectorRuleRow(Base):
    __tablename__ = "governance_detectors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    # The whole governance.DetectorRule as JSON.
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    position: Mapped[int] = mapped_column(Integer)  # rules are tried in this order
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ColumnPolicyRow(Base):
    __tablename__ = "governance_policies"
    __table_args__ = (UniqueConstraint("table_name", "column_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    table_name: Mapped[str] = mapped_column(String(128))
    column_name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # a ColumnPolicy
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class StandardiseRuleRow(Base):
    __tablename__ = "governance_standardise"
    __table_args__ = (UniqueConstraint("table_name", "column_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    table_name: Mapped[str] = mapped_column(String(128))
    column_name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # a StandardiseRule
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LookupTableRow(Base):
    __tablename__ = "governance_lookup_tables"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    entries: Mapped[dict[str, Any]] = mapped_column(JSON)  # old value → new value
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DetectionCount(Base):
    """Detections per hour, instance, logical table, column, detector and applied action
    (from the collectors' detection topics; never a value)."""

    __tablename__ = "detection_counts"
    __table_args__ = (
        UniqueConstraint("hour", "instance", "logical_table", "column_name", "detector", "action"),
        Index("ix_detection_counts_hour", "hour"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hour: Mapped[int] = mapped_column(BigInteger)  # unix seconds of the hour's start (UTC)
    instance: Mapped[str] = mapped_column(String(63))
    logical_table: Mapped[str] = mapped_column(String(128))
    column_name: Mapped[str] = mapped_column(String(64))
    detector: Mapped[str] = mapped_column(String(63))
    action: Mapped[str] = mapped_column(String(8))
    count: Mapped[int] = mapped_column(BigInteger)


class DetectionOffset(Base):
    """The next Kafka offset to read per detection topic partition, written in the same
    transaction as the counts it covers: a restarted consumer resumes there, counting each
    record once."""

    __tablename__ = "detection_offsets"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    next_offset: Mapped[int] = mapped_column(BigInteger)


# --- replay jobs (issue 22, item 8) ---------------------------------------------------------


class ReplayJob(Base):
    """A replay the admin submitted; ``cdc-mirror replay-worker`` claims it (``worker``,
    ``heartbeat_at``), runs it through mock_replay under the same ``run_id`` and writes its
    progress back here, so no page of the admin reads Kafka for it. ``recorded``: the run's
    spec is in its progress topic (a worker taking over a stale job resumes it there)."""

    __tablename__ = "replay_jobs"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)  # a webui.replay.ReplayRequest
    state: Mapped[str] = mapped_column(String(16), index=True)  # pending | running | …
    rows_done: Mapped[int] = mapped_column(BigInteger, default=0)
    rows_total: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    recorded: Mapped[bool] = mapped_column(default=False)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The table mirror whose initial load this is (issue 22, item 2), if any.
    table_mirror: Mapped[str | None] = mapped_column(String(200), nullable=True)


# --- the control plane (issue 22: component registry, scheduler runs) ---------------------


class ComponentRow(Base):
    """One running (or lately stopped) process, renewed by its heartbeat
    (``cdc_platform.control.ComponentBeat``)."""

    __tablename__ = "components"
    __table_args__ = (Index("ix_components_heartbeat_at", "heartbeat_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    instance: Mapped[str] = mapped_column(String(200))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str] = mapped_column(String(500))
    started_at: Mapped[float] = mapped_column(Float)  # Unix seconds, the process's clock
    heartbeat_at: Mapped[float] = mapped_column(Float)  # Unix seconds, the admin's clock
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class SchedulerRun(Base):
    """One run of the scheduler, or a re-run requested in the admin (``state`` requested);
    ``cdc_platform.control.RunRecord`` on the wire."""

    __tablename__ = "scheduler_runs"
    __table_args__ = (
        Index("ix_scheduler_runs_kind_dt", "kind", "dt"),
        Index("ix_scheduler_runs_state", "state"),
        Index("ix_scheduler_runs_kind_table_name", "kind", "table_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # merge | validation | maintenance
    table_name: Mapped[str] = mapped_column(String(200))
    dt: Mapped[str] = mapped_column(String(10))  # YYYY-MM-DD
    # A merge of one hour of dt (tables with hourly snapshots, RunRecord.hour); NULL: the day.
    hour: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    requested_by: Mapped[str | None] = mapped_column(String(80), nullable=True)
    scheduler: Mapped[str | None] = mapped_column(String(200), nullable=True)
    requested_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    rows: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    files: Mapped[int | None] = mapped_column(Integer, nullable=True)
    check_ok: Mapped[bool | None] = mapped_column(nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    retry_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A validation run: each target's outcome, RunRecord.validation as JSON.
    validation: Mapped[str | None] = mapped_column(Text, nullable=True)
