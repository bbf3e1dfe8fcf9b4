"""The Kafka listener's translations, version by version, against one real broker in
this process: what changes between versions of the group APIs, offsets by leader epoch
and by time, and topic configs, as Kafka's clients see them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import structlog.testing
from kafka.protocol.admin import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from raftka.broker.authorization import RequestAuthorizer
from raftka.broker.kafka.cluster_apis import PARTITIONS_PER_SLICE, ClusterApis
from raftka.broker.kafka.endpoints import KAFKA_LISTENER
from raftka.metadata.image import (
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionState,
    TopicImage,
    frozen,
)
from raftka.node.config import KafkaConfig, NodeConfig
from raftka.v1 import broker_pb2, controller_pb2
from tests.unit.kafka_wire import BrokerThread, broker_thread, call
from tests.unit.test_kafka_listener import TOPIC, one_record_batch

MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION = 79, 25, 42, 3
OFFSET_OUT_OF_RANGE = 1


@pytest.fixture
def served(tmp_path: Path):
    with broker_thread(tmp_path, {TOPIC: 2}, configs={TOPIC: {"retention.ms": "60000"}}) as broker:
        yield broker


def join(served: BrokerThread, version: int, member_id: str = "", group: str = "g") -> JoinGroupResponse:
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=6_000,
        rebalance_timeout_ms=6_000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
        reason=None,
    )
    return call(served.bootstrap, request, version, JoinGroupResponse)


def test_join_group_from_version_4_asks_a_new_member_to_join_again_with_its_id(served: BrokerThread) -> None:
    first = join(served, 4)
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
    joined = join(served, 4, first.member_id)
    assert (joined.error_code, joined.member_id, joined.leader, joined.generation_id) == (
        0,
        first.member_id,
        first.member_id,
        1,
    )
    assert [m.member_id for m in joined.members] == [first.member_id]


def test_join_group_before_version_4_adds_a_new_member_at_once(served: BrokerThread) -> None:
    joined = join(served, 3, group="old-clients")
    assert joined.error_code == 0 and joined.member_id and joined.leader == joined.member_id
    assert joined.protocol_name == "range" and joined.generation_id == 1
    sync = SyncGroupRequest(
        group_id="old-clients", generation_id=1, member_id=joined.member_id, group_instance_id=None,
        protocol_type=None, protocol_name=None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"mine")],
    )  # fmt: skip
    synced = call(served.bootstrap, sync, 2, SyncGroupResponse)
    assert (synced.error_code, synced.assignment) == (0, b"mine")


def test_leave_group_speaks_for_one_member_before_version_3_and_for_each_after(served: BrokerThread) -> None:
    joined = join(served, 3, group="leavers")
    old = call(
        served.bootstrap, LeaveGroupRequest(group_id="leavers", member_id="nobody"), 2, LeaveGroupResponse
    )
    assert old.error_code == UNKNOWN_MEMBER_ID
    M = LeaveGroupRequest.MemberIdentity
    new = call(
        served.bootstrap,
        LeaveGroupRequest(
            group_id="leavers",
            members=[
                M(member_id=joined.member_id, group_instance_id=None, reason="done"),
                M(member_id="nobody", group_instance_id=None, reason=None),
            ],
        ),
        5,
        LeaveGroupResponse,
    )
    assert new.error_code == 0
    assert [(m.member_id, m.error_code) for m in new.members] == [
        (joined.member_id, 0),
        ("nobody", UNKNOWN_MEMBER_ID),
    ]


def test_find_coordinator_answers_one_key_before_version_4_and_a_batch_after(served: BrokerThread) -> None:
    port = int(served.bootstrap.rpartition(":")[2])
    old = call(served.bootstrap, FindCoordinatorRequest(key="g", key_type=0), 3, FindCoordinatorResponse)
    assert (old.error_code, old.node_id, old.port) == (0, 101, port)
    batch = call(
        served.bootstrap,
        FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]),
        4,
        FindCoordinatorResponse,
    )
    assert [(c.key, c.node_id, c.port, c.error_code) for c in batch.coordinators] == [
        ("a", 101, port, 0),
        ("b", 101, port, 0),
    ]
    transactional = call(
        served.bootstrap,
        FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]),
        4,
        FindCoordinatorResponse,
    )
    assert [(c.key, c.node_id, c.port, c.error_code) for c in transactional.coordinators] == [
        ("tx", 101, port, 0)
    ]
    unknown_kind = call(
        served.bootstrap,
        FindCoordinatorRequest(key_type=2, coordinator_keys=["x"]),
        4,
        FindCoordinatorResponse,
    )
    assert unknown_kind.coordinators[0].error_code == INVALID_REQUEST


def test_offsets_committed_from_outside_the_group_are_fetched_one_group_or_several(
    served: BrokerThread,
) -> None:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(
        group_id="tool", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(partition_index=1, committed_offset=7, committed_leader_epoch=-1, committed_metadata="m")])],
    )  # fmt: skip
    committed = call(served.bootstrap, commit, 8, OffsetCommitResponse)
    assert [(p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [(1, 0)]

    one = call(
        served.bootstrap,
        OffsetFetchRequest(group_id="tool", topics=None, require_stable=False),
        7,
        OffsetFetchResponse,
    )
    assert one.error_code == 0
    assert [
        (t.name, p.partition_index, p.committed_offset, p.metadata) for t in one.topics for p in t.partitions
    ] == [(TOPIC, 1, 7, "m")]
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    several = call(
        served.bootstrap,
        OffsetFetchRequest(
            groups=[G(group_id="tool", topics=None), G(group_id="nobody", topics=None)], require_stable=False
        ),
        8,
        OffsetFetchResponse,
    )
    found = {
        g.group_id: [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]
        for g in several.groups
    }
    assert found == {"tool": [(TOPIC, 1, 7)], "nobody": []}


def test_offsets_by_time_and_by_leader_epoch(served: BrokerThread) -> None:
    for _ in range(3):
        served.run(_produce(served))
    P = ListOffsetsRequest.ListOffsetsTopic
    asked = ListOffsetsRequest(
        replica_id=-1, isolation_level=1,
        topics=[P(name=TOPIC, partitions=[P.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=t) for t in (-2, -1, 0)])],
    )  # fmt: skip
    answer = call(served.bootstrap, asked, 6, ListOffsetsResponse)
    assert [(p.error_code, p.offset) for p in answer.topics[0].partitions] == [(0, 0), (0, 3), (0, 0)]
    E = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    epochs = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[E(topic=TOPIC, partitions=[E.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0),
                                           E.OffsetForLeaderPartition(partition=9, current_leader_epoch=-1, leader_epoch=0)])],
    )  # fmt: skip
    ends = call(served.bootstrap, epochs, 4, OffsetForLeaderEpochResponse)
    assert [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in ends.topics[0].partitions] == [
        (0, 0, 0, 3),
        (9, UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]


def fetch_one(served: BrokerThread, version: int, fetch_offset: int, last_fetched_epoch: int):  # noqa: ANN201
    """Partition 0's answer to a consumer's fetch at ``fetch_offset`` that last read ``last_fetched_epoch``."""
    F = FetchRequest.FetchTopic
    fetch = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
            partition=0, current_leader_epoch=0, fetch_offset=fetch_offset,
            last_fetched_epoch=last_fetched_epoch, partition_max_bytes=1 << 20)])],
    )  # fmt: skip
    return call(served.bootstrap, fetch, version, FetchResponse).responses[0].partitions[0]


def test_a_fetch_whose_last_epoch_is_not_on_the_leaders_log_gets_the_diverging_epoch(
    served: BrokerThread,
) -> None:
    """KIP-320: a consumer that read past where the leader's log has its last fetched epoch
    (a leader change cut what it read) learns where that epoch ends instead of reading on."""
    for _ in range(3):
        served.run(_produce(served))  # offsets 0..2 in leader epoch 0
    answers = {
        "past the epoch's end": fetch_one(served, 12, 5, 0),
        "an epoch this log never had": fetch_one(served, 12, 3, 4),
        "on the log": fetch_one(served, 12, 2, 0),
        "no epoch sent": fetch_one(served, 12, 5, -1),
        "before version 12": fetch_one(served, 11, 5, 0),
    }
    seen = {why: (p.error_code, _diverging(p), len(p.records or b"") > 0) for why, p in answers.items()}
    assert seen == {
        "past the epoch's end": (0, (0, 3), False),
        "an epoch this log never had": (0, (0, 3), False),
        "on the log": (0, None, True),
        "no epoch sent": (OFFSET_OUT_OF_RANGE, None, False),
        "before version 12": (OFFSET_OUT_OF_RANGE, None, False),
    }


@pytest.mark.parametrize(
    ("version", "error"), [(4, OFFSET_OUT_OF_RANGE), (12, OFFSET_OUT_OF_RANGE), (16, 100)]
)
def test_a_refused_partition_carries_empty_records_never_null(
    served: BrokerThread, version: int, error: int
) -> None:
    """Kafka answers an error with empty records (``MemoryRecords.EMPTY``), never null:
    librdkafka refuses a null record set ("invalid MessageSetSize -1") and logs a protocol
    parse failure on every fetch of a consumer whose position is out of range."""
    served.run(_produce(served))
    refused = fetch_one(served, version, 99, -1)  # v13+ names topics by id: this one is unknown (100)
    assert (refused.error_code, refused.records) == (error, b"")


def _diverging(partition) -> tuple[int, int] | None:  # noqa: ANN001 - a FetchResponse partition
    """(epoch, end offset) of DivergingEpoch, None when the answer has none (Kafka's default -1s)."""
    found = partition.diverging_epoch
    if found is None or (found.epoch, found.end_offset) == (-1, -1):
        return None
    return found.epoch, found.end_offset


async def _produce(served: BrokerThread) -> None:
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=1_000)
    request.topics.add(name=TOPIC).partitions.add(partition=0, records=one_record_batch(b"x"))
    response = await served.broker.replicas.produce(request)
    assert response.topics[0].partitions[0].error == 0


