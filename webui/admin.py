"""The admin's operations on its database: each change and its audit entry in one
transaction (the caller's), secrets encrypted or hashed before they reach a row, and never
written to the audit log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import SecretStr, ValidationError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, selectinload

from cdc_platform.config import Settings, TableMirror
from cdc_platform.config_store import ConfigSnapshot, InstanceConfig, snapshot_tables, with_etag
from simple_binlog.errors import CdcMirrorError
from simple_binlog.routing import ShardRule
from webui.models import (
    ApiToken,
    AuditEntry,
    Instance,
    LoginSession,
    ReplayJob,
    TableMirrorRow,
    User,
)
from webui.schema_source import InstanceAccess, SchemaSource, mirror_problems
from webui.schemas import (
    CollectorConfig,
    InstanceIn,
    InstanceOut,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
)
from webui.security import Keys, hash_password, hash_token, new_api_token, verify_password

log = logging.getLogger(__name__)


class Problems(CdcMirrorError):
    """Bad input: one sentence per problem; nothing was saved."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__(" ".join(messages))
        self.messages = messages


class NotFound(CdcMirrorError):
    """The named object does not exist."""


def now() -> datetime:
    return datetime.now(UTC)


def validation_messages(error: ValidationError) -> list[str]:
    """Pydantic errors as sentences naming the field, without echoing rejected secrets."""
    messages = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "input"
        message = item["msg"].removeprefix("Value error, ")
        messages.append(f"{field}: {message}.")
    return messages


