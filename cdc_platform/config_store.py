"""The configuration store: where every component reads instances, table mirrors (routing,
keys, targets, retention) and shard rules, and learns of changes.

One interface, ``ConfigStore``, chosen by ``config_store.source`` (``open_config_store``):

- ``FileConfigStore``: the YAML config file, the offline / embedded alternative; re-read
  when the file changes (size, mtime or content).
- ``AdminConfigStore``: the web admin's database through ``GET /api/config-snapshot`` with a
  scoped token (role ``component``: no secrets), polled with ``If-None-Match``; a 304 costs
  the admin one small query. A command that reads MySQL itself gets one instance's password
  with that instance's ``source_reader`` token (``load_source_snapshot``). ``AdminFeed`` is
  the one HTTP poller with ETags, also used by the collector's own config
  (``collector.remote_config``).
- ``FakeConfigStore``: the fake, real code for unit tests (``publish`` a snapshot).

A component holds a ``ConfigWatch``: it polls the store in a thread and keeps the newest
*valid* snapshot aside; the component takes it (``take``) at its own safe point (between
batches, before the next micro-batch), so a change is applied whole or not at all. An invalid
snapshot is logged once and the one in force stays.

The pure part: ``parse_snapshot`` / ``snapshot_body`` (the wire form), ``validate_snapshot``
and ``diff_snapshots`` (what changed, per table, optionally for one target).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from cdc_platform.config import (
    CONFIG_ENV_VAR,
    MirrorTarget,
    Settings,
    TableMirror,
    describe_validation_error,
    load_settings,
    named_instance,
    named_table,
)
from cdc_platform.periodic import Periodic
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.routing import ShardRouter, ShardRule

log = logging.getLogger(__name__)

SNAPSHOT_PATH = "/api/config-snapshot"


# --- the snapshot -------------------------------------------------------------------------


class InstanceConfig(BaseModel):
    """One MySQL instance as the components see it. ``password`` is only present for a
    collector token scoped to this instance (and in the file store)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    name: str
    host: str
    port: int = Field(ge=1, le=65535)
    user: str
    password: SecretStr | None = None
    allow_cleartext_password: bool = False
    server_public_key: str = ""  # pinned RSA key (PEM text or a file's path); "" for none
    gtid_start: str = "current"
    include: tuple[str, ...] = (r".*",)
    exclude: tuple[str, ...] = ()
    shard_rules: tuple[ShardRule, ...] = (ShardRule(),)
    collector_group: str | None = None
    topic: str | None = None  # None: kafka.topic_prefix + name
    # The leading collector's watermark heartbeat period while the source is quiet (0: none);
    # None: the collector's own ``collector.watermark_heartbeat_s``.
    watermark_heartbeat_s: float | None = Field(None, ge=0)

    def login(self) -> InstanceLogin:
        """What a connection to the instance needs; ConfigError when the snapshot carries no
        password (the web admin gives none to a token of role 'component')."""
        if self.password is None:
            raise ConfigError(
                f"the configuration carries no password for instance {self.name!r}; reading "
                "its tables needs the config file, or a snapshot with the instance's password."
            )
        return InstanceLogin(
            self.name,
            self.host,
            self.port,
            self.user,
            self.password,
            self.allow_cleartext_password,
            self.server_public_key,
        )


@dataclass(frozen=True, slots=True)
class InstanceLogin:
    """A connection to an instance (``cdc_platform.mysql_source.SourceAccess``), with its
    password; plain data, so it can be handed to another process."""

    name: str
    host: str
    port: int
    user: str
    password: SecretStr
    allow_cleartext_password: bool = False
    server_public_key: str = ""


