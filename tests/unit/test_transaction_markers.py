"""Transactions at the partition, through one real broker's listeners: a producer's
transactional batches open a transaction, the coordinator's markers (WriteTxnMarkers, a
broker's call only) end it, the last stable offset holds read_committed consumers below
every open transaction, and an aborted transaction's records are listed for them to drop."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from raftka.client.consumer import AsyncConsumer
from raftka.client.types import TopicPartition
from raftka.metadata import transactions
from raftka.metadata.image import frozen
from raftka.metadata.transactions import State, TransactionRecord
from raftka.records.codec import BatchBuilder
from raftka.records.control import marker_batch
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import BROKER, InProcessBroker, broker_in_process

E = controller_pb2.ErrorCode
Pb = broker_pb2
TOPIC = "t"
TXN_ID = "tx"


def run(coroutine) -> None:  # noqa: ANN001
    asyncio.run(asyncio.wait_for(coroutine, 60))


def txn_batch(
    producer_id: int, sequence: int, *values: bytes, epoch: int = 0, transactional: bool = True
) -> bytes:
    builder = BatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, transactional=transactional
    )
    for value in values:
        builder.append(1_700_000_000_000, None, value)
    return bytes(builder.build())


async def produce(
    client: BrokerClient, records: bytes, transactional_id: str = TXN_ID
) -> Pb.ProducePartitionResult:
    request = Pb.ProduceRequest(acks=-1, timeout_ms=5_000, transactional_id=transactional_id)
    request.topics.add(name=TOPIC).partitions.add(partition=0, records=records)
    answer = await client.Produce(request, timeout=10)
    assert answer.status.error == E.NONE, answer.status.message
    return answer.topics[0].partitions[0]


def markers_request(
    producer_id: int, committed: bool, *, epoch: int = 0, coordinator_epoch: int = 0, broker_epoch: int = 1
) -> Pb.WriteTxnMarkersRequest:
    request = Pb.WriteTxnMarkersRequest(broker_id=BROKER, broker_epoch=broker_epoch)
    marker = request.markers.add(
        producer_id=producer_id,
        producer_epoch=epoch,
        committed=committed,
        coordinator_epoch=coordinator_epoch,
    )
    marker.topics.add(name=TOPIC, partitions=[0])
    return request


async def write_marker(client: BrokerClient, producer_id: int, committed: bool, **options: int) -> int:
    """The partition's error for the marker."""
    answer = await client.WriteTxnMarkers(markers_request(producer_id, committed, **options), timeout=10)
    assert answer.status.error == E.NONE, answer.status.message
    return answer.markers[0].topics[0].partitions[0].error


