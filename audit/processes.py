"""This machine's processes as Linux's ``/proc`` shows them: which process started which.

The audit's CPU seconds (``raftka.audit.tree_cpu``) and ``raftka perf audit``'s memory
(``raftka.tools.perf.proc_memory``) follow the driver's tree: its JVM, and Spark's Python daemon
and workers below it. Elsewhere than Linux there is no ``/proc``: the tree is the driver.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")


def children(pid: int) -> list[int]:
    """The processes ``pid``'s threads started (each thread lists its own children)."""
    found: list[int] = []
    try:
        for task in (PROC / str(pid) / "task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass  # gone, or no /proc: nothing below it to see
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, at any depth."""
    found, todo = [], children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += children(child)
    return found


class Sampling:
    """``sample`` called now at ``start()``, then every ``interval_s`` on a thread of its own
    until ``stop()``: how the CPU and memory samplers follow a job's processes."""

    def __init__(self, sample: Callable[[], None], interval_s: float, name: str) -> None:
        self._sample = sample
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name=name, daemon=True)

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()
