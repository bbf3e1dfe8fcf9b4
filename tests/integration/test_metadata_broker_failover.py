"""SIGKILL a broker: the controller fences it once its session times out, it leaves every
ISR, and each partition it led gets a new leader from the ISR, all within the session
timeout + 1 s. Restart it: it registers again, its leaders take it back into their ISRs
once it has caught up, and the controller's periodic rebalance gives the preferred
leaders (the first replica) their partitions back without anyone asking."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raft.node_config import load_config
from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic, PartitionInfo
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

TOPIC = "ha"
PARTITIONS = 6
POLL_INTERVAL_S = 0.05
RESTORE_TIMEOUT_S = 30.0
LEADER_REBALANCE_INTERVAL_MS = 1_000  # Kafka checks every 300 s; the test cannot wait that long


def test_a_killed_brokers_partitions_move_within_the_session_timeout_and_come_back(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(
            controller__controller={"leader_rebalance_interval_ms": LEADER_REBALANCE_INTERVAL_MS}
        )
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    brokers = [n.id for n in cluster.nodes("broker")]
    session_timeout_s = (
        load_config(cluster.nodes("controller")[0].config).controller.session_timeout_ms / 1000
    )
    wait_until(
        lambda: sorted(b.broker_id for b in admin.describe_cluster().brokers if not b.fenced) == brokers,
        timeout_s=30,
        what=f"brokers {brokers} to be registered and unfenced",
    )
    (result,) = admin.create_topics([NewTopic(TOPIC, PARTITIONS, len(brokers))])
    assert result.error is None, result
    before = wait_until(
        lambda: preferred_everywhere(admin), timeout_s=10, what="every preferred leader to lead"
    )
    victim = brokers[0]
    led = {p.partition: p for p in before if p.leader == victim}
    assert led, f"broker {victim} leads nothing: {before}"

    killed_at = time.monotonic()
    cluster.kill(victim)
    after = wait_until(
        lambda: moved_away(partitions(admin), victim),
        timeout_s=session_timeout_s + 5,
        what=f"every partition to drop broker {victim} from its ISR and leadership",
        detail=lambda: partitions(admin),
    )
    moved_s = time.monotonic() - killed_at
    print(
        f"broker {victim}: partitions moved {moved_s:.2f} s after SIGKILL (session timeout {session_timeout_s} s)"
    )
    assert moved_s <= session_timeout_s + 1, f"partitions moved only after {moved_s:.2f} s"
    for p in after:
        assert p.leader in p.isr and p.leader != victim, p
        if p.partition in led:
            assert p.leader_epoch > led[p.partition].leader_epoch, (led[p.partition], p)
    assert fenced(admin, victim)

    cluster.up()  # restarts the broker that is down
    wait_until(
        lambda: not fenced(admin, victim) and preferred_everywhere(admin),
        timeout_s=RESTORE_TIMEOUT_S,
        what=f"broker {victim} to be unfenced and every preferred leader to lead again",
        detail=lambda: partitions(admin),
    )


def partitions(admin: Admin) -> list[PartitionInfo]:
    (topic,) = admin.describe_topics([TOPIC])
    return sorted(topic.partitions, key=lambda p: p.partition)


def preferred_everywhere(admin: Admin) -> list[PartitionInfo] | None:
    """The partitions, if each is led by its first replica with the full ISR; else None."""
    found = partitions(admin)
    ok = all(p.leader == p.replicas[0] and sorted(p.isr) == sorted(p.replicas) for p in found)
    return found if ok else None


def moved_away(found: list[PartitionInfo], victim: int) -> list[PartitionInfo] | None:
    ok = all(p.leader not in (victim, -1) and victim not in p.isr for p in found)
    return found if ok else None


def fenced(admin: Admin, broker_id: int) -> bool:
    return any(b.broker_id == broker_id and b.fenced for b in admin.describe_cluster().brokers)
