"""InitProducerId: every broker hands out producer ids from blocks the quorum allocated to
it (``AllocateProducerIds``), asks for the next block before the current one runs out,
and answers REQUEST_TIMED_OUT, to be retried, when it has no id to give; a bad request is
refused naming its field."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from raftka.broker.controller_link import LinkError
from raftka.broker.producer_ids import ProducerIdManager, ProducerIdsUnavailable
from raftka.rpc.stubs import ControllerRpc
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.metadata_controller_support import live_brokers, run, single
from tests.unit.test_clients import serving

E = controller_pb2.ErrorCode


class ControllerAsLink:
    """A broker's controller link that reaches an in-process QuorumController, or fails."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.calls = 0
        self.down = False

    async def call(self, rpc: ControllerRpc, request: Any) -> Any:
        """Like the real link, with this object as the stub: ``rpc`` picks AllocateProducerIds."""
        return await rpc(self)(request, timeout=1.0)

    async def AllocateProducerIds(self, request: Any, timeout: float) -> Any:
        self.calls += 1
        if self.down:
            raise LinkError("no controller (the test)")
        return await self.controller.allocate_producer_ids(request)


def test_ids_come_from_quorum_blocks_and_the_next_block_is_asked_for_before_one_runs_out() -> None:
    async def body() -> None:
        quorum, member = await single()
        epochs = await live_brokers(member.controller, [101, 102])
        link = ControllerAsLink(member.controller)
        ids = ProducerIdManager(link, 101, lambda: epochs[101])
        other = ProducerIdManager(ControllerAsLink(member.controller), 102, lambda: epochs[102])
        first = [await ids.next_id() for _ in range(900)]
        assert first == list(range(900)) and link.calls == 1
        await asyncio.sleep(0)  # the 900th id started the next block's request
        assert await other.next_id() == 2000, "broker 102's block follows the two of broker 101"
        rest = [await ids.next_id() for _ in range(1100)]
        assert rest == list(range(900, 1000)) + list(range(1000, 2000)), "the reserve block, then none"
        assert link.calls == 2 and member.image.next_producer_id == 3000
        await ids.next_id()
        assert link.calls == 3, "the third block, asked for when the second ran out"
        await ids.close()
        await other.close()
        await quorum.close()

    run(body)


def test_without_a_block_an_id_is_refused_until_the_controller_answers() -> None:
    async def body() -> None:
        quorum, member = await single()
        epochs = await live_brokers(member.controller, [101])
        link = ControllerAsLink(member.controller)
        unregistered = ProducerIdManager(link, 101, lambda: 12345)
        with pytest.raises(ProducerIdsUnavailable, match="STALE_BROKER_EPOCH"):
            await unregistered.next_id()
        ids = ProducerIdManager(link, 101, lambda: epochs[101])
        link.down = True
        with pytest.raises(ProducerIdsUnavailable, match="no active controller answered"):
            await ids.next_id()
        link.down = False
        assert await ids.next_id() == 0, "nothing was allocated by the refused requests"
        assert link.calls == 3
        await quorum.close()

    run(body)


def test_init_producer_id_over_the_data_protocol(tmp_path: Path) -> None:
    """The test broker's controller link allocates blocks of 10 ids."""

    async def scenario(address: str) -> None:
        client = BrokerClient(address)
        try:
            request = broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
            answers = [await client.InitProducerId(request, timeout=5) for _ in range(12)]
            assert [(a.status.error, a.producer_epoch) for a in answers] == [(E.NONE, 0)] * 12
            assert [a.producer_id for a in answers] == list(range(12))
            untimed = broker_pb2.InitProducerIdRequest(transactional_id="tx", producer_id=-1, producer_epoch=-1)
            answer = await client.InitProducerId(untimed, timeout=5)
            assert answer.status.error == E.INVALID_TRANSACTION_TIMEOUT
            assert "transaction_timeout_ms" in answer.status.message
            for bad, field in (
                (broker_pb2.InitProducerIdRequest(producer_id=4, producer_epoch=-1), "producer_epoch"),
                (broker_pb2.InitProducerIdRequest(producer_id=-7, producer_epoch=-7), "producer_id"),
            ):
                answer = await client.InitProducerId(bad, timeout=5)
                assert answer.status.error == E.INVALID_REQUEST and field in answer.status.message
                assert (answer.producer_id, answer.producer_epoch) == (-1, -1)
        finally:
            client.close()

    async def main() -> None:
        async with serving(tmp_path) as address:
            await scenario(address)

    asyncio.run(main())