def test_describe_configs_shows_a_topics_settings_and_defaults_with_their_source(
    served: BrokerThread,
) -> None:
    R = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(
        resources=[R(resource_type=2, resource_name=TOPIC, configuration_keys=["retention.ms", "cleanup.policy", "min.cleanable.dirty.ratio"]),
                   R(resource_type=2, resource_name="nowhere", configuration_keys=None),
                   R(resource_type=4, resource_name="101", configuration_keys=["kafka.num_partitions"]),
                   R(resource_type=4, resource_name="101", configuration_keys=["leader.replication.throttled.rate"])],
        include_synonyms=True, include_documentation=True,
    )  # fmt: skip
    answer = call(served.bootstrap, request, 4, DescribeConfigsResponse)
    topic, missing, broker, dynamic = answer.results
    assert topic.error_code == 0
    assert [(c.name, c.value, c.config_source, c.config_type) for c in topic.configs] == [
        ("cleanup.policy", "delete", 5, 7),
        ("min.cleanable.dirty.ratio", "0.5", 5, 6),  # DOUBLE
        ("retention.ms", "60000", 1, 5),
    ]
    assert missing.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert [(c.name, c.value, c.read_only) for c in broker.configs] == [("kafka.num_partitions", "1", True)]
    assert [(c.name, c.value, c.read_only, c.config_source) for c in dynamic.configs] == [
        ("leader.replication.throttled.rate", str(2**63 - 1), False, 5)  # alterable; the default
    ]