class ConfigSnapshot(BaseModel):
    """One version of the whole configuration. ``version`` grows with every change;
    ``etag`` names the content (a hash of the body)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    version: int = Field(ge=0)
    etag: str = ""
    instances: tuple[InstanceConfig, ...] = ()
    tables: tuple[TableMirror, ...] = ()  # the enabled table mirrors (``snapshot_tables``)

    def instance(self, name: str) -> InstanceConfig:
        return named_instance(self.instances, name)

    def table(self, name: str) -> TableMirror:
        return named_table(self.tables, name)

    def tables_for(self, target: MirrorTarget | None = None) -> tuple[TableMirror, ...]:
        """The table mirrors with ``target`` among their targets (all when None)."""
        return tuple(t for t in self.tables if target is None or target in t.targets)

    def routers(self) -> dict[str, ShardRouter]:
        """Each instance's shard router, by instance name."""
        return {i.name: ShardRouter(list(i.shard_rules)) for i in self.instances}


def snapshot_body(snapshot: ConfigSnapshot) -> dict[str, Any]:
    """The wire form without the etag (passwords in clear where present). Pure."""
    body = snapshot.model_dump(mode="json", exclude={"etag"})
    for wire, instance in zip(body["instances"], snapshot.instances, strict=True):
        wire["password"] = instance.password.get_secret_value() if instance.password else None
    return body


def etag_of(body: Mapping[str, Any]) -> str:
    """A hash of the canonical JSON of ``body``. Pure."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()[:32]


def with_etag(snapshot: ConfigSnapshot) -> ConfigSnapshot:
    return snapshot.model_copy(update={"etag": etag_of(snapshot_body(snapshot))})


def parse_snapshot(document: Any) -> ConfigSnapshot:
    """Validate a served snapshot; ConfigError (one sentence, never a password) if it is bad."""
    if not isinstance(document, dict):
        raise ConfigError("the configuration snapshot is not a JSON object.")
    try:
        snapshot = ConfigSnapshot.model_validate(document)
    except ValidationError as exc:
        where = f"version {document.get('version')!r}"
        raise ConfigError(
            f"the configuration snapshot {where} is refused: "
            f"{describe_validation_error(exc, ConfigSnapshot)}"
        ) from None
    problems = validate_snapshot(snapshot)
    if problems:
        raise ConfigError(
            f"the configuration snapshot version {snapshot.version} is refused: {problems[0]}"
        )
    return snapshot


def snapshot_from_settings(settings: Settings, version: int = 1) -> ConfigSnapshot:
    """The file's configuration as a snapshot: every instance shares ``shard_rules``. Pure."""
    rules = tuple(settings.shard_rules)
    instances = tuple(
        InstanceConfig(
            name=i.name,
            host=i.host,
            port=i.port,
            user=i.user,
            password=i.password,
            allow_cleartext_password=i.allow_cleartext_password,
            server_public_key=i.server_public_key,
            gtid_start=settings.collector.start,
            include=tuple(settings.collector.include),
            exclude=tuple(settings.collector.exclude),
            shard_rules=rules,
        )
        for i in settings.instances
    )
    return with_etag(
        ConfigSnapshot(
            version=version, instances=instances, tables=snapshot_tables(settings.tables)
        )
    )


def snapshot_tables(tables: Iterable[TableMirror]) -> tuple[TableMirror, ...]:
    """The table mirrors a snapshot carries: the enabled ones. A disabled mirror is left out
    as a removed one is, so every component stops it at its own safe point with no code of
    its own for it, and takes it up again the same way when it is enabled. Pure."""
    return tuple(table for table in tables if table.enabled)


def validate_snapshot(snapshot: ConfigSnapshot) -> list[str]:
    """What makes a snapshot unusable as a whole, one sentence each (empty: usable). Pure."""
    problems: list[str] = []
    names = [i.name for i in snapshot.instances]
    for repeated in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"instance {repeated!r} is configured twice.")
    for instance in snapshot.instances:
        if not instance.shard_rules:
            problems.append(f"instance {instance.name!r} has no shard rule.")
    seen: set[str] = set()
    for table in snapshot.tables:
        if table.instance not in names:
            problems.append(
                f"table mirror {table.name!r} names the unknown instance {table.instance!r}."
            )
        if table.name in seen:
            problems.append(f"table mirror {table.name!r} is configured twice.")
        seen.add(table.name)
    return problems


