"""The gRPC front (``raftka.wire.grpc_front``): a node's gRPC server behind it answers as
before, sees each call's client address, and no address holds more than its share of
connections, while the cluster's own nodes keep places no client can take (5,200 sockets
from one address filled a controller's bound and 14 of 21 admin calls failed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from raftka.raft.transport.grpc_transport import GrpcTransport
from raftka.security.principal import host_of
from raftka.wire.grpc_front import FrontLimits, GrpcFront
from tests.unit.test_wire import until
from tests.unit.transport_fakes import CLUSTER, FakeInbox

SERVING = health_pb2.HealthCheckResponse.SERVING


class Recording(health.aio.HealthServicer):
    """Health, noting the client address each call is judged from."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts: list[str] = []

    async def Check(self, request, context):  # noqa: ANN001, ANN201, N802 - grpc's names
        self.hosts.append(host_of(context.peer()))
        return await super().Check(request, context)


@contextlib.asynccontextmanager
async def fronted(limits: FrontLimits, trusted: str) -> AsyncIterator[tuple[GrpcFront, Recording, int]]:
    recording = Recording()
    front = GrpcFront(limits, lambda: frozenset({trusted}))
    add = lambda server: health_pb2_grpc.add_HealthServicer_to_server(recording, server)  # noqa: E731
    transport = GrpcTransport(1, "127.0.0.1:0", {}, CLUSTER, servicers=[add], front=front)
    await transport.start(FakeInbox())
    try:
        yield front, recording, transport.port
    finally:
        await transport.close()


async def check(port: int) -> int:
    """A health check from 127.0.0.1 (a gRPC channel cannot choose its source address)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return answer.status


async def open_sockets(port: int, count: int, local_host: str) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0))
        writers.append(writer)
    return writers


def closed(writer: asyncio.StreamWriter) -> bool:
    return writer.transport.is_closing() or writer.transport.get_extra_info("socket") is None


def test_one_address_holds_no_more_than_its_share_and_others_are_served() -> None:
    async def scenario() -> None:
        limits = FrontLimits(connections_max=64, per_host_max=8, reserved=4)
        async with fronted(limits, trusted="127.0.0.9") as (front, recording, port):
            flood = await open_sockets(port, 40, "127.0.0.2")  # never a byte: no TLS, no HTTP/2
            await until(lambda: front.connections == 8 and front.closed == 32, "the flood judged")
            assert await check(port) == SERVING
            assert recording.hosts == ["127.0.0.1"]  # the client's address, not the front's
            for writer in flood:
                writer.close()
            await until(lambda: front.connections == 0, "every flood socket given back")

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_clusters_own_nodes_keep_places_clients_cannot_take() -> None:
    async def scenario() -> None:
        limits = FrontLimits(connections_max=20, per_host_max=8, reserved=4)
        async with fronted(limits, trusted="127.0.0.1") as (front, _, port):
            flood = [
                *await open_sockets(port, 8, "127.0.0.2"),
                *await open_sockets(port, 8, "127.0.0.3"),
                *await open_sockets(port, 8, "127.0.0.5"),  # no room left for these
            ]
            await until(lambda: front.connections == 16 and front.closed == 8, "the flood judged")
            assert await check(port) == SERVING  # a node of the cluster gets in all the same
            for writer in flood:
                writer.close()
            await until(lambda: front.connections == 0, "every socket given back")

    asyncio.run(asyncio.wait_for(scenario(), 30))
