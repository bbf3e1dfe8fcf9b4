"""Authorization with mutual TLS on: a controller started as ``raftka server`` builds it,
called over gRPC with certificates of different roles. A refused request is answered
with Kafka's authorization error, and the cluster is as it was: the topic is still
there and the metadata log has not grown. The pure parts (the authorizer's rules, the
quorum's gate, ACL requests and their replay) are tested on plain values."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from raftka.metadata import acl_ops
from raftka.metadata.acls import Acl, Authorizer
from raftka.metadata.image import EMPTY
from raftka.metadata.server import ControllerNode, start_controller
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.node.config import AuthorizerConfig, ConfigError, NodeConfig, Voter, parse_config
from raftka.raft.storage.meta import format_storage, new_cluster_id
from raftka.security.quorum_gate import QuorumGate
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import controller_pb2_grpc, metadata_pb2
from tests.metadata_sim.quorum import eventually
from tests.unit import metadata_support as m
from tests.unit.metadata_controller_support import E, run
from tests.unit.tls_support import Certs, make_certs

TIMEOUT_S = 5.0
ADMIN = "User:CN=admin,OU=client,O=raftka"
ALICE = "User:CN=alice,OU=client,O=raftka"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def acl(principal: str, operation: str, resource_type: str, name: str, **fields: str) -> Acl:
    values = {"pattern_type": "LITERAL", "host": "*", "permission_type": "ALLOW"} | fields
    return Acl(
        resource_type,
        name,
        values["pattern_type"],
        principal,
        values["host"],
        operation,
        values["permission_type"],
    )


# the authorizer's rules ----------------------------------------------------------------


def test_a_super_user_may_do_anything_and_nobody_else_without_an_acl() -> None:
    authorizer = Authorizer([ADMIN], dict)
    assert authorizer.allowed(ADMIN, "DELETE", "TOPIC", "orders")
    assert not authorizer.allowed(ALICE, "DELETE", "TOPIC", "orders")


@pytest.mark.parametrize(
    ("granted", "allowed", "refused"),
    [
        (acl(ALICE, "CREATE", "TOPIC", "orders"), ("CREATE", "orders"), ("CREATE", "orders2")),
        (acl(ALICE, "ALL", "TOPIC", "orders"), ("DELETE", "orders"), ("DELETE", "other")),
        (acl(ALICE, "CREATE", "TOPIC", "*"), ("CREATE", "anything"), ("DELETE", "anything")),
        (
            acl(ALICE, "CREATE", "TOPIC", "team-", pattern_type="PREFIXED"),
            ("CREATE", "team-a"),
            ("CREATE", "teama"),
        ),
        (acl("User:*", "CREATE", "TOPIC", "orders"), ("CREATE", "orders"), ("ALTER", "orders")),
    ],
)
def test_an_acl_allows_what_it_names_and_no_more(
    granted: Acl, allowed: tuple[str, str], refused: tuple[str, str]
) -> None:
    authorizer = Authorizer([], lambda: {granted.id: granted})
    assert authorizer.allowed(ALICE, allowed[0], "TOPIC", allowed[1])
    assert not authorizer.allowed(ALICE, refused[0], "TOPIC", refused[1])
    assert not authorizer.allowed("User:CN=bob,OU=client,O=raftka", *allowed[:1], "GROUP", allowed[1])


def test_a_deny_acl_wins_over_an_allow() -> None:
    allow = acl("User:*", "ALL", "TOPIC", "*")
    deny = acl(ALICE, "DELETE", "TOPIC", "orders", permission_type="DENY")
    authorizer = Authorizer([], lambda: {allow.id: allow, deny.id: deny})
    assert not authorizer.allowed(ALICE, "DELETE", "TOPIC", "orders")
    assert authorizer.allowed(ALICE, "DELETE", "TOPIC", "payments")


# ACL requests and their records ---------------------------------------------------------


def binding(principal: str = ALICE, operation: str = "CREATE", **fields: str) -> pb.AclBinding:
    values = {"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL", "host": "*"}
    values |= {"permission_type": "ALLOW"} | fields
    return pb.AclBinding(principal=principal, operation=operation, **values)


def test_acls_are_created_once_listed_deleted_and_kept_in_snapshots() -> None:
    image = EMPTY
    plan = acl_ops.create(
        image, pb.CreateAclsRequest(acls=[binding(), binding(), binding(operation="DELETE")])
    )
    assert len(plan.records) == 2  # the same ACL twice is one ACL
    image = m.replay(EMPTY, *plan.records)
    assert acl_ops.create(image, pb.CreateAclsRequest(acls=[binding()])).records == []
    assert decode_image(encode_image(image)).acls == image.acls
    listed = acl_ops.describe(image, pb.DescribeAclsRequest(filter=pb.AclBinding(operation="DELETE")))
    assert [a.operation for a in listed.acls] == ["DELETE"]
    deleted = acl_ops.delete(image, pb.DeleteAclsRequest(filters=[pb.AclBinding(principal=ALICE)]))
    assert len(deleted.response.deleted) == 2
    assert m.replay(EMPTY, *plan.records, *deleted.records).acls == {}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (binding(operation="EAT"), "operation"),
        (binding(principal="alice"), "principal"),
        (binding(resource_type="CLUSTER"), "resource_name"),
        (binding(host="example.com"), "host"),
        (binding(host="::0001"), "host"),
        (binding(pattern_type="MATCH"), "pattern_type"),
    ],
)
def test_a_bad_acl_is_refused_naming_its_field_and_writes_nothing(bad: pb.AclBinding, field: str) -> None:
    plan = acl_ops.create(EMPTY, pb.CreateAclsRequest(acls=[binding(), bad]))
    assert plan.response.status.error == E.INVALID_REQUEST
    assert plan.response.status.message.startswith(f"acls[1].{field}: ")
    assert plan.records == []


# the quorum's gate ----------------------------------------------------------------------


@dataclass
class FakeContext:
    """What the gate reads of a gRPC call: the caller's certificate."""

    pem: bytes

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_pem_cert": [self.pem]}


