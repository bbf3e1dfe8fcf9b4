"""GrpcTransport between real servers on loopback: the Exchange stream, pairing, rejection,
bounds, dead peers, shutdown.

Servers bind port 0 and the client learns the port afterwards, so no test races for a
free port. Raw streams and fake servers stand in for misbehaving or foreign peers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from raftka.raft.batch import Batch, BatchKind
from raftka.raft.messages import Envelope, Error, FetchRequest, FetchResponse, Request, VoteResponse
from raftka.raft.transport import codec
from raftka.raft.transport.grpc_transport import GrpcTransport
from raftka.v1 import raft_pb2, raft_pb2_grpc
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
EXCHANGE = "/raftka.v1.Raft/Exchange"


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


class RawStream:
    """An Exchange stream outside any transport, written frame by frame (or byte by byte)."""

    def __init__(self, call: Any) -> None:
        self._call = call

    async def send(self, frame: raft_pb2.RaftRequest) -> None:
        await self.send_bytes(frame.SerializeToString())

    async def send_bytes(self, data: bytes) -> None:
        await within(self._call.write(data))

    async def answer(self) -> raft_pb2.RaftResponse:
        return raft_pb2.RaftResponse.FromString(await within(self._call.read()))


@contextlib.asynccontextmanager
async def raw_stream(transport: GrpcTransport) -> AsyncIterator[RawStream]:
    async with grpc.aio.insecure_channel(address(transport)) as channel:
        call = channel.stream_stream(EXCHANGE)()  # bytes in, bytes out
        try:
            yield RawStream(call)
        finally:
            call.cancel()


def vote_frame(call_id: int, epoch: int = VOTE.candidate_epoch) -> raft_pb2.RaftRequest:
    vote = codec.encode(dataclasses.replace(VOTE, candidate_epoch=epoch))
    return raft_pb2.RaftRequest(call_id=call_id, vote=vote)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def fake_peer(servicer: raft_pb2_grpc.RaftServicer) -> AsyncIterator[str]:
    """A Raft server that is not a GrpcTransport; yields its address."""
    server = grpc.aio.server()
    raft_pb2_grpc.add_RaftServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    await server.start()
    try:
        yield f"{LOOPBACK}:{port}"
    finally:
        await server.stop(None)


def drain(events: asyncio.Queue[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Every event called ``name`` captured so far (the queue is emptied)."""
    drained = []
    while not events.empty():
        event = events.get_nowait()
        if event["event"] == name:
            drained.append(event)
    return drained


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
            one.send(Envelope(1, 2, request_msg, rpc_id=7))
            inbound = await inbox2.next_delivered()
            assert (inbound.src, inbound.dst, inbound.msg) == (1, 2, request_msg)
            assert inbound.rpc_id > 0
            assert await inbox1.next_delivered() == Envelope(2, 1, answer(request_msg), rpc_id=7)

    run(body)


def test_one_stream_per_peer_carries_every_request() -> None:
    """Twenty requests of every kind to each of two peers: one stream opened at each."""

    async def body() -> None:
        rounds = 4
        inbox1, inbox2, inbox3 = FakeInbox(), FakeInbox(answering=True), FakeInbox(answering=True)
        with log_events() as events:
            async with (
                node(2, inbox2) as two,
                node(3, inbox3) as three,
                node(1, inbox1, {2: address(two), 3: address(three)}) as one,
            ):
                for _ in range(rounds):
                    for request in REQUESTS:
                        one.send(Envelope(1, 2, request))
                        one.send(Envelope(1, 3, request))
                replies = [await inbox1.next_delivered() for _ in range(2 * rounds * len(REQUESTS))]
                assert sorted(r.src for r in replies) == [2] * 20 + [3] * 20
                opened = drain(events, "inbound raft stream opened")
                assert sorted(e["node_id"] for e in opened) == [2, 3]

    run(body)


def test_concurrent_calls_are_answered_by_call_id_in_any_order() -> None:
    """The core answers 40 parked calls in reverse: each answer carries its call's id."""

    async def body() -> None:
        calls = 40
        inbox = FakeInbox()
        async with node(2, inbox) as two, raw_stream(two) as stream:
            for call_id in range(1, calls + 1):
                await stream.send(vote_frame(call_id, epoch=call_id))
            inbound = [await inbox.next_delivered() for _ in range(calls)]
            assert len({env.rpc_id for env in inbound}) == calls
            for env in reversed(inbound):
                two.send(Envelope(2, env.src, answer(env.msg), env.rpc_id))  # type: ignore[arg-type]
            answers = [await stream.answer() for _ in range(calls)]
            assert [a.call_id for a in answers] == list(range(calls, 0, -1))
            assert all(a.vote.epoch == a.call_id for a in answers)

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


