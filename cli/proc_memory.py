"""Peak resident memory of a Spark job's processes on this machine, sampled from ``/proc`` (Linux).

Three roles: the driver (this Python process), its JVM (a child named ``java``: with a
``local`` master it is the executors too) and Spark's Python workers (every process below
the JVM: the ``pyspark.daemon`` and the workers it forks). Each role's memory is summed over
its processes every ``SAMPLE_S`` seconds and the largest sum kept: a spike shorter than that
can be missed. The driver's and the JVM's is their resident set; the workers' is their
proportional set (``Pss`` in ``smaps_rollup``): they are forked from one daemon and share its
pages, which their resident sets would count once in each. Where the kernel has no ``smaps_rollup`` (before Linux 4.14), their resident
set, an upper bound. With a cluster master the executors run elsewhere and are not seen: the
workers' peak is then None.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

SAMPLE_S = 0.2
DRIVER, JVM, PYTHON_WORKERS = "driver", "jvm", "python_workers"
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
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


def rss_bytes(pid: int) -> int:
    try:
        return int((PROC / str(pid) / "statm").read_text().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0  # exited since it was listed


def pss_bytes(pid: int) -> int:
    """Its proportional set: each page divided among the processes that share it."""
    try:
        lines = (PROC / str(pid) / "smaps_rollup").read_text().splitlines()
    except FileNotFoundError:
        return rss_bytes(pid)  # no such file on this kernel, or the process exited
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("Pss:")), 0)


def _is_java(pid: int) -> bool:
    try:
        return (PROC / str(pid) / "comm").read_text().strip() == "java"
    except OSError:
        return False


def roles_bytes(driver: int) -> dict[str, int | None]:
    """Bytes in memory now per role; None for a role with no process."""
    jvms = [c for c in children(driver) if _is_java(c)]
    workers, todo = [], [c for j in jvms for c in children(j)]
    while todo:
        pid = todo.pop()
        workers.append(pid)
        todo += children(pid)
    return {
        DRIVER: rss_bytes(driver),
        JVM: sum(map(rss_bytes, jvms)) if jvms else None,
        PYTHON_WORKERS: sum(map(pss_bytes, workers)) if workers else None,
    }


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.mib()``: each role's peak while inside."""

    def __init__(self, driver: int | None = None) -> None:
        self._driver = driver or os.getpid()
        self._peaks: dict[str, int | None] = dict.fromkeys((DRIVER, JVM, PYTHON_WORKERS))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="peak-memory", daemon=True)

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def mib(self) -> dict[str, float | None]:
        return {
            role: None if peak is None else round(peak / (1 << 20), 1) for role, peak in self._peaks.items()
        }

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def _sample(self) -> None:
        for role, now in roles_bytes(self._driver).items():
            if now is not None:
                self._peaks[role] = max(now, self._peaks[role] or 0)
