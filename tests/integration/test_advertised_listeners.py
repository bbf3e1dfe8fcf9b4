"""Advertised listeners with real processes: three brokers bind every address (0.0.0.0)
and advertise other loopback addresses than the ones clients bootstrap from, as brokers
behind NAT or in containers do. Followers replicate through the advertised data
addresses (acks=all, RF 3), raftka's client and kafka-python are handed the advertised
addresses and use them, and each Kafka listener answers with its own: the internal one
with ``kafka.advertised_listener``, the external one with
``kafka.advertised_external_listener``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.cli import cluster
from raftka.client.admin import Admin
from raftka.client.consumer import Consumer
from raftka.client.errors import KafkaError
from raftka.client.producer import Producer
from raftka.client.types import NewTopic, TopicPartition
from raftka.command import local
from raftka.command.local import free_ports
from raftka.node.config import load_config, render_toml
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
UP_TIMEOUT_S = 60.0
DATA_HOST, KAFKA_HOST, EXTERNAL_HOST = "127.0.0.2", "127.0.0.3", "127.0.0.4"


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "local"
    try:
        cluster.create(path, 3, brokers=3)  # configured before its first start
        for node in MetadataCluster(path).nodes("broker"):
            config = load_config(node.config)
            data_port = config.broker.data_listener.rpartition(":")[2]
            kafka_port = config.kafka.listener.rpartition(":")[2]
            [external_port] = free_ports(1)
            config = dataclasses.replace(
                config,
                broker=dataclasses.replace(
                    config.broker,
                    data_listener=f"0.0.0.0:{data_port}",
                    advertised_data_listener=f"{DATA_HOST}:{data_port}",
                ),
                kafka=dataclasses.replace(
                    config.kafka,
                    listener=f"0.0.0.0:{kafka_port}",
                    advertised_listener=f"{KAFKA_HOST}:{kafka_port}",
                    external_listener=f"0.0.0.0:{external_port}",
                    advertised_external_listener=f"{EXTERNAL_HOST}:{external_port}",
                ),
            )
            Path(node.config).write_text(render_toml(config), encoding="utf-8")
        cluster.up(path, None, UP_TIMEOUT_S)
        yield path
    finally:
        MetadataCluster(path).close()


def test_clients_and_followers_are_handed_the_advertised_addresses_and_use_them(cluster_dir: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    nodes = local.load(cluster_dir)
    with Admin(nodes.addresses()) as admin:
        admin.create_topics([NewTopic("far", 3, 3, configs={"min.insync.replicas": "3"})])[0].check()
    data_bootstrap = [n.data_address for n in nodes.brokers()]  # 127.0.0.1: where the cluster was made
    producer = Producer(data_bootstrap, acks="all")  # min ISR 3: every follower must have each record
    try:
        wait_until(lambda: _sent(producer, 0), timeout_s=30, what="topic 'far' known to the brokers")
        for i in range(1, 30):
            producer.send("far", value=b"raftka-%d" % i, partition=i % 3).result(30)
    finally:
        producer.close()
    consumer = Consumer(data_bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition("far", p) for p in range(3)])
        read: list[bytes] = []
        for _ in range(100):
            read += [r.value for r in consumer.poll(timeout_ms=300)]
            if len(read) >= 30:
                break
    finally:
        consumer.close()
    assert sorted(read) == sorted(b"raftka-%d" % i for i in range(30))

    internal = [n.kafka_address for n in nodes.brokers()]
    for bootstrap, host in ((internal, KAFKA_HOST), (_external(cluster_dir), EXTERNAL_HOST)):
        admin_client = KafkaAdminClient(bootstrap_servers=bootstrap)
        described = admin_client.describe_cluster()
        admin_client.close()
        assert {b["host"] for b in described["brokers"]} == {host}, described
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        for i in range(10):
            producer.send("far", value=f"{host}-{i}".encode(), partition=i % 3).get(30)
        producer.close()
        consumer = KafkaConsumer("far", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=5_000, enable_auto_commit=False)  # fmt: skip
        values = {m.value for m in consumer}
        consumer.close()
        assert {f"{host}-{i}".encode() for i in range(10)} <= values


def _sent(producer: Producer, i: int) -> bool | None:
    try:
        producer.send("far", value=b"raftka-%d" % i, partition=i % 3).result(30)
    except KafkaError:
        return None  # not on the brokers yet
    return True


def _external(cluster_dir: Path) -> list[str]:
    """The brokers' external Kafka listeners, dialled at 127.0.0.1 (they bind every address)."""
    ports = [
        load_config(n.config).kafka.external_listener.rpartition(":")[2]
        for n in local.load(cluster_dir).brokers()
    ]
    return [f"127.0.0.1:{port}" for port in ports]
