"""``stack.process.terminate`` against a real child process (no service needed)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from stack.process import port_open, terminate

# A process whose first thread exits (it shows as a zombie in /proc/<pid>/stat) while another
# thread keeps a listening socket, ignoring SIGTERM: how a JVM looks for a moment while it
# exits (its first thread gone before the others let go of their sockets).
_LEADER_GONE_FIRST = """
import ctypes, signal, socket, sys, threading, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
server = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=time.sleep, args=(600,)).start()
print(server.getsockname()[1], flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_terminate_returns_only_once_every_thread_has_let_go_of_its_ports() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _LEADER_GONE_FIRST],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        deadline = time.monotonic() + 30
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(child.pid) == "Z" and port_open(port)

        terminate(child.pid, timeout_s=1.0)

        assert not port_open(port)
    finally:
        child.kill()
        child.wait()
