"""Client quotas on ``raftka cluster up`` (3 controllers, 3 brokers, real processes):
``raftka quotas`` sets one through the controllers (a bad value is refused naming the
field), every broker learns it from the metadata log (Kafka's DescribeClientQuotas on its
listener answers from its image), and a greedy kafka-python producer under it is told to
wait (throttle_time_ms) and counted as throttled by the broker that leads its partition."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from prometheus_client.parser import text_string_to_metric_families

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic
from tests.integration.metadata_cluster import RAFTKA, MetadataCluster
from tests.integration.polling import wait_until
from tests.unit.kafka_wire import call

pytestmark = pytest.mark.integration
TOPIC = "metered"
QUOTA = 10_000  # bytes/s: about the first 100 kB pass (a rate over 10 s at first), then it throttles


@pytest.fixture
def cluster(tmp_path: Path):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.close()


def quotas_on(kafka_address: str) -> list:
    described = call(
        kafka_address,
        DescribeClientQuotasRequest(components=[], strict=False),
        1,
        DescribeClientQuotasResponse,
    )
    return [
        ({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
        for entry in described.entries
    ]


def produce_throttle_ms(metrics_address: str, client_id: str) -> float:
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kafka_server_quota_throttle_time_ms_total"
        and sample.labels == {"quota_type": "Produce", "user": "", "client_id": client_id}
    )


def test_a_quota_set_with_raftka_reaches_every_broker_and_throttles_a_greedy_producer(
    cluster: MetadataCluster,
) -> None:
    alter = ["quotas", "alter", "--entity-type", "clients", "--entity-name", "greedy", "--add-config"]
    refused = subprocess.run(
        [*RAFTKA, *alter, "producer_byte_rate=0.5", "--dir", str(cluster.dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert "INVALID_REQUEST" in refused.stderr and "entries[0].ops[0].value" in refused.stderr
    cluster.raftka(*alter, f"producer_byte_rate={QUOTA}", timeout_s=60)
    described = json.loads(cluster.raftka("quotas", "describe", "--output", "json", timeout_s=60))
    assert described == [{"entity": {"client-id": "greedy"}, "values": {"producer_byte_rate": float(QUOTA)}}]
    expected = [({"client-id": "greedy"}, {"producer_byte_rate": float(QUOTA)})]
    brokers = cluster.nodes("broker")
    wait_until(
        lambda: all(quotas_on(b.kafka_address) == expected for b in brokers),
        timeout_s=30,
        what="every broker's image to hold the quota",
    )

    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[0].check()
    producer = KafkaProducer(
        bootstrap_servers=",".join(b.kafka_address for b in brokers),
        client_id="greedy",
        acks="all",
        linger_ms=0,
    )
    try:
        for _ in range(130):  # 130 kB: 30 kB more than passes before the first throttle
            producer.send(TOPIC, b"g" * 1_000)
        producer.flush(60)
        throttles = [
            value
            for group in producer.metrics().values()
            for name, value in group.items()
            if name == "throttle-time-max" and value == value  # NaN: no sample
        ]
    finally:
        producer.close()
    assert max(throttles, default=0) > 0, "no produce answer carried a throttle time"
    assert sum(produce_throttle_ms(b.metrics_address, "greedy") for b in brokers) > 0
