"""The pipeline's long-running parts as supervised local processes.

The live demo and the end-to-end tests run each component the way an operator does: a
``cdc-mirror`` subcommand in its own process, configured through ``CDC_MIRROR_…``
variables, with its output in a log file. ``Component`` starts one and lets the caller
inject the faults production sees (``kill -9``, a pause past a session timeout, a restart);
``Supervisor`` owns a set of them and stops every one it started, even when the caller
fails half-way, so no stray collector keeps publishing after a run.

The outside world is injected: a ``Launcher`` starts a ``ChildProcess`` (``PopenLauncher``,
or ``FakeLauncher`` whose ``FakeProcess`` obeys signals the way a process does), a ``Clock``
paces the waits (``SystemClock`` or ``FakeClock``) and a probe reads health endpoints. The
fakes are product code, so the supervision rules are tested without a process or a sleep.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from simple_binlog.errors import CdcMirrorError, ExitCode

log = logging.getLogger(__name__)

ENV_PREFIX = "CDC_MIRROR_"


class ComponentError(CdcMirrorError):
    """A supervised component did not reach the state it was waited for."""


def config_env(overrides: Mapping[str, Any], prefix: str = ENV_PREFIX) -> dict[str, str]:
    """Flatten nested settings into the variables ``Settings`` reads.

    ``{"kafka": {"partitions": 3}, "instances": [{...}]}`` becomes
    ``CDC_MIRROR_KAFKA__PARTITIONS=3`` and ``CDC_MIRROR_INSTANCES=[{...}]``: nested mappings
    descend with ``__``; lists and scalars are leaves (lists as JSON, because a list cannot be
    set element by element from the environment).
    """
    env: dict[str, str] = {}
    for key, value in overrides.items():
        name = f"{prefix}{key.upper()}"
        if isinstance(value, Mapping):
            env.update(config_env(value, f"{name}__"))
        elif isinstance(value, list | tuple):
            env[name] = json.dumps(value, default=str)
        elif isinstance(value, bool):
            env[name] = "true" if value else "false"
        elif value is None:
            continue  # absent means the default; pydantic would read "None" as a string
        else:
            env[name] = str(value)
    return env


def http_json(url: str, timeout_s: float = 2.0) -> Any | None:
    """The JSON body of ``url``, or None while it does not answer (starting, paused, dead)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (loopback)
            return json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``url`` answers with a non-error status (e.g. a login page)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (loopback)
            return bool(response.status < 400)
    except (OSError, urllib.error.URLError):
        return False


class Clock(Protocol):
    """Time as the waits see it."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class FakeClock:
    """A clock whose ``sleep`` only moves it forward: waits run at once, deterministically."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


SYSTEM_CLOCK: Clock = SystemClock()


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    poll_s: float = 0.2,
    clock: Clock = SYSTEM_CLOCK,
) -> float:
    """Poll ``predicate`` until it holds; returns the seconds it took.

    Raises ``ComponentError`` naming ``what`` when the deadline passes.
    """
    started = clock.monotonic()
    deadline = started + timeout_s
    while True:
        if predicate():
            return clock.monotonic() - started
        if clock.monotonic() >= deadline:
            raise ComponentError(f"timed out after {timeout_s:.0f} s waiting for {what}.")
        clock.sleep(poll_s)


# -- starting processes --------------------------------------------------------------------


class ChildProcess(Protocol):
    """A started child: the leader of its own process group."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; raises ``subprocess.TimeoutExpired`` if not exited within time."""
        ...

    def signal(self, signum: int) -> None:
        """Signal the child alone (no error if it is gone)."""
        ...

    def signal_group(self, signum: int) -> None:
        """Signal the child's process group, its own children too (no error if gone)."""
        ...


class Launcher(Protocol):
    def launch(
        self, command: list[str], env: Mapping[str, str], cwd: Path | None, log_path: Path | None
    ) -> ChildProcess:
        """Start ``command`` with ``env`` added to this process's environment, its output
        appended to ``log_path`` (its folder created) or discarded."""
        ...


class _PopenChild:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def poll(self) -> int | None:
        return self._process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._process.wait(timeout=timeout)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._process.pid, signum)

    def signal_group(self, signum: int) -> None:
        # Already gone: whoever waits on the process collects it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signum)


