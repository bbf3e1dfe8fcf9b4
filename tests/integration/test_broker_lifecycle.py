"""Brokers as real processes next to real controllers (``raftka cluster up``):

- SIGTERM is a controlled shutdown: the broker exits 0 only after the controller has
  moved its leaderships away, so by the time it is gone no partition names it leader;
- a restarted broker is a new incarnation with a new (higher) broker epoch, is unfenced
  once caught up, rejoins the ISRs through their leaders, and gets its preferred
  leaderships back at the controller's leader rebalance (every second here);
- a SIGKILLed broker is fenced after the session timeout and its partitions get new
  leaders from the ISR within session timeout + 1 s.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.cli import cluster
from raftka.client.admin import Admin
from raftka.client.types import NewTopic, TopicDescription
from raftka.command import local
from raftka.node.config import ControllerConfig
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

UP_TIMEOUT_S = 60.0
SESSION_TIMEOUT_S = ControllerConfig().session_timeout_ms / 1000
EXIT_TIMEOUT_S = 10.0


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "local"
    try:  # a failed start leaves nodes running too
        cluster.create(path, 3, brokers=3)  # configured before its first start
        MetadataCluster(path).configure("controller", "controller", leader_rebalance_interval_ms=1_000)
        cluster.up(path, None, UP_TIMEOUT_S)
        yield path
    finally:
        MetadataCluster(path).close()


def describe(admin: Admin, name: str) -> TopicDescription:
    [topic] = admin.describe_topics([name])
    topic.check()
    return topic


def wait_exit(pid: int, timeout_s: float) -> int:
    """The exit status of our child ``pid`` (``cluster up`` ran in this process)."""

    def reaped() -> int | None:
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None

    return wait_until(reaped, timeout_s=timeout_s, what=f"process {pid} to exit")


def test_controlled_shutdown_restart_and_crash(cluster_dir: Path) -> None:
    nodes = local.load(cluster_dir)
    with Admin(nodes.addresses()) as admin:
        admin.create_topics([NewTopic("orders", 6, 3)])[0].check()
        preferred = {p.partition: p.replicas[0] for p in describe(admin, "orders").partitions}
        wait_until(
            lambda: all(p.leader == preferred[p.partition] for p in describe(admin, "orders").partitions),
            timeout_s=10,
            what="preferred leaders",
        )
        before = {b.broker_id: b for b in admin.describe_cluster().brokers}
        victim = nodes.node(101)
        assert victim.pid is not None
        led = [p for p in describe(admin, "orders").partitions if p.leader == 101]
        assert led, "placement gives every broker some leaderships"

        # SIGTERM: controlled shutdown. Once the process is gone, nothing is led by it.
        os.kill(victim.pid, signal.SIGTERM)
        assert wait_exit(victim.pid, EXIT_TIMEOUT_S) == 0
        after = describe(admin, "orders")
        assert [p.partition for p in after.partitions if p.leader == 101] == []
        assert all(p.leader >= 0 for p in after.partitions)  # moved, not offline
        assert admin.describe_cluster().brokers[0].fenced
        log_text = Path(victim.log).read_text()
        assert '"state": "controlled_shutdown"' in log_text and '"state": "stopped"' in log_text
        assert "not confirmed in time" not in log_text

        # Restart: a new incarnation, a higher broker epoch, unfenced, leaderships back.
        cluster.up(cluster_dir, None, UP_TIMEOUT_S)  # starts what is down; waits until unfenced
        again = {b.broker_id: b for b in admin.describe_cluster().brokers}
        assert again[101].epoch > before[101].epoch and not again[101].fenced
        wait_until(
            lambda: all(p.leader == preferred[p.partition] for p in describe(admin, "orders").partitions),
            timeout_s=SESSION_TIMEOUT_S + 5,
            what="preferred leaders to return to the restarted broker",
        )

        # SIGKILL: fenced after the session timeout; its partitions get leaders from the ISR.
        crashed = local.load(cluster_dir).node(102)
        assert crashed.pid is not None
        led = [p.partition for p in describe(admin, "orders").partitions if p.leader == 102]
        killed_at = time.monotonic()
        os.kill(crashed.pid, signal.SIGKILL)
        wait_exit(crashed.pid, EXIT_TIMEOUT_S)

        def moved() -> bool:
            topic = describe(admin, "orders")
            return all(
                p.leader not in (102, -1) and 102 not in p.isr for p in topic.partitions if p.partition in led
            )

        wait_until(moved, timeout_s=SESSION_TIMEOUT_S + 3, what="leaders to move off the crashed broker")
        assert time.monotonic() - killed_at <= SESSION_TIMEOUT_S + 1
        assert {b.broker_id: b.fenced for b in admin.describe_cluster().brokers}[102]
