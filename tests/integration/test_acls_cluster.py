"""ACLs with Kafka's semantics on every front end of a ``raftka cluster up --tls`` cluster.

One table of principal x operation x resource -> Kafka's answer is run against the data
listener and the gRPC ``Broker`` service (raftka's own protocol) and the Kafka listener
(Kafka's frames, kafka-python's encoding, over SSL), each principal presenting its own
certificate signed by the cluster's CA. A refusal is Kafka's code (29 topic, 30 group,
31 cluster), an unknown topic is refused like an existing one, and nothing refused is
written: the log end offsets and the committed offsets are what the allowed rows made
them. Then Kafka's own client (confluent-kafka) manages ACLs through the Kafka listener
and sees their effect."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import (
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

from raftka.broker.kafka.errors import kafka_error
from raftka.client.errors import KafkaError as RaftkaError
from raftka.client.producer import Producer as RaftkaProducer
from raftka.command import local
from raftka.records.codec import BatchBuilder
from raftka.security.certs import CLIENT_UNIT, Authority
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import broker_pb2 as Pb
from raftka.v1 import broker_pb2_grpc
from raftka.v1 import controller_pb2 as C
from raftka.wire.client import BrokerClient
from tests.integration.metadata_cluster import RAFTKA, UP_TIMEOUT_S, MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
TIMEOUT_S = 30
OK, TOPIC_REFUSED, GROUP_REFUSED, CLUSTER_REFUSED = 0, 29, 30, 31
REFUSALS = (TOPIC_REFUSED, GROUP_REFUSED, CLUSTER_REFUSED)
GRANTED, SECRET, GROUP, JOINED = "granted", "secret", "readers", "readers-joining"
USERS = ("reader", "writer", "nobody", "local-denied")


def principal(name: str) -> str:
    return f"User:CN={name},OU=client,O=raftka"


# the cluster, its certificates and its ACLs --------------------------------------------------


@dataclass
class Setup:
    cluster: MetadataCluster
    certs: dict[str, TlsFiles]
    leader: dict[str, int]  # topic -> its partition 0's leader
    coordinators: dict[str, int]  # GROUP's and JOINED's

    @property
    def coordinator(self) -> int:
        return self.coordinators[GROUP]

    listeners: dict[int, dict[str, str]]  # broker id -> listener name -> host:port

    def admin_call(self, *args: str) -> Any:
        return json.loads(raftka(self.cluster, *args, "--output", "json"))


def raftka(cluster: MetadataCluster, *args: str, stdin: str = "") -> str:
    """A ``raftka`` command as the local cluster's super user (admin.crt)."""
    done = subprocess.run(
        [*RAFTKA, *args, "--dir", str(cluster.dir)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"raftka {' '.join(args)} failed: {done.stderr.strip()}"
    return done.stdout


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path_factory.mktemp("acls") / "cluster")
    try:
        cluster.raftka("cluster", "up", "--tls", "--output", "json", timeout_s=UP_TIMEOUT_S)
        certs_dir = local.load(cluster.dir).certs_dir()
        authority = Authority(
            x509.load_pem_x509_certificate((certs_dir / "ca.crt").read_bytes()),
            load_pem_private_key((certs_dir / "ca.key").read_bytes(), password=None),
        )
        certs = {"admin": TlsFiles(certs_dir / "ca.crt", certs_dir / "admin.crt", certs_dir / "admin.key")}
        for name in USERS:
            issued = authority.issue(name, CLIENT_UNIT)
            (certs_dir / f"{name}.crt").write_bytes(issued.cert_pem)
            (certs_dir / f"{name}.key").write_bytes(issued.key_pem)
            certs[name] = TlsFiles(certs_dir / "ca.crt", certs_dir / f"{name}.crt", certs_dir / f"{name}.key")
        brokers = json.loads(raftka(cluster, "brokers", "list", "--output", "json"))
        listeners = {
            b["id"]: {e.partition("://")[0]: e.partition("://")[2] for e in b["listeners"]} for b in brokers
        }
        for topic in (GRANTED, SECRET):
            raftka(cluster, "topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
        wait_until(
            lambda: all(_knows(certs["admin"], b["DATA"], (GRANTED, SECRET)) for b in listeners.values()),
            timeout_s=TIMEOUT_S,
            what="every broker to know the topics and their leaders",
        )
        for topic in (GRANTED, SECRET):
            raftka(cluster, "produce", topic, stdin="first\n")
        for grant in (
            ("--allow-principal", principal("reader"), "--operation", "Read", "--topic", GRANTED),
            ("--allow-principal", principal("reader"), "--operation", "Read", "--group", "read",
             "--resource-pattern-type", "prefixed"),  # GROUP and JOINED
            ("--allow-principal", principal("writer"), "--operation", "Write", "--topic", "gran",
             "--resource-pattern-type", "prefixed"),
            ("--allow-principal", principal("local-denied"), "--operation", "All", "--topic", "*"),
            ("--deny-principal", principal("local-denied"), "--deny-host", "127.0.0.1", "--operation", "Read",
             "--topic", GRANTED),
            ("--deny-principal", principal("writer"), "--deny-host", "10.9.9.9", "--operation", "Write",
             "--topic", GRANTED),  # another host's deny: not the writer's from here
        ):  # fmt: skip
            raftka(cluster, "acls", "add", *grant)
        leader = {
            topic: json.loads(raftka(cluster, "topics", "describe", topic, "--output", "json"))[0][
                "partitions"
            ][0]["leader"]
            for topic in (GRANTED, SECRET)
        }
        coordinators = {
            group: asyncio.run(
                _data_call(certs["admin"], listeners[leader[GRANTED]]["DATA"], "FindCoordinator",
                           Pb.FindCoordinatorRequest(group_id=group))
            ).node_id
            for group in (GROUP, JOINED)
        }  # fmt: skip
        yield Setup(cluster, certs, leader, coordinators, listeners)
    finally:
        cluster.close()


def _knows(tls: TlsFiles, address: str, topics: tuple[str, ...]) -> bool:
    answer = asyncio.run(_data_call(tls, address, "Metadata", Pb.MetadataRequest(topics=topics)))
    return all(t.error == C.NONE and t.partitions and not t.partitions[0].offline for t in answer.topics)


async def _data_call(tls: TlsFiles, address: str, method: str, request: Any) -> Any:
    client = BrokerClient(address, tls=tls.client_ssl)
    try:
        return await getattr(client, method)(request, timeout=TIMEOUT_S)
    finally:
        client.close()


async def _grpc_call(tls: TlsFiles, address: str, method: str, request: Any) -> Any:
    async with aio_channel(address, tls) as channel:
        return await getattr(broker_pb2_grpc.BrokerStub(channel), method)(request, timeout=TIMEOUT_S)


def one_record() -> bytes:
    builder = BatchBuilder()
    builder.append(1_700_000_000_000, None, b"row")
    return bytes(builder.build())


# the front ends: one operation each, answered as Kafka's code --------------------------------


class RaftkaFront:
    """The data listener or the gRPC Broker service: raftka's own messages."""

    def __init__(self, setup: Setup, listener: str, call: Callable[..., Any]) -> None:
        self.setup, self.listener, self._call = setup, listener, call

    def _ask(self, who: str, broker: int, method: str, request: Any) -> Any:
        address = self.setup.listeners[broker][self.listener]
        return asyncio.run(self._call(self.setup.certs[who], address, method, request))

    def produce(self, who: str, topic: str) -> int:
        request = Pb.ProduceRequest(acks=-1, timeout_ms=10_000)
        request.topics.add(name=topic).partitions.add(partition=0, records=one_record())
        answer = self._ask(who, self.setup.leader.get(topic, self.setup.leader[GRANTED]), "Produce", request)
        return kafka_error(answer.status.error or answer.topics[0].partitions[0].error)

    def fetch(self, who: str, topic: str) -> int:
        request = Pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20)
        request.topics.add(name=topic).partitions.add(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        answer = self._ask(who, self.setup.leader[topic], "Fetch", request)
        return kafka_error(answer.status.error or answer.topics[0].partitions[0].error)

    def list_offsets(self, who: str, topic: str) -> int:
        request = Pb.ListOffsetsRequest()
        request.topics.add(name=topic).partitions.add(partition=0, timestamp=-1)
        answer = self._ask(who, self.setup.leader[topic], "ListOffsets", request)
        return kafka_error(answer.status.error or answer.topics[0].partitions[0].error)

    def find_coordinator(self, who: str, group: str) -> int:
        answer = self._ask(
            who, self.setup.coordinator, "FindCoordinator", Pb.FindCoordinatorRequest(group_id=group)
        )
        return kafka_error(answer.status.error)

    def join(self, who: str, group: str) -> int:
        request = Pb.JoinGroupRequest(
            group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
            protocols=[Pb.JoinGroupProtocol(name="range", metadata=b"")],
        )  # fmt: skip
        coordinator = self.setup.coordinators.get(group, self.setup.coordinator)
        return kafka_error(self._ask(who, coordinator, "JoinGroup", request).status.error)

    def commit(self, who: str, group: str, topic: str, offset: int) -> int:
        request = C.OffsetCommitRequest(group=group)
        request.topics.add(topic=topic, partitions=[C.OffsetCommitPartition(partition=0, offset=offset)])
        answer = self._ask(who, self.setup.coordinator, "OffsetCommit", request)
        return kafka_error(answer.status.error or next((p.error for p in answer.partitions), 0))

    def init_producer_id(self, who: str) -> int:
        request = Pb.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
        return kafka_error(self._ask(who, self.setup.coordinator, "InitProducerId", request).status.error)

    def topics_listed(self, who: str) -> set[str]:
        answer = self._ask(who, self.setup.coordinator, "Metadata", Pb.MetadataRequest())
        return {t.name for t in answer.topics}

    def metadata_of(self, who: str, topic: str) -> int:
        answer = self._ask(who, self.setup.coordinator, "Metadata", Pb.MetadataRequest(topics=[topic]))
        return kafka_error(answer.topics[0].error)


class KafkaFront:
    """The Kafka listener: Kafka's own requests, one connection each."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def _ask(self, who: str, broker: int, request: ApiMessage, version: int, answer: type[ApiMessage]) -> Any:
        host, _, port = self.setup.listeners[broker]["KAFKA"].rpartition(":")
        context: ssl.SSLContext = self.setup.certs[who].client_ssl
        raw = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        with context.wrap_socket(raw, server_hostname=host) as sock:
            request.API_VERSION = version
            request.with_header(correlation_id=1, client_id="acl-table")
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            length = int.from_bytes(_read(sock, 4), "big")
            return answer.decode(_read(sock, length), version=version, header=True)

    def produce(self, who: str, topic: str) -> int:
        P = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=None, acks=-1, timeout_ms=10_000,
            topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=one_record())])],
        )  # fmt: skip
        answer = self._ask(
            who, self.setup.leader.get(topic, self.setup.leader[GRANTED]), request, 9, ProduceResponse
        )
        return answer.responses[0].partition_responses[0].error_code

    def fetch(self, who: str, topic: str) -> int:
        F = FetchRequest.FetchTopic
        request = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[F(topic=topic, partitions=[F.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20)])],
        )  # fmt: skip
        answer = self._ask(who, self.setup.leader[topic], request, 11, FetchResponse)
        return answer.responses[0].partitions[0].error_code

    def list_offsets(self, who: str, topic: str) -> int:
        P = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=0,
            topics=[P(name=topic, partitions=[P.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])],
        )  # fmt: skip
        answer = self._ask(who, self.setup.leader[topic], request, 6, ListOffsetsResponse)
        return answer.topics[0].partitions[0].error_code

    def find_coordinator(self, who: str, group: str) -> int:
        request = FindCoordinatorRequest(key=group, key_type=0)
        return self._ask(who, self.setup.coordinator, request, 3, FindCoordinatorResponse).error_code

    def join(self, who: str, group: str, member_id: str = "") -> int:
        return self.joined(who, group, member_id).error_code

    def joined(self, who: str, group: str, member_id: str = "") -> Any:
        request = JoinGroupRequest(
            group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None,
        )  # fmt: skip
        return self._ask(
            who, self.setup.coordinators.get(group, self.setup.coordinator), request, 5, JoinGroupResponse
        )

    def commit(self, who: str, group: str, topic: str, offset: int) -> int:
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])],
        )  # fmt: skip
        answer = self._ask(who, self.setup.coordinator, request, 8, OffsetCommitResponse)
        return answer.topics[0].partitions[0].error_code

    def init_producer_id(self, who: str) -> int:
        request = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
        return self._ask(who, self.setup.coordinator, request, 4, InitProducerIdResponse).error_code

    def _metadata(self, who: str, topics: list[str] | None) -> Any:
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )  # fmt: skip
        return self._ask(who, self.setup.coordinator, request, 9, MetadataResponse)

    def topics_listed(self, who: str) -> set[str]:
        return {t.name for t in self._metadata(who, None).topics}

    def metadata_of(self, who: str, topic: str) -> int:
        return self._metadata(who, [topic]).topics[0].error_code


def _read(sock: ssl.SSLSocket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


FRONTS: dict[str, Callable[[Setup], Any]] = {
    "data listener": lambda s: RaftkaFront(s, "DATA", _data_call),
    "gRPC": lambda s: RaftkaFront(s, "GRPC", _grpc_call),
    "Kafka listener": KafkaFront,
}

# principal, operation, resource -> Kafka's answer (ALLOWED: served, whatever else it says)
ALLOWED = "allowed"
TABLE: list[tuple[str, str, str, int | str]] = [
    ("writer", "produce", GRANTED, OK),  # WRITE on the prefix "gran"; the deny is another host's
    ("reader", "produce", GRANTED, TOPIC_REFUSED),
    ("nobody", "produce", GRANTED, TOPIC_REFUSED),
    ("writer", "produce", SECRET, TOPIC_REFUSED),
    ("writer", "produce", "ghost", TOPIC_REFUSED),  # never "unknown topic": existence is not told
    ("reader", "fetch", GRANTED, OK),
    ("writer", "fetch", GRANTED, TOPIC_REFUSED),
    ("reader", "fetch", SECRET, TOPIC_REFUSED),
    ("local-denied", "fetch", GRANTED, TOPIC_REFUSED),  # denied from 127.0.0.1, whatever ALL allows
    ("local-denied", "fetch", SECRET, OK),
    ("reader", "list_offsets", GRANTED, OK),  # READ implies DESCRIBE
    ("writer", "list_offsets", GRANTED, OK),  # so does WRITE
    ("nobody", "list_offsets", GRANTED, TOPIC_REFUSED),
    ("reader", "metadata_of", GRANTED, OK),
    ("reader", "metadata_of", SECRET, TOPIC_REFUSED),
    ("nobody", "metadata_of", "ghost", TOPIC_REFUSED),
    ("reader", "find_coordinator", GROUP, OK),  # READ implies DESCRIBE
    ("writer", "find_coordinator", GROUP, GROUP_REFUSED),
    ("reader", "join", JOINED, ALLOWED),  # (a member there would keep GROUP's resets out)
    ("writer", "join", JOINED, GROUP_REFUSED),
    ("nobody", "join", "elsewhere", GROUP_REFUSED),
    ("writer", "init_producer_id", "", OK),  # WRITE on some topic (KIP-679)
    ("reader", "init_producer_id", "", CLUSTER_REFUSED),
]


@pytest.mark.parametrize("front_name", list(FRONTS))
def test_every_front_end_answers_the_acl_table_as_kafka(setup: Setup, front_name: str) -> None:
    front = FRONTS[front_name](setup)
    ends_before = {t: _log_end(setup, t) for t in (GRANTED, SECRET)}
    answers = {}
    for who, operation, resource, _ in TABLE:
        args = (resource,) if resource else ()
        answers[(who, operation, resource)] = getattr(front, operation)(who, *args)
    expected = {(w, o, r): e for w, o, r, e in TABLE}
    allowed_rows = {k for k, e in expected.items() if e == ALLOWED}
    assert all(answers[k] not in REFUSALS for k in allowed_rows), answers
    assert {k: v for k, v in answers.items() if k not in allowed_rows} == {
        k: e for k, e in expected.items() if k not in allowed_rows
    }
    # nothing refused was written: only the writer's one produce reached a log
    assert _log_end(setup, GRANTED) == ends_before[GRANTED] + 1
    assert _log_end(setup, SECRET) == ends_before[SECRET]
    assert "ghost" not in [t["name"] for t in setup.admin_call("topics", "list")]

    assert front.topics_listed("reader") == {GRANTED}
    assert front.topics_listed("writer") == {GRANTED}  # the prefix "gran" covers it
    assert front.topics_listed("nobody") == set()
    assert front.topics_listed("admin") >= {GRANTED, SECRET}

    marker = 100 + list(FRONTS).index(front_name)
    assert front.commit("reader", GROUP, GRANTED, marker) == OK
    assert front.commit("writer", GROUP, GRANTED, marker + 50) == GROUP_REFUSED
    assert front.commit("reader", GROUP, SECRET, marker + 50) == TOPIC_REFUSED
    committed = setup.admin_call("offsets", "fetch", "--group", GROUP)["offsets"]
    assert [(o["topic"], o["offset"]) for o in committed] == [(GRANTED, marker)]


def _log_end(setup: Setup, topic: str) -> int:
    request = Pb.ListOffsetsRequest()
    request.topics.add(name=topic).partitions.add(partition=0, timestamp=-1)
    leader = setup.admin_call("topics", "describe", topic)[0]["partitions"][0]["leader"]
    address = setup.listeners[leader]["DATA"]
    answer = asyncio.run(_data_call(setup.certs["admin"], address, "ListOffsets", request))
    assert answer.topics[0].partitions[0].error == C.NONE, answer
    return answer.topics[0].partitions[0].offset


def test_kafkas_admin_client_manages_acls_and_its_producer_obeys_them(setup: Setup) -> None:
    """confluent-kafka through the Kafka listener: the new user may not create ACLs (31)
    nor write; the admin grants WRITE with AdminClient.create_acls, sees it with
    describe_acls, and the user's producer then delivers; deleting it takes it back."""
    certs_dir = local.load(setup.cluster.dir).certs_dir()

    def config(name: str) -> dict[str, str]:
        return {
            "bootstrap.servers": ",".join(local.load(setup.cluster.dir).kafka_addresses()),
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs_dir / "ca.crt"),
            "ssl.certificate.location": str(certs_dir / f"{name}.crt"),
            "ssl.key.location": str(certs_dir / f"{name}.key"),
        }

    topic = f"kafka-acl-{uuid.uuid4().hex[:6]}"
    raftka(setup.cluster, "topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
    binding = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal("nobody"), "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    nobodys = AdminClient(config("nobody"))  # kept: a handle dropped early fails its futures
    with pytest.raises(KafkaException) as refused:
        nobodys.create_acls([binding])[binding].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    def deliver() -> KafkaError | None:
        outcome: list[KafkaError | None] = []
        producer = Producer(config("nobody") | {"message.timeout.ms": "10000"})
        producer.produce(topic, value=b"v", on_delivery=lambda error, message: outcome.append(error))
        producer.flush(TIMEOUT_S)
        assert len(outcome) == 1
        return outcome[0]

    error = deliver()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(config("admin"))
    admin.create_acls([binding])[binding].result(TIMEOUT_S)
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(TIMEOUT_S)
    assert described == [binding]
    assert deliver() is None
    assert _log_end(setup, topic) == 1
    exact = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal("nobody"), "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    deleted = admin.delete_acls([exact])[exact].result(TIMEOUT_S)
    assert deleted == [binding]
    error = deliver()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _log_end(setup, topic) == 1


def test_the_kafka_listeners_own_apis_are_judged_as_kafka_judges_them(setup: Setup) -> None:
    """What only the Kafka listener serves: configs (DescribeConfigs, which Read does not
    imply), leader epochs, auto-creation by Metadata (Create), CreateTopics and DeleteTopics
    per topic, and group listings filtered by Describe."""
    kafka = KafkaFront(setup)
    R = DescribeConfigsRequest.DescribeConfigsResource

    def configs(who: str) -> list[int]:
        request = DescribeConfigsRequest(
            resources=[R(resource_type=2, resource_name=GRANTED, configuration_keys=None),
                       R(resource_type=4, resource_name=str(setup.coordinator), configuration_keys=None)],
            include_synonyms=False, include_documentation=False,
        )  # fmt: skip
        answer = kafka._ask(who, setup.coordinator, request, 4, DescribeConfigsResponse)
        return [r.error_code for r in answer.results]

    assert configs("reader") == [TOPIC_REFUSED, CLUSTER_REFUSED]
    assert configs("local-denied") == [OK, CLUSTER_REFUSED]  # All on every topic, nothing on the cluster
    assert configs("admin") == [OK, OK]

    E = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    epochs = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[E(topic=GRANTED, partitions=[E.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])],
    )  # fmt: skip
    for who, expected in (("nobody", TOPIC_REFUSED), ("reader", OK)):
        answer = kafka._ask(who, setup.leader[GRANTED], epochs, 4, OffsetForLeaderEpochResponse)
        assert answer.topics[0].partitions[0].error_code == expected, who

    auto = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="gran-auto")], allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    made = kafka._ask(
        "writer", setup.coordinator, auto, 9, MetadataResponse
    )  # Describe (by Write), no Create
    assert made.topics[0].error_code == TOPIC_REFUSED
    C_ = CreateTopicsRequest.CreatableTopic
    create = CreateTopicsRequest(
        topics=[C_(name="made-by-writer", num_partitions=1, replication_factor=3, assignments=[], configs=[])],
        timeout_ms=10_000, validate_only=False,
    )  # fmt: skip
    created = kafka._ask("writer", setup.coordinator, create, 5, CreateTopicsResponse)
    assert created.topics[0].error_code == TOPIC_REFUSED
    delete = DeleteTopicsRequest(topic_names=[GRANTED, "ghost"], timeout_ms=10_000)
    deleted = kafka._ask("reader", setup.coordinator, delete, 4, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in deleted.responses] == [
        (GRANTED, TOPIC_REFUSED),
        ("ghost", TOPIC_REFUSED),
    ]
    listed = {t["name"] for t in setup.admin_call("topics", "list")}
    assert {"gran-auto", "made-by-writer"}.isdisjoint(listed) and GRANTED in listed

    first = kafka.joined("reader", JOINED)  # MEMBER_ID_REQUIRED, then join with the id given
    assert kafka.join("reader", JOINED, first.member_id) == OK  # a member: the group is listed
    for who, expected in (("reader", [JOINED]), ("writer", [])):
        at = setup.coordinators[JOINED]
        groups = kafka._ask(who, at, ListGroupsRequest(states_filter=[]), 4, ListGroupsResponse)
        assert [g.group_id for g in groups.groups if g.group_id == JOINED] == expected, who
        asked = DescribeGroupsRequest(groups=[JOINED], include_authorized_operations=False)
        described = kafka._ask(who, at, asked, 5, DescribeGroupsResponse)
        assert described.groups[0].error_code == (OK if expected else GROUP_REFUSED), who


