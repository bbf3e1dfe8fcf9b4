"""MemoryTransport keeps GrpcTransport's promises: rpc_id pairing, unreachable, silent cuts.

Delivery is FIFO through ``loop.call_soon``, so "message A was dropped" is proved by
sending A, then B on a link that works, and seeing B arrive with nothing before it.
"""

from __future__ import annotations

import dataclasses

import pytest

from raftka.raft.messages import Envelope, Request
from raftka.raft.transport.memory import MemoryNetwork, MemoryTransport
from tests.unit.transport_fakes import REQUESTS, FakeInbox, answer, run

VOTE, BEGIN = REQUESTS[0], REQUESTS[1]


async def join(
    network: MemoryNetwork, node_id: int, *, answering: bool = False
) -> tuple[MemoryTransport, FakeInbox]:
    transport, inbox = MemoryTransport(network, node_id), FakeInbox(answering=answering)
    inbox.transport = transport
    await transport.start(inbox)
    return transport, inbox


@pytest.mark.parametrize("request_msg", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_and_response_pair_by_rpc_id(request_msg: Request) -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        _, inbox2 = await join(network, 2, answering=True)

        one.send(Envelope(1, 2, request_msg))
        assert inbox2.delivered.empty(), "delivery is asynchronous, as on a network"
        inbound = await inbox2.next_delivered()
        assert (inbound.src, inbound.dst, inbound.msg) == (1, 2, request_msg)
        assert inbound.rpc_id > 0
        assert await inbox1.next_delivered() == Envelope(2, 1, answer(request_msg))

    run(body)


def test_each_inbound_request_gets_a_fresh_rpc_id() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, _ = await join(network, 1)
        _, inbox2 = await join(network, 2)
        for _ in range(3):
            one.send(Envelope(1, 2, VOTE))
        ids = [(await inbox2.next_delivered()).rpc_id for _ in range(3)]
        assert len(set(ids)) == 3

    run(body)


def test_request_to_absent_or_closed_node_is_unreachable() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        two, _ = await join(network, 2)
        one.send(Envelope(1, 3, VOTE))
        assert await inbox1.next_unreachable() == 3
        await two.close()
        one.send(Envelope(1, 2, VOTE))
        assert await inbox1.next_unreachable() == 2

    run(body)


def test_closing_a_node_resets_the_calls_waiting_at_it() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        two, inbox2 = await join(network, 2)
        one.send(Envelope(1, 2, VOTE))
        await inbox2.next_delivered()
        await two.close()
        assert await inbox1.next_unreachable() == 2

    run(body)


def test_cut_link_drops_both_ways_until_healed() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        two, inbox2 = await join(network, 2)
        three, _ = await join(network, 3)

        network.cut(1, 2)
        one.send(Envelope(1, 2, VOTE))
        two.send(Envelope(2, 1, VOTE))
        three.send(Envelope(3, 2, BEGIN))
        three.send(Envelope(3, 1, BEGIN))
        assert (await inbox2.next_delivered()).msg == BEGIN
        assert (await inbox1.next_delivered()).msg == BEGIN
        assert inbox1.unreachable_peers.empty() and inbox2.unreachable_peers.empty()

        network.heal(1, 2)
        one.send(Envelope(1, 2, VOTE))
        assert (await inbox2.next_delivered()).msg == VOTE

    run(body)


def test_response_sent_over_a_cut_link_is_lost() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        two, inbox2 = await join(network, 2)
        one.send(Envelope(1, 2, VOTE))
        inbound = await inbox2.next_delivered()
        network.cut(1, 2)
        two.send(Envelope(2, 1, answer(VOTE), inbound.rpc_id))
        network.heal_all()
        two.send(Envelope(2, 1, BEGIN))  # a request after the lost response: it arrives first
        assert (await inbox1.next_delivered()).msg == BEGIN

    run(body)


def test_unknown_rpc_id_and_closed_requester_are_ignored() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        two, inbox2 = await join(network, 2)
        two.send(Envelope(2, 1, answer(VOTE), rpc_id=99))
        one.send(Envelope(1, 2, VOTE))
        inbound = await inbox2.next_delivered()
        await one.close()
        two.send(Envelope(2, 1, answer(VOTE), inbound.rpc_id))

        restarted, inbox1b = await join(network, 1)
        two.send(Envelope(2, 1, BEGIN))
        assert (await inbox1b.next_delivered()).msg == BEGIN, "the old call's response went nowhere"
        assert inbox1.delivered.empty()

    run(body)


def test_a_node_id_is_registered_once() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        await join(network, 1)
        with pytest.raises(ValueError, match="node 1"):
            await join(network, 1)

    run(body)


def test_pending_calls_are_bounded_by_forgetting_the_oldest() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, inbox1 = await join(network, 1)
        two, inbox2 = MemoryTransport(network, 2, pending_calls_max=2), FakeInbox()
        await two.start(inbox2)
        for _ in range(3):
            one.send(Envelope(1, 2, VOTE))
        first, *rest = [await inbox2.next_delivered() for _ in range(3)]
        two.send(Envelope(2, 1, answer(VOTE), first.rpc_id))  # forgotten: dropped
        denied = dataclasses.replace(answer(VOTE), vote_granted=False)
        for inbound in rest:
            two.send(Envelope(2, 1, denied, inbound.rpc_id))
        assert [(await inbox1.next_delivered()).msg for _ in rest] == [denied, denied]
        assert inbox1.delivered.empty()

    run(body)


def test_request_in_flight_when_the_link_is_cut_is_lost() -> None:
    async def body() -> None:
        network = MemoryNetwork()
        one, _ = await join(network, 1)
        _, inbox2 = await join(network, 2)
        three, _ = await join(network, 3)
        one.send(Envelope(1, 2, VOTE))
        network.cut(1, 2)
        three.send(Envelope(3, 2, BEGIN))
        assert (await inbox2.next_delivered()).msg == BEGIN

    run(body)
