"""Which processes count as the driver, its JVM and Spark's Python workers, on a made-up /proc;
the workers by their proportional set where the kernel gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.audit import processes
from raftka.tools.perf import proc_memory
from raftka.tools.perf.proc_memory import PAGE_BYTES, PeakMemory, roles_bytes


def _process(
    proc: Path, pid: int, comm: str, pages: int, children: dict[int, list[int]], pss_kib: int | None = None
) -> None:
    """A process whose threads (tid: children) started ``children``."""
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "comm").write_text(comm + "\n")
    (proc / str(pid) / "statm").write_text(f"999 {pages} 10 1 0 5 0\n")
    if pss_kib is not None:
        rollup = f"5-6 ---p 00000000 00:00 0 [rollup]\nRss: {pages * PAGE_BYTES // 1024} kB\nPss: {pss_kib} kB\n"
        (proc / str(pid) / "smaps_rollup").write_text(rollup)
    for tid, started in children.items():
        (proc / str(pid) / "task" / str(tid)).mkdir(parents=True)
        (proc / str(pid) / "task" / str(tid) / "children").write_text(" ".join(map(str, started)) + " ")


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(processes, "PROC", tmp_path)
    return tmp_path


def test_the_jvm_and_everything_below_it_are_told_apart(proc: Path) -> None:
    _process(proc, 10, "python", 100, {10: [20], 11: [30]})  # the driver: the JVM, and some other child
    _process(proc, 20, "java", 1000, {20: [], 21: [40]})  # a JVM thread started the daemon
    _process(proc, 30, "sleep", 7, {30: []})
    _process(proc, 40, "python3", 50, {40: [41, 42]})  # pyspark.daemon forks the workers
    _process(proc, 41, "python3", 60, {41: []})
    _process(proc, 42, "python3", 70, {42: []})
    assert roles_bytes(10) == {"driver": 100 * PAGE_BYTES, "jvm": 1000 * PAGE_BYTES,
                               "python_workers": 180 * PAGE_BYTES, "python_worker_processes": 3}  # fmt: skip


def test_forked_workers_count_the_pages_they_share_once(proc: Path) -> None:
    """Three workers resident in 1,000 pages each, 900 of them the daemon's, shared by four:
    their proportional sets add up to what they hold, where their resident sets triple it."""
    _process(proc, 10, "python", 100, {10: [20]})
    _process(proc, 20, "java", 1000, {20: [40]})
    shared, own = 900 * PAGE_BYTES // 4 // 1024, 100 * PAGE_BYTES // 1024
    _process(proc, 40, "python3", 900, {40: [41, 42, 43]}, pss_kib=shared)
    for worker in (41, 42, 43):
        _process(proc, worker, "python3", 1000, {worker: []}, pss_kib=shared + own)
    assert roles_bytes(10)["python_workers"] == (4 * shared + 3 * own) * 1024 == 1200 * PAGE_BYTES


def test_the_jvm_forking_itself_to_run_a_command_is_not_a_worker(proc: Path) -> None:
    """Hadoop's local file system runs ``chmod`` as Spark writes a table: the JVM forks, and
    until the command starts, the copy (named ``java``) shares the JVM's pages. Counted as
    a worker, a 4 GB JVM made 2 GB more of Python workers for an instant, at random."""
    _process(proc, 10, "python", 100, {10: [20]})
    _process(proc, 20, "java", 1_000_000, {20: [40], 21: [50], 22: [60]})
    _process(proc, 40, "python3", 50, {40: [41]})
    _process(proc, 41, "python3", 60, {41: []})
    _process(proc, 50, "java", 1_000_000, {50: []}, pss_kib=1_000_000 * PAGE_BYTES // 2048)
    _process(proc, 60, "chmod", 20, {60: []})
    found = roles_bytes(10)
    assert (found["python_workers"], found["python_worker_processes"]) == (110 * PAGE_BYTES, 2)


def test_a_role_without_processes_is_none_and_a_peak_outlives_its_process(proc: Path) -> None:
    _process(proc, 10, "python", 256, {10: [20]})
    _process(proc, 20, "java", 512, {20: [40]})
    _process(proc, 40, "python3", 1024, {40: []})
    with PeakMemory(driver=10) as peak:
        (proc / "20" / "task" / "20" / "children").write_text("")  # the worker exits
    mib = PAGE_BYTES / (1 << 20)
    assert peak.mib() == {"driver": round(256 * mib, 1), "jvm": round(512 * mib, 1),
                          "python_workers": round(1024 * mib, 1)}  # fmt: skip
    assert roles_bytes(10)["python_workers"] is None
    (proc / "20" / "comm").write_text("bash\n")  # a cluster master: no local JVM
    assert roles_bytes(10) == {"driver": 256 * PAGE_BYTES, "jvm": None, "python_workers": None,
                               "python_worker_processes": None}  # fmt: skip


def test_peaks_are_told_per_stretch_of_time(proc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's steps: each step's peak is the largest sample taken in it, and how many
    workers there were at most."""
    _process(proc, 10, "python", 100, {10: [20]})
    _process(proc, 20, "java", 500, {20: [40]})
    _process(proc, 40, "python3", 50, {40: [41]})
    _process(proc, 41, "python3", 300, {41: []})
    clock = iter(range(100))
    monkeypatch.setattr(proc_memory, "SAMPLE_S", 3600.0)  # only the samples taken below
    with PeakMemory(driver=10, clock=lambda: float(next(clock))) as peak:  # a sample at 0
        peak._sample()  # 1: the same
        (proc / "40" / "task" / "40" / "children").write_text("")  # the worker exits
        peak._sample()  # 2: the daemon alone
        (proc / "10" / "statm").write_text("999 400 10 1 0 5 0\n")
        peak._sample()  # 3: a bigger driver
    mib = PAGE_BYTES / (1 << 20)
    steps = peak.mib_between({"first": (0.0, 1.0), "then": (2.0, 3.0), "none": (10.0, 11.0)})
    assert steps["first"] == {"driver": round(100 * mib, 1), "jvm": round(500 * mib, 1),
                              "python_workers": round(350 * mib, 1), "python_worker_processes": 2}  # fmt: skip
    assert steps["then"] == {"driver": round(400 * mib, 1), "jvm": round(500 * mib, 1),
                             "python_workers": round(50 * mib, 1), "python_worker_processes": 1}  # fmt: skip
    assert steps["none"] == {"driver": None, "jvm": None, "python_workers": None, "python_worker_processes": None}