class PopenLauncher:
    """Real child processes, each the leader of a new session (so a group kill reaches a
    JVM a PySpark component starts as well)."""

    def launch(
        self, command: list[str], env: Mapping[str, str], cwd: Path | None, log_path: Path | None
    ) -> ChildProcess:
        output: IO[bytes] | None = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            output = log_path.open("ab")
        try:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=output if output is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if output is not None:
                output.close()  # the child holds its own descriptor
        return _PopenChild(process)


@dataclass
class FakeProcess:
    """A child that obeys signals as a process does, and ends when told (``exit``).

    SIGKILL ends it at once (code ``-9``); SIGSTOP pauses it and a paused process handles
    SIGTERM only after SIGCONT; SIGTERM ends it with ``sigterm_code`` unless
    ``ignores_sigterm``; ``exits_with`` makes it a job that has already finished. ``wait``
    never blocks: an unfinished process times out at once.
    """

    pid: int
    command: list[str]
    env: dict[str, str]
    cwd: Path | None
    log_path: Path | None
    ignores_sigterm: bool = False
    sigterm_code: int = -signal.SIGTERM
    returncode: int | None = None
    paused: bool = False
    signals: list[tuple[str, int]] = field(default_factory=list)  # ("pid" | "group", signum)
    journal: list[tuple[int, str, int]] | None = None  # shared by a launcher's children
    exits_with: int | None = None  # a job that has finished by the first look at it
    _pending_term: bool = False

    def __post_init__(self) -> None:
        if self.exits_with is not None:
            self.returncode = self.exits_with

    def exit(self, code: int) -> None:
        """The child ends on its own (a crash, a finished job)."""
        if self.returncode is None:
            self.returncode = code

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.command, timeout or 0.0)
        return self.returncode

    def signal(self, signum: int) -> None:
        self._note("pid", signum)
        self._receive(signum)

    def signal_group(self, signum: int) -> None:
        self._note("group", signum)
        self._receive(signum)

    def _note(self, target: str, signum: int) -> None:
        self.signals.append((target, signum))
        if self.journal is not None:
            self.journal.append((self.pid, target, signum))

    def _receive(self, signum: int) -> None:
        if self.returncode is not None:
            return
        if signum == signal.SIGKILL:
            self.returncode = -signal.SIGKILL
        elif signum == signal.SIGSTOP:
            self.paused = True
        elif signum == signal.SIGCONT:
            self.paused = False
            if self._pending_term:
                self._receive(signal.SIGTERM)
        elif signum == signal.SIGTERM:
            if self.paused:
                self._pending_term = True
            elif not self.ignores_sigterm:
                self.returncode = self.sigterm_code


@dataclass
class FakeLauncher:
    """Starts ``FakeProcess``es and keeps them, in order, for a test to drive and inspect.
    ``configure`` sets how the next children of a command name behave."""

    launched: list[FakeProcess] = field(default_factory=list)
    behaviour: dict[str, dict[str, Any]] = field(default_factory=dict)
    journal: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, target, signum)
    next_pid: int = 1000

    def launch(
        self, command: list[str], env: Mapping[str, str], cwd: Path | None, log_path: Path | None
    ) -> FakeProcess:
        self.next_pid += 1
        options = next((how for word, how in self.behaviour.items() if word in command), {})
        child = FakeProcess(
            self.next_pid, list(command), dict(env), cwd, log_path, journal=self.journal, **options
        )
        self.launched.append(child)
        return child

    def configure(self, word: str, **how: Any) -> None:
        self.behaviour[word] = how

    def started(self, word: str) -> list[FakeProcess]:
        """The children whose command contains ``word``, oldest first."""
        return [child for child in self.launched if word in child.command]


DEFAULT_LAUNCHER: Launcher = PopenLauncher()


