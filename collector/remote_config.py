"""The collector's configuration from the web admin (``collector.config_source: webui``).

``GET <governance.webui.url>/api/collector-config/<instance>`` (the collector token of
``governance.webui``) gives the instance's connection (host, port, user, password), its GTID
start, include/exclude filters, shard rules and the governance policy set. One poller per
process (``RemoteConfigRuntime``) fetches it every ``governance.webui.poll_interval_s`` with
``If-None-Match`` and serves both the collector and, with ``governance.source: webui``, the
policy set (one request, one etag).

What happens to a change (the pure part is ``diff_configs``):

- connection, password, include/exclude filters or the stopped table mirrors: the active
  collector switches at a safe point. It waits for the end of the MySQL transaction in
  progress (a split transaction's position counts rows published under the old filters, so
  it must never be resumed under new ones), commits it with its position, then restarts its
  binlog reading from that committed position with the new settings: same process,
  leadership, epoch and Kafka producer (fencing intact), the following binlogOffsets
  continue from the committed state.
  A newly included table is collected from the switch on; its earlier rows need a history
  replay (``cdc-mirror replay``). A newly excluded table stops at the switch.
- the stopped table mirrors (``stopped_tables``: the instance's mirrors disabled or removed in
  the admin): their physical tables (by the shard rules) are left out as excluded ones are,
  from the switch on, so a mirror stops at a transaction boundary and is taken up again
  the same way when it is enabled or created again (``collector.service.TableFilter``).
- shard rules or the policy set: the new policy set applies at the next transaction boundary.
- the watermark heartbeat period (the instance's, else the file's): from the next transaction
  boundary (0 stops the heartbeats).
- GTID start: only used when the instance has no stored position, i.e. on a first start.
- the topic: set by ``kafka.topic_prefix``; a different topic in the admin is logged and
  not used (moving topics would move the position and fencing topics with them).

Failures, one sentence each: the admin unreachable at start → the last config received is
used from the cache (``governance.webui.cache_dir``, mode 0600, encrypted with a key derived
from the collector token: it holds the MySQL password), else the process stops; unreachable
later → the config in force stays (logged once); 404 → the instance was deleted in the admin:
the collector stops, exit status 1; an invalid config (a regex that does not compile, …) →
logged once, the config in force stays. A standby keeps the newest config for its takeover.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr, ValidationError

from cdc_platform.config import CollectorSettings, MySQLInstance, Settings
from cdc_platform.config import describe_validation_error as describe_settings_error
from cdc_platform.config_store import AdminFeed, AdminNotFoundError
from cdc_platform.governance_model import (
    GovernanceSettings,
    GovernanceWebUISource,
    describe_governance_error,
)
from cdc_platform.periodic import Periodic
from collector.metrics import CollectorMetrics
from governance.policy import Governance, compile_governance
from governance.source import GovernanceRuntime, StaticPolicySource
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.naming import topic_name
from simple_binlog.routing import ShardRouter, ShardRule

log = logging.getLogger(__name__)

_REQUIRED = ("version", "etag", "host", "port", "user", "password", "gtid_start", "include")
_CACHE_KEY_CONTEXT = b"cdc-mirror collector config cache\x00"


class InstanceDeletedError(ConfigError):
    """The web admin no longer knows the instance (404): its collectors must stop."""


@dataclass(frozen=True)
class RemoteConfig:
    """One validated version of an instance's config as the web admin serves it."""

    version: int
    etag: str
    instance: MySQLInstance
    collector: CollectorSettings
    shard_rules: tuple[ShardRule, ...]
    topic: str
    governance: dict[str, Any]  # the published policy set ({} when the admin sends none)
    # The logical tables of the instance's table mirrors that are disabled or removed: not
    # published although the include patterns take them (``collector.service.TableFilter``).
    stopped_tables: frozenset[str] = frozenset()


