"""Replication throttles on a live cluster (real processes), set and lifted with ``raftka
configs`` while it runs: a follower back from a crash, far behind, is held back by its
leader (``kafka_server_leaderreplication_heldback_total`` moves and it stays out of the
ISR), and joins the ISR once the rate is lifted, with no restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.producer import Producer
from raftka.client.types import NewTopic, PartitionInfo
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.test_metrics import scrape

pytestmark = pytest.mark.integration

TOPIC = "throttled"
RECORDS = 300
VALUE = b"x" * 10_000  # 3 MB in all: three fetch answers of 1 MiB, far beyond what 1 B/s lets through
WAIT_S = 60.0
HELD = "kafka_server_leaderreplication_heldback_total"
SENT = "kafka_server_leaderreplication_byterate_total"
RATE = "leader.replication.throttled.rate"


def test_a_throttle_holds_a_catching_up_follower_back_until_it_is_lifted(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    admin.create_topics([NewTopic(TOPIC, 1, 3, {"min.insync.replicas": "2"})])[0].check()
    [healthy] = wait_until(lambda: in_isr(admin, 3), timeout_s=WAIT_S, what="a full ISR")
    leader = healthy.leader
    follower = next(b for b in healthy.replicas if b != leader)
    cluster.kill(follower)
    producer = Producer([n.data_address for n in cluster.nodes("broker")], acks=-1)
    try:
        for future in [producer.send(TOPIC, VALUE, partition=0) for _ in range(RECORDS)]:
            future.result()
    finally:
        producer.close()
    wait_until(lambda: in_isr(admin, 2), timeout_s=WAIT_S, what=f"broker {follower} out of the ISR")

    cluster.raftka(
        "configs", "alter", "--topic", TOPIC, "--set", "leader.replication.throttled.replicas=*", timeout_s=30
    )
    cluster.raftka("configs", "alter", "--broker", str(leader), "--set", f"{RATE}=1", timeout_s=30)
    metrics = cluster.node(leader).metrics_address
    held_before = scrape(metrics)[HELD]
    cluster.up()  # the follower is back, 3 MB behind
    wait_until(
        lambda: scrape(metrics)[HELD] > held_before,
        timeout_s=WAIT_S,
        what=f"leader {leader} holding broker {follower}'s fetches back",
    )
    [partition] = describe(admin)
    assert follower not in partition.isr, "held back, it cannot have caught up"

    cluster.raftka("configs", "alter", "--broker", str(leader), "--delete", RATE, timeout_s=30)
    wait_until(lambda: in_isr(admin, 3), timeout_s=WAIT_S, what=f"broker {follower} back in the ISR")
    assert scrape(metrics)[SENT] >= RECORDS * len(VALUE), "its catch-up counted as throttled bytes"


def describe(admin: Admin) -> list[PartitionInfo]:
    (topic,) = admin.describe_topics([TOPIC])
    return list(topic.partitions)


def in_isr(admin: Admin, members: int) -> list[PartitionInfo] | None:
    partitions = describe(admin)
    return partitions if all(p.leader >= 0 and len(p.isr) == members for p in partitions) else None