def test_a_call_past_its_deadline_gives_up_its_place_and_its_late_answer() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox()  # node 2 parks every call
        options = {"peer_calls_max": 1, "request_timeout_ms": 300}
        async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}, **options) as one:
            one.send(Envelope(1, 2, dataclasses.replace(VOTE, candidate_epoch=0)))
            first = await inbox2.next_delivered()
            epoch = 0
            while inbox2.delivered.empty():  # dropped until the first call's deadline passes
                epoch += 1
                one.send(Envelope(1, 2, dataclasses.replace(VOTE, candidate_epoch=epoch)))
                await asyncio.sleep(0.05)
            second = await inbox2.next_delivered()
            assert second.msg.candidate_epoch == epoch  # type: ignore[union-attr]
            two.send(Envelope(2, 1, answer(first.msg), first.rpc_id))  # type: ignore[arg-type]
            two.send(Envelope(2, 1, answer(second.msg), second.rpc_id))  # type: ignore[arg-type]
            assert (await inbox1.next_delivered()).msg.epoch == epoch  # the first's answer was dropped

    run(body)


def test_requests_waiting_for_the_core_are_bounded_per_stream_and_in_all() -> None:
    async def body() -> None:
        inbox = FakeInbox()  # parks every call
        dropped = "too many requests waiting for the core; request dropped"
        with log_events() as events:
            async with (
                node(2, inbox, peer_calls_max=2, inbound_calls_max=3) as two,
                raw_stream(two) as a,
                raw_stream(two) as b,
            ):
                for call_id in (1, 2, 3):
                    await a.send(vote_frame(call_id))
                assert (await next_event(events, dropped))["level"] == "warning"
                for call_id in (1, 2):
                    await b.send(vote_frame(call_id))
                await next_event(events, dropped)
                waiting = [inbox.delivered.get_nowait() for _ in range(3)]
                assert inbox.delivered.empty()
                two.send(Envelope(2, 1, answer(VOTE), waiting[0].rpc_id))
                assert (await a.answer()).call_id == 1

    run(body)


def test_a_request_the_core_leaves_unanswered_gives_up_its_place() -> None:
    """Past its deadline a waiting request makes room for the next, and its late answer
    is not sent: the caller has given up on it."""

    async def body() -> None:
        inbox = FakeInbox()  # parks every call
        async with node(2, inbox, peer_calls_max=1, request_timeout_ms=300) as two, raw_stream(two) as stream:
            await stream.send(vote_frame(1))
            first = await inbox.next_delivered()
            call_id = 1
            while inbox.delivered.empty():  # dropped until the first request's deadline passes
                call_id += 1
                await stream.send(vote_frame(call_id))
                await asyncio.sleep(0.05)
            second = await inbox.next_delivered()
            two.send(Envelope(2, 1, answer(VOTE), first.rpc_id))
            two.send(Envelope(2, 1, answer(VOTE), second.rpc_id))
            assert (await stream.answer()).call_id == call_id

    run(body)


def _wrong_field(request: raft_pb2.RaftRequest) -> raft_pb2.RaftResponse:
    return raft_pb2.RaftResponse(call_id=request.call_id, vote=raft_pb2.VoteResponse(error=99))


def _wrong_kind(request: raft_pb2.RaftRequest) -> raft_pb2.RaftResponse:
    return raft_pb2.RaftResponse(call_id=request.call_id, fetch=raft_pb2.FetchResponse())


def _no_such_call(request: raft_pb2.RaftRequest) -> raft_pb2.RaftResponse:
    vote = codec.encode(answer(VOTE))
    return raft_pb2.RaftResponse(call_id=request.call_id + 1000, vote=vote)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lie", "event_name", "level", "field"),
    [
        (_wrong_field, "invalid response", "warning", "error"),
        (_wrong_kind, "invalid response", "warning", "response"),
        (_no_such_call, "answer to no call in flight", "debug", None),
    ],
    ids=["invalid field", "wrong kind", "unknown call id"],
)
def test_invalid_response_is_dropped(
    lie: Callable[[raft_pb2.RaftRequest], raft_pb2.RaftResponse],
    event_name: str,
    level: str,
    field: str | None,
) -> None:
    class Liar(raft_pb2_grpc.RaftServicer):
        async def Exchange(self, request_iterator: Any, context: Any) -> None:
            async for request in request_iterator:
                await context.write(lie(request))

    async def body() -> None:
        inbox = FakeInbox()
        with log_events() as events:
            async with fake_peer(Liar()) as liar, node(1, inbox, {2: liar}) as one:
                one.send(Envelope(1, 2, VOTE))
                event = await next_event(events, event_name)
                assert (event["level"], event["peer_id"], event.get("field")) == (level, 2, field)
                assert inbox.delivered.empty()

    run(body)


