"""Peak memory of a Spark job's processes on this machine, sampled from ``/proc`` (Linux).

Three roles: the driver (this Python process), its JVM (a child named ``java``: with a
``local`` master it is the executors too) and Spark's Python workers (every process below
the JVM: the ``pyspark.daemon`` and the workers it forks; ``raftka.audit.processes``). Each
role's memory is summed over its processes every ``SAMPLE_S`` seconds and the largest sum
kept: a spike shorter than that can be missed. The driver's and the JVM's is their resident
set; the workers' is their proportional set (``Pss`` in ``smaps_rollup``): they are forked
from one daemon and share its pages, which their resident sets would count once in each.
Where the kernel has no ``smaps_rollup`` (before Linux 4.14), their resident set, an upper
bound. With a cluster master the executors run elsewhere and are not seen: the workers'
peak is then None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from types import TracebackType

from raftka.audit import processes

SAMPLE_S = 0.2
DRIVER, JVM, PYTHON_WORKERS = "driver", "jvm", "python_workers"
WORKER_PROCESSES = "python_worker_processes"  # a count, not bytes
ROLES = (DRIVER, JVM, PYTHON_WORKERS)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int) -> int:
    try:
        return int((processes.PROC / str(pid) / "statm").read_text().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0  # exited since it was listed


def pss_bytes(pid: int) -> int:
    """Its proportional set: each page divided among the processes that share it."""
    try:
        lines = (processes.PROC / str(pid) / "smaps_rollup").read_text().splitlines()
    except OSError:
        return rss_bytes(pid)  # no such file on this kernel, not ours to read, or exited
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("Pss:")), 0)


def _command(pid: int) -> str:
    try:
        return (processes.PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""  # exited since it was listed


def roles_bytes(driver: int) -> dict[str, int | None]:
    """Bytes in memory now per role; None for a role with no process. ``WORKER_PROCESSES``:
    how many Python workers there are (many small ones, or a few large?). Only the JVM's
    Python children and what they fork are workers: the JVM also forks itself to run
    commands (Hadoop's local file system runs ``chmod`` and ``ls`` as it writes), and until
    the command starts the copy shares the JVM's pages, half of them by its proportional set."""
    jvms = [c for c in processes.children(driver) if _command(c) == "java"]
    daemons = [c for jvm in jvms for c in processes.children(jvm) if _command(c).startswith("python")]
    workers = [pid for daemon in daemons for pid in (daemon, *processes.descendants(daemon))]
    return {
        DRIVER: rss_bytes(driver),
        JVM: sum(map(rss_bytes, jvms)) if jvms else None,
        PYTHON_WORKERS: sum(map(pss_bytes, workers)) if workers else None,
        WORKER_PROCESSES: len(workers) if workers else None,
    }


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.mib()``: each role's peak while inside;
    ``peak.mib_between(...)``: in stretches of that time, such as a job's steps."""

    def __init__(self, driver: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._driver = driver or os.getpid()
        self._clock = clock
        self._samples: list[tuple[float, dict[str, int | None]]] = []  # (time.monotonic(), roles_bytes)
        self._sampling = processes.Sampling(self._sample, SAMPLE_S, "peak-memory")

    def __enter__(self) -> PeakMemory:
        self._sampling.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._sampling.stop()
        self._sample()

    def mib(self) -> dict[str, float | None]:
        return _peaks(sample for _, sample in self._samples)

    def mib_between(self, stretches: dict[str, tuple[float, float]]) -> dict[str, dict[str, float | None]]:
        """Each role's peak, and the most worker processes, within each named stretch (from,
        to, on the clock: ``time.monotonic()``); a stretch shorter than a sample's interval
        may have none."""
        return {
            name: _peaks(sample for at, sample in self._samples if start <= at <= end) | {
                WORKER_PROCESSES: max((s[WORKER_PROCESSES] or 0 for at, s in self._samples if start <= at <= end),
                                      default=None)
            }
            for name, (start, end) in stretches.items()
        }  # fmt: skip

    def _sample(self) -> None:
        self._samples.append((self._clock(), roles_bytes(self._driver)))


def _peaks(samples: Iterable[dict[str, int | None]]) -> dict[str, float | None]:
    """Each role's largest figure in ``samples``, MiB; None where no sample saw the role."""
    peaks: dict[str, int | None] = dict.fromkeys(ROLES)
    for sample in samples:
        for role in ROLES:
            if sample[role] is not None:
                peaks[role] = max(sample[role], peaks[role] or 0)  # type: ignore[type-var]
    return {role: None if peak is None else round(peak / (1 << 20), 1) for role, peak in peaks.items()}
