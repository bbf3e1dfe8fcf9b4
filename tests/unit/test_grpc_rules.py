"""Every gRPC method of every service has a rule, and a method without one is refused.

The services are enumerated from the protobuf descriptors (every ``raftka.v1`` module,
plus gRPC's health and reflection), never from a hand list; each node kind's rule table
is the one its server installs (``raftka.node.assembly.node_rules``). Then a controller
with TLS, called over gRPC with the certificate of a client that holds no ACL, refuses
every method that is not open by design, and nothing of the cluster changes: the voter
set, the log end offset, topics, configs, ACLs, quotas and credentials."""

from __future__ import annotations

import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import raftka.v1
from raftka.broker.authorization import BROKER_SERVICE_RULES
from raftka.broker.data_service import BrokerService
from raftka.metadata.acls import Authorizer
from raftka.metadata.authorization import controller_rules
from raftka.node.assembly import node_rules
from raftka.node.health import HEALTH_RULES, HEALTH_SERVICE, REFLECTION_SERVICE, NodeHealth
from raftka.node.journal_service import journal_rules
from raftka.security.grpc_gate import PrincipalGate, Rules, anyone, method_names
from raftka.security.quorum_gate import QuorumGate
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import broker_pb2, broker_pb2_grpc, raft_pb2, raft_pb2_grpc
from raftka.v1 import controller_pb2 as pb
from tests.unit.broker_in_process import broker_in_process
from tests.unit.metadata_controller_support import E, run
from tests.unit.test_authorization import (
    ADMIN,
    ALICE,
    TIMEOUT_S,
    FakeContext,
    binding,
    call,
    register,
    tls_controller,
    unfenced_broker,
)
from tests.unit.tls_support import Certs, make_certs

AUTHORIZATION_FAILED = {
    E.CLUSTER_AUTHORIZATION_FAILED,
    E.TOPIC_AUTHORIZATION_FAILED,
    E.GROUP_AUTHORIZATION_FAILED,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def every_service() -> Iterator[ServiceDescriptor]:
    """Every service of every generated raftka.v1 module, and health and reflection."""
    for module in pkgutil.iter_modules(raftka.v1.__path__):
        if module.name.endswith("_pb2"):
            descriptor = __import__(f"raftka.v1.{module.name}", fromlist=["DESCRIPTOR"]).DESCRIPTOR
            yield from descriptor.services_by_name.values()
    yield HEALTH_SERVICE
    yield REFLECTION_SERVICE


def node_kinds() -> dict[str, Rules]:
    """Each node kind's rule table, as its server installs it."""
    authorizer = Authorizer([], dict)
    return {
        kind: node_rules(authorizer, lambda node_id: False, rules)
        for kind, rules in (
            ("controller", controller_rules(authorizer)),
            ("broker", BROKER_SERVICE_RULES),
            ("journal", journal_rules(authorizer)),
        )
    }


def test_every_method_of_every_service_has_a_rule_on_the_nodes_that_serve_it() -> None:
    kinds = node_kinds()
    services = list(every_service())
    assert {s.name for s in services} >= {"Raft", "Controller", "Broker", "Journal", "Health"}
    for service in services:
        methods = set(method_names(service))
        serving = [kind for kind, rules in kinds.items() if methods & set(rules)]
        assert serving, f"{service.full_name}: no node has a rule for any of its methods"
        for kind in serving:
            assert methods <= set(kinds[kind]), f"{kind}: no rule for {sorted(methods - set(kinds[kind]))}"
    for kind, rules in kinds.items():  # every server has the quorum, health and reflection
        for service in (raft_pb2.DESCRIPTOR.services_by_name["Raft"], HEALTH_SERVICE, REFLECTION_SERVICE):
            assert set(method_names(service)) <= set(rules), (kind, service.full_name)


# the gate fails closed -------------------------------------------------------------------


async def health_server(certs: Certs, rules: Rules) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=[PrincipalGate(rules)])
    health = NodeHealth(1, [])
    health.set_serving(True)
    health.add_to_server(server)
    port = server.add_secure_port("127.0.0.1:0", certs.controller.server_credentials)
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_a_method_without_a_rule_is_refused_unary_or_streaming(certs: Certs) -> None:
    async def body() -> None:
        server, address = await health_server(certs, {})  # nobody wrote a rule
        try:
            async with aio_channel(address, certs.admin) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "no rule says who may call it" in (refused.value.details() or "")
                watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await watch.read()
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        finally:
            await server.stop(None)
        server, address = await health_server(certs, HEALTH_RULES)  # open to every certificate
        try:
            async with aio_channel(address, certs.alice) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
                first = await stub.Watch(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S).read()
                assert first.status == health_pb2.HealthCheckResponse.SERVING
                reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                    timeout=TIMEOUT_S
                )
                await reflection.write(reflection_pb2.ServerReflectionRequest(list_services=""))
                listed = await reflection.read()
                assert "grpc.health.v1.Health" in [s.name for s in listed.list_services_response.service]
                reflection.cancel()
        finally:
            await server.stop(None)

    run(body)