# --- what changed -------------------------------------------------------------------------


@dataclass(frozen=True)
class TableChange:
    name: str
    fields: tuple[str, ...]  # the TableMirror fields that differ


@dataclass(frozen=True)
class SnapshotDiff:
    """What changed between two snapshots, by table and by instance (names sorted)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[TableChange, ...] = ()
    instances_added: tuple[str, ...] = ()
    instances_removed: tuple[str, ...] = ()
    instances_changed: tuple[str, ...] = ()  # any field, shard rules included
    shard_rules_changed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.added
            or self.removed
            or self.changed
            or self.instances_added
            or self.instances_removed
            or self.instances_changed
        )

    def describe(self) -> str:
        parts = [
            *(f"table {n} added" for n in self.added),
            *(f"table {n} removed" for n in self.removed),
            *(f"table {c.name} changed ({', '.join(c.fields)})" for c in self.changed),
            *(f"instance {n} added" for n in self.instances_added),
            *(f"instance {n} removed" for n in self.instances_removed),
            *(f"instance {n} changed" for n in self.instances_changed),
        ]
        return "; ".join(parts) or "nothing"


def diff_snapshots(
    old: ConfigSnapshot, new: ConfigSnapshot, target: MirrorTarget | None = None
) -> SnapshotDiff:
    """What changed from ``old`` to ``new``; with ``target``, only the table mirrors of that
    target count (a table that gains the target is added for it, one that loses it removed).
    Pure."""
    before = {t.name: t for t in old.tables_for(target)}
    after = {t.name: t for t in new.tables_for(target)}
    changed = tuple(
        TableChange(name, _fields_differing(before[name], after[name]))
        for name in sorted(before.keys() & after.keys())
        if before[name] != after[name]
    )
    old_instances = {i.name: i for i in old.instances}
    new_instances = {i.name: i for i in new.instances}
    common = sorted(old_instances.keys() & new_instances.keys())
    return SnapshotDiff(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        changed=changed,
        instances_added=tuple(sorted(new_instances.keys() - old_instances.keys())),
        instances_removed=tuple(sorted(old_instances.keys() - new_instances.keys())),
        instances_changed=tuple(n for n in common if old_instances[n] != new_instances[n]),
        shard_rules_changed=tuple(
            n for n in common if old_instances[n].shard_rules != new_instances[n].shard_rules
        ),
    )


def _fields_differing(a: BaseModel, b: BaseModel) -> tuple[str, ...]:
    return tuple(name for name in type(a).model_fields if getattr(a, name) != getattr(b, name))


# --- the interface ------------------------------------------------------------------------


class ConfigStore(ABC):
    """Lifecycle: ``load()`` once (the first snapshot, or a one-sentence error), then
    ``poll()`` any number of times, then ``close()``. Neither validates beyond the wire
    form: ``ConfigWatch`` decides what is put in force."""

    @abstractmethod
    def load(self) -> ConfigSnapshot:
        """The current snapshot. Raises ConfigError or ServiceUnavailableError."""

    @abstractmethod
    def poll(self) -> ConfigSnapshot | None:
        """A snapshot newer than the last one returned, or None if nothing changed.

        Raises ConfigError (bad snapshot, refused token) or ServiceUnavailableError."""

    def close(self) -> None:  # noqa: B027 - most stores hold nothing to release
        """Release what the store holds."""

    @property
    def where(self) -> str:
        """Where the configuration comes from, for log lines."""
        return type(self).__name__


class FakeConfigStore(ConfigStore):
    """In memory: ``publish`` a snapshot and the next ``poll`` returns it (version and etag
    filled in when left empty)."""

    def __init__(self, snapshot: ConfigSnapshot | None = None) -> None:
        self._current = with_etag(snapshot or ConfigSnapshot(version=1))
        self._delivered: str | None = None
        self._lock = threading.Lock()
        self.failure: CdcMirrorError | None = None  # raised by the next load/poll when set

    def publish(
        self,
        tables: Iterable[TableMirror] | None = None,
        instances: Iterable[InstanceConfig] | None = None,
    ) -> ConfigSnapshot:
        with self._lock:
            update: dict[str, Any] = {"version": self._current.version + 1}
            if tables is not None:
                update["tables"] = tuple(tables)
            if instances is not None:
                update["instances"] = tuple(instances)
            self._current = with_etag(self._current.model_copy(update=update))
            return self._current

    def load(self) -> ConfigSnapshot:
        with self._lock:
            self._raise_failure()
            self._delivered = self._current.etag
            return self._current

    def poll(self) -> ConfigSnapshot | None:
        with self._lock:
            self._raise_failure()
            if self._current.etag == self._delivered:
                return None
            self._delivered = self._current.etag
            return self._current

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure


class FileConfigStore(ConfigStore):
    """The YAML config file; ``poll`` re-reads it when its size, mtime or bytes changed.
    ``version`` counts the contents seen by this process (1, 2, …)."""

    def __init__(
        self,
        path: Path,
        loader: Callable[[Path], Settings] = load_settings,
    ) -> None:
        self._path = path
        self._loader = loader
        self._stamp: tuple[int, int] | None = None
        self._current: ConfigSnapshot | None = None

    @property
    def where(self) -> str:
        return f"the config file {self._path}"

    def load(self) -> ConfigSnapshot:
        self._stamp = self._file_stamp()
        self._current = snapshot_from_settings(self._loader(self._path), version=1)
        return self._current

    def poll(self) -> ConfigSnapshot | None:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        settings = self._loader(self._path)
        version = self._current.version if self._current is not None else 0
        if snapshot_from_settings(settings, version) == self._current:
            return None  # touched, not changed
        self._current = snapshot_from_settings(settings, version + 1)
        return self._current

    def _file_stamp(self) -> tuple[int, int]:
        try:
            status = self._path.stat()
        except OSError as exc:
            raise ConfigError(f"the config file {self._path} cannot be read ({exc}).") from None
        return (status.st_size, status.st_mtime_ns)


class AdminNotFoundError(ConfigError):
    """The web admin answered 404 for the polled URL."""


class AdminFeed:
    """One URL of the web admin polled with ``If-None-Match`` and a bearer token.

    ``fetch`` returns the JSON object when it changed, None on 304. Errors, one sentence:
    AdminNotFoundError (404), ConfigError (the token refused: ``refusal_advice`` says what
    to use), ServiceUnavailableError (unreachable, any other answer, not JSON).
    """

    def __init__(
        self,
        url: str,
        token: SecretStr,
        timeout_s: float,
        setting_name: str,
        refusal_advice: str,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self.etag: str | None = None
        self._setting_name = setting_name
        self._refusal_advice = refusal_advice
        self._client = httpx.Client(
            headers={"Authorization": f"Bearer {token.get_secret_value()}"},
            timeout=timeout_s,
            transport=transport,
        )

    def fetch(self) -> dict[str, Any] | None:
        headers = {"If-None-Match": f'"{self.etag}"'} if self.etag else {}
        try:
            response = self._client.get(self.url, headers=headers)
        except httpx.HTTPError as exc:
            raise ServiceUnavailableError(
                f"the web admin at {self.url} cannot be reached ({type(exc).__name__})."
            ) from None
        status = response.status_code
        if status == httpx.codes.NOT_MODIFIED:
            return None
        if status in (httpx.codes.UNAUTHORIZED, httpx.codes.FORBIDDEN):
            raise ConfigError(
                f"the web admin at {self.url} refused {self._setting_name} ({status}); "
                f"{self._refusal_advice}"
            )
        if status == httpx.codes.NOT_FOUND:
            raise AdminNotFoundError(f"the web admin at {self.url} answered 404.")
        if status != httpx.codes.OK:
            raise ServiceUnavailableError(f"the web admin at {self.url} answered {status}.")
        try:
            document = json.loads(response.content)
        except ValueError:
            raise ServiceUnavailableError(
                f"the web admin at {self.url} answered with something that is not JSON."
            ) from None
        if not isinstance(document, dict):
            raise ServiceUnavailableError(f"the web admin at {self.url} sent no config object.")
        return document

    def close(self) -> None:
        self._client.close()


class AdminConfigStore(ConfigStore):
    """The web admin's snapshot (``GET <webui_url>/api/config-snapshot``)."""

    def __init__(
        self,
        webui_url: str,
        token: SecretStr,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        setting_name: str = "config_store.token",
        refusal_advice: str = "use an unexpired web admin token of role 'component'.",
    ) -> None:
        self._feed = AdminFeed(
            webui_url.rstrip("/") + SNAPSHOT_PATH,
            token,
            timeout_s,
            setting_name=setting_name,
            refusal_advice=refusal_advice,
            transport=transport,
        )

    @property
    def where(self) -> str:
        return f"the web admin at {self._feed.url}"

    def load(self) -> ConfigSnapshot:
        self._feed.etag = None
        snapshot = self.poll()
        if snapshot is None:  # no etag was sent, so no 304
            raise ServiceUnavailableError(f"the web admin at {self._feed.url} sent no snapshot.")
        return snapshot

    def poll(self) -> ConfigSnapshot | None:
        document = self._feed.fetch()
        if document is None:
            return None
        snapshot = parse_snapshot(document)
        self._feed.etag = snapshot.etag or None
        return snapshot

    def close(self) -> None:
        self._feed.close()