def test_only_controllers_vote_and_brokers_only_observe(certs: Certs) -> None:
    voters = {1, 2, 3}
    gate = QuorumGate(voters.__contains__)
    controller = gate(FakeContext(certs.controller.cert.read_bytes()))
    assert controller("vote", 1) is None
    assert "may not speak for node 2" in controller("vote", 2)
    broker = gate(FakeContext(certs.broker.cert.read_bytes()))
    assert broker("fetch", 101) is None
    assert "only controllers vote" in broker("vote", 101)
    assert "observer 101" in broker("fetch", 1)
    voters.add(101)  # a voter set in the log (KIP-853) that has since taken id 101
    assert "observer 101" in broker("fetch", 101), "the live voter set is checked, not the one at connect"
    with pytest.raises(PermissionError, match="may not join the quorum"):
        gate(FakeContext(certs.admin.cert.read_bytes()))


# a controller with TLS on, called with certificates of every kind ----------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def tls_controller(tmp_path: Path, certs: Certs) -> AsyncIterator[tuple[ControllerNode, str]]:
    port = free_port()
    config = NodeConfig(
        node_id=1,
        data_dir=tmp_path / "data",
        voters=(Voter(1, "127.0.0.1", port),),
        listener=f"127.0.0.1:{port}",
        tls=certs.controller,
        authorizer=AuthorizerConfig(super_users=(ADMIN,)),
    )
    format_storage(config.data_dir, new_cluster_id(), 1, initial_cluster=True)
    started = await start_controller(config)
    try:
        await eventually(lambda: started.controller.is_active, "the controller to activate")
        yield started, config.listener
    finally:
        await started.shutdown()


async def call(address: str, tls: TlsFiles, method: str, request: object) -> object:
    async with aio_channel(address, tls) as channel:
        return await getattr(controller_pb2_grpc.ControllerStub(channel), method)(request, timeout=TIMEOUT_S)


def log_end(started: ControllerNode) -> int:
    return started.node.core.log_end_offset


def register(broker_id: int) -> pb.BrokerRegistrationRequest:
    endpoint = metadata_pb2.BrokerEndpoint(name="DATA", host="127.0.0.1", port=9092)
    return pb.BrokerRegistrationRequest(broker_id=broker_id, incarnation_id="i", listeners=[endpoint])