def audit(
    db: Session,
    actor: str,
    action: str,
    object_type: str,
    object_name: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    db.add(
        AuditEntry(
            at=now(),
            actor=actor,
            action=action,
            object_type=object_type,
            object_name=object_name,
            before=before,
            after=after,
        )
    )
    log.info("%s %s %s %s", actor, action, object_type, object_name)


# --- instances ----------------------------------------------------------------------------


def instance_out(row: Instance) -> InstanceOut:
    return InstanceOut(
        name=row.name,
        host=row.host,
        port=row.port,
        user=row.user,
        password_set=bool(row.password_encrypted),
        allow_cleartext_password=row.allow_cleartext_password,
        server_public_key=row.server_public_key or "",
        gtid_start=row.gtid_start,
        include=list(row.include),
        exclude=list(row.exclude),
        shard_rules=[ShardRule.model_validate(rule) for rule in row.shard_rules],
        collector_group=row.collector_group,
        topic=row.topic,
        watermark_heartbeat_s=row.watermark_heartbeat_s,
        version=row.version,
        updated_at=row.updated_at,
    )


def _instance_audit_view(row: Instance) -> dict[str, Any]:
    view = instance_out(row).model_dump(mode="json", exclude={"updated_at"})
    view["password"] = "(redacted)" if row.password_encrypted else "(none)"
    del view["password_set"]
    return view


def get_instance(db: Session, name: str) -> Instance:
    row = db.scalar(select(Instance).where(Instance.name == name))
    if row is None:
        raise NotFound(f"no instance named {name!r}.")
    return row


def list_instances(db: Session) -> list[Instance]:
    return list(db.scalars(select(Instance).order_by(Instance.name)))


def save_instance(
    db: Session,
    settings: Settings,
    keys: Keys,
    actor: str,
    data: InstanceIn,
    existing: str | None = None,
) -> Instance:
    """Create (``existing`` None) or update the named instance; renaming is not allowed
    because collectors, topics and table mirrors are keyed by the name."""
    topic = data.topic or f"{settings.kafka.topic_prefix}{data.name}"
    row: Instance | None
    if existing is None:
        if db.scalar(select(Instance).where(Instance.name == data.name)) is not None:
            raise Problems([f"an instance named {data.name!r} exists already."])
        if data.password is None:
            raise Problems(["password: a new instance needs the MySQL user's password."])
        row = None
        before = None
    else:
        row = get_instance(db, existing)
        if data.name != existing:
            raise Problems([f"name: an instance cannot be renamed ({existing!r} → {data.name!r})."])
        before = _instance_audit_view(row)
    values: dict[str, Any] = {
        "name": data.name,
        "host": data.host,
        "port": data.port,
        "user": data.user,
        "allow_cleartext_password": data.allow_cleartext_password,
        "server_public_key": data.server_public_key,
        "gtid_start": data.gtid_start,
        "include": list(data.include),
        "exclude": list(data.exclude),
        "shard_rules": [rule.model_dump() for rule in data.shard_rules],
        "collector_group": data.collector_group,
        "topic": topic,
        "watermark_heartbeat_s": data.watermark_heartbeat_s,
        "updated_at": now(),
    }
    if row is not None and data.password is None:
        _check_kept_password(row, data)
    if data.password is not None:
        values["password_encrypted"] = keys.encrypt(data.password.get_secret_value())
    if row is None:
        row = Instance(version=1, **values)
        db.add(row)
    else:
        changed = any(getattr(row, k) != v for k, v in values.items() if k != "updated_at")
        for key, value in values.items():
            setattr(row, key, value)
        if changed:
            row.version += 1
    db.flush()
    audit(
        db,
        actor,
        "create" if before is None else "update",
        "instance",
        row.name,
        before,
        _instance_audit_view(row),
    )
    return row


# A message, not a password (ruff's S105 judges by the name).
CONNECTION_NEEDS_PASSWORD = (
    "password: changing the host, port or user needs the MySQL password entered again; "  # noqa: S105
    "the stored one is never sent to a new server."
)


CLEARTEXT_NEEDS_PASSWORD = (
    "password: allowing the password in cleartext needs the MySQL password entered again; "  # noqa: S105
    "the stored one is never released by this change alone."
)


def _check_kept_password(row: Instance, data: InstanceIn) -> None:
    """Refuse (Problems) an update without the password that would release the stored one
    to another server, in cleartext, or encrypted with another key."""
    if _connection_changes(row, data):
        raise Problems([CONNECTION_NEEDS_PASSWORD])
    if _cleartext_turned_on(row, data):
        raise Problems([CLEARTEXT_NEEDS_PASSWORD])
    if _public_key_changes(row, data):
        raise Problems([PUBLIC_KEY_NEEDS_PASSWORD])


def _cleartext_turned_on(row: Instance, data: InstanceIn) -> bool:
    """Whether the update lets the stored password go out in cleartext (or encrypted with
    a key the server sends): only someone who knows the password may allow that."""
    return data.allow_cleartext_password and not row.allow_cleartext_password


PUBLIC_KEY_NEEDS_PASSWORD = (
    "password: changing the server public key needs the MySQL password entered again; "  # noqa: S105
    "the stored one is never encrypted for a new key by this change alone."
)


def _public_key_changes(row: Instance, data: InstanceIn) -> bool:
    """Whether the update pins another RSA key: whoever holds its private key (and can
    intercept the traffic) could decrypt the stored password, so only someone who knows the
    password may change it."""
    return (row.server_public_key or "") != data.server_public_key


def _connection_changes(row: Instance, data: InstanceIn) -> bool:
    """Whether the update points the instance at another server or account: the stored
    password then stays behind, so whoever controls the new host never receives it."""
    return (row.host, row.port, row.user) != (data.host, data.port, data.user)


def has_encrypted_secrets(db: Session) -> bool:
    """Whether any row holds a value encrypted with the admin's key."""
    return (
        db.scalar(select(Instance.id).where(Instance.password_encrypted != "").limit(1)) is not None
    )


def delete_instance(db: Session, actor: str, name: str) -> None:
    row = get_instance(db, name)
    users = db.scalar(
        select(func.count()).select_from(TableMirrorRow).where(TableMirrorRow.instance_id == row.id)
    )
    if users:
        raise Problems([f"instance {name!r} still has {users} table mirror(s); delete them first."])
    before = _instance_audit_view(row)
    db.delete(row)
    audit(db, actor, "delete", "instance", name, before, None)


def instance_access(row: Instance, keys: Keys) -> InstanceAccess:
    return InstanceAccess(
        name=row.name,
        host=row.host,
        port=row.port,
        user=row.user,
        password=keys.decrypt(row.password_encrypted),
        shard_rules=tuple(ShardRule.model_validate(rule) for rule in row.shard_rules),
        allow_cleartext_password=row.allow_cleartext_password,
        server_public_key=row.server_public_key or "",
    )


# --- table mirrors ------------------------------------------------------------------------


def table_mirror(row: TableMirrorRow) -> TableMirror:
    return TableMirror.model_validate({**row.spec, "instance": row.instance.name})


def list_table_mirrors(db: Session) -> list[TableMirrorRow]:
    # Each instance once (select-in), not joined onto every one of hundreds of mirror rows
    # (its JSON columns were then read again per row).
    return list(
        db.scalars(
            select(TableMirrorRow)
            .options(selectinload(TableMirrorRow.instance))
            .order_by(TableMirrorRow.name)
        )
    )


def get_table_mirror(db: Session, name: str) -> TableMirrorRow:
    row = db.scalar(select(TableMirrorRow).where(TableMirrorRow.name == name))
    if row is None:
        raise NotFound(f"no table mirror named {name!r}.")
    return row


def save_table_mirror(
    db: Session,
    keys: Keys,
    schemas: SchemaSource,
    actor: str,
    mirror: TableMirror,
    existing: str | None = None,
) -> TableMirrorRow:
    """Validate against the live MySQL schema, then create or update. Raises Problems."""
    instance = db.scalar(select(Instance).where(Instance.name == mirror.instance))
    if instance is None:
        raise Problems([f"instance: there is no instance named {mirror.instance!r}."])
    if existing is None:
        same = db.scalar(select(TableMirrorRow).where(TableMirrorRow.name == mirror.name))
        if same is not None:
            raise Problems(
                [
                    f"a table mirror named {mirror.name!r} exists already (of instance "
                    f"{same.instance.name!r}); its lake, warehouse and Redis names would be the "
                    "same, so choose other prefixes or edit that mirror."
                ]
            )
    if existing is not None and existing != mirror.name:
        raise Problems(
            [f"the prefixes cannot change on an existing mirror ({existing!r} → {mirror.name!r})."]
        )
    try:
        live = schemas.live_schema(
            instance_access(instance, keys), mirror.db_prefix, mirror.table_prefix
        )
    except CdcMirrorError as exc:  # unreachable MySQL: the form says so, nothing is saved
        raise Problems([str(exc)]) from exc
    problems = mirror_problems(mirror, live) + collision_problems(db, mirror, existing)
    if live is not None:
        problems += capture_problems(instance, live.physical_tables)
    if problems:
        raise Problems(problems)
    if existing is not None and "enabled" not in mirror.model_fields_set:
        # An edit that does not say (the form, an API body without it) keeps the mirror
        # enabled or disabled as it is; only set_table_mirror_enabled or an explicit
        # ``enabled`` switches it.
        current = get_table_mirror(db, existing)
        mirror = mirror.model_copy(update={"enabled": table_mirror(current).enabled})
    spec = mirror.model_dump(mode="json", exclude={"instance"})
    if existing is None:
        row = TableMirrorRow(name=mirror.name, instance_id=instance.id, spec=spec, updated_at=now())
        db.add(row)
        before = None
    else:
        row = get_table_mirror(db, existing)
        before = {**row.spec, "instance": row.instance.name}
        if row.instance_id != instance.id:
            row.instance.version += 1  # the old instance's collectors lose the table
        row.instance_id = instance.id
        row.spec = spec
        row.updated_at = now()
    instance.version += 1
    db.flush()
    audit(
        db,
        actor,
        "create" if before is None else "update",
        "table_mirror",
        mirror.name,
        before,
        {**spec, "instance": instance.name},
    )
    if before is not None and before.get("enabled", True) and not mirror.enabled:
        stop_initial_loads(db, actor, mirror.name)  # disabled through an edit (the API)
    return row


# PostgreSQL cuts identifiers at 63 bytes; the warehouse names a table's staging table
# ``_cdc_stage_<name>`` and its tombstone table ``<name>__tombstone`` (mirror.warehouse), so
# a longer name would make two tables share one identifier.
WAREHOUSE_NAME_MAX_BYTES = 63 - len("_cdc_stage_")
TOMBSTONE_SUFFIX = "__tombstone"


def collision_problems(db: Session, mirror: TableMirror, existing: str | None) -> list[str]:
    """Names of ``mirror`` that would land on another mirror's data, as sentences (the
    mirror's own name is checked for uniqueness by the caller)."""
    problems: list[str] = []
    name = mirror.name
    if "warehouse" in mirror.targets:
        size = len(name.encode())
        if size > WAREHOUSE_NAME_MAX_BYTES:
            problems.append(
                f"the logical table name {name!r} is {size} bytes; the warehouse target takes at "
                f"most {WAREHOUSE_NAME_MAX_BYTES} (PostgreSQL cuts names at 63 bytes, and the "
                "warehouse adds '_cdc_stage_' or '__tombstone' to it), so choose shorter "
                "prefixes."
            )
        others = {
            row.name: table_mirror(row)
            for row in list_table_mirrors(db)
            if row.name not in (name, existing)
        }
        for other, other_mirror in others.items():
            if "warehouse" not in other_mirror.targets:
                continue
            if other == name + TOMBSTONE_SUFFIX or name == other + TOMBSTONE_SUFFIX:
                problems.append(
                    f"the warehouse table of {name!r} would collide with that of table mirror "
                    f"{other!r} (one is the other's tombstone table); choose other prefixes."
                )
    return problems


def capture_problems(instance: Instance, physical_tables: tuple[str, ...]) -> list[str]:
    """The physical tables the instance's include/exclude patterns leave out: its collector
    would never capture their changes, so the mirror would get the initial load only."""
    from simple_binlog.patterns import compile_pattern  # noqa: PLC0415

    try:
        include = [compile_pattern(p) for p in instance.include]
        exclude = [compile_pattern(p) for p in instance.exclude]
    except CdcMirrorError:
        return []  # the instance's own form refuses such patterns
    left_out = [
        table
        for table in physical_tables
        if not any(p.fullmatch(table) for p in include) or any(p.fullmatch(table) for p in exclude)
    ]
    if not left_out:
        return []
    shown = ", ".join(left_out[:3]) + (
        f" and {len(left_out) - 3} more" if len(left_out) > 3 else ""
    )
    return [
        f"instance {instance.name!r} does not capture {shown}: its include/exclude patterns "
        "leave them out, so their changes would never reach the mirror; change the "
        "instance's patterns first."
    ]


def set_table_mirror_enabled(db: Session, actor: str, name: str, enabled: bool) -> bool:
    """Enable or disable the mirror (audited); whether anything changed.

    A disabled mirror stays in the admin with its settings, and leaves the configuration the
    components read (``cdc_platform.config_store.snapshot_tables``): the stream writer,
    merge, the scheduler and the mirrors stop it at their next look, between two batches, as
    if it were removed; its instance's collector stops publishing its changes at a
    transaction boundary (``stopped_table_mirrors``). Enabled again, all take it up from the
    next change on. Its queued or running initial load is stopped as on removal."""
    row = get_table_mirror(db, name)
    before = {**row.spec, "instance": row.instance.name}
    if table_mirror(row).enabled == enabled:
        return False
    row.spec = {**row.spec, "enabled": enabled}
    row.updated_at = now()
    row.instance.version += 1  # the collector config's etag moves with it
    audit(
        db,
        actor,
        "enable" if enabled else "disable",
        "table_mirror",
        name,
        before,
        {**row.spec, "instance": row.instance.name},
    )
    if not enabled:
        stop_initial_loads(db, actor, name)
    return True


def delete_table_mirror(db: Session, actor: str, name: str) -> list[str]:
    """Delete the mirror (the components drop it at their next look at the configuration,
    its instance's collector stops publishing its changes: ``stopped_table_mirrors``) and
    stop its initial load if one is queued or running; the stopped run ids."""
    row = get_table_mirror(db, name)
    before = {**row.spec, "instance": row.instance.name}
    row.instance.version += 1
    db.delete(row)
    audit(db, actor, "delete", "table_mirror", name, before, None)
    return stop_initial_loads(db, actor, name)


def stop_initial_loads(db: Session, actor: str, name: str) -> list[str]:
    """Cancel the mirror's queued initial load, stop a running one after its current chunk
    (audited); the run ids."""
    stopped = []
    for job in db.scalars(
        select(ReplayJob).where(
            ReplayJob.table_mirror == name, ReplayJob.state.in_(("pending", "running"))
        )
    ):
        if job.state == "pending":
            job.state, job.finished_at = "cancelled", now()
        else:
            job.cancel_requested = True  # its worker stops it after the current chunk
        stopped.append(job.run_id)
        audit(db, actor, "cancel", "replay", job.run_id, None, {"table_mirror": name})
    return stopped


# --- collector config ---------------------------------------------------------------------


class CollectorConfigCache:
    """Built configs by (instance id, version, updated_at).

    Every saved change to an instance sets its ``updated_at`` and every change to its table
    mirrors bumps its ``version``, so a key names one content exactly: a poll that finds its
    key here costs one small query instead of rebuilding and hashing the body.
    """

    def __init__(self, max_entries: int = 1024) -> None:
        self._entries: dict[tuple[int, int, str], CollectorConfig] = {}
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int, str]) -> CollectorConfig | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: tuple[int, int, str], config: CollectorConfig) -> None:
        with self._lock:
            if len(self._entries) >= self._max:
                self._entries.clear()  # stale versions pile up only; start afresh
            self._entries[key] = config


