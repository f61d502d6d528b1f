"""The control plane's records that processes write to the web admin: the component registry
and the scheduler's run history. The wire form is defined here, once, for both ends (the web
admin serves it, the processes send it); the web admin's database keeps it.

**Component registry.** Every running process (collector, stream writer, merge, mirror,
replay, scheduler, maintenance) says who it is — kind, instance, host, pid, version, start
time, role — and renews that every ``config_store.heartbeat_s`` with one small request (one
upsert in the admin database). ``Heartbeat`` is the thread that does it; ``register`` starts
it from the settings. Where it goes follows ``config_store.source``, like the configuration:

- ``webui``: ``AdminControl`` (``PUT /api/components/{id}``, a token of role ``component``);
- ``file``: nowhere (``LocalControl``). The file store is the offline, embedded set-up: there
  is no shared database to list processes in, so registering is a no-op (said once at DEBUG)
  and each process's own /health endpoint is where to ask.

**Run history.** The scheduler records each merge, validation and maintenance run (start,
end, table, day — and the hour, for an hour of a table with hourly snapshots — rows, files,
check verdict, error, retry time) and picks up the re-runs an operator requested in the web
admin (rows in state ``requested``). ``RunStore`` is the
interface: ``AdminControl`` over the admin API, ``MemoryRunStore`` in memory (the fake, and
the file store's: without the admin database the history lives as long as the process).

A registry or history that cannot be reached never stops a process: a failed heartbeat is
logged once until it works again, and the next one tries again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import date
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from cdc_platform.config import Settings
from cdc_platform.periodic import Periodic
from simple_binlog.errors import CdcMirrorError, ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

ComponentKind = Literal[
    "collector",
    "stream_writer",
    "merge",
    "mirror",
    "replay",
    "scheduler",
    "maintenance",
    "validation",
]
COMPONENT_KINDS: tuple[str, ...] = ComponentKind.__args__  # type: ignore[attr-defined]

RunKind = Literal["merge", "validation", "maintenance"]
RunState = Literal["requested", "running", "succeeded", "mismatch", "failed", "waiting"]
# A run in one of these states is over; "mismatch": the work ended but its check found a
# difference (the merged day is red); "waiting": the merge found its day or hour not ready yet
# (exit code NOT_READY): nothing was done, the scheduler tries again at ``retry_at`` without
# counting it as a failed attempt (not red).
FINAL_RUN_STATES: tuple[str, ...] = ("succeeded", "mismatch", "failed", "waiting")

COMPONENTS_PATH = "/api/components"
RUNS_PATH = "/api/runs"


def package_version() -> str:
    try:
        return version("cdc-mirror")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


class ComponentBeat(BaseModel):
    """One process as the registry lists it; sent whole with every heartbeat."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    kind: ComponentKind
    instance: str = Field("", max_length=200)  # the MySQL instance, target or table; "" none
    host: str = Field(max_length=255)
    pid: int = Field(ge=0)
    version: str = Field(max_length=64)
    started_at: float  # Unix time
    role: str = Field("", max_length=32)  # collector and scheduler: active | standby
    detail: str = Field("", max_length=500)  # one line: what it works on now


