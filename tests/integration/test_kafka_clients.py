"""Kafka's own clients against ``raftka cluster up``'s Kafka listeners: kafka-python
(idempotent by default), confluent-kafka and kcat (librdkafka) and aiokafka each
produce keyed records, read them in a group of two members that share the partitions
with no overlap, commit, and a new member of the group resumes where they stopped. A key
lands where Java's murmur2 partitioner puts it, and raftka's own `consume` and
`groups describe` see the same records at the same offsets and the same commits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import NewTopic as KafkaNewTopic
from kafka.partitioner import murmur2
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from raftka.broker.data_service import BrokerApi
from raftka.client.admin import Admin, RetryPolicy
from raftka.client.group_admin import GroupAdmin
from raftka.client.types import GroupDescription, NewTopic
from raftka.v1 import broker_pb2, controller_pb2
from tests.integration.kafka_clients import CLIENTS, POLL_MS, KafkaPython, Seen
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until
from tests.unit.kafka_wire import broker_thread, call

pytestmark = pytest.mark.integration
PARTITIONS = 6
FIRST, LATER = 60, 9


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path_factory.mktemp("kafka") / "cluster")
    try:
        cluster.up_configured(broker__broker={"group_initial_rebalance_delay_ms": 0})
        yield cluster
    finally:
        cluster.close()


def keyed(start: int, count: int, client: str) -> list[tuple[bytes, bytes]]:
    return [(f"{client}-key-{i}".encode(), f"value-{i}".encode()) for i in range(start, start + count)]


def java_partition(key: bytes) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


@pytest.mark.parametrize("client_type", CLIENTS, ids=lambda c: c.name)
def test_a_kafka_client_produces_consumes_in_a_group_commits_and_resumes(
    cluster: MetadataCluster, client_type: type
) -> None:
    client = client_type()
    topic, group = f"orders-{client.name}", f"readers-{client.name}"
    kafka = ",".join(n.kafka_address for n in cluster.nodes("broker"))
    data = [n.data_address for n in cluster.nodes("broker")]
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})])[0].check()
    # every broker's metadata has the topic before the group forms: a leader that assigns
    # with no partition metadata assigns nothing, and kafka-python can take tens of seconds
    # (on a slow machine, past the test's timeout) to notice and rebalance again
    wait_until(lambda: all(topic_is_led(a, topic) for a in kafka.split(",")), timeout_s=30,
               what=f"every broker's Kafka metadata to lead all {PARTITIONS} partitions of {topic}")  # fmt: skip

    run = client.group(
        kafka,
        topic,
        group,
        FIRST,
        lambda: group_is_whole(data, group),
        lambda: client.produce(kafka, topic, keyed(0, FIRST, client.name)),
    )
    read = set(run.records)
    assert len(read) == len(run.records), "a record was read twice though no partition moved"
    assert sorted(s.key for s in read) == sorted(k for k, _ in keyed(0, FIRST, client.name))
    assert all(s.partition == java_partition(s.key) for s in read), "a key is not where murmur2 puts it"
    for first, second in [run.assignments] if run.assignments else []:
        assert not first & second and first | second == set(range(PARTITIONS))

    ends = {p: 1 + max(s.offset for s in read if s.partition == p) for p in {s.partition for s in read}}
    described = raftka_json(cluster, "groups", "describe", group)
    assert {o["partition"]: o["committed"] for o in described["offsets"]} == ends
    assert all(o["lag"] == 0 for o in described["offsets"])
    printed = raftka_lines(
        cluster, "consume", topic, "--from-beginning", "--max-messages", str(FIRST), "--timeout-ms", "10000"
    )
    assert sorted(Seen(r["partition"], r["offset"], r["key"].encode()) for r in printed) == sorted(read)

    client.produce(kafka, topic, keyed(FIRST, LATER, client.name))
    resumed = client.resume(kafka, topic, group, LATER)
    assert sorted(s.key for s in resumed) == sorted(k for k, _ in keyed(FIRST, LATER, client.name))
    assert all(s.offset >= ends.get(s.partition, 0) for s in resumed), "the new member read below the commits"


def test_a_kafka_python_member_finishes_a_join_whose_rebalance_commits_after_its_poll(tmp_path: Path) -> None:
    """Each rebalance commits only after several of the member's polls (a slow quorum), so
    a poll returns with the join's SyncGroup outstanding and a later poll must finish it.
    A member that finished its join heartbeats; one left mid-join sends nothing until its
    session ends, holding no partitions or an older generation's."""
    topic, group = "slow-rebalances", "readers"
    with broker_thread(tmp_path, {topic: PARTITIONS}) as served:
        served.broker.controller.rebalance_commit_s = 5 * POLL_MS / 1000
        beats = heartbeats_accepted(served.broker.api)
        member = KafkaPython.subscribed(topic, served.bootstrap, group, 0)
        try:
            with KafkaPython.polled([member], []) as check:
                wait_until(
                    lambda: check() or bool(beats),
                    timeout_s=30,  # under the member's 45 s session: one left mid-join is still a member
                    what="a heartbeat from the member",
                    detail=lambda: describe([served.broker.address], group),
                )
            described = describe([served.broker.address], group)
            assert described.state == "Stable" and len(described.members) == 1
            assert (described.members[0].member_id, described.generation) in beats
            assert len(member.assignment()) == PARTITIONS
        finally:
            member.close()


