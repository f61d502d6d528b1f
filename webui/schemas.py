"""Request and response models of the JSON API (and of the forms, which map onto them)."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any, Literal, Self

from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from cdc_platform.config import (
    INSTANCE_NAME,
    LOCAL_PASSWORDS,
    TOPIC_NAME,
    TableMirror,
    check_patterns,
    is_gtid_start,
)
from simple_binlog.routing import ShardRule

_HOST = re.compile(r"^[A-Za-z0-9.:_-]{1,255}$")
_MYSQL_USER = re.compile(r"^[^\s'\"\\]{1,64}$")
_GROUP = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def check_server_public_key(value: str) -> str:
    """An instance's ``server_public_key``: '' (none pinned), a PEM public key, or the
    absolute path of a PEM file (read by the host that connects, so not checked here)."""
    value = value.replace("\r\n", "\n").strip()
    if not value:
        return ""
    if value.startswith("-----BEGIN"):
        try:
            load_pem_public_key(value.encode())
        except (ValueError, TypeError):
            raise ValueError(
                "the server public key must be a PEM public key "
                "(-----BEGIN PUBLIC KEY-----) or the absolute path of a PEM file"
            ) from None
        return value + "\n"
    if "\n" in value or "\x00" in value or not value.startswith(("/", "~")):
        raise ValueError(
            "the server public key must be a PEM public key "
            "(-----BEGIN PUBLIC KEY-----) or the absolute path of a PEM file"
        )
    return value


class InstanceIn(BaseModel):
    """A MySQL instance as an admin writes it. ``password`` is write-only: leave it out on an
    update to keep the stored one."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(examples=["orders-eu"])
    host: str = Field(examples=["10.0.0.12"])
    port: int = Field(3306, ge=1, le=65535)
    user: str = "cdc"
    password: SecretStr | None = Field(None, json_schema_extra={"writeOnly": True})
    allow_cleartext_password: bool = Field(
        False,
        description="send the password when the server asks for it in cleartext without TLS",
    )
    server_public_key: str = Field(
        "",
        max_length=16384,
        description=(
            "the server's RSA public key (PEM text, or the absolute path of a PEM file on the "
            "connecting host), pinned for RSA full authentication without TLS; '' pins none"
        ),
    )
    gtid_start: str = Field("current", description="'current' or a GTID position like 0-1-100")
    include: list[str] = Field(default_factory=lambda: [r".*"])
    exclude: list[str] = Field(
        default_factory=lambda: [r"(mysql|information_schema|performance_schema|sys)\..*"]
    )
    shard_rules: list[ShardRule] = Field(default_factory=lambda: [ShardRule()])
    collector_group: str = "default"
    topic: str | None = Field(None, description="default: <kafka.topic_prefix><name>")
    # Issue 22, item 6: a quiet source's days become ready with these heartbeats. At most an
    # hour: a day is ready only after a heartbeat past its end, so a longer period would
    # hold the day's merge back for longer than the scheduler's retries allow for.
    watermark_heartbeat_s: float | None = Field(
        None,
        ge=0,
        le=3600,
        description=(
            "how often the leading collector publishes a watermark heartbeat while the source "
            "is quiet, in seconds (0: none); null: the collector's own "
            "collector.watermark_heartbeat_s"
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not INSTANCE_NAME.match(value):
            raise ValueError(
                "the name must be lowercase letters, digits, '_' or '-' (at most 63), "
                "starting with a letter or digit"
            )
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not _HOST.match(value):
            raise ValueError("the host must be a host name or an IP address")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _MYSQL_USER.match(value):
            raise ValueError("the user must be 1 to 64 characters without spaces or quotes")
        return value

    @field_validator("gtid_start")
    @classmethod
    def _gtid(cls, value: str) -> str:
        value = value.strip()
        if not is_gtid_start(value):
            raise ValueError(
                "the GTID start must be 'current', a MariaDB GTID position such as 0-1-100 "
                "(several domains separated by commas) or a MySQL GTID set such as "
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42 (tagged: uuid:tag:1-3)"
            )
        return value

    @field_validator("server_public_key")
    @classmethod
    def _public_key(cls, value: str) -> str:
        return check_server_public_key(value)

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return check_patterns(value)

    @field_validator("collector_group")
    @classmethod
    def _group(cls, value: str) -> str:
        if not _GROUP.match(value):
            raise ValueError("the collector group may hold only letters, digits, '.', '_', '-'")
        return value

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not TOPIC_NAME.match(value):
            raise ValueError("the topic may hold only letters, digits, '.', '_' and '-'")
        return value

    @model_validator(mode="after")
    def _no_local_password_remote(self) -> Self:
        if (
            self.password is not None
            and self.password.get_secret_value() in LOCAL_PASSWORDS
            and self.host not in _LOOPBACK
        ):
            raise ValueError(
                f"a local-stack default password is refused for the non-loopback host "
                f"{self.host!r}; set a real password"
            )
        return self


class InstanceOut(BaseModel):
    name: str
    host: str
    port: int
    user: str
    password_set: bool = Field(description="whether a password is stored (never returned)")
    allow_cleartext_password: bool = False
    server_public_key: str = ""
    gtid_start: str
    include: list[str]
    exclude: list[str]
    shard_rules: list[ShardRule]
    collector_group: str
    topic: str
    watermark_heartbeat_s: float | None = None
    version: int
    updated_at: datetime


class MirrorResource(BaseModel):
    """A thing a table mirror writes to, and its state (``webui.provisioning.Resource``)."""

    kind: str
    name: str
    state: str


class TableMirrorOut(BaseModel):
    name: str
    mirror: TableMirror
    updated_at: datetime
    # Only in the answer to its creation: what was set up, and the initial load's run id.
    resources: list[MirrorResource] = Field(default_factory=list)
    initial_load: str | None = None


class InitialLoadIn(BaseModel):
    """A table mirror's initial load: only rows matching ``condition`` (mock_replay's
    grammar; checked against the table, values bound), belonging to ``execute_time``
    (default: yesterday, UTC)."""

    model_config = ConfigDict(extra="forbid")

    condition: str | None = Field(None, max_length=2000)
    execute_time: date | None = None


class CollectorConfig(BaseModel):
    """What a collector of one instance runs with. See ``webui.api`` for the contract."""

    instance: str
    version: int
    etag: str
    host: str
    port: int
    user: str
    password: str = Field(description="only in responses to tokens of role 'collector'")
    allow_cleartext_password: bool = False
    server_public_key: str = Field("", description="PEM text or a file path; '' pins none")
    gtid_start: str
    include: list[str]
    exclude: list[str]
    shard_rules: list[ShardRule]
    collector_group: str
    topic: str
    watermark_heartbeat_s: float | None = Field(
        None, description="seconds (0: none); null: the collector's own setting"
    )
    tables: list[TableMirror]
    stopped_tables: list[str] = Field(
        default_factory=list,
        description=(
            "logical tables of the instance's mirrors that are disabled or were removed: "
            "the collector publishes none of their changes"
        ),
    )
    governance: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the governance policy set (governance.GovernanceSettings without "
            "source, webui and hash_salt: the salt stays in each collector's own config)"
        ),
    )


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._@-]+$")
    password: SecretStr = Field(json_schema_extra={"writeOnly": True})
    role: Literal["admin", "viewer"] = "viewer"

    @field_validator("password")
    @classmethod
    def _strong_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 10:
            raise ValueError("the password must be at least 10 characters")
        return value


class PasswordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    password: SecretStr = Field(json_schema_extra={"writeOnly": True})


class UserOut(BaseModel):
    username: str
    role: str
    created_at: datetime
    disabled: bool


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9 ._-]+$")
    role: Literal["admin", "viewer", "collector", "component", "source_reader"] = "viewer"
    instance: str | None = Field(
        None,
        description="collector and source_reader tokens only: the one instance whose config "
        "(with its password) they read",
    )
    expires_in_days: int | None = Field(
        None, ge=1, description="default: webui.token_default_lifetime_days"
    )


class TokenOut(BaseModel):
    """A token as listed; never its value."""

    id: int
    name: str
    role: str
    instance: str | None
    display_prefix: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    last_used_at: datetime | None
    revoked: bool
    state: Literal["active", "expired", "revoked"]


class TokenCreated(TokenOut):
    token: str = Field(description="the secret; shown this once, only its hash is stored")


class AuditOut(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    object_type: str
    object_name: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class Problem(BaseModel):
    """An error: ``detail`` is one sentence per problem, meant for a person."""

    detail: list[str]


class Me(BaseModel):
    name: str
    role: str
    kind: Literal["user", "token"]
