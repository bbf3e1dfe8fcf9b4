"""A SIGKILLed broker is fenced because its connections closed, not because its session
ran out: with a session timeout far longer than the test waits, its partitions still get
new leaders, and the active controller says why. Brokers that stay alive are never
fenced this way (their streams do not churn), and the killed one comes back into every
ISR once restarted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic, PartitionInfo
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

TOPIC = "moved"
PARTITIONS = 6
SESSION_TIMEOUT_MS = 600_000  # ten minutes: only a closed connection can fence within the test
WAIT_S = 60.0
DISCONNECTED = "broker disconnected: fencing it unless it reconnects"


def test_a_killed_broker_is_fenced_once_its_connections_close(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS})
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])[0].check()
    healthy = wait_until(lambda: fully_replicated(admin), timeout_s=WAIT_S, what="a full ISR everywhere")
    led = {p.leader for p in healthy}
    victim = max(led, key=lambda b: sum(p.leader == b for p in healthy))

    seen = {node.id: len(disconnects(cluster, node.id)) for node in cluster.nodes("controller")}
    cluster.kill(victim)
    moved = wait_until(
        lambda: moved_away(admin, victim),
        timeout_s=WAIT_S,
        what=f"every partition led by a broker other than {victim}, and {victim} fenced",
        detail=lambda: describe(admin),
    )
    for before, after in zip(healthy, moved, strict=True):
        assert victim not in after.isr
        if before.leader == victim:
            assert after.leader_epoch > before.leader_epoch
    said = [line for node in cluster.nodes("controller") for line in disconnects(cluster, node.id)[seen[node.id] :]]
    assert said and all(f'"broker_id": {victim}' in line for line in said), said

    cluster.up()
    wait_until(
        lambda: fully_replicated(admin),
        timeout_s=WAIT_S,
        what=f"broker {victim} back in every ISR",
        detail=lambda: describe(admin),
    )


def describe(admin: Admin) -> list[PartitionInfo]:
    (topic,) = admin.describe_topics([TOPIC])
    return sorted(topic.partitions, key=lambda p: p.partition)


def fully_replicated(admin: Admin) -> list[PartitionInfo] | None:
    partitions = describe(admin)
    return partitions if all(p.leader >= 0 and len(p.isr) == 3 for p in partitions) else None


def moved_away(admin: Admin, victim: int) -> list[PartitionInfo] | None:
    fenced = next(b.fenced for b in admin.describe_cluster().brokers if b.broker_id == victim)
    partitions = describe(admin)
    done = fenced and all(p.leader not in (-1, victim) for p in partitions)
    return partitions if done else None


def disconnects(cluster: MetadataCluster, node_id: int) -> list[str]:
    return [line for line in cluster.log_text(node_id).splitlines() if DISCONNECTED in line]
