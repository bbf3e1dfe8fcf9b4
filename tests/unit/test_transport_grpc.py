"""GrpcTransport between real servers on loopback: pairing, rejection, dead peers, shutdown.

Servers bind port 0 and the client learns the port afterwards, so no test races for a
free port. Raw stubs stand in for misbehaving or foreign peers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from raftka.v1 import raft_pb2, raft_pb2_grpc

from raft.batch import Batch, BatchKind
from raft.messages import Envelope, Error, FetchRequest, FetchResponse, Request, VoteResponse
from raft.transport import codec
from raft.transport.grpc_transport import GrpcTransport
from tests.unit.transport_fakes import (
    CLUSTER,
    REQUESTS,
    FakeInbox,
    answer,
    log_events,
    next_event,
    run,
    within,
)

VOTE = REQUESTS[0]
LOOPBACK = "127.0.0.1"


@pytest.fixture(autouse=True, scope="module")
def _loopback_available() -> None:
    try:
        with socket.socket() as s:
            s.bind((LOOPBACK, 0))
    except OSError as e:
        pytest.skip(f"cannot bind a loopback port for gRPC servers: {e}")


@contextlib.asynccontextmanager
async def node(
    node_id: int, inbox: FakeInbox, peers: dict[int, str] | None = None, port: int = 0, **options: Any
) -> AsyncIterator[GrpcTransport]:
    options.setdefault("cluster_id", CLUSTER)
    transport = GrpcTransport(node_id, f"{LOOPBACK}:{port}", peers or {}, **options)
    inbox.transport = transport
    await transport.start(inbox)
    try:
        yield transport
    finally:
        await transport.close()


def address(transport: GrpcTransport) -> str:
    return f"{LOOPBACK}:{transport.port}"


@contextlib.asynccontextmanager
async def raw_stub(transport: GrpcTransport) -> AsyncIterator[raft_pb2_grpc.RaftStub]:
    """A stub outside any transport: a foreign or misbehaving peer."""
    async with grpc.aio.insecure_channel(address(transport)) as channel:
        yield raft_pb2_grpc.RaftStub(channel)


async def outcome(inbox: FakeInbox) -> Envelope | int:
    """The next thing the inbox hears of: a delivered envelope or an unreachable peer id."""
    waits = [asyncio.ensure_future(inbox.next_delivered()), asyncio.ensure_future(inbox.next_unreachable())]
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in pending:
        wait.cancel()
    return done.pop().result()


@pytest.mark.parametrize("request_msg", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_and_response_cross_the_wire(request_msg: Request) -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox(answering=True)
        async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}) as one:
            one.send(Envelope(1, 2, request_msg))
            inbound = await inbox2.next_delivered()
            assert (inbound.src, inbound.dst, inbound.msg) == (1, 2, request_msg)
            assert inbound.rpc_id > 0
            assert await inbox1.next_delivered() == Envelope(2, 1, answer(request_msg))

    run(body)


def test_concurrent_calls_are_answered_by_rpc_id_in_any_order() -> None:
    """The core answers 40 parked calls in reverse: each caller still gets its own answer."""

    async def body() -> None:
        calls = 40
        inbox = FakeInbox()
        async with node(2, inbox) as two, raw_stub(two) as stub:
            requests = [codec.encode(dataclasses.replace(VOTE, candidate_epoch=e)) for e in range(calls)]
            replies = [asyncio.ensure_future(stub.Vote(r, timeout=5)) for r in requests]
            inbound = [await inbox.next_delivered() for _ in range(calls)]
            assert len({env.rpc_id for env in inbound}) == calls
            for env in reversed(inbound):
                two.send(Envelope(2, env.src, answer(env.msg), env.rpc_id))  # type: ignore[arg-type]
            assert [r.epoch for r in await within(asyncio.gather(*replies))] == list(range(calls))

    run(body)


def test_many_calls_in_flight_between_transports_all_come_back() -> None:
    async def body() -> None:
        calls = 40
        inbox1, inbox2 = FakeInbox(), FakeInbox(answering=True)
        async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}) as one:
            for epoch in range(calls):
                one.send(Envelope(1, 2, dataclasses.replace(VOTE, candidate_epoch=epoch)))
            replies = [await inbox1.next_delivered() for _ in range(calls)]
            assert sorted(r.msg.epoch for r in replies) == list(range(calls))
            assert {(r.src, r.dst, r.rpc_id) for r in replies} == {(2, 1, 0)}

    run(body)


def test_calls_in_flight_to_a_peer_are_bounded() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox()  # node 2 parks every call
        with log_events() as events:
            async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}, peer_calls_max=2) as one:
                for _ in range(3):
                    one.send(Envelope(1, 2, VOTE))
                event = await next_event(events, "too many calls in flight to peer; request dropped")
                assert (event["level"], event["peer_id"]) == ("warning", 2)
                parked = [await inbox2.next_delivered() for _ in range(2)]
                for call in parked:
                    two.send(Envelope(2, 1, answer(VOTE), call.rpc_id))
                assert [(await inbox1.next_delivered()).msg for _ in parked] == [answer(VOTE)] * 2
                assert inbox2.delivered.empty()

    run(body)


def test_invalid_response_is_dropped_with_a_warning() -> None:
    class Liar(raft_pb2_grpc.RaftServicer):
        async def Vote(self, request: Any, context: Any) -> raft_pb2.VoteResponse:
            return raft_pb2.VoteResponse(error=99)

    async def body() -> None:
        server = grpc.aio.server()
        raft_pb2_grpc.add_RaftServicer_to_server(Liar(), server)
        port = server.add_insecure_port(f"{LOOPBACK}:0")
        await server.start()
        inbox = FakeInbox()
        try:
            with log_events() as events:
                async with node(1, inbox, {2: f"{LOOPBACK}:{port}"}) as one:
                    one.send(Envelope(1, 2, VOTE))
                    event = await next_event(events, "invalid response")
                    assert (event["level"], event["field"], event["peer_id"]) == ("warning", "error", 2)
                    assert inbox.delivered.empty()
        finally:
            await server.stop(None)

    run(body)


def test_other_cluster_is_rejected_before_the_core() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox(answering=True)
        with log_events() as events:
            async with (
                node(2, inbox2) as two,
                node(1, inbox1, {2: address(two)}) as one,
                raw_stub(two) as stub,
            ):
                one.send(Envelope(1, 2, dataclasses.replace(VOTE, cluster_id="cluster-b")))
                reply = await inbox1.next_delivered()
                assert reply.src == 2
                assert reply.msg == VoteResponse(Error.INCONSISTENT_CLUSTER_ID, 0, -1, False, False)
                assert (await next_event(events, "request from another cluster"))["level"] == "warning"
                await stub.Vote(codec.encode(VOTE), timeout=5)  # the server still serves its own cluster
                assert (await inbox2.next_delivered()).msg == VOTE
                assert inbox2.delivered.empty()

    run(body)


def test_invalid_request_is_answered_invalid_and_the_server_keeps_serving() -> None:
    async def body() -> None:
        inbox = FakeInbox(answering=True)
        with log_events() as events:
            async with node(2, inbox) as two, raw_stub(two) as stub:
                bad = raft_pb2.VoteRequest(cluster_id=CLUSTER, candidate_epoch=-1)
                assert (await stub.Vote(bad, timeout=5)).error == Error.INVALID_REQUEST
                event = await next_event(events, "invalid request")
                assert (event["level"], event["field"]) == ("warning", "candidate_epoch")

                no_snapshot_id = raft_pb2.FetchSnapshotRequest(cluster_id=CLUSTER, max_bytes=1)
                reply = await stub.FetchSnapshot(no_snapshot_id, timeout=5)
                assert reply.error == Error.INVALID_REQUEST
                assert reply.HasField("snapshot_id"), "even an error response decodes"

                async with grpc.aio.insecure_channel(address(two)) as channel:
                    garbage = channel.unary_unary("/raftka.v1.Raft/Vote")  # bytes in, bytes out
                    with pytest.raises(grpc.aio.AioRpcError):
                        await garbage(b"\xff\xff\xff", timeout=5)

                assert (await stub.Vote(codec.encode(VOTE), timeout=5)).vote_granted
                assert (await inbox.next_delivered()).msg == VOTE
                assert inbox.delivered.empty()

    run(body)


def test_dead_peer_is_unreachable_and_found_again_when_it_restarts() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox(answering=True)
        async with node(2, inbox2) as two:
            port = two.port
        async with node(1, inbox1, {2: f"{LOOPBACK}:{port}"}) as one:
            one.send(Envelope(1, 2, VOTE))
            assert await inbox1.next_unreachable() == 2

            async with node(2, inbox2, port=port):
                loop = asyncio.get_running_loop()
                restarted_at = loop.time()
                one.send(Envelope(1, 2, VOTE))
                while isinstance(await outcome(inbox1), int):  # fails fast until the channel reconnects
                    await asyncio.sleep(0.02)
                    one.send(Envelope(1, 2, VOTE))
                assert loop.time() - restarted_at < 1.5, "reconnect backoff is capped at 500 ms"

    run(body)


def test_close_answers_parked_calls_unavailable() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox()  # node 2's core never answers
        async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}) as one:
            one.send(Envelope(1, 2, VOTE))
            await inbox2.next_delivered()
            await two.close()
            assert await inbox1.next_unreachable() == 2

    run(body)


def test_core_silence_ends_in_unavailable_before_the_callers_deadline() -> None:
    async def body() -> None:
        inbox = FakeInbox()  # never answers
        async with node(2, inbox, request_timeout_ms=300) as two, raw_stub(two) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Vote(codec.encode(VOTE), timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE

    run(body)


def test_fetch_deadline_allows_the_long_poll() -> None:
    """A Fetch parked longer than the plain request timeout is still answered."""

    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox()
        fetch = FetchRequest(
            CLUSTER, replica_id=1, epoch=3, fetch_offset=0, last_fetched_epoch=0, max_wait_ms=600
        )
        options = {"request_timeout_ms": 300}
        async with node(2, inbox2, **options) as two, node(1, inbox1, {2: address(two)}, **options) as one:
            one.send(Envelope(1, 2, fetch))
            inbound = await inbox2.next_delivered()
            asyncio.get_running_loop().call_later(
                0.5, two.send, Envelope(2, 1, answer(fetch), inbound.rpc_id)
            )
            assert (await inbox1.next_delivered()).msg == answer(fetch)

    run(body)


def test_stray_response_is_ignored() -> None:
    async def body() -> None:
        inbox = FakeInbox()
        async with node(1, inbox) as one:
            one.send(Envelope(1, 2, answer(VOTE), rpc_id=12345))

    run(body)


def test_describe_quorum_and_extra_services_share_the_server() -> None:
    class Journal(raft_pb2_grpc.JournalServicer):
        async def Read(self, request: Any, context: Any) -> raft_pb2.JournalReadResponse:
            return raft_pb2.JournalReadResponse(entry_count=7)

    async def body() -> None:
        described = raft_pb2.DescribeQuorumResponse(
            cluster_id=CLUSTER, node_id=2, leader_id=1, role="follower"
        )
        options = {
            "describe": lambda: described,
            "servicers": [lambda server: raft_pb2_grpc.add_JournalServicer_to_server(Journal(), server)],
        }
        async with node(2, FakeInbox(), **options) as two, grpc.aio.insecure_channel(address(two)) as channel:
            assert (
                await raft_pb2_grpc.RaftStub(channel).DescribeQuorum(raft_pb2.DescribeQuorumRequest())
                == described
            )
            journal = raft_pb2_grpc.JournalStub(channel)
            assert (await journal.Read(raft_pb2.JournalReadRequest())).entry_count == 7

    run(body)


def test_describe_quorum_without_a_callback_is_unimplemented() -> None:
    async def body() -> None:
        async with node(2, FakeInbox()) as two, raw_stub(two) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED

    run(body)


def test_listening_on_a_taken_port_fails_clearly() -> None:
    async def body() -> None:
        async with node(1, FakeInbox()) as one:
            with pytest.raises(OSError, match="cannot listen"):
                async with node(2, FakeInbox(), port=one.port):
                    pass

    run(body)


def test_request_to_an_unknown_node_is_unreachable() -> None:
    async def body() -> None:
        inbox = FakeInbox()
        async with node(1, inbox) as one:
            one.send(Envelope(1, 9, VOTE))
            assert await inbox.next_unreachable() == 9

    run(body)


class ParkedJournal(raft_pb2_grpc.JournalServicer):
    """A client-facing service whose calls stay open until released, as writes waiting
    for a commit do; ``parked`` counts the calls it holds."""

    def __init__(self) -> None:
        self.parked = 0
        self.release = asyncio.Event()
        self._changed = asyncio.Condition()

    async def Read(self, request: Any, context: Any) -> raft_pb2.JournalReadResponse:
        async with self._changed:
            self.parked += 1
            self._changed.notify_all()
        await self.release.wait()
        return raft_pb2.JournalReadResponse(entry_count=1)

    async def parked_calls(self, n: int) -> None:
        async with self._changed:
            await within(self._changed.wait_for(lambda: self.parked == n))


def test_client_calls_saturating_their_budget_never_refuse_a_vote_or_a_fetch() -> None:
    async def body() -> None:
        journal = ParkedJournal()
        options = {
            "servicers": [lambda server: raft_pb2_grpc.add_JournalServicer_to_server(journal, server)],
            "service_calls_max": 4,
        }
        async with (
            node(2, FakeInbox(answering=True), **options) as two,
            grpc.aio.insecure_channel(address(two)) as channel,
        ):
            clients, raft = raft_pb2_grpc.JournalStub(channel), raft_pb2_grpc.RaftStub(channel)
            held = [
                asyncio.ensure_future(clients.Read(raft_pb2.JournalReadRequest(), timeout=10))
                for _ in range(4)
            ]
            await journal.parked_calls(4)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await clients.Read(raft_pb2.JournalReadRequest(), timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "4 service calls in progress" in (refused.value.details() or "")

            assert (await raft.Vote(codec.encode(VOTE), timeout=5)).vote_granted
            fetch = next(r for r in REQUESTS if isinstance(r, FetchRequest))
            assert codec.decode(await raft.Fetch(codec.encode(fetch), timeout=5)) == answer(fetch)

            journal.release.set()
            assert [r.entry_count for r in await within(asyncio.gather(*held))] == [1] * 4
            assert (await clients.Read(raft_pb2.JournalReadRequest(), timeout=5)).entry_count == 1

    run(body)


def test_raft_calls_have_a_budget_of_their_own() -> None:
    async def body() -> None:
        inbox = FakeInbox()  # parks every Raft call
        async with node(2, inbox, raft_calls_max=2) as two, raw_stub(two) as stub:
            held = [asyncio.ensure_future(stub.Vote(codec.encode(VOTE), timeout=10)) for _ in range(2)]
            parked = [await inbox.next_delivered() for _ in held]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Vote(codec.encode(VOTE), timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            for call in parked:
                two.send(Envelope(2, call.src, answer(call.msg), call.rpc_id))  # type: ignore[arg-type]
            assert all(r.vote_granted for r in await within(asyncio.gather(*held)))

    run(body)


def test_a_request_over_4_mib_is_refused_and_the_server_keeps_serving() -> None:
    async def body() -> None:
        options = {
            "servicers": [lambda server: raft_pb2_grpc.add_JournalServicer_to_server(ParkedJournal(), server)]
        }
        async with (
            node(2, FakeInbox(answering=True), **options) as two,
            grpc.aio.insecure_channel(
                address(two), options=[("grpc.max_send_message_length", -1)]
            ) as channel,
        ):
            big = raft_pb2.JournalAppendRequest(entries=[bytes(1 << 20)] * 5)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await raft_pb2_grpc.JournalStub(channel).Append(big, timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert (await raft_pb2_grpc.RaftStub(channel).Vote(codec.encode(VOTE), timeout=5)).vote_granted

    run(body)


def test_a_fetch_answer_larger_than_what_a_server_takes_still_arrives() -> None:
    """Only requests are held to 4 MiB: a Fetch answer carries up to fetch_max_bytes and more."""

    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox()
        fetch = next(r for r in REQUESTS if isinstance(r, FetchRequest))
        batch = Batch(fetch.fetch_offset, fetch.epoch, 1, BatchKind.DATA, (bytes(5 << 20),))
        big = FetchResponse(Error.NONE, fetch.epoch, 2, batch.next_offset, 0, batches=(batch,))
        async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}) as one:
            one.send(Envelope(1, 2, fetch))
            inbound = await inbox2.next_delivered()
            two.send(Envelope(2, 1, big, inbound.rpc_id))
            assert (await inbox1.next_delivered()).msg == big

    run(body)