@dataclass
class Component:
    """One ``cdc-mirror`` subcommand run as a child process.

    ``args`` follow ``cdc-mirror`` (e.g. ``["collector", "run", "--instance", "demo"]``);
    ``env`` is added to this process's environment. Output goes to ``log_path`` (appended to
    across restarts, so a run's whole story is in one file). The child is the leader of a new
    process group, so a kill reaches the JVM a PySpark component starts as well.
    """

    name: str
    args: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    health_url: str | None = None
    cwd: Path | None = None
    # What runs ``args``: the installed ``cdc-mirror`` of this interpreter by default.
    program: list[str] = field(default_factory=lambda: [sys.executable, "-m", "cdc_mirror"])
    launcher: Launcher = field(default=DEFAULT_LAUNCHER, repr=False)
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False)
    probe: Callable[[str], Any | None] = field(default=http_json, repr=False)
    process: ChildProcess | None = field(default=None, init=False, repr=False)
    starts: int = field(default=0, init=False)

    @property
    def command(self) -> list[str]:
        return [*self.program, *self.args]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def start(self) -> Component:
        if self.running:
            raise ComponentError(f"{self.name} is already running (pid {self.pid}).")
        self.process = self.launcher.launch(self.command, self.env, self.cwd, self.log_path)
        self.starts += 1
        log.debug("started %s (pid %s): %s", self.name, self.process.pid, " ".join(self.args))
        return self

    def _signal_group(self, signum: int) -> None:
        if self.process is not None:
            self.process.signal_group(signum)

    def kill(self) -> None:
        """``kill -9`` the component (and its children) and reap it."""
        if self.process is None:
            return
        self._signal_group(signal.SIGKILL)
        self.process.wait()
        log.debug("killed %s", self.name)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but does nothing, like a long GC pause."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """Ask the component to stop (SIGTERM), then kill it if it has not within the time."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self._signal_group(signal.SIGCONT)  # a paused process cannot handle SIGTERM
            # SIGTERM to the component alone, as `docker stop` does: the stream writer's
            # Python side stops its query and then Spark's JVM. Signalled too, the JVM would
            # shut down under a batch and the stop would end in py4j errors.
            self.process.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s: killing it", self.name, timeout_s)
                self.kill()
        # The group may still hold children (a JVM) that outlived their parent.
        self._signal_group(signal.SIGKILL)
        return self.process.returncode

    def restart(self) -> Component:
        self.kill()
        return self.start()

    def health(self) -> Any | None:
        return self.probe(self.health_url) if self.health_url else None

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Like the module's ``wait_until``, but fails early if the component has exited."""

        def check() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise ComponentError(
                    f"{self.name} exited with code {self.process.returncode} while waiting "
                    f"for {what}{self._log_hint()}."
                )
            return predicate()

        return wait_until(check, timeout_s, f"{what} ({self.name})", clock=self.clock)

    def wait_healthy(self, timeout_s: float = 60.0) -> float:
        if self.health_url is None:
            raise ComponentError(f"{self.name} has no health endpoint to wait for.")
        return self.wait_until(lambda: self.health() is not None, timeout_s, "its health endpoint")

    def _log_hint(self) -> str:
        return f"; see {self.log_path}" if self.log_path is not None else ""


@dataclass
class Supervisor:
    """The components of one run; leaving the ``running()`` block stops them all."""

    components: dict[str, Component] = field(default_factory=dict)

    def add(self, component: Component) -> Component:
        if component.name in self.components:
            raise ComponentError(f"two components are named {component.name!r}.")
        self.components[component.name] = component
        return component

    def __getitem__(self, name: str) -> Component:
        return self.components[name]

    def stop_all(self, timeout_s: float = 30.0) -> dict[str, int | None]:
        """Stop in reverse order of adding: consumers before what feeds them."""
        codes: dict[str, int | None] = {}
        for component in reversed(list(self.components.values())):
            codes[component.name] = component.terminate(timeout_s)
        return codes

    @contextmanager
    def running(self) -> Iterator[Supervisor]:
        """Stop every component on leaving, also when this process gets SIGTERM (whose
        default action would end it at once, leaving the components running)."""
        previous: Any = None
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            yield self
        finally:
            self.stop_all()
            if in_main:
                signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(ExitCode.TERMINATED)  # 128 + SIGTERM, listed in the CLI's help


def port_free(port: int) -> bool:
    """Whether nothing listens on ``port`` of the loopback address."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port nothing listens on right now (for metrics and admin endpoints)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
