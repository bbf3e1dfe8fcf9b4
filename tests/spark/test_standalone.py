"""The audit on a real Spark cluster: a standalone master and two workers started from the
pyspark installation (``tests.spark.standalone``), as a user would first try it.

A collected history (three node folders, written by ``raftka.audit.synthetic``) is audited
with the embedded ``local[2]``, then on the cluster with ``raftka audit --master spark://...``
from another working directory with relative paths (the executors run in their workers'
folders, where those paths name nothing), then with ``spark-submit`` and ``file:`` URIs while
one worker is killed once the job runs tasks (Spark reruns them on the other). Every run
must give the same tables, row for row, and the same summary.

Not in ``make test``: four JVMs and three audits take minutes on two cores. ``make
spark-cluster-test`` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from raftka.command.local import free_ports
from tests.integration.metadata_cluster import RAFTKA
from tests.integration.polling import wait_until
from tests.spark.conftest import require_spark
from tests.spark.standalone import HOST, Daemon, Standalone, get_json, spark_home

pytestmark = [pytest.mark.spark_cluster, pytest.mark.timeout(1_200)]
NODES = (1, 2, 3)
RECORDS_PER_NODE = 100_000  # replay tasks of about a second each: a kill finds one running
AUDIT_TIMEOUT_S = 600.0
TASKS_TIMEOUT_S = 300.0  # the driver's JVM starts, gets executors and plans its first job
DRIVER_MEMORY = "1g"
# What differs between two runs of the same audit: how long its steps took, and the memory.
TIMING_KEYS = ("timings_s", "cpu_s", "tables_s", "driver_peak_mib")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of node folders, as ``raftka metadata collect`` writes one: the same history
    on every node (one seed)."""
    require_spark()
    from raftka.audit.synthetic import write_history

    root = tmp_path_factory.mktemp("collected")
    for node in NODES:
        write_history(root / f"node-{node}" / "data", RECORDS_PER_NODE, node_id=node, segment_bytes=1 << 20)
    return root


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, history: Path) -> Iterator[Standalone]:
    standalone = Standalone(tmp_path_factory.mktemp("standalone"))
    try:
        standalone.start()
        yield standalone
    finally:
        standalone.stop()


@pytest.fixture(scope="module")
def embedded(history: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output of the embedded ``local[2]`` audit, which every cluster run must equal."""
    out = tmp_path_factory.mktemp("local") / "out"
    done = _run([*RAFTKA, "audit", *_node_paths(history), "--out", str(out), "--driver-memory", DRIVER_MEMORY],
                cwd=history)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3_000:]
    return out


def test_the_cli_on_the_cluster_from_another_folder_with_relative_paths(
    history: Path, cluster: Standalone, embedded: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    relative = [os.path.relpath(p, elsewhere) for p in _node_paths(history)]
    assert all(not Path(p).is_absolute() for p in relative)
    done = _run([*RAFTKA, "audit", *relative, "--out", "out", "--master", cluster.url,
                 "--driver-memory", DRIVER_MEMORY], cwd=elsewhere)  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-2_000:]}\n{done.stderr[-3_000:]}\n{cluster.log_tails()}"
    _assert_same_audit(elsewhere / "out", embedded)
    apps = (cluster.master.json() if cluster.master else {}).get("completedapps", [])
    assert [a["name"] for a in apps] == ["raftka-audit"]  # it ran on the cluster, not embedded


def test_spark_submit_with_file_uris_survives_a_worker_killed_mid_job(
    history: Path, cluster: Standalone, embedded: Path, tmp_path: Path
) -> None:
    from raftka.audit import job

    ui_port, *_ = free_ports(1)
    out = tmp_path / "out"
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url,
               "--driver-memory", DRIVER_MEMORY, "--conf", f"spark.ui.port={ui_port}", job.__file__,
               *[Path(p).as_uri() for p in _node_paths(history)], "--out", out.as_uri()]  # fmt: skip
    with subprocess.Popen(command, cwd=tmp_path, env=_env(ui_port=None), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as submit:  # fmt: skip
        try:
            killed, executor = _kill_a_worker_running_tasks(cluster, ui_port, submit)
            stdout, stderr = submit.communicate(timeout=AUDIT_TIMEOUT_S)
        finally:
            if submit.poll() is None:
                submit.kill()
    assert submit.returncode == 0, f"{stdout[-2_000:]}\n{stderr[-3_000:]}\n{cluster.log_tails()}"
    assert json.loads(stdout)["status"] == "passed"
    assert f"Lost executor {executor}" in stderr  # the driver saw its tasks' executor go
    assert killed.process.returncode is not None
    assert len([w for w in cluster.workers if w.process.poll() is None]) == 1
    _assert_same_audit(out, embedded)


def _kill_a_worker_running_tasks(
    cluster: Standalone, ui_port: int, submit: subprocess.Popen[str]
) -> tuple[Daemon, str]:
    """Once an executor of the audit's application runs tasks (the driver's REST API says
    so), SIGKILL the worker it runs on; that worker and the executor's id."""
    api = f"http://{HOST}:{ui_port}/api/v1/applications"

    def running() -> tuple[Daemon, str] | None:
        assert submit.poll() is None, "spark-submit ended before any task ran on an executor"
        apps = get_json(api) or []
        for app in apps:
            for executor in get_json(f"{api}/{app['id']}/executors") or []:
                if executor["id"] != "driver" and executor.get("activeTasks", 0) > 0:
                    worker = cluster.worker_running(app["id"], executor["id"])
                    if worker is not None:
                        return worker, executor["id"]
        return None

    worker, executor = wait_until(
        running, timeout_s=TASKS_TIMEOUT_S, what="an executor running the audit's tasks",
        detail=cluster.log_tails,
    )  # fmt: skip
    worker.kill()
    return worker, executor


def _assert_same_audit(out: Path, reference: Path) -> None:
    """Every table row for row (in any order: Spark's partitioning may differ) and the
    summary but for its timings."""
    from raftka.audit.job import TABLES

    for name in TABLES:
        assert _rows(out / "tables" / name) == _rows(reference / "tables" / name), name
    assert _summary(out) == _summary(reference)


def _rows(folder: Path) -> list[str]:
    rows = pq.read_table(folder).to_pylist()
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


def _summary(out: Path) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())
    replay = summary.pop("replay_tasks")
    return {k: v for k, v in summary.items() if k not in TIMING_KEYS} | {"pieces": replay["pieces"]}


def _node_paths(history: Path) -> list[str]:
    return [str(history / f"node-{node}") for node in NODES]


def _env(ui_port: int | None) -> dict[str, str]:
    """The driver's and executors' Python is this one (raftka installed); the driver's web UI
    on a free port (the CLI's session keeps it on a cluster) rather than Spark's 4040."""
    env = os.environ | {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
    }
    if ui_port is not None:
        env["PYSPARK_SUBMIT_ARGS"] = f"--conf spark.ui.port={ui_port} pyspark-shell"
    return env


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    ui_port, *_ = free_ports(1)
    return subprocess.run(
        command, cwd=cwd, env=_env(ui_port), capture_output=True, text=True, timeout=AUDIT_TIMEOUT_S
    )
