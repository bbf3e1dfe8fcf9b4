"""Who may fetch as a follower, asked over each of a broker's listeners. The data protocol
and gRPC take the principal from the connection's certificate (TLS on) and the broker
epoch from the request; the Kafka listener serves no followers at all. A refused fetch
reads nothing, above the high watermark or below, and leaves the high watermark where it
was. (The rules case by case: ``test_replication``.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from raftka.broker.authorization import BROKER_SERVICE_RULES
from raftka.broker.data_service import BrokerApi, BrokerService
from raftka.records.codec import read_records
from raftka.security.grpc_gate import PrincipalGate
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import InProcessBroker, broker_in_process
from tests.unit.kafka_wire import RawConnection, broker_thread, request_frame
from tests.unit.test_kafka_listener import one_record_batch
from tests.unit.tls_support import Certs, make_certs

E = controller_pb2.ErrorCode
TOPIC = "t"
FOLLOWER = 102  # a replica of every partition, registered at broker epoch 1
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def run(coroutine) -> None:  # noqa: ANN001
    asyncio.run(asyncio.wait_for(coroutine, 30))


@asynccontextmanager
async def grpc_broker(api: BrokerApi, tls: TlsFiles | None) -> AsyncIterator[str]:
    """The ``Broker`` gRPC service as a node serves it: behind the principal gate with TLS."""
    server = grpc.aio.server(interceptors=[PrincipalGate(BROKER_SERVICE_RULES)] if tls else [])
    broker_pb2_grpc.add_BrokerServicer_to_server(BrokerService(api), server)
    address = "127.0.0.1:0"
    port = (
        server.add_secure_port(address, tls.server_credentials) if tls else server.add_insecure_port(address)
    )
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@asynccontextmanager
async def fetcher(listener: str, broker: InProcessBroker, server_tls: TlsFiles | None) -> AsyncIterator:
    """``fetch(request, client certificate)`` over ``listener`` ("data" or "grpc")."""
    if listener == "data":

        async def over_data(
            request: broker_pb2.FetchRequest, tls: TlsFiles | None
        ) -> broker_pb2.FetchResponse:
            client = BrokerClient(broker.address, tls=tls.client_ssl if tls else None)
            try:
                return await client.Fetch(request, timeout=5)
            finally:
                client.close()

        yield over_data
        return
    async with grpc_broker(broker.api, server_tls) as address:

        async def over_grpc(
            request: broker_pb2.FetchRequest, tls: TlsFiles | None
        ) -> broker_pb2.FetchResponse:
            async with aio_channel(address, tls) as channel:
                return await broker_pb2_grpc.BrokerStub(channel).Fetch(request, timeout=5)

        yield over_grpc


def follower_fetch(replica_id: int, replica_epoch: int, fetch_offset: int) -> broker_pb2.FetchRequest:
    request = broker_pb2.FetchRequest(replica_id=replica_id, replica_epoch=replica_epoch, max_bytes=1 << 20)
    request.topics.add(name=TOPIC).partitions.add(
        partition=0, fetch_offset=fetch_offset, last_fetched_epoch=-1, partition_max_bytes=1 << 20
    )
    return request


async def produce_unreplicated(broker: InProcessBroker) -> None:
    """One record on the leader that its follower has not fetched: above the high watermark."""
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=1_000)
    request.topics.add(name=TOPIC).partitions.add(partition=0, records=one_record_batch(b"only-here"))
    assert (await broker.replicas.produce(request)).topics[0].partitions[0].error == E.NONE


def high_watermark(broker: InProcessBroker) -> int:
    return broker.replicas.get(TOPIC, 0).high_watermark


@pytest.mark.parametrize("listener", ["data", "grpc"])
def test_with_tls_only_the_followers_own_certificate_fetches_as_it(
    tmp_path: Path, certs: Certs, listener: str
) -> None:
    async def scenario() -> None:
        async with (
            broker_in_process(tmp_path, {TOPIC: 1}, tls=certs.broker, followers=(FOLLOWER,)) as broker,
            fetcher(listener, broker, certs.broker) as fetch,
        ):
            await produce_unreplicated(broker)
            spoofs = [  # (certificate, replica_epoch, answer), each claiming to be broker 102
                (certs.alice, 1, E.CLUSTER_AUTHORIZATION_FAILED),  # a client's certificate
                (certs.admin, 1, E.CLUSTER_AUTHORIZATION_FAILED),  # a super user's is no broker's
                (certs.broker, 1, E.CLUSTER_AUTHORIZATION_FAILED),  # broker 101's
                (certs.follower, 0, E.STALE_BROKER_EPOCH),  # broker 102's, an old epoch
            ]
            for tls, replica_epoch, code in spoofs:
                for fetch_offset in (0, 1):
                    answer = await fetch(follower_fetch(FOLLOWER, replica_epoch, fetch_offset), tls)
                    assert answer.status.error == code, (tls.cert.name, E.Name(answer.status.error))
                    assert not answer.topics, "a refused fetch reads nothing"
            assert high_watermark(broker) == 0

            read = await fetch(follower_fetch(FOLLOWER, 1, 0), certs.follower)
            assert [r.value for r in read_records(read.topics[0].partitions[0].records)] == [b"only-here"]
            assert (await fetch(follower_fetch(FOLLOWER, 1, 1), certs.follower)).status.error == E.NONE
            assert high_watermark(broker) == 1, "the real follower's fetch counts"

    run(scenario())


# without TLS: what the request claims, checked against the leader's image
SPOOFS = {
    "a stale broker epoch": (FOLLOWER, 0, E.STALE_BROKER_EPOCH),
    "an unknown broker": (103, 1, E.BROKER_ID_NOT_REGISTERED),
}


@pytest.mark.parametrize("listener", ["data", "grpc"])
@pytest.mark.parametrize("case", list(SPOOFS))
def test_without_tls_a_fetch_with_a_broker_epoch_not_registered_is_refused(
    tmp_path: Path, listener: str, case: str
) -> None:
    replica_id, replica_epoch, code = SPOOFS[case]

    async def scenario() -> None:
        async with (
            broker_in_process(tmp_path, {TOPIC: 1}, followers=(FOLLOWER,)) as broker,
            fetcher(listener, broker, None) as fetch,
        ):
            await produce_unreplicated(broker)
            for fetch_offset in (0, 1):
                answer = await fetch(follower_fetch(replica_id, replica_epoch, fetch_offset), None)
                assert (answer.status.error, len(answer.topics)) == (code, 0), E.Name(answer.status.error)
            assert high_watermark(broker) == 0

    run(scenario())


def kafka_fetch(version: int, topic_id: bytes) -> FetchRequest:
    """A Kafka fetch claiming to come from broker 102: ReplicaId before version 15, ReplicaState
    from; the topic by name before version 13, by id from."""
    F = FetchRequest.FetchTopic
    topic = {"topic": TOPIC} if version < 13 else {"topic_id": uuid.UUID(bytes=topic_id)}
    claim = (
        {"replica_id": FOLLOWER}
        if version < 15
        else {"replica_state": FetchRequest.ReplicaState(replica_id=FOLLOWER, replica_epoch=1)}
    )
    return FetchRequest(
        **claim,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F(
                **topic,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


@pytest.mark.parametrize("version", [12, 15])
def test_the_kafka_listener_refuses_a_fetch_from_a_follower(tmp_path: Path, version: int) -> None:
    with broker_thread(tmp_path, {TOPIC: 1}, followers=(FOLLOWER,)) as served:
        served.run(produce_unreplicated(served.broker))
        request = kafka_fetch(version, served.broker.replicas.image.topic_ids_by_name[TOPIC])
        with RawConnection(served.bootstrap) as connection:
            connection.send(request_frame(request, version, 1))
            answer = FetchResponse.decode(connection.read_frame(), version=version, header=True)
        partition = answer.responses[0].partitions[0]
        assert (partition.error_code, partition.records) == (TOPIC_AUTHORIZATION_FAILED, b"")
        assert high_watermark(served.broker) == 0