def collector_config(
    db: Session, keys: Keys, name: str, cache: CollectorConfigCache | None = None
) -> CollectorConfig:
    """The instance's effective config; ``etag`` changes whenever any part of it does.

    A governance change bumps every instance's ``version`` (``webui.governance``), so the
    cache key below covers the policy set too.
    """
    from webui import governance  # noqa: PLC0415 - governance builds on this module

    row = get_instance(db, name)
    key = (row.id, row.version, row.updated_at.isoformat())
    cached = cache.get(key) if cache is not None else None
    if cached is not None:
        return cached
    mirrors = [
        table_mirror(t)
        for t in db.scalars(
            select(TableMirrorRow)
            .where(TableMirrorRow.instance_id == row.id)
            .order_by(TableMirrorRow.name)
        )
    ]
    tables = snapshot_tables(mirrors)
    body: dict[str, Any] = {
        "instance": row.name,
        "version": row.version,
        "host": row.host,
        "port": row.port,
        "user": row.user,
        "password": keys.decrypt(row.password_encrypted),
        "allow_cleartext_password": row.allow_cleartext_password,
        "server_public_key": row.server_public_key or "",
        "gtid_start": row.gtid_start,
        "include": list(row.include),
        "exclude": list(row.exclude),
        "shard_rules": [ShardRule.model_validate(r).model_dump() for r in row.shard_rules],
        "collector_group": row.collector_group,
        "topic": row.topic,
        "watermark_heartbeat_s": row.watermark_heartbeat_s,
        "tables": [t.model_dump(mode="json") for t in tables],
        "stopped_tables": stopped_table_mirrors(db, row.name, mirrors),
        "governance": governance.published(db),
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    etag = hashlib.sha256(canonical).hexdigest()[:32]
    config = CollectorConfig.model_validate({**body, "etag": etag})
    if cache is not None:
        cache.put(key, config)
    return config


def stopped_table_mirrors(db: Session, instance: str, mirrors: list[TableMirror]) -> list[str]:
    """The logical tables whose changes the instance's collector no longer publishes: its
    table mirrors that are disabled, and those removed from it and not made again on it.

    The audit log is the record of removals (its entries are never deleted); a name made
    again on the instance is published again from then on, and an instance made again
    under an old name starts with none removed. Sorted."""
    disabled = {m.name for m in mirrors if not m.enabled}
    present = {m.name for m in mirrors}
    created = db.scalar(
        select(func.coalesce(func.max(AuditEntry.id), 0)).where(
            AuditEntry.object_type == "instance",
            AuditEntry.action == "create",
            AuditEntry.object_name == instance,
        )
    )
    removed = {
        name
        for name, before in db.execute(
            select(AuditEntry.object_name, AuditEntry.before).where(
                AuditEntry.object_type == "table_mirror",
                AuditEntry.action == "delete",
                AuditEntry.id > (created or 0),
            )
        )
        if isinstance(before, dict) and before.get("instance") == instance
    }
    return sorted(disabled | (removed - present))


def audit_secret_read(
    db: Session,
    who: str,
    instance: str,
    outcome: Literal["read_secret", "refused"],
    object_type: str = "collector_config",
) -> None:
    """One audit entry per collector config handed over (it carries the MySQL password) or
    refused; a 304 hands nothing over and is not recorded."""
    audit(db, who, outcome, object_type, instance, None, None)


# --- the configuration snapshot (cdc_platform.config_store) -------------------------------

# The audited changes that make up the snapshot: their count is its version (entries are
# never deleted, and every committed change adds one, so it grows with each commit).
SNAPSHOT_OBJECTS = ("instance", "table_mirror")


def snapshot_version(db: Session) -> tuple[int, int]:
    """(version, last audit id) of the configuration: one small query."""
    count, last = db.execute(
        select(func.count(), func.coalesce(func.max(AuditEntry.id), 0)).where(
            AuditEntry.object_type.in_(SNAPSHOT_OBJECTS)
        )
    ).one()
    return int(count), int(last)


class SnapshotEtags:
    """The etag of each (version, last audit id, scope) built, so an unchanged poll is
    answered 304 without building the snapshot."""

    def __init__(self, max_entries: int = 256) -> None:
        self._etags: dict[tuple[int, int, str | None], str] = {}
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int, str | None]) -> str | None:
        with self._lock:
            return self._etags.get(key)

    def put(self, key: tuple[int, int, str | None], etag: str) -> None:
        with self._lock:
            if len(self._etags) >= self._max:
                self._etags.clear()
            self._etags[key] = etag


