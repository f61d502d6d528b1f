"""The stack's HDFS and SeaweedFS: `up` twice is a no-op, `status` reports them healthy, `down`
leaves no process, port or socket behind, and `up` brings them back with their data.

Runs after the Iceberg tests (file order) and leaves both services up."""

from __future__ import annotations

from pathlib import Path

from cdc_platform.config import LOCAL_PORTS, Settings
from stack import seaweedfs
from stack.manager import LocalStack
from stack.process import port_open

NAMES = ["hdfs-namenode", "hdfs-datanode", "seaweedfs"]
PORTS = [LOCAL_PORTS[name] for name in LOCAL_PORTS if name.startswith(("hdfs_", "seaweedfs_"))]


def test_up_status_down_up(hdfs_service: Settings, s3_service: Settings) -> None:
    stack = LocalStack(hdfs_service)
    assert stack.up(NAMES) == dict.fromkeys(NAMES, "already running")
    status = {s.name: s for s in stack.status()}
    assert all(status[name].healthy and status[name].started_by_stack for name in NAMES)
    # The default lake is local: neither is needed by the configuration.
    assert not any(status[name].configured for name in NAMES)

    assert stack.down(NAMES) == dict.fromkeys(NAMES, "stopped")
    assert [port for port in PORTS if port_open(port)] == []
    run_dir = stack.paths.run
    assert [p for p in seaweedfs.socket_files(run_dir) if p.exists()] == []
    assert [p for p in (run_dir / f"{name}.pid" for name in NAMES) if Path(p).exists()] == []
    assert _processes_of(str(stack.paths.home), ("weed server", ".NameNode", ".DataNode")) == []

    assert stack.up(NAMES) == dict.fromkeys(NAMES, "started")
    assert all(s.healthy for s in stack.status() if s.name in NAMES)


def _processes_of(home: str, programs: tuple[str, ...]) -> list[str]:
    """Command lines of running processes that name the stack's home and one of
    ``programs`` (a child the pid file did not name would show here)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if home in args and any(program in args for program in programs):
            found.append(args)
    return found
