"""Starting, watching and stopping the stack's own processes.

A process the stack starts is recorded in ``<home>/run/<service>.pid`` with its start time;
``down`` stops only processes whose pid and start time both match, so it never touches a
service someone else started on the same machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simple_binlog.errors import StackError


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    or None if it is gone or a zombie. With the pid it names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); the start time is field 22.
    if fields[0] == "Z":
        return None
    return fields[19]


@dataclass(frozen=True)
class PidFile:
    """``<pid> <start time>`` of a process the stack started. Pid reuse cannot fool it."""

    path: Path

    def read(self) -> int | None:
        try:
            pid_text, started = self.path.read_text().split()
            pid = int(pid_text)
        except (FileNotFoundError, ValueError):
            return None
        return pid if _start_time(pid) == started else None

    def write(self, pid: int) -> None:
        started = _start_time(pid)
        if started is None:
            raise StackError(f"process {pid} exited right after it was started.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{pid} {started}\n")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def spawn(
    argv: Sequence[str],
    log_file: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
) -> int:
    """Start a detached process (own session, output appended to ``log_file``); its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    command = list(argv)
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return process.pid


def run(argv: Sequence[str], what: str, user: str | None = None, **kwargs: object) -> str:
    """Run a setup command to completion; StackError with its last output line on failure."""
    command = list(argv)
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    try:
        result = subprocess.run(  # type: ignore[call-overload]
            command, capture_output=True, text=True, check=False, **kwargs
        )
    except FileNotFoundError as exc:
        raise StackError(f"{what} failed: {exc.filename} is not installed.") from None
    if result.returncode != 0:
        lines = (result.stderr or result.stdout or "").strip().splitlines()
        last = lines[-1] if lines else f"exit code {result.returncode}"
        raise StackError(f"{what} failed: {last}")
    return str(result.stdout)


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    still_alive: Callable[[], bool],
    interval_s: float = 0.25,
) -> bool:
    """Poll ``check`` until it holds (True), the process died or the time is up (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        if not still_alive():
            return check()
        time.sleep(interval_s)
    return False


def terminate(pid: int, timeout_s: float = 60.0) -> None:
    """SIGTERM the process group, wait for it to exit, SIGKILL it if it will not (and wait
    for that too), so that its ports are free when this returns."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if _exited(pid, timeout_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    _exited(pid, _KILLED_EXIT_S)


# How long a SIGKILLed process may take to be gone (its memory freed, its sockets closed).
_KILLED_EXIT_S = 10.0


def _exited(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether any thread of process ``pid`` still runs. Its first thread shows as a zombie
    as soon as it exits, while the others may still hold the process's sockets (a JVM's
    first thread ends before the rest), so the zombie counts as gone only without them."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        if any(thread != str(pid) for thread in threads):
            return True
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def last_log_line(log_file: Path, pattern: str = "") -> str:
    """The last non-empty line of a log (containing ``pattern`` if given), for error messages."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "no log written"
    for line in reversed(lines):
        if line.strip() and pattern.lower() in line.lower():
            return line.strip()[:300]
    return "log is empty"