def test_raftkas_own_producer_is_refused_with_kafkas_error_and_writes_nothing(setup: Setup) -> None:
    """raftka's Producer over the data listener: the writer's idempotent producer delivers
    (Write on some topic allows its InitProducerId); a principal without Write gets the
    refusal as the record's error, at once, and the log does not grow."""
    bootstrap = [setup.listeners[b]["DATA"] for b in sorted(setup.listeners)]

    def send(who: str, **options: Any) -> BaseException | None:
        producer = RaftkaProducer(bootstrap, tls=setup.certs[who], **options)
        try:
            return producer.send(GRANTED, b"from " + who.encode()).exception(TIMEOUT_S)
        finally:
            producer.close()

    end = _log_end(setup, GRANTED)
    assert send("writer") is None
    assert _log_end(setup, GRANTED) == end + 1
    refused = send("nobody", enable_idempotence=False)
    assert isinstance(refused, RaftkaError) and refused.code == "TOPIC_AUTHORIZATION_FAILED", refused
    refused = send("reader")  # idempotent: its InitProducerId needs IdempotentWrite or Write somewhere
    assert isinstance(refused, RaftkaError) and refused.code == "CLUSTER_AUTHORIZATION_FAILED", refused
    assert _log_end(setup, GRANTED) == end + 1
