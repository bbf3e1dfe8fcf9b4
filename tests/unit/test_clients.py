"""Producer and Consumer against a real broker's data service in this process: one
broker (replication factor 1) with its replica manager and partition logs on disk,
served over the data protocol on a loopback port, the metadata image given by the test."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from raftka.client import producer as producer_module
from raftka.client.cluster_metadata import ClusterMetadata, PartitionLeader, TopicInfo
from raftka.client.consumer import AsyncConsumer
from raftka.client.errors import KafkaError, OffsetOutOfRangeError, ProducerError
from raftka.client.partitioner import default_partition
from raftka.client.producer import AsyncProducer, Producer
from raftka.client.types import RecordMetadata, TopicPartition
from raftka.records.codec import BatchBuilder
from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient, WireError
from tests.unit.broker_in_process import broker_in_process

BROKER = 101
PARTITIONS = 3
TOPIC_NAME = "t"
TOPIC_ID = uuid.UUID(int=9).bytes


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[str]:
    """A broker's data service on a loopback port; yields its address."""
    async with broker_in_process(
        tmp_path, {TOPIC_NAME: PARTITIONS}, {TOPIC_NAME: {"max.message.bytes": "4000"}}
    ) as broker:
        yield broker.address


def run(tmp_path: Path, scenario: Callable[[str], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serving(tmp_path) as address:
            await scenario(address)

    asyncio.run(main())


async def produce(address: str, records: list[tuple[bytes | None, bytes]], **options: Any) -> list[Any]:
    producer = AsyncProducer(address, **options)
    try:
        futures = [await producer.send(TOPIC_NAME, value, key=key) for key, value in records]
        await producer.flush()
        return [await f for f in futures]
    finally:
        await producer.close()


def test_keyed_records_land_on_murmur2_partitions_in_send_order(tmp_path: Path) -> None:
    async def scenario(broker: str) -> None:
        records = [(b"key-%d" % (i % 7), b"v%d" % i) for i in range(300)]
        sent = await produce(broker, records, linger_ms=20)
        for (key, _), metadata in zip(records, sent, strict=True):
            assert metadata.partition == default_partition(key, PARTITIONS)
        for p in range(PARTITIONS):
            offsets = [m.offset for m in sent if m.partition == p]
            assert offsets == list(range(len(offsets))), "each partition's records in send order"

    run(tmp_path, scenario)


def test_a_consumer_reads_everything_back_and_seeks(tmp_path: Path) -> None:
    async def scenario(broker: str) -> None:
        sent = await produce(broker, [(None, b"v%d" % i) for i in range(100)])
        consumer = AsyncConsumer(broker, auto_offset_reset="earliest", fetch_max_wait_ms=50)
        try:
            await consumer.assign_topic(TOPIC_NAME)
            got = []
            while len(got) < 100:
                got += await consumer.poll(2000, 1000)
            assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(100))
            assert {(r.partition, r.offset) for r in got} == {(m.partition, m.offset) for m in sent}
            tp = TopicPartition(TOPIC_NAME, sent[-1].partition)
            consumer.seek(tp, sent[-1].offset)
            again = [r for r in await consumer.poll(2000, 10) if r.partition == tp.partition]
            assert again and again[0].offset == sent[-1].offset and again[0].value == b"v99"
            assert await consumer.position(tp) == sent[-1].offset + 1
        finally:
            await consumer.close()

    run(tmp_path, scenario)


def test_reset_policies_and_out_of_range(tmp_path: Path) -> None:
    async def scenario(broker: str) -> None:
        await produce(broker, [(b"k", b"x")] * 5)
        tp = TopicPartition(TOPIC_NAME, default_partition(b"k", PARTITIONS))
        latest = AsyncConsumer(broker, auto_offset_reset="latest")
        strict = AsyncConsumer(broker, auto_offset_reset="none")
        earliest = AsyncConsumer(broker, auto_offset_reset="earliest", fetch_max_wait_ms=50)
        try:
            await latest.assign([tp])
            assert await latest.position(tp) == 5
            await strict.assign([tp])
            with pytest.raises(OffsetOutOfRangeError, match=str(tp)):
                await strict.poll(100)
            await earliest.assign([tp])
            earliest.seek(tp, 500)  # past the end: OFFSET_OUT_OF_RANGE, then the policy
            records = []
            while len(records) < 5:
                records += await earliest.poll(2000)
            assert [r.offset for r in records] == [0, 1, 2, 3, 4]
        finally:
            for consumer in (latest, strict, earliest):
                await consumer.close()

    run(tmp_path, scenario)


def test_a_non_retriable_error_fails_fast_with_the_brokers_message(tmp_path: Path) -> None:
    async def scenario(broker: str) -> None:
        producer = AsyncProducer(broker, delivery_timeout_ms=60_000)
        try:
            future = await producer.send(TOPIC_NAME, b"x" * 5000, partition=0)  # over max.message.bytes 4000
            with pytest.raises(ProducerError) as failed:
                await asyncio.wait_for(future, 10)
            assert (
                failed.value.code == "MESSAGE_TOO_LARGE" and "max.message.bytes 4000" in failed.value.message
            )
            ok = await producer.send(TOPIC_NAME, b"small", partition=0)
            assert (await ok).offset == 0, "the partition serves on, nothing was written"
        finally:
            await producer.close()

    run(tmp_path, scenario)


def test_commit_and_committed_round_trip_and_resume(tmp_path: Path) -> None:
    async def scenario(broker: str) -> None:
        await produce(broker, [(b"k", b"v%d" % i) for i in range(10)])
        tp = TopicPartition(TOPIC_NAME, default_partition(b"k", PARTITIONS))
        first = AsyncConsumer(broker, group_id="g", auto_offset_reset="earliest", fetch_max_wait_ms=50)
        try:
            await first.assign([tp])
            taken = await first.poll(2000, 4)
            assert [r.offset for r in taken] == [0, 1, 2, 3]
            await first.commit()
            assert await first.committed([tp]) == {tp: 4}
        finally:
            await first.close()
        resumed = AsyncConsumer(broker, group_id="g", auto_offset_reset="earliest", fetch_max_wait_ms=50)
        try:
            await resumed.assign([tp])
            assert (await resumed.poll(2000, 1))[0].offset == 4
        finally:
            await resumed.close()

    run(tmp_path, scenario)


def test_acks_zero_completes_without_offsets(tmp_path: Path) -> None:
    async def scenario(broker: str) -> None:
        sent = await produce(broker, [(None, b"fire")] * 3, acks=0)
        assert {m.offset for m in sent} == {-1}

    run(tmp_path, scenario)


def test_an_acks_zero_produce_is_not_answered_and_a_refused_one_closes_the_connection(tmp_path: Path) -> None:
    def request(payload: bytes) -> broker_pb2.ProduceRequest:
        produce = broker_pb2.ProduceRequest(acks=0, timeout_ms=1000)
        produce.topics.add(name=TOPIC_NAME).partitions.add(partition=0, records=payload)
        return produce

    good = bytes(_batch(b"kept"))
    corrupt = bytearray(_batch(b"x"))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches

    async def log_end(client: BrokerClient) -> int:
        offsets = broker_pb2.ListOffsetsRequest()
        offsets.topics.add(name=TOPIC_NAME).partitions.add(partition=0, timestamp=-1)
        return (await client.ListOffsets(offsets, timeout=5)).topics[0].partitions[0].offset

    async def scenario(broker: str) -> None:
        client = BrokerClient(broker)
        try:
            await client.ProduceWithoutAnswer(request(good))
            assert (
                await log_end(client) == 1
            )  # answered in order on the same connection: the produce was taken
            await client.ProduceWithoutAnswer(request(bytes(corrupt)))
            with pytest.raises(WireError) as closed:
                await client.Metadata(
                    broker_pb2.MetadataRequest(), timeout=5
                )  # in flight as the broker hangs up
            assert closed.value.code == "UNAVAILABLE"
            with pytest.raises(WireError):
                await client.ProduceWithoutAnswer(request(good))  # the loss is reported to the sender once
            await client.ProduceWithoutAnswer(request(good))  # then a new connection
            assert await log_end(client) == 2, "nothing of the refused batch was written"
        finally:
            client.close()

    run(tmp_path, scenario)


def _batch(*values: bytes) -> bytearray:
    builder = BatchBuilder()
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    return builder.build()


def test_the_synchronous_producer_keeps_send_order_and_reports_through_futures(tmp_path: Path) -> None:
    """``send`` returns at once from any thread; the records reach the partition in the
    order sent, ``flush`` waits for all of them, and a bad record fails its own future."""

    def use(broker: str) -> tuple[list[RecordMetadata], BaseException | None]:
        producer = Producer(
            broker, linger_ms=50, batch_size=2000
        )  # the broker takes batches of 4000 bytes at most
        try:
            futures = [producer.send(TOPIC_NAME, b"v%d" % i, key=b"k") for i in range(500)]
            bad = producer.send(TOPIC_NAME, b"x", partition=PARTITIONS)  # no such partition
            producer.flush()
            assert all(f.done() for f in futures)
            return [f.result() for f in futures], bad.exception(timeout=10)
        finally:
            producer.close()

    async def scenario(broker: str) -> None:
        sent, problem = await asyncio.to_thread(use, broker)
        assert [m.offset for m in sent] == list(range(500))
        assert {m.partition for m in sent} == {default_partition(b"k", PARTITIONS)}
        assert isinstance(problem, ProducerError) and problem.code == "UNKNOWN_TOPIC_OR_PARTITION"

    run(tmp_path, scenario)


def test_a_synchronous_send_blocks_while_its_hand_off_is_full_then_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(producer_module, "HANDOFF_RECORDS_MAX", 2)

    def use(broker: str) -> int:
        producer = Producer(broker, max_block_ms=200)
        held = threading.Event()
        try:
            producer._loop.call_soon_threadsafe(held.wait)  # the loop cannot drain meanwhile
            queued = [producer.send(TOPIC_NAME, b"q%d" % i, partition=0) for i in range(2)]
            with pytest.raises(ProducerError) as full:
                producer.send(TOPIC_NAME, b"one too many", partition=0)
            assert full.value.code == "BUFFER_EXHAUSTED"
            held.set()
            return sum(1 for f in queued if f.result(timeout=10).offset >= 0)
        finally:
            held.set()
            producer.close()

    async def scenario(broker: str) -> None:
        assert await asyncio.to_thread(use, broker) == 2

    run(tmp_path, scenario)


def test_buffer_memory_back_pressure_gives_up_after_max_block() -> None:
    """Nothing can be delivered (no leader): the second record finds no room and waits
    max_block_ms, then fails naming buffer_memory."""

    async def scenario() -> None:
        producer = AsyncProducer("127.0.0.1:1", buffer_memory=1000, max_block_ms=200, linger_ms=0)
        producer.metadata.topics[TOPIC_NAME] = TopicInfo(TOPIC_NAME, TOPIC_ID, {0: PartitionLeader(-1, 0)})
        try:
            await producer.send(TOPIC_NAME, b"x" * 900, partition=0)
            with pytest.raises(ProducerError, match="buffer_memory"):
                await producer.send(TOPIC_NAME, b"y" * 900, partition=0)
        finally:
            await producer.close(timeout_s=0.1)

    asyncio.run(scenario())


def test_metadata_from_a_lagging_broker_never_sends_the_client_back_to_an_older_leader() -> None:
    def answer(leader: int, epoch: int, topic_id: bytes = TOPIC_ID) -> broker_pb2.MetadataResponse:
        response = broker_pb2.MetadataResponse()
        response.brokers.add(broker_id=leader, host="127.0.0.1", port=9000 + leader)
        response.topics.add(name=TOPIC_NAME, topic_id=topic_id).partitions.add(
            partition=0, leader=leader, leader_epoch=epoch, replicas=[1, 2], isr=[1, 2]
        )
        return response

    metadata = ClusterMetadata("127.0.0.1:1")
    metadata._adopt(answer(2, 5))
    metadata._adopt(answer(1, 4))  # a broker that has not replayed the election yet
    assert metadata.leader(TopicPartition(TOPIC_NAME, 0)) == PartitionLeader(2, 5)
    metadata._adopt(answer(1, 6))
    assert metadata.leader(TopicPartition(TOPIC_NAME, 0)) == PartitionLeader(1, 6)
    metadata._adopt(answer(1, 0, topic_id=uuid.UUID(int=77).bytes))  # re-created: its epochs start over
    assert metadata.leader(TopicPartition(TOPIC_NAME, 0)) == PartitionLeader(1, 0)


def test_wait_ready_waits_for_a_topic_the_brokers_do_not_know_yet(tmp_path: Path) -> None:
    """A topic created a moment ago reaches the brokers' metadata a little later; the
    producer waits for it within max_block_ms instead of failing at once."""

    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC_NAME: PARTITIONS}) as broker:
            producer = AsyncProducer(broker.address, max_block_ms=30_000, retry_backoff_ms=10)
            try:
                waiting = asyncio.create_task(producer.wait_ready("later"))
                while producer.metadata._refreshed_at == 0:
                    await asyncio.sleep(0.01)  # until the producer has asked and not found it
                assert not waiting.done()
                broker.set_topics({TOPIC_NAME: PARTITIONS, "later": 2})
                await waiting
                assert len((await producer.metadata.topic("later")).partitions) == 2
            finally:
                await producer.close()

    asyncio.run(main())