async def unfenced_broker(address: str, certs: Certs) -> None:
    """Broker 101 registered and unfenced, so topics can be placed."""
    registered = await call(address, certs.broker, "BrokerRegistration", register(101))
    beat = pb.BrokerHeartbeatRequest(
        broker_id=101, broker_epoch=registered.broker_epoch, current_metadata_offset=registered.broker_epoch
    )
    assert not (await call(address, certs.broker, "BrokerHeartbeat", beat)).is_fenced


def test_a_non_super_user_cannot_delete_a_topic_and_nothing_is_written(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            await unfenced_broker(address, certs)
            create = pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
            )
            created = await call(address, certs.admin, "CreateTopics", create)
            assert created.status.error == E.NONE and created.topics[0].error == E.NONE
            end = log_end(started)
            refused = await call(address, certs.alice, "DeleteTopics", pb.DeleteTopicsRequest(names=["t"]))
            assert refused.status.error == E.TOPIC_AUTHORIZATION_FAILED
            assert ALICE in refused.status.message
            assert started.state_machine.image.topic("t") is not None
            assert log_end(started) == end

    run(body)


@pytest.mark.parametrize("who", ["client", "another broker"])
def test_only_a_brokers_own_certificate_registers_it(tmp_path: Path, certs: Certs, who: str) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            end = log_end(started)
            request = register(101) if who == "client" else register(102)
            tls = certs.admin if who == "client" else certs.broker  # broker-101's certificate
            refused = await call(address, tls, "BrokerRegistration", request)
            assert refused.status.error == E.CLUSTER_AUTHORIZATION_FAILED
            assert started.state_machine.image.brokers == {}
            assert log_end(started) == end
            registered = await call(address, certs.broker, "BrokerRegistration", register(101))
            assert registered.status.error == E.NONE

    run(body)


def test_a_group_commit_is_taken_only_from_the_certificate_of_the_broker_it_names(
    tmp_path: Path, certs: Certs
) -> None:
    """The controller fences a group's commits by the coordinator that sends them
    (``raftka.metadata.group_ops``, ``offset_ops``); with TLS that is the certificate's broker,
    so broker 101 cannot send as another broker, in a batch or a commit forwarded on its own."""

    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            await unfenced_broker(address, certs)
            create = pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
            )
            assert (await call(address, certs.admin, "CreateTopics", create)).status.error == E.NONE
            epoch = started.state_machine.image.brokers[101].epoch
            commit = pb.OffsetCommitRequest(
                group="g",
                topics=[
                    pb.OffsetCommitTopic(
                        topic="t", partitions=[pb.OffsetCommitPartition(partition=0, offset=3)]
                    )
                ],
            )
            end = log_end(started)
            claimed = pb.CommitGroupOffsetsRequest(groups=[commit], broker_id=102, broker_epoch=epoch)
            refused = await call(address, certs.broker, "CommitGroupOffsets", claimed)
            assert refused.status.error == E.CLUSTER_AUTHORIZATION_FAILED, refused.status
            assert "for broker 102: the certificate is broker 101's" in refused.status.message
            assert log_end(started) == end and "g" not in started.state_machine.image.offsets
            forwarded = pb.OffsetCommitRequest(coordinator_id=102, coordinator_epoch=epoch)
            forwarded.MergeFrom(commit)
            refused = await call(address, certs.broker, "OffsetCommit", forwarded)
            assert refused.status.error == E.CLUSTER_AUTHORIZATION_FAILED, refused.status
            assert "for broker 102: the certificate is broker 101's" in refused.status.message
            assert log_end(started) == end and "g" not in started.state_machine.image.offsets
            own = pb.CommitGroupOffsetsRequest(groups=[commit], broker_id=101, broker_epoch=epoch)
            taken = await call(address, certs.broker, "CommitGroupOffsets", own)
            assert taken.status.error == E.NONE and taken.groups[0].status.error == E.NONE, taken
            assert [o.offset for o in started.state_machine.image.offsets["g"].values()] == [3]

    run(body)


