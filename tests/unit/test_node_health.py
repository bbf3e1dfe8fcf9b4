"""Health and reflection on a node's gRPC server, and the raft state health follows.

- ``RaftNode.caught_up``: false until the node follows a live leader and has applied up
  to the high watermark that leader sent (or leads, announced); false again when the
  leader is lost, and from the first moment of ``shutdown``.
- ``NodeHealth`` behind the transport's call budgets (Watch is a stream, reflection an
  async generator: both must pass the interceptor): NOT_SERVING first, the status the
  node sets, NOT_SERVING for good after ``shut_down``; unknown names are refused;
  reflection lists the services.
- ``raftka health``: one line naming the status, exit 0 only for SERVING.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from raftka.cli.main import main
from raftka.node.health import NOT_SERVING, SERVING, NodeHealth
from raftka.raft.transport.grpc_transport import GrpcTransport
from raftka.v1 import controller_pb2
from tests.metadata_sim.quorum import Quorum, eventually
from tests.unit.transport_fakes import CLUSTER, FakeInbox, run, within

CONTROLLER = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


# RaftNode.caught_up ----------------------------------------------------------------------


def test_a_voter_is_caught_up_only_with_a_quorum_and_not_from_the_start_of_its_shutdown() -> None:
    async def body() -> None:
        quorum = Quorum()
        heard: dict[int, list[bool]] = {1: [], 2: [], 3: []}
        try:
            await quorum.start(1)
            quorum.members[1].node.add_caught_up_listener(heard[1].append)
            await asyncio.sleep(0.3)  # many election timeouts: alone, it never leads
            assert not quorum.members[1].node.caught_up and heard[1] == []
            for node_id in (2, 3):  # each listener added before the node's loop first runs
                await quorum.start(node_id)
                quorum.members[node_id].node.add_caught_up_listener(heard[node_id].append)
            for node_id in (1, 2, 3):
                await eventually(
                    lambda n=node_id: quorum.members[n].node.caught_up, f"node {node_id} caught up"
                )
            assert all(calls == [True] for calls in heard.values()), heard
            leader = quorum.leader_id()
            assert leader is not None
            follower = next(n for n in (1, 2, 3) if n != leader)
            node = quorum.members[follower].node
            assert node.core.leader_high_watermark >= 0, (
                "a follower of a live leader has heard its high watermark"
            )

            quorum.network.cut(follower, leader)  # the leader is lost after fetch_timeout_ms
            await eventually(lambda: not node.caught_up, "the cut-off follower to fall behind")
            assert heard[follower] == [True, False]
            quorum.network.heal_all()
            await eventually(lambda: node.caught_up, "the follower to catch up again")

            shutting_down = asyncio.create_task(node.shutdown())
            await asyncio.sleep(0)  # shutdown's first step, before any of its awaits end
            assert heard[follower][-1] is False and not node.caught_up
            await shutting_down
            quorum.members.pop(follower)
        finally:
            await quorum.close()

    run(body)


# NodeHealth on the transport's server ------------------------------------------------------


@contextlib.asynccontextmanager
async def serving(health: NodeHealth) -> AsyncIterator[grpc.aio.Channel]:
    transport = GrpcTransport(1, "127.0.0.1:0", {}, CLUSTER, servicers=[health.add_to_server])
    await transport.start(FakeInbox())
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
            yield channel
    finally:
        await transport.close()


async def check(channel: grpc.aio.Channel, service: str = "") -> int:
    answer = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=5
    )
    return answer.status


def test_check_answers_not_serving_until_told_and_not_serving_for_good_after_shut_down() -> None:
    async def body() -> None:
        health = NodeHealth(1, [CONTROLLER])
        async with serving(health) as channel:
            for name in ("", "raftka.v1.Raft", "raftka.v1.Controller"):
                assert await check(channel, name) == NOT_SERVING, name
            health.set_serving(True)
            for name in ("", "raftka.v1.Raft", "raftka.v1.Controller"):
                assert await check(channel, name) == SERVING, name
            health.shut_down()
            health.set_serving(True)
            assert await check(channel) == NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await check(channel, "raftka.broker.v1.Broker")
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND

    run(body)


def test_watch_streams_each_change_and_service_unknown_for_a_name_the_node_lacks() -> None:
    async def body() -> None:
        health = NodeHealth(1, [CONTROLLER])
        async with serving(health) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service="raftka.v1.Controller"))
            assert (await within(watch.read())).status == NOT_SERVING
            health.set_serving(True)
            assert (await within(watch.read())).status == SERVING
            health.shut_down()
            assert (await within(watch.read())).status == NOT_SERVING
            watch.cancel()
            unknown = stub.Watch(health_pb2.HealthCheckRequest(service="nope"))
            assert (await within(unknown.read())).status == UNKNOWN
            unknown.cancel()

    run(body)


def test_reflection_lists_the_node_services_through_the_call_budgets() -> None:
    async def body() -> None:
        async with serving(NodeHealth(1, [CONTROLLER])) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            call = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
            answers = [answer async for answer in call]
            names = {s.name for s in answers[0].list_services_response.service}
            assert names == {
                "raftka.v1.Raft",
                "raftka.v1.Controller",
                "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection",
            }
            call = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(file_containing_symbol="raftka.v1.Controller")]),
                timeout=5,
            )
            [answer] = [answer async for answer in call]
            assert answer.file_descriptor_response.file_descriptor_proto, "no descriptor for the service"

    run(body)


# raftka health ------------------------------------------------------------------------------


def answer(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's line: the last on stdout (the in-process server's logs come before it)."""
    return capsys.readouterr().out.splitlines()[-1]


def test_the_health_command_names_the_status_and_exits_0_only_when_serving(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def body() -> None:
        health = NodeHealth(1, [CONTROLLER])
        transport = GrpcTransport(1, "127.0.0.1:0", {}, CLUSTER, servicers=[health.add_to_server])
        await transport.start(FakeInbox())
        address = f"127.0.0.1:{transport.port}"
        try:
            assert await asyncio.to_thread(main, ["health", address]) == 1
            assert answer(capsys) == f"{address}: NOT_SERVING"
            health.set_serving(True)
            assert (
                await asyncio.to_thread(main, ["health", address, "--service", "raftka.v1.Controller"]) == 0
            )
            assert answer(capsys) == f"{address} raftka.v1.Controller: SERVING"
        finally:
            await transport.close()
        assert await asyncio.to_thread(main, ["health", address, "--timeout", "1"]) == 1
        assert answer(capsys).startswith(f"{address}: UNAVAILABLE (")

    run(body)


@pytest.mark.parametrize(
    ("args", "named"), [(["nohost"], "ADDRESS"), (["127.0.0.1:1", "--timeout", "0"], "--timeout")]
)
def test_the_health_command_refuses_bad_arguments_naming_them(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["health", *args])
    assert exited.value.code == 1
    assert capsys.readouterr().err.startswith(f"raftka: error: {named}")