class RenderedByVersion:
    """Page fragments rendered for one configuration version (``snapshot_version``) and
    viewer, so a page listing hundreds of table mirrors renders them once per change rather
    than on every request (issue 22, item 8: rendering 500 rows made tens of thousands of
    objects a request, and the garbage collections they caused were the page's p95)."""

    def __init__(self, max_entries: int = 16) -> None:
        self._html: dict[tuple[Any, ...], str] = {}
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> str | None:
        with self._lock:
            return self._html.get(key)

    def put(self, key: tuple[Any, ...], html: str) -> None:
        with self._lock:
            if len(self._html) >= self._max:
                self._html.clear()  # older versions are never asked for again
            self._html[key] = html


def instance_config(row: Instance, keys: Keys | None = None) -> InstanceConfig:
    """An instance as the components see it; with ``keys``, its password decrypted (in
    memory only), for the web admin's own use of it or a collector token's snapshot."""
    return InstanceConfig(
        name=row.name,
        host=row.host,
        port=row.port,
        user=row.user,
        password=SecretStr(keys.decrypt(row.password_encrypted)) if keys is not None else None,
        allow_cleartext_password=row.allow_cleartext_password,
        server_public_key=row.server_public_key or "",
        gtid_start=row.gtid_start,
        include=tuple(row.include),
        exclude=tuple(row.exclude),
        shard_rules=tuple(ShardRule.model_validate(rule) for rule in row.shard_rules),
        collector_group=row.collector_group,
        topic=row.topic,
        watermark_heartbeat_s=row.watermark_heartbeat_s,
    )


