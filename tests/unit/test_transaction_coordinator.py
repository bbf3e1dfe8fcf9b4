"""The transaction coordinator on one in-process broker, over the data protocol: a
transactional id gets a producer id and its epochs, a transaction's partitions and the
markers written to their leaders, its offsets committed only with it, zombies fenced,
timed-out transactions aborted, prepared ones finished by a coordinator that takes over,
and bad input refused naming its field."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from raftka.metadata.transactions import State
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import InProcessBroker, broker_in_process

E = controller_pb2.ErrorCode
Pb = broker_pb2
TOPIC = "orders"
TID = "tx-1"


def run(tmp_path: Path, scenario: Callable[[InProcessBroker, BrokerClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 3, "other": 1}) as broker:
            client = BrokerClient(broker.address)
            try:
                await scenario(broker, client)
            finally:
                client.close()

    asyncio.run(main())


async def init(
    client: BrokerClient, tid: str = TID, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
):
    return await client.InitProducerId(
        Pb.InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch
        ),
        timeout=5,
    )


async def add(
    client: BrokerClient, pid: int, epoch: int, *partitions: int, topic: str = TOPIC, tid: str = TID
):
    answer = await client.AddPartitionsToTxn(
        Pb.AddPartitionsToTxnRequest(
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            topics=[Pb.TxnTopic(name=topic, partitions=partitions)],
        ),
        timeout=5,
    )
    return {(t.name, p.partition): p.error for t in answer.topics for p in t.partitions}


async def end(client: BrokerClient, pid: int, epoch: int, committed: bool, tid: str = TID) -> int:
    answer = await client.EndTxn(
        Pb.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed),
        timeout=5,
    )
    return answer.status.error


async def settled(broker: InProcessBroker, tid: str, wanted: int) -> None:
    """Until the controller's image shows the id in state ``wanted`` (markers written)."""
    for _ in range(500):
        record = broker.controller.image.transactions.get(tid)
        if record is not None and record.state == wanted:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(
        f"{tid} never reached {State.Name(wanted)}: {broker.controller.image.transactions.get(tid)}"
    )


def test_a_committed_transaction_writes_a_commit_marker_to_every_partition(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        first = await init(client)
        assert (first.status.error, first.producer_epoch) == (E.NONE, 0)
        pid = first.producer_id
        assert await add(client, pid, 0, 0, 2) == {(TOPIC, 0): E.NONE, (TOPIC, 2): E.NONE}
        assert await add(client, pid, 0, 1) == {(TOPIC, 1): E.NONE}
        assert await end(client, pid, 0, committed=True) == E.NONE
        await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
        markers = [m for _, r in broker.markers.requests for m in r.markers]
        assert {(t.name, p) for m in markers for t in m.topics for p in t.partitions} == {
            (TOPIC, 0),
            (TOPIC, 1),
            (TOPIC, 2),
        }
        assert all(m.committed and (m.producer_id, m.producer_epoch) == (pid, 0) for m in markers)
        assert await end(client, pid, 0, committed=True) == E.NONE  # a retry of the same end
        assert await end(client, pid, 0, committed=False) == E.INVALID_TXN_STATE

    run(tmp_path, scenario)
