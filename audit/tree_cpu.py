"""The CPU seconds of this process and everything it started, those that have exited included.

A step of the audit runs in the driver, its JVM and Spark's Python workers. Linux adds an
exited process's seconds to its parent's (``cutime``) only if the parent waits for it, and
Spark's Python daemon ignores SIGCHLD: its workers' seconds vanish when they exit (a step
of the 100M-record audit once read -876 s). So a thread reads the own seconds (``utime`` +
``stime``, never a parent's ``cutime``, which would count a child twice) of every process in
the tree (``raftka.audit.processes``) every ``INTERVAL_S``, and keeps each one's last reading
after it is gone: what is lost is at most an interval of each process that exits, and any
that lives less than one.
"""

from __future__ import annotations

import os
import threading

from raftka.audit import processes

INTERVAL_S = 0.25


class TreeCpu:
    """``seconds()``: the CPU seconds every process of the tree seen since ``start()`` has
    spent in all (its life before included: take differences)."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self._seen: dict[tuple[int, int], float] = {}  # (pid, start time): highest reading
        self._lock = threading.Lock()
        self._sampling = processes.Sampling(self.sample, interval_s, "audit-cpu")

    def start(self) -> TreeCpu:
        self._sampling.start()
        return self

    def stop(self) -> None:
        self._sampling.stop()

    def seconds(self) -> float:
        self.sample()
        with self._lock:
            return sum(self._seen.values())

    def sample(self) -> None:
        found = _tree_cpu(os.getpid())
        with self._lock:  # two readings may land out of order: the higher is the later
            for process, seconds in found.items():
                self._seen[process] = max(seconds, self._seen.get(process, 0.0))


def _tree_cpu(root: int) -> dict[tuple[int, int], float]:
    """(pid, start time) → own CPU seconds of ``root`` and its live descendants. The start
    time tells a reused pid from the one before."""
    ticks, found = os.sysconf("SC_CLK_TCK"), {}
    for pid in (root, *processes.descendants(root)):
        try:
            fields = (processes.PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since it was listed
        # after the name: state is 0, ppid 1, utime 11, stime 12, starttime 19
        found[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / ticks
    return found