def config_snapshot(
    db: Session, keys: Keys, version: int, secret_for: str | None = None
) -> ConfigSnapshot:
    """Instances (without passwords) and table mirrors. ``secret_for``: a collector token's
    instance: the snapshot then holds only that instance, its password and its mirrors."""
    rows = list_instances(db)
    if secret_for is not None:
        rows = [row for row in rows if row.name == secret_for]
    instances = tuple(
        instance_config(row, keys if row.name == secret_for else None) for row in rows
    )
    names = {i.name for i in instances}
    tables = snapshot_tables(
        mirror
        for mirror in (table_mirror(row) for row in list_table_mirrors(db))
        if mirror.instance in names
    )
    return with_etag(ConfigSnapshot(version=version, instances=instances, tables=tables))


# --- users and tokens ---------------------------------------------------------------------


def user_out(row: User) -> UserOut:
    return UserOut(
        username=row.username, role=row.role, created_at=row.created_at, disabled=row.disabled
    )


def create_user(db: Session, actor: str, data: UserIn) -> User:
    if db.scalar(select(User).where(User.username == data.username)) is not None:
        raise Problems([f"a user named {data.username!r} exists already."])
    row = User(
        username=data.username,
        password_hash=hash_password(data.password.get_secret_value()),
        role=data.role,
        created_at=now(),
        disabled=False,
    )
    db.add(row)
    db.flush()
    audit(db, actor, "create", "user", row.username, None, {"role": row.role})
    return row


