"""The Dockerfile and pyproject.toml as the Docker tests read them (tests/unit/docker,
tests/integration/docker)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    instructions = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def copied_sources() -> list[str]:
    """The sources of every COPY (its last word is the destination)."""
    sources = []
    for keyword, arguments in dockerfile_instructions():
        if keyword == "COPY":
            words = [w for w in arguments.split() if not w.startswith("--")]
            sources.extend(words[:-1])
    return sources


def installed_packages() -> set[str]:
    """The top-level packages of [tool.setuptools.packages.find] include."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.rstrip("*").rstrip(".") for pattern in include}
