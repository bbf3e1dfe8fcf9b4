"""KIP-890 through one broker whose partitions ask its transaction coordinator: a
transactional batch for a partition the producer's ongoing transaction does not hold is
refused (a late retry of a transaction that already ended, or a producer that skipped
AddPartitionsToTxn) and nothing is appended; one it holds is written, and the
coordinator's markers, written to the partition for real, make it readable
read_committed once the transaction commits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raftka.metadata.transactions import State
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import broker_in_process
from tests.unit.test_transaction_coordinator import TID, TOPIC, add, end, init, settled
from tests.unit.test_transaction_markers import txn_batch

E = controller_pb2.ErrorCode
Pb = broker_pb2
READ_COMMITTED = 1


async def produce(client: BrokerClient, records: bytes, tid: str = TID) -> int:
    request = Pb.ProduceRequest(acks=-1, timeout_ms=5_000, transactional_id=tid)
    request.topics.add(name=TOPIC).partitions.add(partition=0, records=records)
    answer = await client.Produce(request, timeout=10)
    return answer.status.error or answer.topics[0].partitions[0].error


async def last_stable_offset(client: BrokerClient) -> int:
    request = Pb.FetchRequest(replica_id=-1, max_bytes=1 << 20, isolation_level=READ_COMMITTED)
    request.topics.add(name=TOPIC).partitions.add(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    answer = await client.Fetch(request, timeout=10)
    return answer.topics[0].partitions[0].last_stable_offset


def test_a_batch_for_a_partition_outside_the_ongoing_transaction_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 3}, transactions_for_real=True) as broker:
            client = BrokerClient(broker.address)
            try:
                pid = (await init(client)).producer_id
                log = broker.replicas.get(TOPIC, 0).log
                assert await produce(client, txn_batch(pid, 0, b"unannounced")) == E.INVALID_TXN_STATE
                assert log.log_end_offset == 0
                assert await add(client, pid, 0, 0) == {(TOPIC, 0): E.NONE}
                assert await produce(client, txn_batch(pid, 0, b"a", b"b")) == E.NONE
                assert await last_stable_offset(client) == 0
                assert await end(client, pid, 0, committed=True) == E.NONE
                await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
                assert await last_stable_offset(client) == 3  # two records and the commit marker
                assert await produce(client, txn_batch(pid, 2, b"late")) == E.INVALID_TXN_STATE
                assert log.log_end_offset == 3
            finally:
                client.close()

    asyncio.run(main())


def test_a_fenced_epochs_batch_is_refused_as_kafka_answers_a_produce_invalid_producer_epoch(
    tmp_path: Path,
) -> None:
    """The coordinator says PRODUCER_FENCED to the verification; the produce is answered
    INVALID_PRODUCER_EPOCH, as Kafka's AddPartitionsToTxnManager maps it: clients abort on
    that and learn they are fenced from the coordinator (librdkafka takes PRODUCER_FENCED
    from a Produce as abortable too, Java's producer as fatal at once)."""

    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}, transactions_for_real=True) as broker:
            client = BrokerClient(broker.address)
            try:
                old = await init(client)
                new = await init(client)
                assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
                zombie = txn_batch(old.producer_id, 0, b"zombie", epoch=old.producer_epoch)
                assert await produce(client, zombie) == E.INVALID_PRODUCER_EPOCH
                assert broker.replicas.get(TOPIC, 0).log.log_end_offset == 0
            finally:
                client.close()

    asyncio.run(main())


def test_a_batch_is_bound_to_the_transaction_whose_producer_id_and_epoch_it_carries(tmp_path: Path) -> None:
    """Issue 29 finding 3: another client that read an open transaction's producer id, epoch
    and next sequence appended a batch to it under a transactional id of its own (or any),
    and the owner's commit committed it. The batch is refused (the coordinator issued that
    producer id to another id: INVALID_PRODUCER_ID_MAPPING) and nothing is appended, even
    while the broker's image shows the owner's transaction (it skips the coordinator only
    for the id, producer id and epoch the image binds)."""

    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}, transactions_for_real=True) as broker:
            client = BrokerClient(broker.address)
            try:
                owner = await init(client)
                pid, epoch = owner.producer_id, owner.producer_epoch
                assert (await init(client, "intruder")).producer_id != pid
                assert await add(client, pid, epoch, 0) == {(TOPIC, 0): E.NONE}
                assert await produce(client, txn_batch(pid, 0, b"owner's")) == E.NONE
                log = broker.replicas.get(TOPIC, 0).log
                for image_caught_up in (False, True):
                    if image_caught_up:
                        broker.follow_controller()
                        assert broker.replicas.image.transactions[TID].state == State.TXN_ONGOING
                    for tid in ("intruder", "nobody"):
                        injected = txn_batch(pid, 1, b"injected", epoch=epoch)
                        assert await produce(client, injected, tid) == E.INVALID_PRODUCER_ID_MAPPING
                    assert log.log_end_offset == 1
                assert await produce(client, txn_batch(pid, 1, b"owner's too")) == E.NONE
                assert await end(client, pid, epoch, committed=True) == E.NONE
                await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
                assert await last_stable_offset(client) == 3  # the owner's two records and the marker
            finally:
                client.close()

    asyncio.run(main())