def open_config_store(settings: Settings, config_file: Path | None = None) -> ConfigStore:
    """The store ``config_store.source`` names. ``config_file``: the file the settings came
    from (default: ``$CDC_MIRROR_CONFIG``); without one the file store serves ``settings``
    as they are, unchanging."""
    chosen = settings.config_store
    if chosen.source == "webui":
        return AdminConfigStore(chosen.webui_url, chosen.component_token(), chosen.timeout_s)
    path = config_file or _env_config_file()
    if path is None:
        return FakeConfigStore(snapshot_from_settings(settings))
    return FileConfigStore(path)


def load_snapshot(settings: Settings, config_file: Path | None = None) -> ConfigSnapshot:
    """The current snapshot of ``config_store``, once: for batch jobs (merge, replay) that
    read their instances and table mirrors at start. ConfigError when it is unusable."""
    return _load_once(open_config_store(settings, config_file))


def _load_once(store: ConfigStore) -> ConfigSnapshot:
    """``store``'s snapshot, the store closed after; ConfigError when it is unusable."""
    try:
        snapshot = store.load()
    finally:
        store.close()
    return _usable(snapshot, store.where)


def _usable(snapshot: ConfigSnapshot, where: str) -> ConfigSnapshot:
    """``snapshot``, or ConfigError naming its first problem and where it came from."""
    problems = validate_snapshot(snapshot)
    if problems:
        raise ConfigError(f"the configuration from {where} is refused: {problems[0]}")
    return snapshot


