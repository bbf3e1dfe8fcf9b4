"""A topic with the longest name Kafka allows (249 characters), on real processes
(``raftka cluster up``: 3 controllers, 3 brokers): created at RF 3, written, deleted; every
broker removes its folders (whose ``-delete`` rename once exceeded a file name's 255
bytes and stopped every broker that held it, at every restart again), keeps serving
another topic, and a restart of the cluster, whose brokers replay the deletion, changes
nothing of that."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.broker.server import PARTITIONS_DIR
from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.producer import Producer
from raftka.client.types import NewTopic
from raftka.command import local
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
LONG = "l" * 249
OTHER = "other"


@pytest.fixture
def cluster(tmp_path: Path):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.close()


def produce(cluster: MetadataCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer([n.data_address for n in cluster.nodes("broker")], acks=-1)
    try:
        sent = [producer.send(topic, value, partition=0) for value in values]
        producer.flush()
        for future in sent:
            future.result(timeout=0)
    finally:
        producer.close()


def read_all(cluster: MetadataCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer([n.data_address for n in cluster.nodes("broker")], auto_offset_reset="earliest")
    try:
        consumer.assign_topic(topic)
        read: list[bytes] = []

        def all_read() -> bool:
            read.extend(r.value for r in consumer.poll(500))
            return len(read) >= count

        wait_until(all_read, timeout_s=30, what=f"{count} records of {topic}")
        return read
    finally:
        consumer.close()


def folders_of(cluster: MetadataCluster, topic: str) -> list[str]:
    """Every partition folder of ``topic``, ``-delete`` ones included, on every broker."""
    prefix = topic[:200]
    return [
        f"{broker.id}:{folder.name}"
        for broker in cluster.nodes("broker")
        for folder in (Path(broker.data_dir) / PARTITIONS_DIR).iterdir()
        if folder.name.startswith(prefix)
    ]


def brokers_alive(cluster: MetadataCluster) -> bool:
    return all(local.is_alive(b) for b in cluster.nodes("broker"))


def test_a_topic_with_the_longest_name_is_deleted_and_every_broker_serves_on(
    cluster: MetadataCluster,
) -> None:
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        for result in admin.create_topics([NewTopic(LONG, 2, 3), NewTopic(OTHER, 1, 3)]):
            result.check()
        produce(cluster, LONG, [b"long-a", b"long-b"])
        produce(cluster, OTHER, [b"a"])
        assert len(folders_of(cluster, LONG)) == 6, "two partitions on each of three brokers"

        [deleted] = admin.delete_topics([LONG])
        deleted.check()
        wait_until(
            lambda: not folders_of(cluster, LONG),
            timeout_s=30,
            what="every broker to remove the topic's folders",
            detail=lambda: (folders_of(cluster, LONG), cluster.log_tails(5)),
        )
    assert brokers_alive(cluster)
    produce(cluster, OTHER, [b"b"])
    assert read_all(cluster, OTHER, 2) == [b"a", b"b"]

    cluster.down()  # every node stops; each broker replays the committed deletion at start
    cluster.up()  # waits until every broker is unfenced again
    produce(cluster, OTHER, [b"c"])
    assert read_all(cluster, OTHER, 3) == [b"a", b"b", b"c"]
    assert brokers_alive(cluster) and not folders_of(cluster, LONG)
