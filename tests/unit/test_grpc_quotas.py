"""The gRPC ``Broker`` service counts Produce and a consumer's Fetch against the same client
quotas as the data and Kafka listeners: over the quota its answer carries the throttle
time and is held that long (gRPC has no connection to mute), and a throttled fetch carries
no records."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc

from raftka.broker.data_service import BrokerApi, BrokerService
from raftka.metadata.image import frozen
from raftka.metadata.quotas import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, QuotaEntity
from raftka.v1 import broker_pb2, broker_pb2_grpc
from tests.unit.broker_in_process import InProcessBroker, broker_in_process
from tests.unit.test_kafka_listener import one_record_batch

TOPIC = "t"
QUOTA_BYTES_PER_S = 20_000


@asynccontextmanager
async def grpc_service(api: BrokerApi, held: list[int]) -> AsyncIterator[broker_pb2_grpc.BrokerStub]:
    async def hold(throttle_ms: int) -> None:
        held.append(throttle_ms)

    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(BrokerService(api, hold), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield broker_pb2_grpc.BrokerStub(channel)
    finally:
        await server.stop(None)


def limit_every_user(broker: InProcessBroker) -> None:
    quotas = {
        QuotaEntity(user=DEFAULT): {
            PRODUCER_BYTE_RATE: QUOTA_BYTES_PER_S,
            CONSUMER_BYTE_RATE: QUOTA_BYTES_PER_S,
        }
    }
    broker.controller.set_image(dataclasses.replace(broker.controller.image, client_quotas=frozen(quotas)))
    broker.follow_controller()


def test_grpc_produce_and_fetch_are_held_to_the_client_quotas(tmp_path: Path) -> None:
    async def scenario() -> None:
        held: list[int] = []
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker, grpc_service(broker.api, held) as stub:
            limit_every_user(broker)
            batch = one_record_batch(b"x" * 100_000)
            answers = []
            for _ in range(20):  # 2 MB at once against a 20 kB/s quota
                request = broker_pb2.ProduceRequest(acks=1, timeout_ms=1_000)
                request.topics.add(name=TOPIC).partitions.add(partition=0, records=batch)
                answers.append(await stub.Produce(request, timeout=10))
            assert all(a.topics[0].partitions[0].error == 0 for a in answers)
            assert answers[-1].throttle_time_ms > 0, "2 MB against a 20 kB/s quota is throttled"
            assert held == [a.throttle_time_ms for a in answers], "each answer held for its throttle time"
            held.clear()
            fetch = broker_pb2.FetchRequest(replica_id=-1, max_bytes=1 << 22)
            fetch.topics.add(name=TOPIC).partitions.add(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 22
            )
            fetched = []
            for _ in range(3):
                fetched.append(await stub.Fetch(fetch, timeout=10))
            assert (
                sum(len(p.records) for f in fetched for t in f.topics for p in t.partitions) < 2 * 100_000 * 3
            )
            throttled = [f for f in fetched if f.throttle_time_ms > 0]
            assert throttled, "a consumer over its quota is throttled"
            assert all(not p.records for f in throttled for t in f.topics for p in t.partitions)
            assert held == [f.throttle_time_ms for f in fetched]

    asyncio.run(asyncio.wait_for(scenario(), 60))
