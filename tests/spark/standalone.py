"""A Spark standalone cluster on loopback, as a user starts one from the pyspark installation:
a master and workers from ``spark-class`` (``org.apache.spark.deploy.master.Master`` and
``...worker.Worker``), each worker with one core and a small memory, every folder
(logs, work dirs, an empty conf dir) in one temp dir and every port a free one.

``start`` returns once every worker has registered (the master's JSON page lists it
ALIVE); ``stop`` ends each process group it started, executors and their Python workers
included. A worker's ``kill`` is a worker machine lost mid-job: its JVM, its executor and
their Python workers at once (SIGKILL to its process group).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftka.command.local import free_ports
from tests.integration.polling import wait_until

HOST = "127.0.0.1"
WORKER_MEMORY = "1g"  # an executor's default spark.executor.memory (1g) must fit in it
DAEMON_MEMORY = "256m"  # the master's and the workers' own JVMs
REGISTER_TIMEOUT_S = 120.0  # two JVMs starting on a loaded two-core machine
STOP_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 5.0


def spark_home() -> Path:
    """The pyspark package's folder: its bin/ holds spark-class and spark-submit."""
    import pyspark

    return Path(pyspark.__file__).parent


def get_json(url: str) -> Any:
    """The JSON at ``url``, or None while nothing answers there (a UI not up yet, or gone)."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            return json.load(response)
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


@dataclass
class Daemon:
    """A master or a worker: its process (the JVM: spark-class execs java) and its web UI."""

    name: str
    process: subprocess.Popen[bytes]
    webui_port: int
    log: Path

    def json(self) -> Any:
        return get_json(f"http://{HOST}:{self.webui_port}/json/")

    def kill(self) -> None:
        """SIGKILL to its process group: the JVM, the executor it launched and their Python
        workers, as when the worker's machine is lost."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):  # what its group still holds (an executor)
            os.killpg(self.process.pid, signal.SIGKILL)

    def log_tail(self, chars: int = 3_000) -> str:
        return f"--- {self.name} ({self.log}) ---\n{self.log.read_text(errors='replace')[-chars:]}"


@dataclass
class Standalone:
    root: Path
    workers_wanted: int = 2
    master: Daemon | None = None
    workers: list[Daemon] = field(default_factory=list)
    master_port: int = 0

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    def env(self) -> dict[str, str]:
        """What every process of the cluster runs with: loopback, folders under ``root``."""
        conf = self.root / "conf"  # empty: no spark-defaults or spark-env from elsewhere
        conf.mkdir(parents=True, exist_ok=True)
        return os.environ | {
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.root / "logs"),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        }

    def start(self) -> None:
        master_port, master_ui, *worker_ports = free_ports(2 + 2 * self.workers_wanted)
        self.master_port = master_port
        self.master = self._daemon(
            "master", master_ui,
            ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(master_port)],
        )  # fmt: skip
        for n in range(self.workers_wanted):
            port, ui = worker_ports[2 * n : 2 * n + 2]
            work = self.root / f"work-{n}"
            self.workers.append(
                self._daemon(
                    f"worker-{n}", ui,
                    ["org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(port),
                     "--cores", "1", "--memory", WORKER_MEMORY, "--work-dir", str(work), self.url],
                )  # fmt: skip
            )
        wait_until(
            lambda: len(self.alive_workers()) == self.workers_wanted or None,
            timeout_s=REGISTER_TIMEOUT_S,
            what=f"{self.workers_wanted} workers registered with the master",
            detail=self.log_tails,
        )

    def alive_workers(self) -> list[dict[str, Any]]:
        assert self.master is not None
        state = self.master.json() or {}
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def worker_running(self, app_id: str, executor_id: str) -> Daemon | None:
        """The worker whose JSON page lists executor ``executor_id`` of ``app_id``."""
        for worker in self.workers:
            executors = (worker.json() or {}).get("executors", [])
            if any(e.get("appid") == app_id and str(e.get("id")) == executor_id for e in executors):
                return worker
        return None

    def stop(self) -> None:
        for daemon in [*self.workers, *([self.master] if self.master else [])]:
            daemon.stop()

    def log_tails(self) -> str:
        return "\n".join(d.log_tail() for d in [*([self.master] if self.master else []), *self.workers])

    def _daemon(self, name: str, webui_port: int, args: list[str]) -> Daemon:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args, "--webui-port", str(webui_port)],
                env=self.env(),
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends its executors too
            )
        return Daemon(name, process, webui_port, log)