def test_an_acl_lets_a_non_super_user_create_topics(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            await unfenced_broker(address, certs)
            create = pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
            )
            assert (
                await call(address, certs.alice, "CreateTopics", create)
            ).status.error == E.TOPIC_AUTHORIZATION_FAILED
            grant = pb.CreateAclsRequest(acls=[binding(ALICE, "CREATE", resource_name="t")])
            assert (
                await call(address, certs.alice, "CreateAcls", grant)
            ).status.error == E.CLUSTER_AUTHORIZATION_FAILED
            assert (await call(address, certs.admin, "CreateAcls", grant)).status.error == E.NONE
            created = await call(address, certs.alice, "CreateTopics", create)
            assert created.status.error == E.NONE and created.topics[0].error == E.NONE
            delete = pb.DeleteTopicsRequest(names=["t"])
            assert (
                await call(address, certs.alice, "DeleteTopics", delete)
            ).status.error == E.TOPIC_AUTHORIZATION_FAILED

    run(body)


def test_a_forwarded_principal_counts_only_from_a_broker(tmp_path: Path, certs: Certs) -> None:
    """A broker forwarding a client's request is judged as that client; a client that
    claims to forward for the super user is judged as itself."""

    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            await unfenced_broker(address, certs)
            create = pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
            )
            for tls, forwarded, expected in (
                (certs.alice, ADMIN, E.TOPIC_AUTHORIZATION_FAILED),
                (certs.broker, ALICE, E.TOPIC_AUTHORIZATION_FAILED),
                (certs.broker, ADMIN, E.NONE),
            ):
                async with aio_channel(address, tls) as channel:
                    answer = await controller_pb2_grpc.ControllerStub(channel).CreateTopics(
                        create, timeout=TIMEOUT_S, metadata=(("raftka-principal", forwarded),)
                    )
                assert answer.status.error == expected, (tls.cert.name, forwarded)

    run(body)


def test_reads_are_open_to_every_certificate_of_the_cluster(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (_, address):
            listing = await call(address, certs.alice, "ListTopics", pb.ListTopicsRequest())
            assert listing.status.error == E.NONE
            async with aio_channel(address, certs.foreign) as channel:
                with pytest.raises(grpc.aio.AioRpcError):
                    await controller_pb2_grpc.ControllerStub(channel).ListTopics(
                        pb.ListTopicsRequest(), timeout=TIMEOUT_S
                    )

    run(body)


def test_super_users_are_principals_and_a_bad_one_names_the_key() -> None:
    data = {"node_id": 1, "data_dir": "d", "controller": {"quorum": {"voters": "1@127.0.0.1:9093"}}}
    config = parse_config(data | {"authorizer": {"super_users": [ADMIN]}}, Path("/x"))
    assert config.authorizer.super_users == (ADMIN,)
    with pytest.raises(ConfigError, match=r"^authorizer.super_users: expected principals like"):
        parse_config(data | {"authorizer": {"super_users": ["admin"]}}, Path("/x"))


def test_the_controller_matches_hosts_the_callers_own_or_the_one_a_broker_forwards(
    tmp_path: Path, certs: Certs
) -> None:
    """An ACL for one address applies to a caller from it: alice calling from 127.0.0.1,
    or a broker forwarding alice's request from the address alice connected to it from."""

    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (_, address):
            await unfenced_broker(address, certs)
            grant = pb.CreateAclsRequest(
                acls=[
                    binding(ALICE, "CREATE", resource_name="local", host="127.0.0.1"),
                    binding(ALICE, "CREATE", resource_name="remote", host="10.0.0.5"),
                ]
            )
            assert (await call(address, certs.admin, "CreateAcls", grant)).status.error == E.NONE

            def create(name: str) -> pb.CreateTopicsRequest:
                return pb.CreateTopicsRequest(
                    topics=[pb.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]
                )

            assert (await call(address, certs.alice, "CreateTopics", create("remote"))).status.error == (
                E.TOPIC_AUTHORIZATION_FAILED
            )
            for host, expected in (("10.0.0.6", E.TOPIC_AUTHORIZATION_FAILED), ("10.0.0.5", E.NONE)):
                async with aio_channel(address, certs.broker) as channel:
                    answer = await controller_pb2_grpc.ControllerStub(channel).CreateTopics(
                        create("remote"),
                        timeout=TIMEOUT_S,
                        metadata=(("raftka-principal", ALICE), ("raftka-host", host)),
                    )
                assert answer.status.error == expected, host
            assert (await call(address, certs.alice, "CreateTopics", create("local"))).status.error == E.NONE

    run(body)
