"""``raftka brokers unregister`` on a live broker of a real cluster (Kafka's UnregisterBroker):
the partitions it led get new leaders, it leaves every ISR and the cluster's broker list,
and its process stops, saying why. Started again with its old id and its old disk, it is
a new broker: a new registration, in no ISR, leading nothing until it has caught up as a
follower and joined the ISRs again. No acknowledged record is lost on the way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.producer import Producer
from raftka.client.types import NewTopic, PartitionInfo, TopicPartition
from raftka.command import local
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

TOPIC = "retired"
PARTITIONS = 3
RECORDS = 300
WAIT_S = 60.0
STOPPED = "was unregistered (raftka brokers unregister)"


def test_an_unregistered_live_broker_is_gone_and_back_with_its_id_is_a_new_broker(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])[0].check()
    healthy = wait_until(lambda: fully_replicated(admin), timeout_s=WAIT_S, what="a full ISR everywhere")
    victim = healthy[0].leader
    old_epoch = next(b.epoch for b in admin.describe_cluster().brokers if b.broker_id == victim)
    bootstrap = [n.data_address for n in cluster.nodes("broker")]
    sent = produce(bootstrap, [b"before-%03d" % i for i in range(RECORDS)])

    out = cluster.raftka("brokers", "unregister", str(victim), timeout_s=30)
    assert out.strip() == f"Unregistered broker {victim}."
    assert victim not in [b.broker_id for b in admin.describe_cluster().brokers]
    moved = describe(admin)
    for before, after in zip(healthy, moved, strict=True):
        assert victim not in after.isr and victim not in after.elr and after.leader != victim
        if before.leader == victim:
            assert after.leader_epoch > before.leader_epoch
    node = cluster.node(victim)
    wait_until(lambda: not local.is_alive(node), timeout_s=WAIT_S, what=f"broker {victim} to stop")
    assert STOPPED in cluster.log_text(victim)

    sent += produce(bootstrap, [b"while-gone-%03d" % i for i in range(RECORDS)])  # it must catch up on these
    cluster.up()  # the same id, config and log directory: a new process
    back = wait_until(
        lambda: next((b for b in admin.describe_cluster().brokers if b.broker_id == victim), None),
        timeout_s=WAIT_S,
        what=f"broker {victim} registered again",
    )
    assert back.epoch > old_epoch, "a new registration"
    led_early: list[PartitionInfo] = []

    def rejoined() -> list[PartitionInfo] | None:
        partitions = describe(admin)
        led_early.extend(p for p in partitions if p.leader == victim and victim not in p.isr)
        return partitions if all(victim in p.isr for p in partitions) else None

    wait_until(
        rejoined, timeout_s=WAIT_S, what=f"broker {victim} back in every ISR", detail=lambda: describe(admin)
    )
    assert led_early == [], "it led a partition before it was in its ISR"
    assert consume(bootstrap) == sorted(sent)


def produce(bootstrap: list[str], values: list[bytes]) -> list[bytes]:
    producer = Producer(bootstrap, acks=-1)
    try:
        futures = [producer.send(TOPIC, value) for value in values]
        producer.flush()
        for future in futures:
            future.result()  # acknowledged, or raises
    finally:
        producer.close()
    return values


def consume(bootstrap: list[str]) -> list[bytes]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])

        def poll() -> bool:
            got.extend(r.value or b"" for r in consumer.poll(200))
            return len(got) >= 2 * RECORDS

        wait_until(
            poll, timeout_s=WAIT_S, what="every acknowledged record read back", detail=lambda: len(got)
        )
    finally:
        consumer.close()
    return sorted(got)


def describe(admin: Admin) -> list[PartitionInfo]:
    (topic,) = admin.describe_topics([TOPIC])
    return sorted(topic.partitions, key=lambda p: p.partition)


def fully_replicated(admin: Admin) -> list[PartitionInfo] | None:
    partitions = describe(admin)
    return partitions if all(p.leader >= 0 and len(p.isr) == 3 for p in partitions) else None
