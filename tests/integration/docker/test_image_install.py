"""What the Dockerfile copies installs and runs: exactly its COPY sources (minus .dockerignore)
in a temporary build context, ``pip install --no-deps`` of it into a throw-away virtualenv,
then ``cdc-mirror --help`` and an import of every package from that virtualenv. A package the
Dockerfile forgets to copy fails here as it would in the image, without a Docker engine.

The dependencies are those of requirements-runtime.lock, the image's, taken from this
checkout's .venv without downloading them: a folder of links to exactly the runtime lock's
installed distributions (each at the locked version) goes on the new virtualenv's path, so a
dependency the runtime lock misses fails the imports, ``--help`` or ``pip check`` here, and
neither the dev tools nor the editable install of this checkout are seen. The build is
isolated: pyproject.toml needs a newer setuptools than the one in .venv, which pip fetches as
``./run`` does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker

from tests.support.dockerfile import ROOT, copied_sources, installed_packages
from tests.unit.packaging.test_lock import lock_pins


def dockerignored() -> list[str]:
    """The names .dockerignore keeps out (it holds "**/<name>" patterns only)."""
    patterns = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            assert line.startswith("**/"), f"only **/<name> patterns are applied here: {line}"
            patterns.append(line.removeprefix("**/"))
    return patterns


def build_context(target: Path) -> None:
    ignore = shutil.ignore_patterns(*dockerignored())
    for source in copied_sources():
        for path in sorted(ROOT.glob(source.rstrip("/"))):
            destination = target / path.relative_to(ROOT)
            if path.is_dir():
                shutil.copytree(path, destination, ignore=ignore, dirs_exist_ok=True)
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination)


def link_runtime_dependencies(target: Path) -> None:
    """Links in ``target`` to the top-level files and folders (packages, modules, .dist-info)
    of every distribution requirements-runtime.lock installs on this platform, as .venv has
    them: the image's dependencies, without a download."""
    target.mkdir()
    for name, pin in lock_pins("requirements-runtime.lock").items():
        if pin.markers and not Marker(pin.markers).evaluate():
            continue
        distribution = metadata.distribution(name)
        assert distribution.version == pin.version, (name, distribution.version, pin.version)
        site = Path(str(distribution.locate_file("")))
        for file in distribution.files or []:
            top = file.parts[0]
            if top == ".." or (target / top).is_symlink():
                continue  # scripts outside site-packages; a folder two distributions share
            (target / top).symlink_to(site / top)


def test_what_the_dockerfile_copies_installs_and_runs(tmp_path: Path) -> None:
    context, venv = tmp_path / "context", tmp_path / "venv"
    build_context(context)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-input", str(context)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The dependencies: a plain path line adds the runtime lock's after the new site-packages.
    dependencies = tmp_path / "runtime-dependencies"
    link_runtime_dependencies(dependencies)
    (site / "zz_runtime_dependencies.pth").write_text(f"{dependencies}\n")
    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]

    packages = sorted(installed_packages())
    where = subprocess.run(
        [python, "-c", "import importlib, sys\nfor name in sys.argv[1:]:\n"
         "    print(name, importlib.import_module(name).__file__)", *packages],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr[-3000:]
    for line in where.stdout.splitlines():
        name, file = line.split(" ", 1)
        assert Path(file).is_relative_to(site), f"{name} was imported from {file}, not the install"

    cli = venv / "bin" / "cdc-mirror"
    for command in ([], ["scheduler"], ["validate"], ["replay-worker"]):
        done = subprocess.run(
            [cli, *command, "--help"], capture_output=True, text=True, check=False, cwd=tmp_path
        )
        assert done.returncode == 0, (command, done.stderr[-3000:])
        assert "Usage: cdc-mirror" in done.stdout

    # The installed stack package carries what its jars' digest covers (the Java sources too),
    # so the stamp the image writes from it matches the jars built from the source copy.
    digest = "from stack.install import _poms_digest; print(_poms_digest())"
    installed_digest = subprocess.run(
        [python, "-c", digest], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.strip()
    checkout_digest = subprocess.run(
        [sys.executable, "-c", digest], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    assert installed_digest == checkout_digest
