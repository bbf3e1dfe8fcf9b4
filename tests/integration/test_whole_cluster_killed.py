"""Every broker SIGKILLed at once (a reboot of the machine running ``raftka cluster up``,
a power cut of every node) comes back with every partition led and no acknowledged
record lost.

RF 3, min.insync.replicas 2, records acknowledged with acks=all. No broker leaves a
clean-shutdown marker, so each registers again as a crash; its log directory is the one
it registered before (KIP-858's directory id), so it holds what it held up to its last
flush (all of it here: a SIGKILL loses no page cache), and the partitions elect from
their eligible leader replicas instead of waiting for an operator's unclean election.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.producer import Producer
from raftka.client.types import NewTopic, TopicPartition
from raftka.command import local
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

TOPIC = "rebooted"
PARTITIONS = 3
RECORDS = 40  # per partition
TIMEOUT_S = 30.0


def test_every_broker_killed_at_once_comes_back_with_every_partition_led_and_every_record(
    tmp_path: Path,
) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        # No Kafka listener: its ports are Kafka's own (9092...), which another cluster on
        # this machine may take while every broker is down.
        cluster.up_configured(broker__kafka={"listener": "", "advertised_listener": ""})
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])[0].check()
            wait_until(lambda: all_led(admin, isr=3), timeout_s=TIMEOUT_S, what="every partition's full ISR")
            bootstrap = [n.data_address for n in cluster.nodes("broker")]
            sent = {p: [b"p%d-record-%03d" % (p, i) for i in range(RECORDS)] for p in range(PARTITIONS)}
            produce(bootstrap, sent)

            kill_every_broker(cluster)
            cluster.up()  # starts the nodes that are down: every broker

            wait_until(
                lambda: all_led(admin, isr=1),
                timeout_s=TIMEOUT_S,
                what="a leader for every partition",
                detail=lambda: admin.describe_topics([TOPIC])[0].partitions,
            )
            assert read_all(bootstrap) == sent, "an acknowledged record was lost"
    finally:
        cluster.close()


def all_led(admin: Admin, *, isr: int) -> bool:
    """Every partition has a leader and at least ``isr`` members in its ISR."""
    (topic,) = admin.describe_topics([TOPIC])
    return len(topic.partitions) == PARTITIONS and all(
        p.leader >= 0 and len(p.isr) >= isr for p in topic.partitions
    )


def produce(bootstrap: list[str], sent: dict[int, list[bytes]]) -> None:
    producer = Producer(bootstrap, acks=-1)
    try:
        futures = [producer.send(TOPIC, v, partition=p) for p, values in sent.items() for v in values]
        producer.flush()
        for future in futures:
            future.result()  # raises unless acknowledged
    finally:
        producer.close()


def kill_every_broker(cluster: MetadataCluster) -> None:
    """SIGKILL to every broker before any of them is waited for: none sees another go."""
    brokers = cluster.nodes("broker")
    for broker in brokers:
        assert broker.pid is not None and local.is_alive(broker), f"broker {broker.id} is not running"
        os.kill(broker.pid, signal.SIGKILL)
    for broker in brokers:
        wait_until(lambda b=broker: not local.is_alive(b), timeout_s=10, what=f"broker {broker.id} to exit")


def read_all(bootstrap: list[str]) -> dict[int, list[bytes]]:
    """Every partition's records from the start, as a consumer reads them."""
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    read: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])

        def poll() -> bool:
            for record in consumer.poll(200):
                read[record.partition].append(record.value or b"")
            return sum(map(len, read.values())) >= PARTITIONS * RECORDS

        wait_until(
            poll,
            timeout_s=TIMEOUT_S,
            what="every record",
            detail=lambda: {p: len(v) for p, v in read.items()},
        )
    finally:
        consumer.close()
    return read