def test_a_metadata_answer_of_many_partitions_returns_to_the_loop_while_it_is_made() -> None:
    """Every partition of a 100,000-partition cluster, made in one go, held the loop for
    2 to 3 s; the answer is made in slices of PARTITIONS_PER_SLICE, from one image."""
    per_topic = PARTITIONS_PER_SLICE // 2
    state = PartitionState(replicas=(1,), isr=(1,), leader=1, leader_epoch=3, partition_epoch=0)
    ids = {f"t{i}": uuid.uuid5(uuid.NAMESPACE_OID, f"t{i}").bytes for i in range(6)}
    kafka = Endpoint(KAFKA_LISTENER, "127.0.0.1", 9092)
    image = MetadataImage(
        offset=9,
        brokers=frozen({1: BrokerRegistration(1, "i", 1, (kafka,), "", False)}),
        topics_by_id=frozen(
            {i: TopicImage(n, i, frozen(dict.fromkeys(range(per_topic), state))) for n, i in ids.items()}
        ),
        topic_ids_by_name=frozen(ids),
    )
    config = NodeConfig(1, Path("."), (), "127.0.0.1:1", process_roles=("broker",))
    api = SimpleNamespace(image=image, cluster_id="c", authorizer=RequestAuthorizer(None))
    apis = ClusterApis(api, config)  # type: ignore[arg-type]
    asked_by_name = [MetadataRequest.MetadataRequestTopic(name=n) for n in ids]

    async def body(request: MetadataRequest) -> tuple[list[bool], MetadataResponse]:
        answering = asyncio.create_task(apis.metadata(request, 12))
        seen: list[bool] = []

        async def meanwhile() -> None:
            seen.append(answering.done())

        await asyncio.gather(answering, meanwhile())
        return seen, answering.result()

    for asked in (None, asked_by_name):
        seen, answer = asyncio.run(body(MetadataRequest(topics=asked, allow_auto_topic_creation=False)))
        assert seen == [False], "the loop ran nothing else until the whole answer was made"
        assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [
            (n, 0, per_topic) for n in sorted(ids)
        ]


