"""Every version Kafka 3.9 serves, for every API the Kafka listener implements, asked by a
raw client and answered in that version's shape (older clients, such as Sarama 1.22 with
its defaults, still send versions Kafka 4.0 dropped): records produced at any Produce
version read the same at any Fetch version, and a version outside the range closes the
connection as Kafka closes it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
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
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from raftka.broker.kafka.protocol import REQUEST_PREFIX, KafkaDispatcher
from raftka.broker.kafka.schemas import UnregisterBrokerRequest
from raftka.records.codec import BatchBuilder, read_records
from raftka.records.legacy import encode_message
from tests.unit.kafka_wire import BrokerThread, RawConnection, broker_thread, call, request_frame
from tests.unit.test_kafka_listener import TOPIC
from tests.unit.test_records_legacy import NOW_MS, read_set

# api key -> (min, max) a Kafka 3.9 broker serves; kafka-python's table leaves out the KRaft-only
# UnregisterBroker, which a 3.9 broker serves at v0 (its schema's listeners: broker, controller)
KAFKA_3_9 = {**BROKER_API_VERSIONS[(3, 9)], UnregisterBrokerRequest.API_KEY: (0, 0)}
PRODUCE_VERSIONS = range(KAFKA_3_9[ProduceRequest.API_KEY][0], ProduceRequest.max_version)
FETCH_VERSIONS = range(0, KAFKA_3_9[FetchRequest.API_KEY][1] + 1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    with broker_thread(tmp_path_factory.mktemp("versions"), {TOPIC: 1, "spare": 1}) as broker:
        yield broker


def test_every_api_is_served_from_kafka_3_9s_oldest_version_to_at_least_its_newest(
    served: BrokerThread,
) -> None:
    with RawConnection(served.bootstrap) as connection:
        connection.send(
            request_frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 1)
        )
        answer = ApiVersionsResponse.decode(connection.read_frame(), version=3, header=True)
    served_versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    short = {
        key: (ours, KAFKA_3_9.get(key))
        for key, ours in served_versions.items()
        if key not in KAFKA_3_9 or ours[0] != KAFKA_3_9[key][0] or ours[1] < KAFKA_3_9[key][1]
    }
    assert short == {}, "(served, Kafka 3.9's) for APIs served outside Kafka 3.9's range"
    assert len(served_versions) >= 20


def test_a_version_outside_the_range_closes_the_connection_and_apiversions_answers_version_0(
    served: BrokerThread,
) -> None:
    beyond = bytearray(request_frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12, 1))
    beyond[6:8] = (99).to_bytes(2, "big")
    with RawConnection(served.bootstrap) as connection:
        connection.send(bytes(beyond))
        assert connection.read_frame() is None  # closed, with nothing the client could misread
    unknown = bytearray(beyond)
    unknown[4:6] = (1000).to_bytes(2, "big")
    with RawConnection(served.bootstrap) as connection:
        connection.send(bytes(unknown))
        assert connection.read_frame() is None


def produce(
    served: BrokerThread, version: int, key: bytes, value: bytes, topic: str = TOPIC
) -> ProduceResponse:
    if version < 2:
        records = encode_message(0, 0, -1, key, value)
    elif version == 2:
        records = encode_message(1, 0, NOW_MS, key, value)
    else:
        records = _keyed(key, value)
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None, acks=1, timeout_ms=5_000,
        topic_data=[P(name=topic, topic_id=_topic_id(served, topic),
                      partition_data=[P.PartitionProduceData(index=0, records=records)])],
    )  # fmt: skip
    return call(served.bootstrap, request, version, ProduceResponse)


def _keyed(key: bytes, value: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(NOW_MS, key, value)
    return bytes(builder.build())


def _topic_id(served: BrokerThread, topic: str) -> uuid.UUID:
    return uuid.UUID(bytes=served.broker.api.image.topic_ids_by_name[topic])


def fetch(served: BrokerThread, version: int, offset: int = 0, topic: str = TOPIC) -> FetchResponse:
    F = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[F(topic=topic, topic_id=_topic_id(served, topic), partitions=[F.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20)])],
    )  # fmt: skip
    return call(served.bootstrap, request, version, FetchResponse)


def test_records_produced_at_every_version_read_the_same_at_every_fetch_version(served: BrokerThread) -> None:
    written = []
    for version in PRODUCE_VERSIONS:
        key, value = f"k{version}".encode(), f"produced at v{version}".encode()
        answer = produce(served, version, key, value)
        partition = answer.responses[0].partition_responses[0]
        assert (partition.error_code, partition.base_offset) == (0, len(written)), f"Produce v{version}"
        written.append((len(written), key, value))
    for version in FETCH_VERSIONS:
        partition = fetch(served, version).responses[0].partitions[0]
        assert partition.error_code == 0 and partition.high_watermark == len(written), f"Fetch v{version}"
        if version < 4:
            read = [(o, k, v) for o, _, k, v in read_set(bytes(partition.records), 0 if version < 2 else 1)]
        else:
            read = [(r.offset, r.key, r.value) for r in read_records(bytes(partition.records))]
        assert read == written, f"Fetch v{version}"


def test_a_legacy_fetch_from_the_middle_of_a_batch_starts_at_the_offset_asked(served: BrokerThread) -> None:
    builder = BatchBuilder()
    for i in range(5):
        builder.append(NOW_MS + i, None, b"%d" % i)
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5_000, topic_data=[P(
        name="spare", partition_data=[P.PartitionProduceData(index=0, records=bytes(builder.build()))])])  # fmt: skip
    assert (
        call(served.bootstrap, request, 9, ProduceResponse).responses[0].partition_responses[0].error_code
        == 0
    )
    partition = fetch(served, 3, offset=3, topic="spare").responses[0].partitions[0]
    assert read_set(bytes(partition.records), 1) == [(3, NOW_MS + 3, None, b"3"), (4, NOW_MS + 4, None, b"4")]


def test_a_legacy_message_set_that_fails_its_crc_is_refused_for_its_partition_alone(
    served: BrokerThread,
) -> None:
    good = encode_message(1, 0, NOW_MS, b"k", b"v")
    bad = good[:-1] + bytes([good[-1] ^ 1])
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5_000, topic_data=[
        P(name="spare", partition_data=[P.PartitionProduceData(index=0, records=bad)]),
        P(name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=good)])])  # fmt: skip
    before = fetch(served, 4, topic="spare").responses[0].partitions[0].high_watermark
    answer = call(served.bootstrap, request, 2, ProduceResponse)
    codes = {t.name: [(p.index, p.error_code) for p in t.partition_responses] for t in answer.responses}
    assert codes == {"spare": [(0, 2)], TOPIC: [(0, 0)]}  # CORRUPT_MESSAGE, then the good one written
    assert fetch(served, 4, topic="spare").responses[0].partitions[0].high_watermark == before


@pytest.mark.parametrize("version", range(0, 10))
def test_list_offsets_at_every_version(served: BrokerThread, version: int) -> None:
    produce(served, 3, b"k", b"v")
    P = ListOffsetsRequest.ListOffsetsTopic
    asked = (
        (-2, -1)
        + ((-3,) if version >= 7 else ())
        + ((-4,) if version >= 8 else ())
        + ((-5,) if version >= 9 else ())
    )
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[P(
        name=TOPIC, partitions=[P.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=t,
                                                       max_num_offsets=1) for t in asked])])  # fmt: skip
    answer = call(served.bootstrap, request, version, ListOffsetsResponse).topics[0].partitions
    end = fetch(served, 4).responses[0].partitions[0].high_watermark
    if version == 0:
        assert [(p.error_code, p.old_style_offsets) for p in answer] == [(0, [0]), (0, [end])]
        return
    stamps = [r.timestamp for r in read_records(bytes(fetch(served, 4).responses[0].partitions[0].records))]
    newest = stamps.index(max(stamps))  # the first record holding the largest timestamp
    expected = {-2: 0, -1: end, -3: newest, -4: 0, -5: -1}
    assert [(p.error_code, p.offset) for p in answer] == [(0, expected[t]) for t in asked]


@pytest.mark.parametrize("version", range(0, 10))
def test_offsets_commit_and_fetch_at_every_version(served: BrokerThread, version: int) -> None:
    group = f"tool-v{version}"
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1,
        topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=version + 1, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata="m")])],
    )  # fmt: skip
    committed = call(served.bootstrap, commit, version, OffsetCommitResponse)
    assert [(p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [(0, 0)]
    if version < 8:
        request = OffsetFetchRequest(group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
            name=TOPIC, partition_indexes=[0])], require_stable=False)  # fmt: skip
        topics = call(served.bootstrap, request, version, OffsetFetchResponse).topics
    else:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest(groups=[G(group_id=group, topics=None)], require_stable=False)
        topics = call(served.bootstrap, request, version, OffsetFetchResponse).groups[0].topics
    assert [(t.name, p.partition_index, p.committed_offset) for t in topics for p in t.partitions] == [
        (TOPIC, 0, version + 1)
    ]


@pytest.mark.parametrize("version", range(0, 5))
def test_offset_for_leader_epoch_at_every_version(served: BrokerThread, version: int) -> None:
    produce(served, 3, b"k", b"v")
    E = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[E(topic=TOPIC, partitions=[
        E.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])])  # fmt: skip
    answer = call(served.bootstrap, request, version, OffsetForLeaderEpochResponse).topics[0].partitions[0]
    end = fetch(served, 4).responses[0].partitions[0].high_watermark
    assert (answer.error_code, answer.end_offset) == (0, end)
    assert answer.leader_epoch == (0 if version >= 1 else -1)  # version 0 has no epoch in its answer


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_configs_at_every_version(served: BrokerThread, version: int) -> None:
    R = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(
        resources=[R(resource_type=2, resource_name=TOPIC, configuration_keys=["cleanup.policy"])],
        include_synonyms=False, include_documentation=False,
    )  # fmt: skip
    result = call(served.bootstrap, request, version, DescribeConfigsResponse).results[0]
    assert result.error_code == 0
    assert [(c.name, c.value, c.read_only) for c in result.configs] == [("cleanup.policy", "delete", False)]
    if version == 0:
        assert result.configs[0].is_default


def test_create_and_delete_topics_at_every_version(served: BrokerThread) -> None:
    created, deleted = [], []
    for version in range(0, 8):
        name = f"made-v{version}"
        T = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(
            topics=[T(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=5_000, validate_only=False,
        )  # fmt: skip
        answer = call(served.bootstrap, request, version, CreateTopicsResponse)
        created.append([(t.name, t.error_code) for t in answer.topics])
    for version in range(0, 7):
        name = f"made-v{version}"
        request = DeleteTopicsRequest(
            topic_names=[name], topics=[DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=None)],
            timeout_ms=5_000,
        )  # fmt: skip
        answer = call(served.bootstrap, request, version, DeleteTopicsResponse)
        deleted.append([(r.name, r.error_code) for r in answer.responses])
    assert created == [[(f"made-v{v}", 0)] for v in range(0, 8)]
    assert deleted == [[(f"made-v{v}", 0)] for v in range(0, 7)]


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_at_every_version(served: BrokerThread, version: int) -> None:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC, topic_id=None)],
                              allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                              include_topic_authorized_operations=False)  # fmt: skip
    answer = call(served.bootstrap, request, version, MetadataResponse)
    assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [(TOPIC, 0, 1)]


def _group_requests() -> dict[str, tuple[Any, type, Any]]:
    """API name -> (request, response type, what its answer must say), each about a group
    that does not exist (or, for a join, a new member), so every version is asked alike."""
    J = JoinGroupRequest.JoinGroupRequestProtocol
    return {
        "FindCoordinator": (FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g"]), FindCoordinatorResponse,
                            lambda a, v: (a.error_code if v < 4 else a.coordinators[0].error_code) == 0),
        "JoinGroup": (JoinGroupRequest(group_id="joined", session_timeout_ms=6_000, rebalance_timeout_ms=6_000, member_id="",
                                       group_instance_id=None, protocol_type="consumer", protocols=[J(name="range", metadata=b"")],
                                       reason=None), JoinGroupResponse,
                      lambda a, v: a.error_code == (79 if v >= 4 else 0)),  # MEMBER_ID_REQUIRED from v4 (KIP-394)
        "Heartbeat": (HeartbeatRequest(group_id="nobody", generation_id=1, member_id="m", group_instance_id=None),
                      HeartbeatResponse, lambda a, v: a.error_code == 25),  # UNKNOWN_MEMBER_ID
        "SyncGroup": (SyncGroupRequest(group_id="nobody", generation_id=1, member_id="m", group_instance_id=None,
                                       protocol_type="consumer", protocol_name="range", assignments=[]),
                      SyncGroupResponse, lambda a, v: a.error_code == 25),
        "LeaveGroup": (LeaveGroupRequest(group_id="nobody", member_id="m", members=[
                           LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None, reason=None)]),
                       LeaveGroupResponse,
                       lambda a, v: (a.error_code if v < 3 else a.members[0].error_code) == 25),
        "DescribeGroups": (DescribeGroupsRequest(groups=["never-seen"], include_authorized_operations=False),
                           DescribeGroupsResponse, lambda a, v: a.groups[0].group_state in ("Dead", "")),
        "ListGroups": (ListGroupsRequest(states_filter=[], types_filter=[]), ListGroupsResponse,
                       lambda a, v: a.error_code == 0),
        "DeleteGroups": (DeleteGroupsRequest(groups_names=["nobody"]), DeleteGroupsResponse,
                         lambda a, v: a.results[0].error_code == 69),  # GROUP_ID_NOT_FOUND
        "InitProducerId": (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1,
                                                 producer_epoch=-1), InitProducerIdResponse,
                           lambda a, v: a.error_code == 0 and a.producer_id >= 0),
    }  # fmt: skip


GROUP_CASES = [
    (name, version)
    for name, (request, _, _) in _group_requests().items()
    for version in range(KAFKA_3_9[request.API_KEY][0], KAFKA_3_9[request.API_KEY][1] + 1)
]


@pytest.mark.parametrize(("api", "version"), GROUP_CASES)
def test_group_and_producer_apis_at_every_version(served: BrokerThread, api: str, version: int) -> None:
    request, response_type, answered_right = _group_requests()[api]
    answer = call(served.bootstrap, request, version, response_type)
    assert answered_right(answer, version), answer


# kafka-python pinned to a broker version -> (the Produce, Fetch) versions it then sends
OLD_CLIENTS = {(0, 9): (1, 1), (0, 10, 0): (2, 2), (0, 10, 2): (2, 3)}


@pytest.mark.parametrize("client_version", OLD_CLIENTS)
def test_kafka_python_as_an_old_client_produces_compressed_records_and_a_group_reads_and_commits_them(
    served: BrokerThread, client_version: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kafka-python pinned to an old broker version speaks that version's APIs: Produce v1
    (magic 0) or v2 (magic 1) with gzip wrappers, Fetch v1-3, GroupCoordinator v0,
    OffsetCommit v2, ListOffsets v0-1, as the clients Kafka 3.x still serves."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    asked: set[tuple[int, int]] = set()  # (api key, version) of every request the listener reads
    dispatch = KafkaDispatcher.dispatch

    def recording(self: KafkaDispatcher, frame: memoryview):  # noqa: ANN202 - as dispatch
        asked.add(REQUEST_PREFIX.unpack_from(frame)[:2])
        return dispatch(self, frame)

    topic, group = "spare", "old-" + "-".join(map(str, client_version))
    start = fetch(served, 4, topic=topic).responses[0].partitions[0].high_watermark
    monkeypatch.setattr(KafkaDispatcher, "dispatch", recording)
    producer = KafkaProducer(bootstrap_servers=served.bootstrap, api_version=client_version,
                             compression_type="gzip", linger_ms=5, acks=1)  # fmt: skip
    sent = [(f"k{i}".encode(), f"{group} {i}".encode()) for i in range(30)]
    for key, value in sent:
        producer.send(topic, key=key, value=value)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=served.bootstrap, api_version=client_version, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
    received: list[tuple[bytes, bytes]] = []
    for _ in range(100):
        for records in consumer.poll(timeout_ms=200).values():
            received += [(r.key, r.value) for r in records if r.offset >= start]
        if len(received) >= len(sent):
            break
    consumer.commit()
    committed = consumer.committed(TopicPartition(topic, 0))
    consumer.close()
    monkeypatch.undo()
    produce_version, fetch_version = OLD_CLIENTS[client_version]
    assert {v for k, v in asked if k == ProduceRequest.API_KEY} == {produce_version}
    assert {v for k, v in asked if k == FetchRequest.API_KEY} == {fetch_version}
    assert received == sent
    assert committed == fetch(served, 4, topic=topic).responses[0].partitions[0].high_watermark
