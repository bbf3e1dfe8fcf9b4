"""The audit's CPU seconds keep what a process spent after it exits, whoever its parent is:
Spark's Python daemon never waits for its workers, so no parent's ``cutime`` holds theirs."""

from __future__ import annotations

import subprocess
import sys

from raftka.audit.tree_cpu import TreeCpu

BURN = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "daemon":  # as Spark's: its children are never waited for
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "worker", sys.argv[2]])
    while os.path.exists(f"/proc/{child.pid}"):
        time.sleep(0.05)
else:
    while time.process_time() < 1.0:
        pass
"""


def test_a_worker_that_exited_under_a_daemon_that_never_waited_still_counts() -> None:
    tree = TreeCpu(interval_s=0.05).start()
    try:
        before = tree.seconds()
        subprocess.run([sys.executable, "-c", BURN, "daemon", BURN], check=True)
        spent = tree.seconds() - before
    finally:
        tree.stop()
    # the worker spent 1 s; a reading misses at most what it spent after the last sample
    assert 0.5 <= spent < 2, spent  # counted once: not also in a parent's cutime