def set_user_disabled(db: Session, actor: str, username: str, disabled: bool) -> User:
    """Disabling ends the user's sessions and revokes every API token they own (enabling
    again brings neither back)."""
    row = db.scalar(select(User).where(User.username == username))
    if row is None:
        raise NotFound(f"no user named {username!r}.")
    if disabled and row.username == actor:
        raise Problems(["you cannot disable your own account."])
    before = {"disabled": row.disabled}
    row.disabled = disabled
    after: dict[str, Any] = {"disabled": disabled}
    if disabled:
        db.execute(delete(LoginSession).where(LoginSession.user_id == row.id))
        owned = list(
            db.scalars(select(ApiToken).where(ApiToken.created_by == username, ~ApiToken.revoked))
        )
        for token in owned:
            token.revoked = True
        after["tokens_revoked"] = [token.id for token in owned]
    audit(db, actor, "update", "user", username, before, after)
    return row


def set_user_password(
    db: Session, actor: str, username: str, password: SecretStr, current: str | None = None
) -> User:
    """Set a password (``current`` given: the user changes their own, which it must match).

    Every session of the user ends, so a leaked session dies with the old password.
    """
    row = db.scalar(select(User).where(User.username == username))
    if row is None:
        raise NotFound(f"no user named {username!r}.")
    if current is not None and not verify_password(current, row.password_hash):
        raise Problems(["current password: it does not match."])
    try:
        checked = UserIn.model_validate(
            {"username": row.username, "password": password, "role": "viewer"}
        )
    except ValidationError as exc:
        raise Problems(validation_messages(exc)) from None
    row.password_hash = hash_password(checked.password.get_secret_value())
    db.execute(delete(LoginSession).where(LoginSession.user_id == row.id))
    audit(db, actor, "update", "user", username, None, {"password": "(changed)"})
    return row


