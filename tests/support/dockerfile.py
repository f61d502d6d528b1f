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


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (each FROM starts one)."""
    stages: list[list[tuple[str, str]]] = []
    for instruction in dockerfile_instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def copied_sources() -> list[str]:
    """The build context's paths every COPY copies (its last word is the destination; a
    ``COPY --from=<stage>`` copies from a stage, not the context)."""
    sources = []
    for keyword, arguments in dockerfile_instructions():
        if keyword == "COPY" and "--from=" not in arguments:
            words = [w for w in arguments.split() if not w.startswith("--")]
            sources.extend(words[:-1])
    return sources


def installed_packages() -> set[str]:
    """The top-level packages of [tool.setuptools.packages.find] include."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.rstrip("*").rstrip(".") for pattern in include}
