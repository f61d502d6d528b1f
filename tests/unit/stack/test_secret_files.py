"""The stack hands its services their secrets in private files (not on command lines, which
every local user reads): SeaweedFS's S3 identities, with the lake's keys."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_platform.config import Settings
from stack.services import SeaweedFS, StackPaths


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)  # the most open umask: a file is what its creation asks for
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_s3_identity_file_is_private_from_its_creation(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = SeaweedFS(Settings(), StackPaths(tmp_path))
    # A chmod after the write does not count: the file was readable before it.
    monkeypatch.setattr(Path, "chmod", lambda *_args, **_kwargs: None)
    monkeypatch.setattr(os, "fchmod", lambda *_args: None)
    service.initialise()
    assert _mode(service.identity) == 0o600
    assert json.loads(service.identity.read_text())["identities"][0]["credentials"]


def test_a_rewritten_identity_file_becomes_private(tmp_path: Path, open_umask: None) -> None:
    service = SeaweedFS(Settings(), StackPaths(tmp_path))
    service.identity.parent.mkdir(parents=True)
    service.identity.write_text("{}")
    service.identity.chmod(0o644)
    service.initialise()
    assert _mode(service.identity) == 0o600
    assert service.identity.read_text() != "{}"
