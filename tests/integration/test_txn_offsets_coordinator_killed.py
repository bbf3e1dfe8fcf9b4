"""A transaction's offsets sent after the group's coordinator was SIGKILLed and, fenced,
dropped from the metadata: the narrow case of the exactly-once test's rare hang.

librdkafka 2.16 keeps the dead broker cached as the group's coordinator and waits in
``send_offsets_to_transaction`` for its connection, past the call's timeout, until some
other connection changes state (confluentinc/librdkafka#5511). ``transactions.send_offsets``
hands the application its thread back (``Wedged``), and a new producer with the same
``transactional.id`` fences the wedged one and commits the offsets through the broker
that coordinates the group now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.transactions import Wedged, committed_offsets, send_offsets, transaction_coordinator

pytestmark = pytest.mark.integration
SESSION_TIMEOUT_MS = 2_000  # short, so the killed broker is fenced (and dropped) quickly
HEARTBEAT_MS = 300
TOPIC = "offsets-input"
GROUP = TRANSACTIONAL_ID = "offsets-processor"  # one name: one broker coordinates both
TIMEOUT_S = 10.0


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
    cluster = MetadataCluster(tmp_path_factory.mktemp("offsets-coordinator-killed") / "cluster")
    try:
        cluster.up_configured(
            controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
            broker__broker={"heartbeat_interval_ms": HEARTBEAT_MS},
        )
        yield cluster
    finally:
        cluster.close()


@pytest.mark.timeout(300)
def test_offsets_commit_in_a_transaction_after_the_group_coordinator_is_killed(
    cluster: MetadataCluster,
) -> None:
    brokers = cluster.nodes("broker")
    bootstrap = ",".join(n.kafka_address for n in brokers)
    admin = Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30))
    try:
        [result] = admin.create_topics([NewTopic(TOPIC, 1, 3, {"min.insync.replicas": "2"})])
        result.check()
    finally:
        admin.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    group_metadata = consumer.consumer_group_metadata()
    try:
        producer = transactional(bootstrap)
        commit_offsets(producer, group_metadata, 1)  # librdkafka now caches the group's coordinator
        coordinator = transaction_coordinator(brokers[0].kafka_address, TRANSACTIONAL_ID)
        cluster.kill(coordinator)
        wait_until(
            lambda: coordinator not in producer.list_topics(timeout=TIMEOUT_S).brokers,
            timeout_s=60,
            what=f"broker {coordinator} fenced and gone from the producer's metadata",
        )
        try:
            commit_offsets(producer, group_metadata, 2)
        except Wedged:
            producer = transactional(bootstrap)  # fences the wedged producer
            commit_offsets(producer, group_metadata, 2)
        assert committed_offsets(bootstrap, GROUP, [(TOPIC, 0)]) == {(TOPIC, 0): 2}
    finally:
        consumer.close()


def transactional(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID})
    retrying(lambda: producer.init_transactions(TIMEOUT_S))
    return producer


def commit_offsets(producer: Producer, group_metadata: object, offset: int) -> None:
    """A transaction holding only the group's offset of the topic's partition."""
    producer.begin_transaction()
    retrying(lambda: send_offsets(producer, [TopicPartition(TOPIC, 0, offset)], group_metadata, TIMEOUT_S))
    retrying(lambda: producer.commit_transaction(TIMEOUT_S))


def retrying(call: Callable[[], None]) -> None:
    """``call`` again while it fails with a retriable error (a coordinator moving), as
    librdkafka asks of an application."""
    while True:
        try:
            call()
            return
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
