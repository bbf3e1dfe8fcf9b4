"""The cyclic collector is off inside ``collector.paused`` and as it was after, even when the
body raises, and a caller that had it off keeps it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from raftka.audit import collector


@pytest.fixture(autouse=True)
def restore_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_paused_then_on_again_even_after_an_error() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector.paused():
        assert not gc.isenabled()
        raise RuntimeError("the body failed")
    assert gc.isenabled()


def test_a_caller_that_had_it_off_keeps_it_off() -> None:
    gc.disable()
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