class ValidationResult(BaseModel):
    """One target's outcome in a validation run (``cdc-mirror validate --result-file``, one
    per target): what the table's status page shows and the scheduler exports as metrics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str = Field(min_length=1, max_length=32)
    # equal | differs | unreachable (the error says why; never counted as a mismatch)
    verdict: Literal["equal", "differs", "unreachable"]
    rows: int = Field(0, ge=0)  # rows compared
    chunks: int = Field(0, ge=0)
    missing: int = Field(0, ge=0)
    extra: int = Field(0, ge=0)
    different: int = Field(0, ge=0)
    unsettled: int = Field(0, ge=0)  # still changing after every round: not a difference
    sample_keys: list[str] = Field(default_factory=list, max_length=20)
    repaired: int | None = Field(None, ge=0)  # keys re-published by --repair
    still_differing: int | None = Field(None, ge=0)  # after the repair
    # A repair asked for and not run (more differing keys than --repair-max-keys): why.
    repair_skipped: str | None = Field(None, max_length=500)
    seconds: float = Field(0.0, ge=0)
    error: str | None = Field(None, max_length=2000)

    @property
    def mismatched(self) -> int:
        return self.missing + self.extra + self.different

    @property
    def differing_now(self) -> int:
        """Keys that differ after the run: those found, or after a repair those it left."""
        return self.mismatched if self.still_differing is None else self.still_differing


# Keys shown per target: enough to start looking, few enough for a page and a run record.
SAMPLE_KEYS = 10


def validation_results(document: dict[str, Any]) -> list[ValidationResult]:
    """Each target's outcome from ``cdc-mirror validate --result-file``'s JSON
    (``TableValidation.to_json``): unreachable targets too, with their sentence."""
    repair = document.get("repair")
    still = (repair or {}).get("stillDiffering", {})
    skipped = document.get("repairSkipped")
    results = []
    for target in document.get("targets", []):
        differences = target.get("differences", {})
        keys = [key for found in differences.values() for key in found]
        name = target["target"]
        results.append(
            ValidationResult(
                target=name,
                verdict="equal" if target["equal"] else "differs",
                rows=target.get("rows", 0),
                chunks=target.get("chunks", 0),
                missing=len(differences.get("missing", [])),
                extra=len(differences.get("extra", [])),
                different=len(differences.get("different", [])),
                unsettled=len(target.get("unsettled", [])),
                sample_keys=keys[:SAMPLE_KEYS],
                repaired=None if repair is None else len(keys),
                still_differing=None if repair is None else len(still.get(name, [])),
                repair_skipped=None if target["equal"] else skipped,
                seconds=target.get("seconds", 0.0),
            )
        )
    for name, sentence in (document.get("unreachable") or {}).items():
        results.append(ValidationResult(target=name, verdict="unreachable", error=sentence))
    return results


class RunRecord(BaseModel):
    """One run of the scheduler (or a re-run an operator requested: state ``requested``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int | None = None
    kind: RunKind = "merge"
    table: str = Field(min_length=1, max_length=200)
    dt: date
    # A merge of one hour of ``dt`` (hours since its midnight in the stream writer's zone,
    # ``merge.hours``) of a table with hourly snapshots; None: the whole day.
    hour: int | None = Field(None, ge=0, le=24)
    state: RunState
    attempt: int = Field(1, ge=1)
    requested_by: str | None = Field(None, max_length=80)
    scheduler: str | None = Field(None, max_length=200)
    requested_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    rows: int | None = None
    files: int | None = None
    check_ok: bool | None = None
    error: str | None = Field(None, max_length=2000)
    retry_at: float | None = None  # a failed or waiting run: when the scheduler tries again
    # A validation run: each target's outcome (None: not a validation, or it wrote none).
    validation: list[ValidationResult] | None = Field(None, max_length=16)

    @property
    def final(self) -> bool:
        return self.state in FINAL_RUN_STATES


# --- the interfaces ---------------------------------------------------------------------


class ComponentRegistry(ABC):
    @abstractmethod
    def beat(self, component: ComponentBeat) -> None:
        """Register or renew ``component``. Raises ServiceUnavailableError or ConfigError."""

    @abstractmethod
    def leave(self, component_id: str) -> None:
        """The process ends: the registry lists it as stopped."""

    def close(self) -> None:  # noqa: B027 - most registries hold nothing
        """Release what the registry holds."""


class RunStore(ABC):
    @abstractmethod
    def save(self, run: RunRecord) -> RunRecord:
        """Create (``id`` None) or update a run; returns it with its id."""

    @abstractmethod
    def requested(self) -> list[RunRecord]:
        """The re-runs operators requested and no scheduler took yet, oldest first."""

    @abstractmethod
    def history(self, kind: RunKind, since: date) -> list[RunRecord]:
        """Runs of ``kind`` for days from ``since`` on, oldest first."""

    def close(self) -> None:  # noqa: B027 - most stores hold nothing
        """Release what the store holds."""


# --- in memory ----------------------------------------------------------------------------


class MemoryRunStore(RunStore):
    """Runs in a list: the fake (``request`` plays the operator), and the file store's
    history, which lasts as long as the process."""

    def __init__(self) -> None:
        self.runs: list[RunRecord] = []
        self._lock = threading.Lock()

    def request(
        self, kind: RunKind, table: str, dt: date, by: str = "operator", hour: int | None = None
    ) -> RunRecord:
        return self.save(
            RunRecord(
                kind=kind,
                table=table,
                dt=dt,
                hour=hour,
                state="requested",
                requested_by=by,
                requested_at=time.time(),
            )
        )

    def save(self, run: RunRecord) -> RunRecord:
        with self._lock:
            if run.id is None:
                run = run.model_copy(update={"id": len(self.runs) + 1})
                self.runs.append(run)
            else:
                self.runs[run.id - 1] = run
            return run

    def requested(self) -> list[RunRecord]:
        with self._lock:
            return [r for r in self.runs if r.state == "requested"]

    def history(self, kind: RunKind, since: date) -> list[RunRecord]:
        with self._lock:
            return [r for r in self.runs if r.kind == kind and r.dt >= since]


class MemoryRegistry(ComponentRegistry):
    """The fake registry: the last beat of each process, and who left."""

    def __init__(self) -> None:
        self.components: dict[str, ComponentBeat] = {}
        self.beats = 0
        self.left: set[str] = set()
        self.failure: CdcMirrorError | None = None  # raised by every beat while set

    def beat(self, component: ComponentBeat) -> None:
        if self.failure is not None:
            raise self.failure
        self.components[component.id] = component
        self.beats += 1

    def leave(self, component_id: str) -> None:
        self.left.add(component_id)


class LocalControl(ComponentRegistry):
    """``config_store.source: file``: no shared database to register in; a no-op."""

    def beat(self, component: ComponentBeat) -> None:
        pass

    def leave(self, component_id: str) -> None:
        pass


# --- the web admin --------------------------------------------------------------------------


class AdminControl(ComponentRegistry, RunStore):
    """The registry and the run history in the web admin's database, through its API."""

    def __init__(
        self,
        webui_url: str,
        token: SecretStr,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._base = webui_url.rstrip("/")
        self._client = httpx.Client(
            headers={"Authorization": f"Bearer {token.get_secret_value()}"},
            timeout=timeout_s,
            transport=transport,
        )

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = self._base + path
        try:
            response = self._client.request(method, url, json=body)
        except httpx.HTTPError as exc:
            raise ServiceUnavailableError(
                f"the web admin at {self._base} cannot be reached ({type(exc).__name__})."
            ) from None
        status = response.status_code
        if status in (httpx.codes.UNAUTHORIZED, httpx.codes.FORBIDDEN):
            raise ConfigError(
                f"the web admin at {self._base} refused config_store.token for {path} "
                f"({status}); use an unexpired token of role 'component'."
            )
        if status >= 400:
            raise ServiceUnavailableError(
                f"the web admin at {self._base} answered {status} to {method} {path}."
            )
        if status == httpx.codes.NO_CONTENT:
            return None
        try:
            return response.json()
        except ValueError:
            raise ServiceUnavailableError(
                f"the web admin at {self._base} answered {method} {path} with no JSON."
            ) from None

    def beat(self, component: ComponentBeat) -> None:
        self._call("PUT", f"{COMPONENTS_PATH}/{component.id}", component.model_dump(mode="json"))

    def leave(self, component_id: str) -> None:
        self._call("DELETE", f"{COMPONENTS_PATH}/{component_id}")

    def save(self, run: RunRecord) -> RunRecord:
        body = run.model_dump(mode="json", exclude={"id"})
        if run.id is None:
            answer = self._call("POST", RUNS_PATH, body)
        else:
            answer = self._call("PUT", f"{RUNS_PATH}/{run.id}", body)
        return _parse_run(answer)

    def requested(self) -> list[RunRecord]:
        return _parse_runs(self._call("GET", f"{RUNS_PATH}?state=requested"))

    def history(self, kind: RunKind, since: date) -> list[RunRecord]:
        return _parse_runs(self._call("GET", f"{RUNS_PATH}?kind={kind}&since={since}"))

    def close(self) -> None:
        self._client.close()


def _parse_run(document: Any) -> RunRecord:
    try:
        return RunRecord.model_validate(document)
    except ValidationError:
        raise ServiceUnavailableError(
            "the web admin sent a run record this version cannot read."
        ) from None


def _parse_runs(document: Any) -> list[RunRecord]:
    if not isinstance(document, list):
        raise ServiceUnavailableError("the web admin sent no list of runs.")
    return sorted((_parse_run(item) for item in document), key=lambda r: r.id or 0)


def open_control(settings: Settings) -> AdminControl | LocalControl:
    """The registry (and, for the web admin, the run history) ``config_store`` points at."""
    chosen = settings.config_store
    if chosen.source != "webui":
        return LocalControl()
    return AdminControl(chosen.webui_url, chosen.component_token(), chosen.timeout_s)


# --- the heartbeat ------------------------------------------------------------------------


class Heartbeat:
    """Registers one process and renews it every ``interval_s`` in a daemon thread until
    ``close()``, which deregisters it. ``role`` and ``detail`` are asked at every beat."""

    def __init__(
        self,
        registry: ComponentRegistry,
        kind: ComponentKind,
        instance: str = "",
        interval_s: float = 5.0,
        role: Callable[[], str] | None = None,
        detail: Callable[[], str] | None = None,
    ) -> None:
        self._registry = registry
        self._kind: ComponentKind = kind
        self._instance = instance
        self._role = role
        self._detail = detail
        self.id = f"{kind}-{uuid.uuid4().hex[:16]}"
        self._host = socket.gethostname()
        self._started = time.time()
        self._version = package_version()
        self._beating = Periodic("heartbeat", interval_s, self.beat_once)
        self._failing: str | None = None

    def current(self) -> ComponentBeat:
        return ComponentBeat(
            id=self.id,
            kind=self._kind,
            instance=self._instance,
            host=self._host,
            pid=os.getpid(),
            version=self._version,
            started_at=self._started,
            role=self._role() if self._role else "",
            detail=(self._detail() if self._detail else "")[:500],
        )

    def beat_once(self) -> bool:
        """One beat; False (logged once until a beat works) when the registry is away."""
        try:
            self._registry.beat(self.current())
        except CdcMirrorError as exc:
            if str(exc) != self._failing:
                self._failing = str(exc)
                log.warning("component registry: %s The next heartbeat tries again.", exc)
            return False
        if self._failing is not None:
            log.info("component registry answers again")
            self._failing = None
        return True

    def start(self) -> Heartbeat:
        self.beat_once()
        self._beating.start()
        return self

    def close(self) -> None:
        self._beating.stop()
        try:
            self._registry.leave(self.id)
        except CdcMirrorError as exc:
            log.debug("component registry: leaving failed (%s)", exc)
        self._registry.close()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def register(
    settings: Settings,
    kind: ComponentKind,
    instance: str = "",
    role: Callable[[], str] | None = None,
    detail: Callable[[], str] | None = None,
) -> Heartbeat:
    """Register this process with the registry of ``config_store`` and keep renewing it
    (``close()`` when the process ends). A bad token is one warning, never a failure."""
    try:
        registry: ComponentRegistry = open_control(settings)
    except ConfigError as exc:
        log.warning("component registry: %s This process is not registered.", exc)
        registry = LocalControl()
    if isinstance(registry, LocalControl):
        log.debug("config_store.source 'file': the process is not registered anywhere")
    return Heartbeat(
        registry, kind, instance, settings.config_store.heartbeat_s, role, detail
    ).start()
