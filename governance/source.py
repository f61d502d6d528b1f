"""Where a process gets its policy set, and swapping a new one in at a transaction boundary.

``governance.source: config``: the ``governance:`` section of the config file. The file is
watched (its modification time, every ``webui.poll_interval_s``): a changed, valid section is
applied without a restart; an invalid one is logged once and the policies in force stay.

``governance.source: webui``: ``GET <webui.url>/api/collector-config/<instance>`` with the
collector token, polled with ``If-None-Match`` (304 while nothing changed); the reply's
``governance`` field is the policy set. The salt stays local (``hash_salt``).

At start, if the web admin cannot be reached, the last policy set received (cached in
``webui.cache_dir``, mode 0600, without the salt) is applied and a warning says which
version; with no cache the process stops with one sentence. It never publishes with no
policy when one was configured. Later poll failures keep the set in force and are logged
(once per kind of failure until the admin answers again).

``GovernanceRuntime`` compiles each new set in the polling thread (so a broken plug-in path
never reaches the hot path: it is logged and the old set stays) and hands it to the
publishing loop, which swaps it in with ``at_boundary()`` between MySQL transactions or
replay chunks; detections not yet published carry over to the new set.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from pydantic import ValidationError

from cdc_platform.governance_model import GovernanceSettings, describe_governance_error
from cdc_platform.periodic import Periodic
from governance.policy import DetectionBatch, Governance, compile_governance
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError
from simple_binlog.routing import ShardRouter

if TYPE_CHECKING:
    from cdc_platform.config import Settings

log = logging.getLogger(__name__)

# cdc_platform.config's name for the config file variable (config imports this package).
CONFIG_ENV_VAR = "CDC_MIRROR_CONFIG"

Compiler = Callable[[GovernanceSettings], Governance | None]


class PolicySource(ABC):
    """Lifecycle: ``initial()`` once (blocking; raises when no policy set can be had), then
    ``poll()`` from a background thread: a newer set, or None when nothing changed."""

    @abstractmethod
    def initial(self) -> GovernanceSettings: ...

    @abstractmethod
    def poll(self) -> GovernanceSettings | None: ...

    def close(self) -> None:  # noqa: B027 - most sources hold nothing to release
        """Release connections."""


class StaticPolicySource(PolicySource):
    """A fixed policy set (tests, the benchmark, a config without a file)."""

    def __init__(self, settings: GovernanceSettings) -> None:
        self._settings = settings

    def initial(self) -> GovernanceSettings:
        return self._settings

    def poll(self) -> GovernanceSettings | None:
        return None


class ConfigFilePolicySource(PolicySource):
    """The ``governance:`` section of the config file, reloaded when the file changes."""

    def __init__(self, local: GovernanceSettings, path: Path) -> None:
        self._local = local
        self._path = path
        self._mtime = self._stat()
        self._warned_mtime: float | None = None

    def _stat(self) -> float | None:
        try:
            return self._path.stat().st_mtime
        except OSError:
            return None

    def initial(self) -> GovernanceSettings:
        return self._local

    def poll(self) -> GovernanceSettings | None:
        mtime = self._stat()
        if mtime is None or mtime == self._mtime:
            return None
        try:
            fresh = _governance_of(self._path)
        except ConfigError as exc:
            if self._warned_mtime != mtime:
                self._warned_mtime = mtime
                log.error(
                    "the changed config file is invalid (%s); the policies in force stay", exc
                )
            return None
        self._mtime = mtime
        if fresh == self._local:
            return None
        self._local = fresh
        return fresh


def _governance_of(path: Path) -> GovernanceSettings:
    """The ``governance`` section of the whole config in ``path`` (with the environment's
    overrides), validated as at start. Unlike ``load_settings`` it does not set
    $CDC_MIRROR_CONFIG: this runs in the polling thread, and the environment is the process's.
    """
    import yaml  # noqa: PLC0415
    from pydantic_settings import (  # noqa: PLC0415
        BaseSettings,
        PydanticBaseSettingsSource,
        YamlConfigSettingsSource,
    )

    from cdc_platform.config import Settings, describe_validation_error  # noqa: PLC0415

    class FileSettings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (
                init_settings,
                env_settings,
                YamlConfigSettingsSource(settings_cls, yaml_file=path),
            )

    try:
        return FileSettings().governance
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except (ValueError, OSError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"config file {path} cannot be read: {reason}") from None


class WebUIPolicySource(PolicySource):
    """The policy set served by the web admin, polled with ETags; the last one cached."""

    def __init__(
        self,
        local: GovernanceSettings,
        instance: str,
        cache_dir: Path,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        webui = local.webui
        if webui.token is None:
            raise ConfigError("governance.webui.token is required with source 'webui'.")
        self._local = local
        self._instance = instance
        self._url = f"{webui.url}/api/collector-config/{instance}"
        self._cache = cache_dir / f"governance-{instance}.json"
        self._etag: str | None = None
        self._last_problem: str | None = None
        self._client = httpx.Client(
            headers={"Authorization": f"Bearer {webui.token.get_secret_value()}"},
            timeout=webui.timeout_s,
            transport=transport,
        )

    def initial(self) -> GovernanceSettings:
        try:
            received = self._fetch()
        except ServiceUnavailableError as exc:
            cached = self._read_cache()
            if cached is None:
                raise ServiceUnavailableError(
                    f"{exc} No policy set was received before (no cache at {self._cache}), so "
                    "nothing is published until the web admin answers."
                ) from None
            log.warning(
                "%s Applying the cached policy set version %d until it answers.",
                exc,
                cached.version,
            )
            return cached
        if received is None:  # cannot happen without an etag; keeps the types honest
            raise ServiceUnavailableError(f"the web admin at {self._url} sent no policy set.")
        return received

    def poll(self) -> GovernanceSettings | None:
        try:
            received = self._fetch()
        except CdcMirrorError as exc:
            problem = str(exc)
            if problem != self._last_problem:
                self._last_problem = problem
                log.warning("%s The policy set in force stays.", problem)
            return None
        if self._last_problem is not None:
            log.info("the web admin at %s answers again", self._url)
            self._last_problem = None
        return received

    def close(self) -> None:
        self._client.close()

    def _fetch(self) -> GovernanceSettings | None:
        headers = {"If-None-Match": f'"{self._etag}"'} if self._etag else {}
        try:
            response = self._client.get(self._url, headers=headers)
        except httpx.HTTPError as exc:
            raise ServiceUnavailableError(
                f"the web admin at {self._url} cannot be reached ({type(exc).__name__})."
            ) from None
        if response.status_code == httpx.codes.NOT_MODIFIED:
            return None
        if response.status_code in (httpx.codes.UNAUTHORIZED, httpx.codes.FORBIDDEN):
            raise ConfigError(
                f"the web admin at {self._url} refused governance.webui.token "
                f"({response.status_code}); use a token of role 'collector'."
            )
        if response.status_code == httpx.codes.NOT_FOUND:
            raise ConfigError(f"the web admin does not know the instance {self._instance!r}.")
        if response.status_code != httpx.codes.OK:
            raise ServiceUnavailableError(
                f"the web admin at {self._url} answered {response.status_code}."
            )
        received = self._parse(response.content)
        self._etag = (response.headers.get("etag") or "").strip('"') or None
        self._write_cache(received)
        return self._local.policy_set(received)

    def _parse(self, body: bytes) -> GovernanceSettings:
        try:
            document: Any = orjson.loads(body)
            published = document.get("governance") if isinstance(document, dict) else None
        except orjson.JSONDecodeError:
            published = None
        if not published:
            raise ServiceUnavailableError(
                f"the web admin at {self._url} serves no governance policy set (an admin "
                "older than governance?)."
            )
        try:
            return GovernanceSettings.from_published(published)
        except ValidationError as exc:
            raise ConfigError(
                f"the web admin's policy set is refused: {describe_governance_error(exc)}"
            ) from None

    def _write_cache(self, received: GovernanceSettings) -> None:
        try:
            self._cache.parent.mkdir(parents=True, exist_ok=True)
            partial = self._cache.with_suffix(".tmp")
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(orjson.dumps(received.published_policy_set()))
            partial.replace(self._cache)
        except OSError as exc:
            log.warning("the policy set could not be cached at %s (%s)", self._cache, exc)

    def _read_cache(self) -> GovernanceSettings | None:
        try:
            document = orjson.loads(self._cache.read_bytes())
            return self._local.policy_set(GovernanceSettings.from_published(document))
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError, ValidationError) as exc:
            log.warning("the cached policy set %s is unusable (%s)", self._cache, exc)
            return None


class GovernanceRuntime:
    """The compiled policy set in force in one process, swapped only at boundaries."""

    def __init__(
        self, source: PolicySource, compile_set: Compiler, poll_interval_s: float = 5.0
    ) -> None:
        self._source = source
        self._compile = compile_set
        self._lock = threading.Lock()
        self._pending: tuple[Governance | None, int] | None = None
        self._polling = Periodic("governance-poll", poll_interval_s, self._poll_once)
        self.current: Governance | None = None
        self.version = 0
        self.batch: DetectionBatch | None = None

    def start(self, poll: bool = True) -> Governance | None:
        """Load and compile the first set (raises when there is none); then poll."""
        first = self._source.initial()
        self.current = self._shared(self._compile(first))
        self.version = first.version
        log.info(
            "governance policy set version %d applied (%s)",
            first.version,
            "on" if self.current is not None else "off",
        )
        if poll:
            self._polling.start()
        return self.current

    def at_boundary(self) -> Governance | None:
        """The set to apply from here on: a newer one if it arrived since the last call.

        Call it between transactions only. Every set shares ``batch``, so detections not yet
        published survive a swap (even to 'off').
        """
        if self._pending is None:
            return self.current
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return self.current
        self.current, self.version = pending
        log.info(
            "governance policy set version %d applied (%s)",
            self.version,
            "on" if self.current is not None else "off",
        )
        return self.current

    def offer(self, settings: GovernanceSettings) -> None:
        """Compile a new set and queue it for the next boundary (logged if it fails)."""
        try:
            compiled = self._shared(self._compile(settings))
        except CdcMirrorError as exc:
            log.error(
                "governance policy set version %d cannot be applied (%s); version %d stays",
                settings.version,
                exc,
                self.version,
            )
            return
        with self._lock:
            self._pending = (compiled, settings.version)

    def _shared(self, compiled: Governance | None) -> Governance | None:
        if compiled is not None:
            if self.batch is None:
                self.batch = compiled.batch
            compiled.batch = self.batch
        return compiled

    def _poll_once(self) -> None:
        fresh = self._source.poll()
        if fresh is not None:
            self.offer(fresh)

    def close(self) -> None:
        self._polling.stop()
        self._source.close()


def policy_source(
    local: GovernanceSettings, instance: str, config_file: Path | None, stack_home: Path
) -> PolicySource:
    """The source the settings name: the web admin, the config file, or the settings alone."""
    if local.source == "webui":
        cache_dir = local.webui.cache_dir or stack_home
        return WebUIPolicySource(local, instance, cache_dir)
    if config_file is not None:
        return ConfigFilePolicySource(local, config_file)
    return StaticPolicySource(local)


def start_governance(
    settings: Settings, instance: str, config_file: Path | str | None = None, poll: bool = True
) -> GovernanceRuntime | None:
    """The policy set in force for one instance's process, polling for changes; None when
    governance is off in the config. ``config_file``: default ``$CDC_MIRROR_CONFIG``.

    Raises ConfigError or ServiceUnavailableError (one sentence) when the configured policies
    cannot be had: the caller must not publish then.
    """
    local = settings.governance
    if not local.enabled:
        return None
    path = config_file if config_file is not None else os.environ.get(CONFIG_ENV_VAR)
    source = policy_source(local, instance, Path(path) if path else None, settings.stack.home)
    router = ShardRouter(settings.shard_rules)

    def compile_set(policy_set: GovernanceSettings) -> Governance | None:
        return compile_governance(policy_set, router, instance)

    runtime = GovernanceRuntime(source, compile_set, local.webui.poll_interval_s)
    try:
        runtime.start(poll=poll)
    except BaseException:
        source.close()
        raise
    return runtime