def test_other_cluster_is_rejected_before_the_core() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox(answering=True)
        with log_events() as events:
            async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}) as one:
                one.send(Envelope(1, 2, dataclasses.replace(VOTE, cluster_id="cluster-b")))
                reply = await inbox1.next_delivered()
                assert reply.src == 2
                assert reply.msg == VoteResponse(Error.INCONSISTENT_CLUSTER_ID, 0, -1, False, False)
                assert (await next_event(events, "request from another cluster"))["level"] == "warning"
                one.send(Envelope(1, 2, VOTE))  # the stream still serves its own cluster
                assert (await inbox2.next_delivered()).msg == VOTE
                assert (await inbox1.next_delivered()).msg == answer(VOTE)
                assert inbox2.delivered.empty()

    run(body)


def test_invalid_request_is_answered_invalid_and_the_stream_keeps_serving() -> None:
    async def body() -> None:
        inbox = FakeInbox(answering=True)
        with log_events() as events:
            async with node(2, inbox) as two, raw_stream(two) as stream:
                bad = raft_pb2.VoteRequest(cluster_id=CLUSTER, candidate_epoch=-1)
                await stream.send(raft_pb2.RaftRequest(call_id=1, vote=bad))
                reply = await stream.answer()
                assert (reply.call_id, reply.vote.error) == (1, Error.INVALID_REQUEST)
                event = await next_event(events, "invalid request")
                assert (event["level"], event["field"]) == ("warning", "candidate_epoch")

                no_snapshot_id = raft_pb2.FetchSnapshotRequest(cluster_id=CLUSTER, max_bytes=1)
                await stream.send(raft_pb2.RaftRequest(call_id=2, fetch_snapshot=no_snapshot_id))
                reply = await stream.answer()
                assert (reply.call_id, reply.fetch_snapshot.error) == (2, Error.INVALID_REQUEST)
                assert reply.fetch_snapshot.HasField("snapshot_id"), "even an error response decodes"
                assert (await next_event(events, "invalid request"))["field"] == "snapshot_id"

                await stream.send(raft_pb2.RaftRequest(call_id=3))  # no request in the frame
                assert (await next_event(events, "invalid request"))["field"] == "request"
                await stream.send_bytes(b"\xff\xff\xff")  # not a frame at all
                assert (await next_event(events, "invalid request"))["field"] == "frame"

                await stream.send(vote_frame(4))
                reply = await stream.answer()  # 3 and the garbage were not answered
                assert (reply.call_id, reply.vote.vote_granted) == (4, True)
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


def test_a_peer_that_moved_is_reached_at_its_new_address() -> None:
    """The log names a voter's new endpoint (KIP-853): the call in flight to the old one
    is dropped without calling the peer unreachable, and the next goes to the new one."""

    async def body() -> None:
        inbox1, old_inbox, new_inbox = FakeInbox(), FakeInbox(), FakeInbox(answering=True)
        async with (
            node(2, old_inbox) as old,
            node(2, new_inbox) as new,
            node(1, inbox1, {2: address(old)}) as one,
        ):
            one.add_peer(2, address(old))  # known there: nothing changes
            one.send(Envelope(1, 2, VOTE, rpc_id=1))
            assert (await old_inbox.next_delivered()).msg == VOTE  # and never answered

            one.add_peer(2, address(new))
            one.send(Envelope(1, 2, VOTE, rpc_id=2))
            assert (await new_inbox.next_delivered()).msg == VOTE
            assert await inbox1.next_delivered() == Envelope(2, 1, answer(VOTE), rpc_id=2)
            assert inbox1.unreachable_peers.empty() and old_inbox.delivered.empty()

    run(body)


@pytest.mark.parametrize(
    ("code", "unreachable"), [(grpc.StatusCode.UNAVAILABLE, True), (grpc.StatusCode.INTERNAL, False)]
)
def test_a_broken_stream_is_reopened_on_the_next_send(code: grpc.StatusCode, unreachable: bool) -> None:
    """The peer breaks the first stream after one request; the next request opens another.
    Only UNAVAILABLE (the peer is gone) is reported as unreachable."""

    class Breaker(raft_pb2_grpc.RaftServicer):
        streams = 0

        async def Exchange(self, request_iterator: Any, context: Any) -> None:
            Breaker.streams += 1
            async for request in request_iterator:
                if Breaker.streams == 1:
                    await context.abort(code, "broken")
                vote = codec.encode(answer(VOTE))
                await context.write(raft_pb2.RaftResponse(call_id=request.call_id, vote=vote))  # type: ignore[arg-type]

    async def body() -> None:
        inbox = FakeInbox()
        with log_events() as events:
            async with fake_peer(Breaker()) as peer, node(1, inbox, {2: peer}) as one:
                one.send(Envelope(1, 2, VOTE))
                if unreachable:
                    assert await inbox.next_unreachable() == 2
                else:
                    event = await next_event(events, "raft stream ended")
                    assert (event["code"], event["calls_lost"]) == (code.name, 1)
                one.send(Envelope(1, 2, VOTE, rpc_id=5))
                assert await inbox.next_delivered() == Envelope(2, 1, answer(VOTE), rpc_id=5)
                assert Breaker.streams == 2
                assert inbox.unreachable_peers.empty()

    run(body)


