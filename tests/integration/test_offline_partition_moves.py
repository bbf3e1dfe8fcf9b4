"""A partition whose log fails on its leader gets a new leader, and nothing acknowledged is lost.

The leader's folder for one partition is removed under it (one log's disk gone); its next
segment roll (``segment.bytes`` 1024) fails, so the partition goes offline on that broker
alone, its heartbeat reports it, and the controller elects another ISR member in a new
leader epoch. Before, the controller kept that broker leader and the partition stayed
unavailable although two healthy replicas held every record. Checked: every record
acknowledged with acks=all (RF 3, min ISR 2), before and after the failure, is read back
once and in order; the broker leads its other partitions on at the same leader epoch; and
the new leader epoch being the partition's next change, the broker opens the partition
again (a new folder), catches up as a follower and rejoins the ISR.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raftka.broker.server import PARTITIONS_DIR
from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.producer import Producer
from raftka.client.types import NewTopic, PartitionInfo, TopicPartition
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

TOPIC = "moved"
PARTITIONS = 6  # each of the three brokers leads two
RECORDS = 100  # per phase: before and after the failure
READ_TIMEOUT_S = 20.0
REJOIN_TIMEOUT_S = 30.0


def test_a_partition_whose_log_fails_on_its_leader_moves_and_loses_nothing(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    configs = {"min.insync.replicas": "2", "segment.bytes": "1024"}
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, configs)])[0].check()
    before = wait_until(lambda: fully_replicated(admin), timeout_s=20, what=f"{TOPIC} with full ISRs")
    victim = before[0].leader
    kept = next(p for p, info in before.items() if p != 0 and info.leader == victim)
    bootstrap = [n.data_address for n in cluster.nodes("broker")]

    producer = Producer(bootstrap, acks=-1, linger_ms=0)
    try:
        sent = send(producer, 0, b"before-%03d")
        shutil.rmtree(partition_dir(cluster, victim, 0))
        sent += send(producer, 0, b"after-%03d")  # rolls fail on the victim: retried at the new leader
        send(producer, kept, b"kept-%03d")
    finally:
        producer.close()

    moved = describe(admin)[0]
    assert moved.leader not in (victim, -1) and moved.leader_epoch > before[0].leader_epoch, moved
    assert "partition offline on this broker" in cluster.log_text(victim)
    assert read_all(bootstrap, 0, len(sent)) == sent, "an acknowledged record was lost or repeated"
    still = describe(admin)[kept]
    assert (still.leader, still.leader_epoch) == (victim, before[kept].leader_epoch), "the rest serves on"
    back = wait_until(
        lambda: in_isr(admin, victim),
        timeout_s=REJOIN_TIMEOUT_S,
        what=f"broker {victim} back in the ISR of {TOPIC}-0",
        detail=lambda: (describe(admin)[0], cluster.log_tails(10)),
    )
    assert back.leader != victim or back.leader_epoch > moved.leader_epoch, back


def send(producer: Producer, partition: int, pattern: bytes) -> list[bytes]:
    """RECORDS values, each acknowledged by the ISR."""
    values = [pattern % i for i in range(RECORDS)]
    futures = [producer.send(TOPIC, value, partition=partition) for value in values]
    producer.flush()
    for future in futures:
        future.result()
    return values


def describe(admin: Admin) -> dict[int, PartitionInfo]:
    (topic,) = admin.describe_topics([TOPIC])
    return {p.partition: p for p in topic.partitions}


def in_isr(admin: Admin, broker_id: int) -> PartitionInfo | None:
    partition = describe(admin)[0]
    return partition if broker_id in partition.isr else None


def fully_replicated(admin: Admin) -> dict[int, PartitionInfo] | None:
    partitions = describe(admin)
    return partitions if all(p.leader >= 0 and len(p.isr) == 3 for p in partitions.values()) else None


def partition_dir(cluster: MetadataCluster, broker_id: int, partition: int) -> Path:
    return Path(cluster.node(broker_id).data_dir) / PARTITIONS_DIR / f"{TOPIC}-{partition}"


def read_all(bootstrap: list[str], partition: int, count: int) -> list[bytes]:
    """The partition's records from the start, as a consumer reads them."""
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    read: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, partition)])

        def poll() -> bool:
            read.extend(r.value or b"" for r in consumer.poll(200))
            return len(read) >= count

        wait_until(poll, timeout_s=READ_TIMEOUT_S, what=f"{count} records", detail=lambda: len(read))
    finally:
        consumer.close()
    return read
