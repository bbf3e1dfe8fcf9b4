"""One journal node as a real OS process: start, signal, kill, restart, and its log.

The node runs ``python -m raftka.node.journal_server --config FILE`` (the quorum with its journal
state machine, which these tests read back) with the interpreter of the virtualenv
these tests run in. stdout and stderr go to one log file per node, kept
across restarts (each run opens with a marker line), so a failed test can show what
every node said.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.proxy import LOOPBACK

JOURNAL_NODE = (sys.executable, "-m", "raftka.node.journal_server")
_EXIT_TIMEOUT_S = 10.0


@dataclass
class NodeProcess:
    node_id: int
    port: int  # the listener; peers reach it through the proxy instead
    config_path: Path
    data_dir: Path
    log_path: Path
    runs: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the process exists, stopped (SIGSTOP) or not."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.running, f"node {self.node_id} is already running"
        self.runs += 1
        with self.log_path.open("ab") as log:
            log.write(f"=== harness: node {self.node_id} run {self.runs} ===\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [*JOURNAL_NODE, "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # a SIGKILLed node still leaves its log
            )

    def send_signal(self, sig: signal.Signals) -> None:
        assert self.process is not None and self.running, f"node {self.node_id} is not running"
        self.process.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap: a crash, no goodbye to the peers, nothing flushed."""
        if self.process is None:
            return
        if self.running:
            self.process.kill()
        self.wait_exit()

    def wait_exit(self, timeout_s: float = _EXIT_TIMEOUT_S) -> int:
        """The exit status once the process has ended; raises TimeoutExpired if it does not."""
        assert self.process is not None, f"node {self.node_id} never started"
        return self.process.wait(timeout_s)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