def test_topics_a_client_names_but_may_not_create_are_logged_once_per_interval() -> None:
    """Metadata naming 1,000 topics the controller refuses to create, sent in a loop, was
    a log line per name per request."""
    names = ["__cluster_metadata", "a b", "é"]

    async def refuse(rpc: object, request: controller_pb2.CreateTopicsRequest, _: type) -> object:
        answer = controller_pb2.CreateTopicsResponse()
        for topic in request.topics:
            answer.topics.add(name=topic.name, error=controller_pb2.INVALID_REQUEST, message="no")
        return answer

    config = NodeConfig(1, Path("."), (), "127.0.0.1:1", process_roles=("broker",), kafka=KafkaConfig())
    api = SimpleNamespace(
        image=MetadataImage(), cluster_id="c", forward=refuse, authorizer=RequestAuthorizer(None)
    )
    apis = ClusterApis(api, config)  # type: ignore[arg-type]
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=True
    )
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            answer = asyncio.run(apis.metadata(request, 12))
            assert [(t.name, t.error_code) for t in answer.topics] == [(n, INVALID_REQUEST) for n in names]
    said = [e for e in logs if e["event"] == "topic not auto-created"]
    assert [(e["log_level"], e["topic"]) for e in said] == [("info", names[0])]
    assert said[0]["left_out"] == 0


def test_leaving_a_group_the_coordinator_does_not_hold_creates_nothing(served: BrokerThread) -> None:
    """Kafka answers UNKNOWN_MEMBER_ID and keeps nothing: a made-up group stays Dead, so no
    client can fill the coordinator's memory with LeaveGroups."""
    leave = LeaveGroupRequest(group_id="made-up", member_id="m", members=[
        LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None, reason=None)])  # fmt: skip
    for version in (0, 5):
        answer = call(served.bootstrap, leave, version, LeaveGroupResponse)
        assert (answer.error_code if version < 3 else answer.members[0].error_code) == UNKNOWN_MEMBER_ID
    described = call(
        served.bootstrap,
        DescribeGroupsRequest(groups=["made-up"], include_authorized_operations=False),
        5,
        DescribeGroupsResponse,
    )
    assert described.groups[0].group_state == "Dead"
