"""The components' garbage-collector tuning (cdc_platform.gc_tuning): start-up objects frozen,
a young collection every 50,000 allocations, and the way back to CPython's defaults."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cdc_platform.gc_tuning import DEFAULT_THRESHOLDS, tune_gc, untune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_tuning_freezes_what_exists_and_raises_the_young_threshold() -> None:
    tune_gc()
    assert gc.get_threshold() == (50_000, 20, 20)
    assert gc.get_freeze_count() > 0

    untune_gc()
    assert gc.get_threshold() == DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() == 0
