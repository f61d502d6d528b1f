"""The machine a benchmark ran on, in one line: every benchmark prints it with its figures."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def describe() -> str:
    """e.g. '2 cores (AMD EPYC …), 23.5 GiB, CPython 3.11.7, Linux-6.1-x86_64'."""
    return (
        f"{os.cpu_count()} cores ({cpu_model()}), {memory_gib():.1f} GiB, "
        f"{platform.python_implementation()} {platform.python_version()}, {platform.platform()}"
    )
