"""Marks every test by the folder it lives in: tests/unit → unit, tests/integration →
integration, tests/e2e → e2e (the markers are registered in pyproject.toml)."""

from pathlib import Path

import pytest

_TESTS_DIR = Path(__file__).parent
_FOLDER_MARKERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            folder = Path(item.path).relative_to(_TESTS_DIR).parts[0]
        except ValueError:
            continue
        if folder in _FOLDER_MARKERS:
            item.add_marker(getattr(pytest.mark, folder))