# a client with no ACL calls everything ----------------------------------------------------


def filled(descriptor: Descriptor, depth: int = 0) -> Message:
    """A request naming something in every field (topic, group, voter... "x" or 1), so a
    rule that judges what a request names has something to judge."""
    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if field.message_type is not None:
            if depth >= 3 or field.message_type.GetOptions().map_entry:
                continue
            value = filled(field.message_type, depth + 1)
            if field.is_repeated:
                getattr(message, field.name).append(value)
            else:
                getattr(message, field.name).CopyFrom(value)
            continue
        value = _scalar(field)
        if field.is_repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
    return message


def _scalar(field: FieldDescriptor) -> Any:
    if field.type == FieldDescriptor.TYPE_STRING:
        return "x"
    if field.type == FieldDescriptor.TYPE_BYTES:
        return b"x"
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values[-1].number
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 1.0
    return 1


async def refusal(address: str, tls: TlsFiles, service: ServiceDescriptor, method: Any) -> str | None:
    """How the gate refused the call (None: it was answered)."""
    name = f"/{service.full_name}/{method.name}"
    response_type = message_factory.GetMessageClass(method.output_type)
    request = filled(method.input_type)
    async with aio_channel(address, tls) as channel:
        try:
            if method.client_streaming:
                stream = channel.stream_stream(
                    name,
                    request_serializer=_serialize,
                    response_deserializer=response_type.FromString,
                )(timeout=TIMEOUT_S)
                await stream.write(request)
                await stream.read()
                stream.cancel()
                return None
            answer = await channel.unary_unary(
                name,
                request_serializer=_serialize,
                response_deserializer=response_type.FromString,
            )(request, timeout=TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            return e.code().name if e.code() == grpc.StatusCode.PERMISSION_DENIED else None
    status = getattr(answer, "status", None)
    return (
        pb.ErrorCode.Name(status.error)
        if status is not None and status.error in AUTHORIZATION_FAILED
        else None
    )


def state(started: Any) -> tuple[Any, ...]:
    core = started.node.core
    return core.log_end_offset, core.voters, started.state_machine.image


def test_a_client_with_no_acl_is_refused_every_method_and_nothing_changes(
    tmp_path: Path, certs: Certs
) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            rules = controller_rules(Authorizer([], dict))
            services = [
                pb.DESCRIPTOR.services_by_name["Controller"],
                raft_pb2.DESCRIPTOR.services_by_name["Raft"],
            ]
            # a read by the super user: what the controller writes as it takes over is committed
            assert (
                await call(address, certs.admin, "DescribeAcls", pb.DescribeAclsRequest())
            ).status.error == 0
            before = state(started)
            answered = []
            for service in services:
                for method in service.methods:
                    name = f"/{service.full_name}/{method.name}"
                    if rules.get(name) is anyone:  # open by design: a listing filtered per caller
                        continue
                    if await refusal(address, certs.alice, service, method) is None:
                        answered.append(name)
            assert answered == [], "answered a client with no ACL"
            assert state(started) == before

    run(body)


# the voter set -------------------------------------------------------------------------


def test_a_broker_can_never_be_made_a_voter_even_by_a_super_user(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            assert (
                await call(address, certs.broker, "BrokerRegistration", register(101))
            ).status.error == E.NONE
            before = state(started)
            add = raft_pb2.AddRaftVoterRequest(
                cluster_id=started.cluster_id, voter_id=101, voter_directory_id="d" * 22, endpoints=["h:1"]
            )
            async with aio_channel(address, certs.admin) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await raft_pb2_grpc_stub(channel).AddRaftVoter(add, timeout=TIMEOUT_S)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "a broker's identity can never be a voter" in (refused.value.details() or "")
            assert state(started)[:2] == before[:2]

    run(body)


def raft_pb2_grpc_stub(channel: grpc.aio.Channel) -> Any:
    return raft_pb2_grpc.RaftStub(channel)


def test_only_a_voters_own_certificate_updates_it(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            update = raft_pb2.UpdateRaftVoterRequest(
                cluster_id=started.cluster_id, voter_id=1, voter_directory_id="d" * 22, endpoints=["h:1"]
            )
            for tls in (certs.admin, certs.broker):  # a super user is not voter 1
                async with aio_channel(address, tls) as channel:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await raft_pb2_grpc_stub(channel).UpdateRaftVoter(update, timeout=TIMEOUT_S)
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "is not its certificate" in (refused.value.details() or "")
            async with aio_channel(address, certs.controller) as channel:  # judged by the leader itself
                answer = await raft_pb2_grpc_stub(channel).UpdateRaftVoter(update, timeout=TIMEOUT_S)
            assert answer.refusal or answer.error or answer.offset  # it reached the quorum

    run(body)


def test_the_quorum_gate_remembers_the_brokers_certificates_it_has_seen(certs: Certs) -> None:
    gate = QuorumGate(lambda node_id: node_id in {1, 2, 3})
    assert not gate.is_broker(101)
    gate(FakeContext(certs.broker.cert.read_bytes()))
    assert gate.is_broker(101)
    gate(FakeContext(certs.controller.cert.read_bytes()))
    assert not gate.is_broker(1)


def test_describing_the_quorum_needs_describe_on_the_cluster(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            for tls, allowed in ((certs.alice, False), (certs.admin, True)):
                async with aio_channel(address, tls) as channel:
                    stub = raft_pb2_grpc_stub(channel)
                    if allowed:
                        assert (
                            await stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=TIMEOUT_S)
                        ).leader_id == 1
                        continue
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=TIMEOUT_S)
                    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

    run(body)


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


# what a listing shows ---------------------------------------------------------------------


def test_every_topics_configs_lists_only_those_the_caller_may_describe_configs(
    tmp_path: Path, certs: Certs
) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (_, address):
            await unfenced_broker(address, certs)
            create = pb.CreateTopicsRequest(
                topics=[
                    pb.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                    for n in ("open", "secret")
                ]
            )
            assert (await call(address, certs.admin, "CreateTopics", create)).status.error == E.NONE
            grant = pb.CreateAclsRequest(acls=[binding(ALICE, "DESCRIBE_CONFIGS", resource_name="open")])
            assert (await call(address, certs.admin, "CreateAcls", grant)).status.error == E.NONE
            listed = await call(address, certs.alice, "DescribeConfigs", pb.DescribeConfigsRequest())
            assert [t.topic for t in listed.topics] == ["open"]
            everything = await call(address, certs.admin, "DescribeConfigs", pb.DescribeConfigsRequest())
            assert [t.topic for t in everything.topics] == ["open", "secret"]

    run(body)


# a broker's gRPC server, called by a client with no ACL ---------------------------------------


# Kafka answers these listings with what the principal may see rather than refusing them
FILTERED_LISTINGS = frozenset({"ListGroups", "ListTransactions"})


def authorization_errors(message: Message) -> set[int]:
    """Every authorization error a response carries, at any depth (a refused topic,
    partition, group or transactional id is answered in its place)."""
    found: set[int] = set()
    for field, value in message.ListFields():
        values = value if field.is_repeated else [value]
        for item in values:
            if field.message_type is not None:
                found |= authorization_errors(item)
            elif (
                field.enum_type is not None
                and field.enum_type.name == "ErrorCode"
                and item in AUTHORIZATION_FAILED
            ):
                found.add(item)
    return found


def test_a_client_with_no_acl_is_refused_every_broker_method_and_nothing_changes(
    tmp_path: Path, certs: Certs
) -> None:
    """Each Broker method, with a request naming something in every field, is refused (an
    authorization error in the answer; a listing Kafka filters: no entries in it), and no
    partition, group, transaction, committed offset or producer id changes."""
    service = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
    authorizer = Authorizer([], dict)

    async def body() -> None:
        async with broker_in_process(tmp_path / "broker", {"x": 1}, authorizer=authorizer) as broker:
            server = grpc.aio.server(
                interceptors=[
                    PrincipalGate(node_rules(authorizer, lambda node_id: False, BROKER_SERVICE_RULES))
                ]
            )
            broker_pb2_grpc.add_BrokerServicer_to_server(BrokerService(broker.api), server)
            port = server.add_secure_port("127.0.0.1:0", certs.broker.server_credentials)
            await server.start()
            try:
                before = broker_state(broker)
                answered = {}
                async with aio_channel(f"127.0.0.1:{port}", certs.alice) as channel:
                    for method in service.methods:
                        response_type = message_factory.GetMessageClass(method.output_type)
                        answer = await channel.unary_unary(
                            f"/{service.full_name}/{method.name}",
                            request_serializer=_serialize,
                            response_deserializer=response_type.FromString,
                        )(filled(method.input_type), timeout=TIMEOUT_S)
                        if not authorization_errors(answer) and (
                            method.name not in FILTERED_LISTINGS
                            or any(f.is_repeated and f.message_type for f, _ in answer.ListFields())
                        ):
                            answered[method.name] = answer
                assert answered == {}, "answered a client with no ACL"
                assert broker_state(broker) == before
            finally:
                await server.stop(None)

    run(body)


def broker_state(broker: Any) -> tuple[Any, ...]:
    partition = broker.replicas.get("x", 0)
    return (
        partition.log.log_end_offset,
        broker.controller.image.groups,
        broker.controller.image.transactions,
        broker.controller.image.next_producer_id,
        broker.controller.image.offsets,
    )


def test_the_quorums_methods_judge_the_caller_not_whom_a_broker_forwards_for(
    tmp_path: Path, certs: Certs
) -> None:
    async def body() -> None:
        async with tls_controller(tmp_path, certs) as (started, address):
            remove = raft_pb2.RemoveRaftVoterRequest(
                cluster_id=started.cluster_id, voter_id=1, voter_directory_id="d"
            )
            async with aio_channel(address, certs.broker) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await raft_pb2_grpc_stub(channel).RemoveRaftVoter(
                        remove, timeout=TIMEOUT_S, metadata=(("raftka-principal", ADMIN),)
                    )
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "broker-101" in (refused.value.details() or "")

    run(body)