def heartbeats_accepted(api: BrokerApi) -> set[tuple[str, int]]:
    """(member id, generation) of every heartbeat the broker answers without an error, from now."""
    accepted: set[tuple[str, int]] = set()
    answer = api.heartbeat

    async def recorded(request: broker_pb2.HeartbeatRequest) -> broker_pb2.HeartbeatResponse:
        response = await answer(request)
        if response.status.error == controller_pb2.ErrorCode.NONE:
            accepted.add((request.member_id, request.generation_id))
        return response

    api.heartbeat = recorded
    return accepted


def topic_is_led(address: str, topic: str) -> bool:
    """The broker's Kafka Metadata names a leader for every partition of ``topic``."""
    asked = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    [found] = call(address, asked, 12, MetadataResponse).topics
    led = [p for p in found.partitions if p.error_code == 0 and p.leader_id >= 0]
    return found.error_code == 0 and len(led) == PARTITIONS


def group_is_whole(bootstrap: list[str], group: str) -> bool:
    """Stable, two members, and every partition owned by exactly one of them."""
    described = describe(bootstrap, group)
    owned = [tp.partition for m in described.members for tp in m.assignment]
    return (
        described.state == "Stable"
        and len(described.members) == 2
        and sorted(owned) == list(range(PARTITIONS))
    )


def describe(bootstrap: list[str], group: str) -> GroupDescription:
    async def described() -> GroupDescription:
        admin = GroupAdmin(bootstrap)
        try:
            return await admin.describe_group(group)
        finally:
            await admin.close()

    return asyncio.run(described())


def raftka_json(cluster: MetadataCluster, *args: str) -> dict:
    return json.loads(cluster.raftka(*args, "--output", "json", timeout_s=60))


def raftka_lines(cluster: MetadataCluster, *args: str) -> list[dict]:
    return [
        json.loads(line)
        for line in cluster.raftka(*args, "--output", "json", timeout_s=60).splitlines()
        if line
    ]


def test_kafkas_admin_client_creates_describes_and_deletes_topics(cluster: MetadataCluster) -> None:
    kafka = ",".join(n.kafka_address for n in cluster.nodes("broker"))
    admin = AdminClient({"bootstrap.servers": kafka})
    created = admin.create_topics(
        [
            KafkaNewTopic(
                "admin-made", num_partitions=4, replication_factor=3, config={"retention.ms": "3600000"}
            )
        ]
    )
    created["admin-made"].result(30)
    again = admin.create_topics([KafkaNewTopic("admin-made", num_partitions=4, replication_factor=3)])
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS"):
        again["admin-made"].result(30)
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as raftka_admin:
        described = {t.name: t for t in raftka_admin.describe_topics(["admin-made"])}
    assert len(described["admin-made"].partitions) == 4

    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "admin-made")]).values()
    configs = future.result(30)
    assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default

    admin.delete_topics(["admin-made"])["admin-made"].result(30)
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as raftka_admin:
        assert "admin-made" not in [t.name for t in raftka_admin.list_topics()]


def test_kafkas_admin_client_sets_a_brokers_replication_throttle_and_a_topics_throttled_replicas(
    cluster: MetadataCluster,
) -> None:
    """IncrementalAlterConfigs as kafka-configs and kafka-reassign-partitions --throttle send it;
    the broker serves the value it runs with in DescribeConfigs, a dynamic broker config."""
    kafka = ",".join(n.kafka_address for n in cluster.nodes("broker"))
    admin = AdminClient({"bootstrap.servers": kafka})
    broker = cluster.nodes("broker")[0].id
    admin.create_topics([KafkaNewTopic("throttled-by-kafka", num_partitions=1, replication_factor=3)])[
        "throttled-by-kafka"
    ].result(30)
    rate = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", "1048576", incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    replicas = ConfigResource(ConfigResource.Type.TOPIC, "throttled-by-kafka", incremental_configs=[
        ConfigEntry("leader.replication.throttled.replicas", "*", incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    for future in admin.incremental_alter_configs([rate, replicas]).values():
        future.result(30)
    described = raftka_json(cluster, "configs", "describe", "--broker", str(broker))
    assert {
        "name": "leader.replication.throttled.rate",
        "value": "1048576",
        "is_default": False,
    } in described["configs"]

    def served() -> bool:
        [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, str(broker))]).values()
        return future.result(30)["leader.replication.throttled.rate"].value == "1048576"

    wait_until(served, timeout_s=30, what=f"broker {broker} serving its new rate")


def test_a_topic_a_kafka_client_names_first_is_created_unless_it_says_not_to(
    cluster: MetadataCluster,
) -> None:
    kafka = [n.kafka_address for n in cluster.nodes("broker")]
    producer = Producer({"bootstrap.servers": ",".join(kafka)})
    delivered: list[tuple[object, int, int]] = []
    producer.produce(
        "auto-made",
        value=b"first",
        on_delivery=lambda error, m: delivered.append((error, m.partition(), m.offset())),
    )
    assert producer.flush(30) == 0
    assert delivered == [(None, 0, 0)]
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        [made] = admin.describe_topics(["auto-made"])
    assert [len(p.replicas) for p in made.partitions] == [
        3
    ]  # kafka.num_partitions 1, default_replication_factor 3

    asked = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="not-made")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    answer = call(kafka[0], asked, 12, MetadataResponse)
    assert [(t.name, t.error_code) for t in answer.topics] == [("not-made", 3)]
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        assert "not-made" not in [t.name for t in admin.list_topics()]