def test_wait_ready_gives_up_on_an_unknown_topic_after_max_block_ms(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as address:
            producer = AsyncProducer(address, max_block_ms=50, retry_backoff_ms=10)
            try:
                with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                    await producer.wait_ready("never")
            finally:
                await producer.close()

    asyncio.run(main())


def test_send_waits_for_a_topic_the_brokers_do_not_know_yet(tmp_path: Path) -> None:
    """As Kafka's producer waits up to max.block.ms in send for a topic's metadata: a
    record for a topic created a moment ago is sent once the brokers know it, not refused
    with UNKNOWN_TOPIC_OR_PARTITION at once."""

    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC_NAME: PARTITIONS}) as broker:
            producer = AsyncProducer(broker.address, max_block_ms=30_000, retry_backoff_ms=10)
            try:
                sending = asyncio.create_task(producer.send("later", b"v", partition=1))
                while producer.metadata._refreshed_at == 0:
                    await asyncio.sleep(0.01)  # until the producer has asked and not found it
                assert not sending.done()
                broker.set_topics({TOPIC_NAME: PARTITIONS, "later": 2})
                delivered = await (await sending)
                assert (delivered.topic, delivered.partition, delivered.offset) == ("later", 1, 0)
            finally:
                await producer.close()

    asyncio.run(main())
