"""`intent.runtime`: the garbage collector settings every command runs with."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from intent.runtime import GC_THRESHOLDS, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored_gc")
def test_thresholds_make_full_collections_rare() -> None:
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    young, middle, full = GC_THRESHOLDS
    assert young > 700 and full > 10  # CPython's defaults are (700, 10, 10)
    tune_gc(20_000)
    assert gc.get_threshold() == (20_000, middle, full)


@pytest.mark.usefixtures("restored_gc")
def test_freeze_moves_what_is_loaded_out_of_every_collection() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    tune_gc(freeze=True)
    assert gc.get_freeze_count() > 1000  # the modules, classes and functions loaded
    assert not gc.get_objects(2)  # nothing left for a full collection to walk