def test_close_ends_the_streams_and_their_callers_hear_unreachable_once() -> None:
    async def body() -> None:
        inbox1, inbox2 = FakeInbox(), FakeInbox()  # node 2's core never answers
        async with node(2, inbox2) as two, node(1, inbox1, {2: address(two)}) as one:
            for _ in range(3):
                one.send(Envelope(1, 2, VOTE))
            for _ in range(3):
                await inbox2.next_delivered()
            await two.close()
            assert await inbox1.next_unreachable() == 2
            one.send(Envelope(1, 2, VOTE))  # a new stream, refused: reported on its own
            assert await inbox1.next_unreachable() == 2
            assert inbox1.unreachable_peers.empty(), "the three lost calls were reported once"

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
            clients = raft_pb2_grpc.JournalStub(channel)
            held = [
                asyncio.ensure_future(clients.Read(raft_pb2.JournalReadRequest(), timeout=10))
                for _ in range(4)
            ]
            await journal.parked_calls(4)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await clients.Read(raft_pb2.JournalReadRequest(), timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "4 service calls in progress" in (refused.value.details() or "")

            async with raw_stream(two) as stream:
                await stream.send(vote_frame(1))
                assert (await stream.answer()).vote.vote_granted
                fetch = next(r for r in REQUESTS if isinstance(r, FetchRequest))
                await stream.send(raft_pb2.RaftRequest(call_id=2, fetch=codec.encode(fetch)))  # type: ignore[arg-type]
                assert codec.decode((await stream.answer()).fetch) == answer(fetch)

            journal.release.set()
            assert [r.entry_count for r in await within(asyncio.gather(*held))] == [1] * 4
            assert (await clients.Read(raft_pb2.JournalReadRequest(), timeout=5)).entry_count == 1

    run(body)


def test_exchange_streams_have_a_budget_of_their_own() -> None:
    """Each open Exchange stream is one Raft call, counted apart from the services' calls."""

    async def body() -> None:
        async with node(2, FakeInbox(answering=True), inbound_calls_max=1) as two:
            async with raw_stream(two) as first:
                await first.send(vote_frame(1))
                assert (await first.answer()).vote.vote_granted
                async with raw_stream(two) as second:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        # the refusal may end the stream before the frame is written, or after
                        await second.send(vote_frame(1))
                        await second.answer()
                    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # The first one ended: room again, once the server has seen it end (which, on a
            # loaded machine, may come after the next stream arrives).
            deadline = time.monotonic() + 10
            while not await _vote_granted_on_a_new_stream(two):
                assert time.monotonic() < deadline, "the first stream's place was never freed"
                await asyncio.sleep(0.02)

    run(body)


async def _vote_granted_on_a_new_stream(transport: GrpcTransport) -> bool:
    """True if a new Exchange stream is admitted and answers; False if refused as busy."""
    async with raw_stream(transport) as stream:
        await stream.send(vote_frame(1))
        try:
            return (await stream.answer()).vote.vote_granted
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            return False


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
            async with raw_stream(two) as stream:
                await stream.send(vote_frame(1))
                assert (await stream.answer()).vote.vote_granted

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


def test_a_peer_is_connected_from_its_first_stream_until_its_last_one_closes() -> None:
    """What the controller fences a dead broker by: its last stream into this node ending.
    A second stream from the same sender (a reconnect racing the old stream's end) keeps
    it connected; a stream that sent nothing accepted names nobody."""

    async def body() -> None:
        inbox = FakeInbox(answering=True)
        async with node(2, inbox) as two:
            async with raw_stream(two) as silent:
                await silent.send(raft_pb2.RaftRequest(call_id=1))  # no request: names nobody
            async with raw_stream(two) as first:
                await first.send(vote_frame(1))
                await first.answer()
                assert await inbox.next_connection() == (VOTE.candidate_id, True)
                async with raw_stream(two) as second:
                    await second.send(vote_frame(1))
                    await second.answer()
                assert inbox.connections.empty(), "the first stream is still open"
                await first.send(vote_frame(2))
                await first.answer()
            assert await inbox.next_connection() == (VOTE.candidate_id, False)
            async with raw_stream(two) as again:
                await again.send(vote_frame(1))
                await again.answer()
                assert await inbox.next_connection() == (VOTE.candidate_id, True)
            assert await inbox.next_connection() == (VOTE.candidate_id, False)

    run(body)