def token_state(row: ApiToken) -> Literal["active", "expired", "revoked"]:
    if row.revoked:
        return "revoked"
    expires = row.expires_at if row.expires_at.tzinfo else row.expires_at.replace(tzinfo=UTC)
    return "expired" if expires <= now() else "active"


def token_out(row: ApiToken) -> TokenOut:
    return TokenOut(
        id=row.id,
        name=row.name,
        role=row.role,
        instance=row.instance,
        display_prefix=row.display_prefix,
        created_by=row.created_by,
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked=row.revoked,
        state=token_state(row),
    )


def list_tokens(db: Session) -> list[ApiToken]:
    return list(db.scalars(select(ApiToken).order_by(ApiToken.id)))


# The token roles bound to one instance, whose password (only) they read: a collector's, and
# a source reader's (a command that reads MySQL itself, e.g. ``cdc-mirror validate``).
INSTANCE_ROLES = ("collector", "source_reader")


def create_token(
    db: Session, settings: Settings, actor: str, owner: str, data: TokenIn
) -> TokenCreated:
    """A new token owned by ``owner`` (a user name): it dies with that account. A collector
    or source_reader token is bound to one existing instance (``INSTANCE_ROLES``: the roles
    that read that instance's password); other roles to none."""
    problems = []
    if data.role in INSTANCE_ROLES and not data.instance:
        problems.append(
            f"instance: a {data.role} token needs the name of the one instance whose config "
            "it reads."
        )
    elif data.role not in INSTANCE_ROLES and data.instance:
        problems.append(
            "instance: only collector and source_reader tokens are bound to an instance."
        )
    elif (
        data.instance and db.scalar(select(Instance).where(Instance.name == data.instance)) is None
    ):
        problems.append(f"instance: there is no instance named {data.instance!r}.")
    days = data.expires_in_days or settings.webui.token_default_lifetime_days
    if days > settings.webui.token_max_lifetime_days:
        problems.append(
            f"expires_in_days: a token may live at most {settings.webui.token_max_lifetime_days} "
            "days (webui.token_max_lifetime_days)."
        )
    if problems:
        raise Problems(problems)
    secret = new_api_token()
    created = now()
    row = ApiToken(
        name=data.name,
        token_hash=hash_token(secret),
        display_prefix=secret[:9],
        role=data.role,
        instance=data.instance if data.role in INSTANCE_ROLES else None,
        created_by=owner,
        created_at=created,
        expires_at=created + timedelta(days=days),
        revoked=False,
    )
    db.add(row)
    db.flush()
    audit(
        db,
        actor,
        "create",
        "api_token",
        data.name,
        None,
        {
            "role": data.role,
            "id": row.id,
            "instance": row.instance,
            "owner": owner,
            "expires_at": row.expires_at.isoformat(),
        },
    )
    return TokenCreated(**token_out(row).model_dump(), token=secret)


def revoke_token(db: Session, actor: str, token_id: int) -> ApiToken:
    row = db.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"no API token with id {token_id}.")
    before = {"revoked": row.revoked}
    row.revoked = True
    audit(db, actor, "revoke", "api_token", row.name, before, {"revoked": True, "id": row.id})
    return row


def ensure_initial_admin(db: Session, settings: Settings) -> None:
    """A fresh install gets its first admin from the config/env, if one is given."""
    if db.scalar(select(func.count()).select_from(User)):
        return
    password = settings.webui.initial_admin_password
    if password is None:
        log.warning(
            "the web admin has no users yet; create one with 'cdc-mirror webui create-user' "
            "or set CDC_MIRROR_WEBUI__INITIAL_ADMIN_PASSWORD"
        )
        return
    create_user(
        db,
        "(initial setup)",
        UserIn(username=settings.webui.initial_admin_user, password=password, role="admin"),
    )