async def fetch(client: BrokerClient, offset: int, isolation_level: int) -> Pb.FetchPartitionResult:
    request = Pb.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation_level
    )
    request.topics.add(name=TOPIC).partitions.add(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    answer = await client.Fetch(request, timeout=10)
    assert answer.status.error == E.NONE, answer.status.message
    return answer.topics[0].partitions[0]


def log_end(broker: InProcessBroker) -> int:
    return broker.replicas.get(TOPIC, 0).log.log_end_offset


def test_markers_end_transactions_and_read_committed_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            client = BrokerClient(broker.address)
            try:
                assert (await produce(client, txn_batch(1, 0, b"a0", b"a1"))).base_offset == 0
                assert (await produce(client, txn_batch(2, 0, b"b0"))).base_offset == 2
                assert (
                    await produce(client, txn_batch(9, 0, b"plain", transactional=False), "")
                ).base_offset == 3
                committed = await fetch(client, 0, 1)
                assert (committed.high_watermark, committed.last_stable_offset) == (4, 0)
                assert committed.records == b"", "nothing below the first open transaction"
                uncommitted = await fetch(client, 0, 0)
                assert uncommitted.last_stable_offset == 0 and uncommitted.records != b""

                assert await write_marker(client, 1, committed=False) == E.NONE  # offset 4
                after_abort = await fetch(client, 0, 1)
                assert after_abort.last_stable_offset == 2, "producer 2's transaction is still open"
                assert [(t.producer_id, t.first_offset) for t in after_abort.aborted_transactions] == [(1, 0)]

                assert await write_marker(client, 2, committed=True) == E.NONE  # offset 5
                done = await fetch(client, 0, 1)
                assert (done.last_stable_offset, done.high_watermark) == (6, 6)
                assert [(t.producer_id, t.first_offset) for t in done.aborted_transactions] == [(1, 0)]
                assert [
                    (t.producer_id, t.first_offset) for t in (await fetch(client, 5, 1)).aborted_transactions
                ] == []
                listed = Pb.ListOffsetsRequest(isolation_level=1)
                listed.topics.add(name=TOPIC).partitions.add(partition=0, timestamp=-1)
                assert (await client.ListOffsets(listed, timeout=10)).topics[0].partitions[0].offset == 6
            finally:
                client.close()

    run(scenario())


async def interleaved_transactions(client: BrokerClient) -> None:
    """Producer 1 aborts a0 a1 a2, producer 2 commits c0 c1, p0 p1 are no transaction's;
    offsets: a0 a1 @0-1, c0 @2, p0 @3, a2 @4, c1 @5, abort @6, commit @7, p1 @8."""
    await produce(client, txn_batch(1, 0, b"a0", b"a1"))
    await produce(client, txn_batch(2, 0, b"c0"))
    await produce(client, txn_batch(9, 0, b"p0", transactional=False), "")
    await produce(client, txn_batch(1, 2, b"a2"))
    await produce(client, txn_batch(2, 1, b"c1"))
    assert await write_marker(client, 1, committed=False) == E.NONE
    assert await write_marker(client, 2, committed=True) == E.NONE
    await produce(client, txn_batch(9, 1, b"p1", transactional=False), "")


async def consumed(broker: InProcessBroker, isolation_level: str, count: int) -> tuple[list[bytes], int]:
    """The values a consumer of the partition polls until it has ``count``, and its position
    once it has polled once more."""
    consumer = AsyncConsumer(
        broker.address, auto_offset_reset="earliest", isolation_level=isolation_level, fetch_max_wait_ms=50
    )
    tp = TopicPartition(TOPIC, 0)
    try:
        await consumer.assign([tp])
        values: list[bytes] = []
        for _ in range(200):
            values += [r.value for r in await consumer.poll(100)]
            if len(values) >= count and await consumer.position(tp) == log_end(broker):
                break
        return values, await consumer.position(tp)
    finally:
        await consumer.close()


def test_the_consumer_drops_aborted_records_read_committed_and_never_returns_markers(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            client = BrokerClient(broker.address)
            try:
                await interleaved_transactions(client)
            finally:
                client.close()
            assert log_end(broker) == 9
            committed, position = await consumed(broker, "read_committed", 4)
            assert (committed, position) == ([b"c0", b"p0", b"c1", b"p1"], 9)
            everything, position = await consumed(broker, "read_uncommitted", 7)
            assert (everything, position) == ([b"a0", b"a1", b"c0", b"p0", b"a2", b"c1", b"p1"], 9)
            client = BrokerClient(broker.address)
            try:
                await produce(client, txn_batch(3, 0, b"open"))  # @9, never ended
            finally:
                client.close()
            for level, end in (("read_committed", 9), ("read_uncommitted", 10)):
                consumer = AsyncConsumer(broker.address, isolation_level=level)
                try:
                    tp = TopicPartition(TOPIC, 0)
                    assert await consumer.end_offsets([tp]) == {tp: end}
                    await consumer.assign([tp])  # auto_offset_reset latest
                    assert await consumer.position(tp) == end
                finally:
                    await consumer.close()

    run(scenario())


class Verifier:
    """A coordinator's answers, recorded; ``held`` keeps each verification in flight until set."""

    def __init__(self, code: int | Exception = E.NONE) -> None:
        self.code = code
        self.asked: list[tuple[str, int, int, str, int]] = []
        self.held: asyncio.Event | None = None
        self.arrived = asyncio.Event()

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> int:
        self.asked.append((transactional_id, producer_id, producer_epoch, topic, partition))
        self.arrived.set()
        if self.held is not None:
            await self.held.wait()
        if isinstance(self.code, Exception):
            raise self.code
        return self.code


def test_a_batch_opening_a_transaction_is_verified_first_and_a_refusal_writes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            verifier = broker.replicas.verifier = Verifier(E.INVALID_TXN_STATE)
            client = BrokerClient(broker.address)
            try:
                refused = await produce(client, txn_batch(1, 0, b"late"))
                assert refused.error == E.INVALID_TXN_STATE and "refused it" in refused.message
                assert log_end(broker) == 0 and verifier.asked == [(TXN_ID, 1, 0, TOPIC, 0)]
                verifier.code = E.COORDINATOR_NOT_AVAILABLE  # Kafka: retriable for any producer
                retry = await produce(client, txn_batch(1, 0, b"late"))
                assert retry.error == E.NOT_ENOUGH_REPLICAS and "COORDINATOR_NOT_AVAILABLE" in retry.message
                verifier.code = RuntimeError("the coordinator's link failed")
                retry = await produce(client, txn_batch(1, 0, b"late"))
                assert retry.error == E.NOT_ENOUGH_REPLICAS and "link failed" in retry.message
                assert log_end(broker) == 0 and broker.replicas.get(TOPIC, 0).log.producers.verifying == {}
                verifier.asked.clear()
                verifier.code = E.NONE
                assert (await produce(client, txn_batch(1, 0, b"a"))).base_offset == 0
                assert (await produce(client, txn_batch(1, 1, b"b"))).base_offset == 1
                assert len(verifier.asked) == 2, "bound to its transaction only by the coordinator"
                ongoing = TransactionRecord(
                    transactional_id=TXN_ID, producer_id=1, producer_epoch=0, state=State.TXN_ONGOING
                )
                transactions.with_partitions(ongoing, {(TOPIC, 0)})
                broker.adopt(
                    dataclasses.replace(broker.replicas.image, transactions=frozen({TXN_ID: ongoing}))
                )
                assert (await produce(client, txn_batch(1, 2, b"c"))).base_offset == 2
                assert len(verifier.asked) == 2, (
                    "a batch continuing its open transaction, bound to it by the image, is not verified again"
                )
                assert await write_marker(client, 1, committed=True) == E.NONE
                assert (await produce(client, txn_batch(1, 3, b"next"))).base_offset == 4
                assert len(verifier.asked) == 3, "the next transaction is verified again"
            finally:
                client.close()

    run(scenario())


def test_a_marker_written_while_a_verification_is_in_flight_voids_it(tmp_path: Path) -> None:
    """KIP-890's guard: the coordinator ended the transaction (its marker is here) while the
    producer's late batch was being verified: the batch must not open a new transaction."""

    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            verifier = broker.replicas.verifier = Verifier()
            verifier.held = asyncio.Event()
            client, coordinator = BrokerClient(broker.address), BrokerClient(broker.address)
            try:
                late = asyncio.create_task(produce(client, txn_batch(1, 0, b"late")))
                await asyncio.wait_for(verifier.arrived.wait(), 30)
                assert await write_marker(coordinator, 1, committed=False) == E.NONE
                verifier.held.set()
                answer = await late
                assert (
                    answer.error == E.INVALID_TXN_STATE
                    and "not part of an ongoing transaction" in answer.message
                )
                assert log_end(broker) == 1, "the marker alone"
                assert broker.replicas.get(TOPIC, 0).last_stable_offset == 1
            finally:
                client.close()
                coordinator.close()

    run(scenario())


def test_a_clients_control_batch_and_an_unknown_isolation_level_are_refused_naming_them(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            client = BrokerClient(broker.address)
            try:
                forged = await produce(client, bytes(marker_batch(1, 0, False, 0, 1_700_000_000_000)))
                assert forged.error == E.INVALID_RECORD and "control batches" in forged.message
                assert log_end(broker) == 0
                request = Pb.FetchRequest(replica_id=-1, max_bytes=1 << 20, isolation_level=2)
                request.topics.add(name=TOPIC).partitions.add(partition=0, partition_max_bytes=1 << 20)
                answer = await client.Fetch(request, timeout=10)
                assert (
                    answer.status.error == E.INVALID_REQUEST and "isolation_level: 2" in answer.status.message
                )
                listed = Pb.ListOffsetsRequest(isolation_level=-1)
                listed.topics.add(name=TOPIC).partitions.add(partition=0, timestamp=-1)
                answer = await client.ListOffsets(listed, timeout=10)
                assert (
                    answer.status.error == E.INVALID_REQUEST
                    and "isolation_level: -1" in answer.status.message
                )
                assert (await produce(client, txn_batch(1, 0, b"after"))).base_offset == 0, "it serves on"
            finally:
                client.close()

    run(scenario())
