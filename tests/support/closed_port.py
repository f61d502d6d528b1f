"""A local port nothing listens on, for a service address where nothing answers."""

from __future__ import annotations

import socket

# The cause ``cdc_platform.iceberg`` names for a lake location where nothing answers.
NOTHING_ANSWERS = "nothing answers there (is the service running and the address right?)"


def closed_port() -> int:
    """A local port nothing listens on (bound once by the OS, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
