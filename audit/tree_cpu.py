"""The CPU seconds of this process and everything it started, those that have exited included.

A step of the audit runs in the driver, its JVM and Spark's Python workers. Linux adds an
exited process's seconds to its parent's (``cutime``) only if the parent waits for it, and
Spark's Python daemon ignores SIGCHLD: its workers' seconds vanish when they exit (a step
of the 100M-record audit once read -876 s). So a thread reads every descendant's own seconds
(``utime`` + ``stime``, never a parent's ``cutime``, which would count a child twice) every
``INTERVAL_S``, and keeps each one's last reading after it is gone: what is lost is at most
an interval of each process that exits, and any that lives less than one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

INTERVAL_S = 0.25


class TreeCpu:
    """``seconds()``: the CPU seconds of this process and its descendants since ``start()``."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._seen: dict[tuple[int, int], float] = {}  # (pid, start time): last reading
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="audit-cpu", daemon=True)

    def start(self) -> TreeCpu:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def seconds(self) -> float:
        self.sample()
        with self._lock:
            return sum(self._seen.values())

    def sample(self) -> None:
        found = _descendants_cpu(os.getpid())
        with self._lock:
            self._seen.update(found)

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()


def _descendants_cpu(root: int) -> dict[tuple[int, int], float]:
    """(pid, start time) → own CPU seconds of ``root`` and its live descendants (Linux
    ``/proc``; nothing elsewhere). The start time tells a reused pid from the one before."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return {}
    for entry in entries:
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone since the listing
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    ticks, found, todo = os.sysconf("SC_CLK_TCK"), {}, [root]
    while todo:
        pid = todo.pop()
        fields = stats.get(pid)
        if fields is not None:  # after ")": state is 0, ppid 1, utime 11, stime 12, starttime 19
            found[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / ticks
        todo += children.get(pid, [])
    return found