def parse_remote_config(document: Any, local: Settings, instance_name: str) -> RemoteConfig:
    """Validate a ``CollectorConfig`` body into what the collector runs with. Pure.

    The local config keeps what the admin does not hold: the replica server id (from the
    file's instance of the same name, if any) and every other collector setting. Raises
    ConfigError with one sentence; the password never appears in it.
    """
    if not isinstance(document, dict):
        raise ConfigError("the web admin's collector config is not a JSON object.")
    missing = [key for key in _REQUIRED if key not in document]
    if missing:
        raise ConfigError(f"the web admin's collector config lacks {missing[0]!r}.")
    version = document["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ConfigError("the web admin's collector config has a malformed 'version'.")
    where = f"the web admin's config version {version} of instance {instance_name!r}"
    replica_server_id = next(
        (i.replica_server_id for i in local.instances if i.name == instance_name),
        MySQLInstance.model_fields["replica_server_id"].default,
    )
    password = document["password"]
    try:
        instance = MySQLInstance(
            name=instance_name,
            host=document["host"],
            port=document["port"],
            user=document["user"],
            password=SecretStr(password if isinstance(password, str) else ""),
            allow_cleartext_password=document.get("allow_cleartext_password", False),
            server_public_key=document.get("server_public_key") or "",
            replica_server_id=replica_server_id,
        )
        collector = CollectorSettings.model_validate(
            {
                **local.collector.model_dump(),
                "include": document["include"],
                "exclude": document.get("exclude", []),
                "start": document["gtid_start"],
                # The instance's own period when the admin sets one, else the file's.
                **(
                    {"watermark_heartbeat_s": document["watermark_heartbeat_s"]}
                    if document.get("watermark_heartbeat_s") is not None
                    else {}
                ),
            }
        )
        rules = tuple(ShardRule.model_validate(r) for r in document.get("shard_rules") or [])
    except ValidationError as exc:
        raise ConfigError(f"{where} is refused: {describe_settings_error(exc)}") from None
    governance = document.get("governance") or {}
    if not isinstance(governance, dict):
        raise ConfigError(f"{where} is refused: 'governance' is not an object.")
    stopped = document.get("stopped_tables") or []  # absent from an admin older than it
    if not isinstance(stopped, list) or not all(isinstance(n, str) for n in stopped):
        raise ConfigError(f"{where} is refused: 'stopped_tables' is not a list of names.")
    return RemoteConfig(
        version=version,
        etag=str(document["etag"]),
        instance=instance,
        collector=collector,
        shard_rules=rules or (ShardRule(),),
        topic=str(document.get("topic") or ""),
        governance=governance,
        stopped_tables=frozenset(stopped),
    )


# What differs between two configs, by name; those in _SWITCHING need a switch of the reading.
CONNECTION, PASSWORD, FILTERS = "connection", "password", "include/exclude filters"
STOPPED = "stopped table mirrors"
START, SHARD_RULES, TOPIC, GOVERNANCE = "GTID start", "shard rules", "topic", "policy set"
HEARTBEAT = "watermark heartbeat period"
_SWITCHING = frozenset({CONNECTION, PASSWORD, FILTERS, STOPPED})


@dataclass(frozen=True)
class ConfigDiff:
    changed: tuple[str, ...]

    @property
    def needs_switch(self) -> bool:
        """Whether the binlog reading restarts (at a transaction boundary) to apply it."""
        return any(name in _SWITCHING for name in self.changed)

    @property
    def filters_changed(self) -> bool:
        """Whether what is published changes (a split transaction must end first)."""
        return FILTERS in self.changed or STOPPED in self.changed

    def describe(self) -> str:
        return ", ".join(self.changed) or "nothing the collector uses"


def diff_configs(old: RemoteConfig, new: RemoteConfig) -> ConfigDiff:
    """What changed from ``old`` to ``new``, in a fixed order. Pure."""
    a, b = old.instance, new.instance
    checks = (
        (CONNECTION, (a.host, a.port, a.user) != (b.host, b.port, b.user)),
        (PASSWORD, a.password.get_secret_value() != b.password.get_secret_value()),
        (
            FILTERS,
            (old.collector.include, old.collector.exclude)
            != (new.collector.include, new.collector.exclude),
        ),
        (STOPPED, _stopped_tables(old) != _stopped_tables(new)),
        (START, old.collector.start != new.collector.start),
        (SHARD_RULES, old.shard_rules != new.shard_rules),
        (TOPIC, old.topic != new.topic),
        (GOVERNANCE, old.governance != new.governance),
        (
            HEARTBEAT,
            old.collector.watermark_heartbeat_s != new.collector.watermark_heartbeat_s,
        ),
    )
    return ConfigDiff(tuple(name for name, differs in checks if differs))


def _stopped_tables(config: RemoteConfig) -> tuple[object, ...]:
    """The stopped mirrors, and while any is, the shard rules (they say which physical
    tables are a mirror's)."""
    return (config.stopped_tables, config.shard_rules if config.stopped_tables else ())


class CollectorConfigFeed:
    """``GET /api/collector-config/<instance>`` with ETags, and the encrypted local cache."""

    def __init__(
        self,
        webui: GovernanceWebUISource,
        instance: str,
        cache_dir: Path,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if webui.token is None:
            raise ConfigError(
                "collector.config_source 'webui' needs governance.webui.token (a token of role "
                "'collector'); governance.webui also names the web admin's url."
            )
        token = webui.token.get_secret_value()
        self._instance = instance
        self.cache_path = cache_dir / f"collector-config-{instance}.bin"
        # The cache holds the MySQL password: encrypted with a key only the token's holder
        # can derive, so the file alone gives nothing away.
        digest = hashlib.sha256(_CACHE_KEY_CONTEXT + token.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(digest))
        # The one poller of the web admin with ETags (the components' AdminConfigStore too).
        self._admin = AdminFeed(
            f"{webui.url}/api/collector-config/{instance}",
            webui.token,
            webui.timeout_s,
            setting_name="governance.webui.token",
            refusal_advice=(
                f"use an unexpired token of role 'collector' made for instance {instance!r}."
            ),
            transport=transport,
        )

    @property
    def url(self) -> str:
        return self._admin.url

    @property
    def etag(self) -> str | None:
        return self._admin.etag

    @etag.setter
    def etag(self, value: str | None) -> None:
        self._admin.etag = value

    def fetch(self) -> dict[str, Any] | None:
        """The config if it changed since the last fetch, None if not (304).

        Raises InstanceDeletedError (404), ConfigError (token refused) or
        ServiceUnavailableError (unreachable, other answers), each one sentence.
        """
        try:
            return self._admin.fetch()
        except AdminNotFoundError:
            raise InstanceDeletedError(
                f"the web admin has no instance {self._instance!r} (deleted?), so its "
                "collector stops."
            ) from None

    def accepted(self, document: dict[str, Any]) -> None:
        """``document`` was valid: poll against its etag from now on, and cache it."""
        self.etag = str(document.get("etag") or "") or None
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.cache_path.with_suffix(".tmp")
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(self._fernet.encrypt(orjson.dumps(document)))
            partial.replace(self.cache_path)
        except OSError as exc:
            log.warning("the collector config could not be cached at %s (%s)", self.cache_path, exc)

    def cached(self) -> dict[str, Any] | None:
        """The last config cached, or None (no cache, unreadable, or another token's)."""
        try:
            sealed = self.cache_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("the cached collector config %s is unreadable (%s)", self.cache_path, exc)
            return None
        try:
            document = orjson.loads(self._fernet.decrypt(sealed))
        except InvalidToken:
            log.warning(
                "the cached collector config %s was written with another collector token; "
                "it is not used",
                self.cache_path,
            )
            return None
        except orjson.JSONDecodeError:
            log.warning(
                "the cached collector config %s is damaged; it is not used", self.cache_path
            )
            return None
        return document if isinstance(document, dict) else None

    def close(self) -> None:
        self._admin.close()


class RemoteConfigRuntime:
    """The newest valid config of one instance in this process, polled in a thread.

    ``latest`` is replaced as a whole (one reference write), so the collector's loop reads
    it without a lock; the collector decides when to put it in force (``collector.service``).
    """

    def __init__(
        self,
        feed: CollectorConfigFeed,
        local: Settings,
        instance_name: str,
        metrics: CollectorMetrics,
        on_deleted: Callable[[], None],
        poll_interval_s: float = 5.0,
    ) -> None:
        self._feed = feed
        self._local = local
        self._instance = instance_name
        self._metrics = metrics
        self._on_deleted = on_deleted
        self._poller = Periodic(
            "collector-config-poll",
            poll_interval_s,
            self.poll_once,
            done=lambda: self.failure is not None,
        )
        self._last_problem: str | None = None
        self._refused_etag: str | None = None
        self._governance: GovernanceRuntime | None = None
        # One poll at a time: the poll thread's, and the one a collector taking over asks for.
        self._polling = threading.Lock()
        self.latest: RemoteConfig | None = None
        # Set when the instance was deleted in the admin: the process stops with it.
        self.failure: InstanceDeletedError | None = None
        # While a collector is active it reports the version in force itself.
        self.collector_active = False

    @property
    def current(self) -> RemoteConfig:
        if self.latest is None:
            raise RuntimeError("RemoteConfigRuntime.start() was not called")
        return self.latest

    def start(self, poll: bool = True) -> RemoteConfig:
        """The first config: from the admin, else the cache; raises (one sentence) if none."""
        try:
            document = self._feed.fetch()
        except ServiceUnavailableError as exc:
            document = self._feed.cached()
            if document is None:
                raise ServiceUnavailableError(
                    f"{exc} No config was received before (no usable cache at "
                    f"{self._feed.cache_path}), so the collector cannot start until the web "
                    "admin answers."
                ) from None
            first = parse_remote_config(document, self._local, self._instance)
            self._feed.etag = first.etag
            log.warning(
                "%s Running on the cached config version %d until it answers.", exc, first.version
            )
            # Said once: the polls that fail the same way until the admin answers stay quiet.
            self._last_problem = f"{exc} The collector config in force stays."
        else:
            if document is None:  # no etag was sent, so no 304; keeps the types honest
                raise ServiceUnavailableError(f"the web admin at {self._feed.url} sent no config.")
            first = parse_remote_config(document, self._local, self._instance)
            self._feed.accepted(document)
            log.info(
                "collector config version %d of %s from the web admin",
                first.version,
                self._instance,
            )
        self._warn_about_topic(first)
        self.latest = first
        self._metrics.config_version.labels(self._instance).set(first.version)
        if poll:
            self.start_polling()
        return first

    def start_polling(self) -> None:
        """Poll in a thread from now on (after ``start_governance``, so no set is missed)."""
        self._poller.start()

    def start_governance(self) -> GovernanceRuntime | None:
        """The policy set served in the same reply (``governance.source: webui``), compiled
        with the admin's shard rules; None when governance is off in the local config."""
        local = self._local.governance
        if not local.enabled:
            return None
        first = self._policy_set(self.current)
        runtime = GovernanceRuntime(
            StaticPolicySource(first), self._compile, local.webui.poll_interval_s
        )
        runtime.start(poll=False)  # this runtime's poller offers each new set
        self._governance = runtime
        return runtime

    def _policy_set(self, config: RemoteConfig) -> GovernanceSettings:
        if not config.governance:
            raise ConfigError(
                f"the web admin's config version {config.version} carries no governance policy "
                "set (an admin older than governance?)."
            )
        try:
            received = GovernanceSettings.from_published(config.governance)
        except ValidationError as exc:
            raise ConfigError(
                f"the web admin's policy set is refused: {describe_governance_error(exc)}"
            ) from None
        return self._local.governance.policy_set(received)

    def _compile(self, policy_set: GovernanceSettings) -> Governance | None:
        # Called in this runtime's poll thread after ``latest`` was replaced: the new rules.
        router = ShardRouter(list(self.current.shard_rules))
        return compile_governance(policy_set, router, self._instance)

    def poll_once(self) -> RemoteConfig | None:
        """One poll: the new config if one was accepted, else None (problems are logged).
        Also called by a standby as it takes over, so it leads with a change made since its
        last poll (a mirror disabled, a filter) rather than publish one poll interval under
        the config before it."""
        with self._polling:
            return self._poll()

    def _poll(self) -> RemoteConfig | None:
        try:
            document = self._feed.fetch()
        except InstanceDeletedError as exc:
            self.failure = exc
            log.error("%s", exc)
            self._on_deleted()
            return None
        except CdcMirrorError as exc:
            self._problem(f"{exc} The collector config in force stays.")
            return None
        if self._last_problem is not None:
            log.info("the web admin at %s answers again", self._feed.url)
            self._last_problem = None
        if document is None:
            return None
        try:
            fresh = parse_remote_config(document, self._local, self._instance)
            policy_set = self._policy_set(fresh) if self._governance is not None else None
        except ConfigError as exc:
            etag = str(document.get("etag"))
            if etag != self._refused_etag:  # once per refused version, not every poll
                self._refused_etag = etag
                self._metrics.errors.labels(self._instance, "config").inc()
                log.error("%s The config in force (version %d) stays.", exc, self.current.version)
            return None
        old = self.current
        self._feed.accepted(document)
        diff = diff_configs(old, fresh)
        self._warn_about_topic(fresh)
        self.latest = fresh
        log.info(
            "collector config version %d received (changed: %s)", fresh.version, diff.describe()
        )
        policies_changed = GOVERNANCE in diff.changed or SHARD_RULES in diff.changed
        if self._governance is not None and policy_set is not None and policies_changed:
            self._governance.offer(policy_set)
        if not self.collector_active:  # a standby: the newest config is the one it will use
            self._metrics.config_version.labels(self._instance).set(fresh.version)
            self._metrics.config_reloads.labels(self._instance).inc()
        return fresh

    def _problem(self, problem: str) -> None:
        if problem != self._last_problem:  # once per kind of failure until it answers again
            self._last_problem = problem
            log.warning("%s", problem)

    def _warn_about_topic(self, config: RemoteConfig) -> None:
        ours = topic_name(self._local.kafka, self._instance)
        if config.topic and config.topic != ours:
            log.warning(
                "the web admin names topic %r for %s; the collector publishes to %r "
                "(kafka.topic_prefix + instance): change the prefix and restart to move it",
                config.topic,
                self._instance,
                ours,
            )

    def close(self) -> None:
        self._poller.stop()
        self._feed.close()


def start_remote_config(
    settings: Settings,
    instance_name: str,
    metrics: CollectorMetrics,
    on_deleted: Callable[[], None],
) -> RemoteConfigRuntime:
    """The runtime of ``collector.config_source: webui`` with its first config; the caller
    starts its polling (``start_polling``) once everything it feeds is attached.

    Raises ConfigError or ServiceUnavailableError (one sentence) when no config can be had.
    """
    webui = settings.governance.webui
    feed = CollectorConfigFeed(webui, instance_name, webui.cache_dir or settings.stack.home)
    runtime = RemoteConfigRuntime(
        feed, settings, instance_name, metrics, on_deleted, webui.poll_interval_s
    )
    try:
        runtime.start(poll=False)
    except BaseException:
        feed.close()
        raise
    return runtime
