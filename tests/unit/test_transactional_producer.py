"""raftka's transactional producer (confluent-kafka's API) against one in-process broker
whose coordinator writes real markers and whose partitions verify transactional batches:
records of a committed transaction are read read_committed and those of an aborted one
never are; the consumed offsets sent into a transaction are the group's once it commits;
a second producer with the same transactional id fences the first; misuse is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftka.client.consumer import AsyncConsumer
from raftka.client.errors import ProducerError
from raftka.client.producer import AsyncProducer
from raftka.client.types import ConsumerGroupMetadata, TopicPartition
from raftka.metadata.transactions import State
from tests.unit.broker_in_process import InProcessBroker, broker_in_process
from tests.unit.test_transaction_coordinator import settled

TOPIC = "out"
TID = "app-1"
GROUP = "readers"


async def read_committed(broker: InProcessBroker, count: int) -> list[bytes]:
    """The values a read_committed consumer of every partition polls, ``count`` at most."""
    consumer = AsyncConsumer(
        broker.address, auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=50
    )
    try:
        await consumer.assign([TopicPartition(TOPIC, p) for p in range(2)])
        values: list[bytes] = []
        for _ in range(50):
            values += [r.value for r in await consumer.poll(50)]
            if len(values) >= count:
                break
        return values
    finally:
        await consumer.close()


def producer(broker: InProcessBroker) -> AsyncProducer:
    return AsyncProducer(broker.address, transactional_id=TID, linger_ms=1)


def test_a_committed_transaction_is_read_and_an_aborted_one_is_not(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 2}, transactions_for_real=True) as broker:
            p = producer(broker)
            try:
                with pytest.raises(ProducerError, match="INVALID_TXN_STATE"):
                    p.begin_transaction()  # before init_transactions
                await p.init_transactions()
                with pytest.raises(ProducerError, match="INVALID_TXN_STATE"):
                    await p.send(TOPIC, b"outside")
                p.begin_transaction()
                for i in range(4):
                    await p.send(TOPIC, f"c{i}".encode(), partition=i % 2)
                await p.send_offsets_to_transaction(
                    {TopicPartition("out", 0): 7}, ConsumerGroupMetadata(GROUP)
                )
                await p.commit_transaction()
                await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
                p.begin_transaction()
                await p.send(TOPIC, b"aborted", partition=0)
                await p.send_offsets_to_transaction(
                    {TopicPartition("out", 0): 99}, ConsumerGroupMetadata(GROUP)
                )
                await p.abort_transaction()
                await settled(broker, TID, State.TXN_COMPLETE_ABORT)
                p.begin_transaction()
                await p.send(TOPIC, b"c4", partition=1)
                await p.commit_transaction()
                await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
                assert sorted(await read_committed(broker, 5)) == [b"c0", b"c1", b"c2", b"c3", b"c4"]
                committed = broker.controller.image.offsets[GROUP]
                assert [c.offset for c in committed.values()] == [7]
            finally:
                await p.close()

    asyncio.run(main())


def test_a_second_producer_with_the_transactional_id_fences_the_first(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 2}, transactions_for_real=True) as broker:
            zombie, successor = producer(broker), producer(broker)
            try:
                await zombie.init_transactions()
                zombie.begin_transaction()
                await zombie.send(TOPIC, b"zombie", partition=0)
                await zombie.flush()
                await successor.init_transactions()  # aborts the zombie's transaction, bumps the epoch
                assert successor.producer_id_and_epoch[1] > zombie.producer_id_and_epoch[1]
                with pytest.raises(ProducerError, match="PRODUCER_FENCED"):
                    await zombie.commit_transaction()
                successor.begin_transaction()
                await successor.send(TOPIC, b"successor", partition=0)
                await successor.commit_transaction()
                await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
                assert await read_committed(broker, 1) == [b"successor"]
            finally:
                await zombie.close()
                await successor.close()

    asyncio.run(main())
