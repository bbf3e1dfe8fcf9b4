"""A partition leader SIGKILLed, its partition folder deleted, and restarted at once (well
inside its old session): every record acknowledged with acks=all (RF 3, min ISR 2) is
still read from the cluster, and all three replicas hold the same records.

The restarted process is a new incarnation that must not act on the image naming its
old incarnation leader: were it to lead again at the old leader epoch with an empty
log, its followers would hear that their whole log diverges and truncate below their
high watermark, losing every acknowledged record.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raftka.broker.log.dump import iter_partition_dump
from raftka.broker.server import PARTITIONS_DIR
from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.producer import Producer
from raftka.client.types import NewTopic, PartitionInfo, TopicPartition
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

TOPIC = "kept"
RECORDS = 100
READ_TIMEOUT_S = 20.0
REJOIN_TIMEOUT_S = 30.0


def test_a_leader_restarted_at_once_on_a_wiped_disk_loses_no_acknowledged_record(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    admin.create_topics([NewTopic(TOPIC, 1, 3, {"min.insync.replicas": "2"})])[0].check()
    before = wait_until(lambda: fully_replicated(admin), timeout_s=20, what=f"{TOPIC}-0 with a full ISR")
    bootstrap = [n.data_address for n in cluster.nodes("broker")]
    sent = [b"record-%03d" % i for i in range(RECORDS)]
    producer = Producer(bootstrap, acks=-1)
    try:
        futures = [producer.send(TOPIC, value, partition=0) for value in sent]
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(RECORDS)), "every record acknowledged"
    finally:
        producer.close()

    victim = before.leader
    cluster.kill(victim)
    shutil.rmtree(partition_dir(cluster, victim))
    cluster.up()  # at once: the killed incarnation's session is still live

    assert read_all(bootstrap) == sent, "an acknowledged record was lost"
    after = wait_until(
        lambda: fully_replicated(admin),
        timeout_s=REJOIN_TIMEOUT_S,
        what=f"broker {victim} back in the ISR of {TOPIC}-0",
        detail=lambda: describe(admin),
    )
    assert after.leader_epoch > before.leader_epoch, (before, after)
    for broker in cluster.nodes("broker"):
        assert stored_values(cluster, broker.id) == sent, f"broker {broker.id} holds other records"


def describe(admin: Admin) -> PartitionInfo:
    (topic,) = admin.describe_topics([TOPIC])
    return topic.partitions[0]


def fully_replicated(admin: Admin) -> PartitionInfo | None:
    partition = describe(admin)
    return partition if partition.leader >= 0 and len(partition.isr) == 3 else None


def partition_dir(cluster: MetadataCluster, broker_id: int) -> Path:
    return Path(cluster.node(broker_id).data_dir) / PARTITIONS_DIR / f"{TOPIC}-0"


def read_all(bootstrap: list[str]) -> list[bytes]:
    """Every record of the partition, from the start, read as a consumer reads it."""
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    read: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])

        def poll() -> bool:
            read.extend(r.value or b"" for r in consumer.poll(200))
            return len(read) >= RECORDS

        wait_until(poll, timeout_s=READ_TIMEOUT_S, what=f"{RECORDS} records", detail=lambda: len(read))
    finally:
        consumer.close()
    return read


def stored_values(cluster: MetadataCluster, broker_id: int) -> list[bytes]:
    """The record values in a broker's partition folder, in log order."""
    values = []
    for entry in iter_partition_dump(partition_dir(cluster, broker_id), print_data=True):
        if entry["type"] == "batch":
            values.extend(record["value"].encode() for record in entry["records"])
    return values