def load_source_snapshot(
    settings: Settings,
    instance: str,
    config_file: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> ConfigSnapshot:
    """The snapshot with ``instance``'s MySQL password, for a command that reads MySQL
    itself (``cdc-mirror validate`` and its repair). From the file: the file's snapshot. From
    the web admin: read with ``config_store.source_tokens[instance]``, a token of role
    ``source_reader`` made for that instance, so it holds that instance (with its password)
    and its table mirrors only, and the admin audits the read under the token's name. The
    component token never carries a password. ConfigError (one sentence) when there is no
    such token, the admin refuses it, or the snapshot lacks the instance's password."""
    chosen = settings.config_store
    setting = f"config_store.source_tokens[{instance!r}]"
    if chosen.source != "webui":
        snapshot = load_snapshot(settings, config_file)
        snapshot.instance(instance)  # ConfigError naming the known instances
    else:
        token = chosen.source_tokens.get(instance)
        if token is None:
            raise ConfigError(
                f"reading MySQL instance {instance!r} with config_store.source 'webui' needs "
                f"{setting}: a web admin token of role 'source_reader' made for that instance "
                "(the web admin keeps the passwords)."
            )
        snapshot = _load_once(
            AdminConfigStore(
                chosen.webui_url,
                token,
                chosen.timeout_s,
                transport,
                setting_name=setting,
                refusal_advice=(
                    f"use an unexpired web admin token of role 'source_reader' made for "
                    f"{instance!r}."
                ),
            )
        )
    found = [i for i in snapshot.instances if i.name == instance]
    if not found or found[0].password is None:
        raise ConfigError(
            f"the web admin's answer to {setting} carries no password for instance "
            f"{instance!r}; the token must be of role 'source_reader', made for that instance."
        )
    return snapshot


def _env_config_file() -> Path | None:
    value = os.environ.get(CONFIG_ENV_VAR)
    return Path(value) if value else None


# --- watching -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigChange:
    old: ConfigSnapshot
    new: ConfigSnapshot


class ConfigWatch:
    """The snapshot in force for one component, and the newest valid one polled since.

    ``start`` loads the first snapshot (raises if there is none) and, with ``poll``, polls
    every ``interval_s`` in a daemon thread. ``take`` — called by the component at its safe
    point — returns the change to apply (old and new snapshot) and puts the new one in force,
    or None. Store failures are logged once per kind until it answers again; an invalid
    snapshot once per version; the snapshot in force stays meanwhile.
    """

    def __init__(self, store: ConfigStore, interval_s: float) -> None:
        self._store = store
        self._polling = Periodic("config-watch", interval_s, self.poll_once)
        self._lock = threading.Lock()
        self._current: ConfigSnapshot | None = None
        self._offered: ConfigSnapshot | None = None
        self._last_problem: str | None = None

    @property
    def current(self) -> ConfigSnapshot:
        if self._current is None:
            raise RuntimeError("ConfigWatch.start() was not called")
        return self._current

    def start(self, poll: bool = True) -> ConfigSnapshot:
        first = _usable(self._store.load(), self._store.where)
        self._current = first
        log.debug("configuration version %d from %s", first.version, self._store.where)
        if poll:
            self._polling.start()
        return first

    def poll_once(self) -> bool:
        """One poll; True when a new valid snapshot is waiting to be taken."""
        try:
            fresh = self._store.poll()
        except CdcMirrorError as exc:
            self._problem(f"{exc} The configuration in force stays.")
            return False
        if self._last_problem is not None:
            log.info("%s answers again", self._store.where)
            self._last_problem = None
        if fresh is None:
            return False
        problems = validate_snapshot(fresh)
        if problems:
            self._problem(
                f"the configuration version {fresh.version} is refused: {problems[0]} "
                "The configuration in force stays."
            )
            return False
        with self._lock:
            self._offered = fresh
        return True

    def take(self) -> ConfigChange | None:
        with self._lock:
            fresh, self._offered = self._offered, None
        if fresh is None or self._current is None or fresh.etag == self._current.etag:
            return None
        change = ConfigChange(self._current, fresh)
        self._current = fresh
        return change

    def _problem(self, problem: str) -> None:
        if problem != self._last_problem:
            self._last_problem = problem
            log.warning("%s", problem)

    def close(self) -> None:
        self._polling.stop()
        self._store.close()


def watch_config(settings: Settings, config_file: Path | None = None) -> ConfigWatch:
    """The watch of ``config_store``, started (polling) with its first snapshot."""
    watch = ConfigWatch(
        open_config_store(settings, config_file), settings.config_store.poll_interval_s
    )
    try:
        watch.start()
    except BaseException:
        watch.close()
        raise
    return watch
