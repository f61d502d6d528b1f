"""requirements.lock (what ./run installs, hash-checked) satisfies pyproject.toml: every
dependency of the project and of its dev and spark extras is pinned there, at a version the
project accepts, with hashes. A pyproject.toml edit without './run lock' fails here.

requirements-runtime.lock (what the Docker image installs) is the same resolution without the
dev tools: each of its pins is requirements.lock's (version, markers and hashes), and it holds
every package the project and its spark extra need, transitively. No network: the transitive
needs are read from the metadata of the distributions installed here, which ./run installs from
requirements.lock."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
LOCKED_EXTRAS = ("dev", "spark")  # ./run lock's --extra arguments
RUNTIME_EXTRAS = ("spark",)  # ... for requirements-runtime.lock
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;(?P<markers>[^\\]*))?"
)


@dataclass
class Pin:
    version: str
    markers: str
    hashes: set[str]


def lock_pins(lock: str) -> dict[str, Pin]:
    """name -> pin of every requirement in the lock file ``lock`` (uv's output format)."""
    pins: dict[str, Pin] = {}
    name: str | None = None
    for line in (ROOT / lock).read_text().splitlines():
        match = PIN.match(line)
        if match:
            name = canonicalize_name(match["name"])
            pins[name] = Pin(match["version"], (match["markers"] or "").strip(), set())
        elif name is not None and line.strip().startswith("--hash=sha256:"):
            pins[name].hashes.add(line.strip().removesuffix("\\").strip())
    return pins


def describe(pin: Pin) -> str:
    markers = f" ; {pin.markers}" if pin.markers else ""
    return f"=={pin.version}{markers} with {len(pin.hashes)} hashes"


def locked_pins() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of every pin in requirements.lock."""
    return {
        name: (pin.version, len(pin.hashes)) for name, pin in lock_pins("requirements.lock").items()
    }


def project_requirements(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in extras:
        texts += project["optional-dependencies"][extra]
    return [Requirement(text) for text in texts]


def test_every_requirement_of_the_project_is_pinned_with_hashes() -> None:
    pins = locked_pins()
    assert pins, "requirements.lock has no pins"

    problems = []
    for requirement in project_requirements(LOCKED_EXTRAS):
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


def runtime_closure() -> set[str]:
    """The names of the project's dependencies with its spark extra, and of theirs, as the
    installed distributions' metadata states them for this interpreter and platform."""
    needed: set[str] = set()
    pending = [
        (requirement, frozenset({""})) for requirement in project_requirements(RUNTIME_EXTRAS)
    ]
    while pending:
        requirement, parent_extras = pending.pop()
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": e}) for e in parent_extras):
            continue
        name = canonicalize_name(requirement.name)
        if name in needed and not requirement.extras:
            continue
        needed.add(name)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise AssertionError(
                f"{name} is not installed here; run ./run to install the lock"
            ) from None
        extras = frozenset({"", *requirement.extras})
        pending += [(Requirement(text), extras) for text in distribution.requires or []]
    return needed


def test_the_runtime_lock_pins_exactly_what_requirements_lock_pins() -> None:
    everything, runtime = lock_pins("requirements.lock"), lock_pins("requirements-runtime.lock")
    assert runtime, "requirements-runtime.lock has no pins"
    problems = []
    for name, pin in sorted(runtime.items()):
        tested = everything.get(name)
        if tested is None:
            problems.append(f"{name} is not in requirements.lock")
        elif pin != tested:
            problems.append(
                f"{name}: {describe(pin)} in the runtime lock, {describe(tested)} in requirements.lock"
            )
    assert not problems, "; ".join(problems) + " (run './run lock')"
    assert all(pin.hashes for pin in runtime.values()), "a pin without a hash"


def test_the_runtime_lock_holds_every_runtime_dependency_and_no_dev_tool() -> None:
    runtime = lock_pins("requirements-runtime.lock")
    needed = runtime_closure()
    assert {"pyspark", "py4j", "pyarrow", "fastapi", "starlette"} <= needed  # the walk went deep
    missing = sorted(needed - set(runtime))
    assert not missing, f"requirements-runtime.lock lacks {missing} (run './run lock')"
    for requirement in project_requirements(RUNTIME_EXTRAS):
        version = runtime[canonicalize_name(requirement.name)].version
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)
    # The dev extra's tools are not in the image unless the runtime needs them too.
    dev_only = {canonicalize_name(r.name) for r in project_requirements(("dev",))} - needed
    assert "pytest" in dev_only
    dev_tools = sorted(dev_only & set(runtime))
    assert not dev_tools, f"dev tools in requirements-runtime.lock: {dev_tools}"
