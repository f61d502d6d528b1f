"""The install builds the collector's C extension wherever a C compiler exists.

The extension is optional for the install (``optional = true`` in pyproject.toml: a machine
without a compiler still gets a working, slower collector), so a failed build would otherwise
go unnoticed: the native-vs-reference tests skip without it. On a machine with a compiler —
every development and CI machine of this project — a missing or stale build is a failure.
"""

from __future__ import annotations

import shutil

import pytest

from collector import native


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this machine")
def test_the_extension_is_built_and_current_where_a_compiler_exists() -> None:
    assert native.AVAILABLE, (
        "collector._native is missing or stale; run ./run setup (or "
        "'.venv/bin/python -m pip install -e .[dev]') to build it."
    )
