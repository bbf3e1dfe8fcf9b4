"""Bounded polls: every wait in these tests is on a condition, with a deadline.

A fault test that sleeps and hopes passes on a fast machine and fails on a slow one;
one that polls a condition is as fast as the cluster and says what it was waiting for
when it gives up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")
POLL_INTERVAL_S = 0.05


def wait_until(
    probe: Callable[[], _T | None],
    *,
    timeout_s: float,
    what: str,
    detail: Callable[[], object] | None = None,
) -> _T:
    """Call ``probe`` until it returns something other than None (or False), and return it.

    On timeout, fail naming ``what`` and, if given, ``detail()``: the last state seen.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            seen = f"; last seen: {detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.1f}s waiting for {what}{seen}")
        time.sleep(POLL_INTERVAL_S)


def hold_for(check: Callable[[], None], *, duration_s: float) -> None:
    """Call ``check`` repeatedly for ``duration_s``; it raises AssertionError on a violation.

    The negative of ``wait_until``: something must stay true for a whole window (the
    leader must not change while a partitioned follower comes back), so one look at the
    end is not enough.
    """
    deadline = time.monotonic() + duration_s
    while True:
        check()
        if time.monotonic() >= deadline:
            return
        time.sleep(POLL_INTERVAL_S)
