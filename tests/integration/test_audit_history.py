"""A real history audits clean: ``raftka cluster up``, some activity, ``raftka chaos
kill-leader --rounds 5`` and a SIGKILLed broker, then ``raftka audit`` over every node's
data dir: no error-level violation, and the failovers show in ``controller_epochs`` and
the broker's fencing and restart in ``broker_timeline``.

The cluster handling is one small helper (``_History``), so it is easy to adapt when
the way brokers listen changes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from raftka.client.admin import Admin, RetryPolicy
from tests.integration.metadata_cluster import RAFTKA, MetadataCluster
from tests.integration.polling import wait_until
from tests.spark.conftest import require_spark

pytestmark = [pytest.mark.integration, pytest.mark.long]  # make test-long
SESSION_TIMEOUT_MS = 2_000  # a killed broker is fenced quickly
HEARTBEAT_MS = 300
ROUNDS = 5


class _History:
    """A local cluster that lives through leader and broker failures."""

    def __init__(self, cluster_dir: Path) -> None:
        self.cluster = MetadataCluster(cluster_dir)

    def start(self) -> None:
        self.cluster.up_configured(
            controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
            broker__broker={"heartbeat_interval_ms": HEARTBEAT_MS},
        )

    def raftka(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*RAFTKA, *args], capture_output=True, text=True, timeout=timeout_s)

    def activity(self) -> None:
        where = ("--dir", str(self.cluster.dir))
        for command in (
            ("topics", "create", "orders", "--partitions", "3", "--replication-factor", "3",
             "--config", "min.insync.replicas=2"),
            ("configs", "alter", "--topic", "orders", "--set", "retention.ms=86400000"),
            ("offsets", "commit", "--group", "g1", "--topic", "orders", "--partition", "0", "--offset", "42"),
        ):  # fmt: skip
            done = self.raftka(*command, *where)
            assert done.returncode == 0, done.stderr

    def kill_leaders(self, rounds: int) -> None:
        done = self.raftka("chaos", "kill-leader", "--rounds", str(rounds), "--dir", str(self.cluster.dir))
        assert done.returncode == 0, f"{done.stderr[-2000:]}\n{self.cluster.log_tails()}"

    def kill_broker(self, broker: int) -> None:
        """SIGKILL, wait until the controller fences it, restart it, wait until it is back."""
        with Admin(self.cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:

            def fenced(want: bool) -> bool:
                return any(
                    b.broker_id == broker and b.fenced == want for b in admin.describe_cluster().brokers
                )

            self.cluster.kill(broker)
            wait_until(lambda: fenced(True), timeout_s=30, what=f"broker {broker} to be fenced")
            self.cluster.up()
            wait_until(lambda: fenced(False), timeout_s=30, what=f"broker {broker} to be unfenced again")

    def data_dirs(self) -> list[str]:
        return [n.data_dir for n in self.cluster.nodes()]

    def close(self) -> None:
        self.cluster.close()


@pytest.mark.timeout(900)  # five failovers, a broker's fencing and a Spark job in its own JVM
def test_a_cluster_that_lost_leaders_and_a_broker_audits_clean(tmp_path: Path) -> None:
    require_spark()
    history = _History(tmp_path / "cluster")
    try:
        history.start()
        history.activity()
        history.kill_leaders(ROUNDS)
        history.kill_broker(101)
        history.cluster.down()
    finally:
        history.close()
    out = tmp_path / "audit"
    done = history.raftka("audit", *history.data_dirs(), "--out", str(out), "--output", "json", timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["violations"]["error"] == 0, summary["checks"]
    assert len(summary["inputs"]["nodes"]) == 6
    epochs = pd.read_parquet(out / "tables" / "controller_epochs")
    committed = epochs[epochs["committed"]]
    assert len(committed) >= ROUNDS + 1  # the first leader and one per killed leader
    assert (committed["gap_before_ms"].dropna() >= 0).all()
    timeline = pd.read_parquet(out / "tables" / "broker_timeline")
    b101 = timeline[timeline["broker"] == 101]
    assert "FENCE" in set(b101["started_by"]) and b101["restart"].any()
