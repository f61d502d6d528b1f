"""requirements.lock (what ./run installs, hash-checked) satisfies pyproject.toml: every
dependency of the project and of its dev and spark extras is pinned there, at a version the
project accepts, with hashes. A pyproject.toml edit without './run lock' fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
LOCKED_EXTRAS = ("dev", "spark")  # ./run lock's --extra arguments
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")


def locked_pins() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of every pin in requirements.lock."""
    pins: dict[str, tuple[str, int]] = {}
    name: str | None = None
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            name = canonicalize_name(match["name"])
            pins[name] = (match["version"], 0)
        elif name is not None and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


def test_every_requirement_of_the_project_is_pinned_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in LOCKED_EXTRAS:
        requirements += project["optional-dependencies"][extra]
    pins = locked_pins()
    assert pins, "requirements.lock has no pins"

    problems = []
    for text in requirements:
        requirement = Requirement(text)
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"{requirement.name} is not in requirements.lock")
        elif not requirement.specifier.contains(pinned[0], prereleases=True):
            problems.append(f"{requirement.name}=={pinned[0]} is outside {requirement.specifier}")
    assert not problems, "; ".join(problems) + " (run './run lock')"
    assert all(hashes > 0 for _, hashes in pins.values()), "a pin without a hash"


def test_requires_python_is_the_range_run_installs_and_tests() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11,<3.14"
    run = (ROOT / "run").read_text()
    assert 'SUPPORTED_PYTHONS="3.11 3.12 3.13"' in run
