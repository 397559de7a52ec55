"""cluster.perf.gc_paused: nested and concurrent pauses, and respect for a disabled collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cluster.perf import gc_paused


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_it_pauses_and_resumes_the_collector() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_it_resumes_after_an_exception() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_it_leaves_a_deliberately_disabled_collector_disabled() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
