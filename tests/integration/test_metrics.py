"""The Prometheus endpoints of a live cluster (``raftka cluster up``: 3 controllers, 3
brokers, real processes), scraped over HTTP as Prometheus would: every name docs/metrics.md lists
is exported by the nodes it is documented for, one controller is active, and the values
move when records are produced and consumed."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.producer import Producer
from raftka.client.types import NewTopic
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
METRICS_PAGE = Path(__file__).parents[2] / "docs" / "metrics.md"
TOPIC = "metered"
RECORDS = 200


@pytest.fixture
def cluster(tmp_path: Path):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.close()


def documented() -> set[str]:
    section = METRICS_PAGE.read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE))


def scrape(address: str) -> dict[Any, float]:
    """Sample name -> value ((name, label value) for labelled ones, buckets left out)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    values: dict[Any, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "le" in sample.labels:
                continue
            label = next(iter(sample.labels.values()), None)
            values[(sample.name, label) if label else sample.name] = sample.value
    return values


def names(values: dict[Any, float]) -> set[str]:
    """The documented form of each exported name: families, counters with ``_total``."""
    out = set()
    for key in values:
        name = key[0] if isinstance(key, tuple) else key
        out.add(name if name in documented() else re.sub(r"_(sum|count)$", "", name))  # a gauge may end so
    return out


def total(scrapes: list[dict[Any, float]], key: Any) -> float:
    return sum(values[key] for values in scrapes)


def test_live_nodes_export_every_documented_metric_and_the_values_move(cluster: MetadataCluster) -> None:
    controllers = [n.metrics_address for n in cluster.nodes("controller")]
    brokers = [n.metrics_address for n in cluster.nodes("broker")]
    assert all(controllers) and all(brokers), "cluster up turns metrics on for every node"

    def one_active_controller() -> list[dict[Any, float]] | None:
        scrapes = [scrape(a) for a in controllers]
        active = total(scrapes, "kafka_controller_kafkacontroller_activecontrollercount")
        leaders = {s["kafka_server_raft_metrics_current_leader"] for s in scrapes}
        return scrapes if active == 1 and len(leaders) == 1 and min(leaders) >= 0 else None

    before = wait_until(one_active_controller, timeout_s=30, what="one active controller, one agreed leader")
    broker_before = [scrape(a) for a in brokers]

    everything = documented()
    for values in before:
        assert names(values) == {
            n
            for n in everything
            if not n.startswith("kafka_server_brokertopic")
            and not n.startswith("kafka_server_replicamanager")
            and not n.startswith("kafka_server_replicafetchermanager")
            and not n.startswith("kafka_server_quota")
            and not n.startswith(("kafka_server_leaderreplication", "kafka_server_followerreplication"))
            and not n.startswith("kafka_network")
            and not n.startswith("kafka_log_")
            and not n.startswith("raftka_listener")
        }
    per_client = {n for n in everything if n.startswith("kafka_server_quota_") and n.endswith("_total")}
    for values in broker_before:  # no client has used the Kafka listener yet: no budgets
        assert names(values) == {n for n in everything if not n.startswith("kafka_controller")} - per_client
        assert values["kafka_server_raft_metrics_current_leader"] >= 0  # brokers follow the same leader
        assert values[("kafka_server_raft_metrics_current_state", "observer")] == 1

    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[0].check()
    bootstrap = [n.data_address for n in cluster.nodes("broker")]
    producer = Producer(bootstrap, acks=-1)
    try:
        for i in range(RECORDS):
            producer.send(TOPIC, b"value-%d" % i, key=b"key-%d" % i)
        producer.flush()
    finally:
        producer.close()
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        consumer.assign_topic(TOPIC)
        read = 0
        while read < RECORDS:
            read += len(consumer.poll(1000))
    finally:
        consumer.close()

    def replicated() -> list[dict[Any, float]] | None:
        scrapes = [scrape(a) for a in brokers]
        caught_up = total(scrapes, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        return (
            scrapes if caught_up and total(scrapes, "kafka_server_replicamanager_leadercount") == 3 else None
        )

    broker_after = wait_until(replicated, timeout_s=30, what="every partition fully replicated")
    after = [scrape(a) for a in controllers]

    assert total(broker_after, "kafka_server_brokertopicmetrics_messagesinpersec_total") == RECORDS
    assert total(broker_after, "kafka_server_brokertopicmetrics_bytesinpersec_total") > RECORDS * len(
        b"value-0"
    )
    assert total(broker_after, "kafka_server_brokertopicmetrics_messagesoutpersec_total") >= RECORDS
    assert total(broker_after, "kafka_server_brokertopicmetrics_bytesoutpersec_total") > 0
    assert total(broker_after, ("kafka_network_requestmetrics_totaltimems_count", "Produce")) >= 1
    assert total(broker_after, ("kafka_network_requestmetrics_totaltimems_count", "FetchConsumer")) >= 1
    assert total(broker_after, ("kafka_network_requestmetrics_totaltimems_count", "FetchFollower")) >= 1
    assert total(broker_after, "kafka_server_replicamanager_partitioncount") == 9  # 3 partitions x 3 replicas
    assert {"kafka_server_quota_bytes_total", "kafka_server_quota_throttle_time_ms_total"} <= set().union(
        *(names(values) for values in broker_after)
    ), "the data listener's clients have quota budgets"
    for old, new in zip(broker_before, broker_after, strict=True):  # the topic's records reached every broker
        assert (
            new["kafka_server_raft_metrics_fetch_records_total"]
            > old["kafka_server_raft_metrics_fetch_records_total"]
        )
        assert (
            new["kafka_server_raft_metrics_log_end_offset"] > old["kafka_server_raft_metrics_log_end_offset"]
        )

    for old, new in zip(before, after, strict=True):
        assert (
            new["kafka_server_raft_metrics_log_end_offset"] > old["kafka_server_raft_metrics_log_end_offset"]
        )
        assert (
            new["kafka_server_raft_metrics_high_watermark"] > old["kafka_server_raft_metrics_high_watermark"]
        )
        assert new["kafka_controller_kafkacontroller_globaltopiccount"] == 1
        assert new["kafka_controller_kafkacontroller_globalpartitioncount"] == 3
        assert new["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
        assert new["kafka_controller_kafkacontroller_activebrokercount"] == 3
        assert new["kafka_controller_kafkacontroller_fencedbrokercount"] == 0
        assert new["kafka_controller_controllereventmanager_eventqueuetimems_count"] > 0
    active = next(n for n in after if n["kafka_controller_kafkacontroller_activecontrollercount"] == 1)
    assert active["kafka_server_raft_metrics_commit_latency_ms_count"] > 0
    assert active["kafka_server_raft_metrics_append_records_total"] > 0
    assert total(after, "kafka_server_raft_metrics_election_latency_ms_count") >= 1
