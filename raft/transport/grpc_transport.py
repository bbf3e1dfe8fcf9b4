"""GrpcTransport: the quorum's RPCs between processes, over grpc.aio.

Why a stream: on this hardware a grpc.aio unary call costs about 0.5 ms of server CPU
and 0.37 ms of client CPU, a message on an open bidirectional stream about 0.25 ms on
each side, and one commit takes about ten fetches and their answers between the leader,
its followers and the brokers. So every request from this node to a peer rides on one
long-lived ``Exchange`` stream (one per sender -> peer pair, on the peer's channel) and
its answer comes back on the same stream. Each frame carries a ``call_id`` the calling
transport chose; the core's ``rpc_id`` stays in the caller's transport (the core sends
every request but a Fetch with ``rpc_id`` 0, so it cannot tell calls on a stream apart).

Outbound: ``send`` queues the request on the peer's stream, opened on first use. A
writer task writes the queue in order, one stream message per request (grpc has no
multi-message write, and nothing waits to fill a batch); a reader task hands each answer
to the inbox with its request's ``rpc_id``. ``peer_calls_max`` bounds the calls in
flight to one peer, queued or written and not yet answered: beyond it a request is
dropped, as a lossy network would drop it. A call past its deadline (a Fetch's
``max_wait_ms`` plus ``fetch_timeout_margin_ms``, any other call's
``request_timeout_ms``) gives up its place when a new call needs it, so a peer that
never answers cannot hold the bound for ever; an answer to a call given up is dropped. A
stream that fails with ``UNAVAILABLE`` (the peer is gone: connection refused or reset)
is reported once with ``Inbox.unreachable`` if calls were in flight on it, the fast
signal of a dead peer, and its channel is made afresh so that the next request opens a
new stream at once rather than after a reconnect backoff. The calls in flight on a
broken stream are lost, whatever the reason; the core's timeouts cover them.

Inbound: one handler per stream. Each request is checked (cluster id, then
``codec.decode``: bad input is answered INCONSISTENT_CLUSTER_ID or INVALID_REQUEST on
the same stream, which keeps serving), numbered with a fresh ``rpc_id`` and handed to
the inbox; the core's answer is written back on the stream whenever it comes, so answers
overtake each other (a Vote is answered while a Fetch is parked). The transport never
delays a call itself: a Fetch long-polls because the core parks it. The requests
waiting for the core are bounded per stream (``peer_calls_max``) and over all streams
(``inbound_calls_max``): beyond, a request is dropped before it reaches the core. A
request the core has left unanswered past its deadline gives up its place in the same
way (its caller has given up too), so a core that never answers cannot fill the bounds.
Closing ends every inbound stream with ``UNAVAILABLE``, so a caller with calls waiting
hears at once that the node is gone.

Every service of the node (the controller's, the journal's) shares the server, so that
an operator opens one port. Two things keep client load from hurting the quorum there:
calls are admitted against two budgets, one for the Raft protocol (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch, FetchSnapshot) and one for everything else, so clients saturating
theirs never refuse a Vote or a Fetch; and the server takes requests of at most 4 MiB
(every Raft request is a few dozen bytes; only the answers to Fetch and FetchSnapshot are
large, and a server sends up to 64 MiB).

The module is not named ``grpc.py`` so that it can never shadow the grpc package.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as PbMessage

from raftka.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from raftka.raft.transport import codec
from raftka.raft.transport.base import Inbox
from raftka.v1 import raft_pb2, raft_pb2_grpc

__all__ = ["AddServicer", "DescribeCallback", "GrpcTransport", "VoterChangeCallback"]

DescribeCallback = Callable[[], raft_pb2.DescribeQuorumResponse]
# An AddRaftVoter, RemoveRaftVoter or UpdateRaftVoter request -> the answer once decided.
VoterChangeCallback = Callable[[PbMessage], Awaitable[raft_pb2.RaftVoterChangeResponse]]
AddServicer = Callable[[grpc.aio.Server], None]
# Why the caller of a stream may not send this request (rpc field, sender id), or None.
ExchangeCheck = Callable[[str, int], str | None]
# The check for one inbound stream, from its call's context; PermissionError refuses it.
ExchangeGate = Callable[[grpc.aio.ServicerContext], ExchangeCheck]

_MESSAGE_BYTES_MAX = 64 << 20  # a 1 MiB fetch or snapshot chunk fits with a wide margin
# What the server takes from any caller: gRPC's default. Raft requests are tiny; clients'
# lists are bounded by their services (metadata/validation.py), journal entries by 1 MiB.
_REQUEST_BYTES_MAX = 4 << 20
_STOP_GRACE_S = 0.2

_CHANNEL_OPTIONS = (
    # A restarted peer is found again within half a second.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    # Each channel gets subchannels of its own: the fresh channel made after a peer went
    # away (``_Peer.reset``) must really dial again, not inherit the old one's backoff.
    ("grpc.use_local_subchannel_pool", 1),
    # Pings find a half-open connection (peer host gone, no RST) within ~3 s.
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", _MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", _MESSAGE_BYTES_MAX),
)

_SERVER_OPTIONS = (
    # Without this, a second process could bind the same port and split the traffic.
    ("grpc.so_reuseport", 0),
    # Accept the clients' keepalive pings (else the server answers GOAWAY too_many_pings).
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
    # Ping back, so a stream from a caller whose host is gone ends within ~3 s too.
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", _MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", _REQUEST_BYTES_MAX),
    # A connection that has not finished its TLS handshake and HTTP/2 preface by then is
    # closed (grpc's default waits 120 s: idle sockets held the node's descriptors).
    ("grpc.server_handshake_timeout_ms", 10_000),
)


def server_options(connections_max: int) -> tuple[tuple[str, Any], ...]:
    """The server's options; beyond ``connections_max`` (0: no bound) grpc accepts no
    connection until one closes, instead of accepting until the process has no descriptor
    left (then it logs "File descriptor limit reached. Retrying." each second)."""
    bound = (("grpc.max_allowed_incoming_connections", connections_max),) if connections_max else ()
    return (*_SERVER_OPTIONS, *bound)


@dataclass(frozen=True, slots=True)
class _Rpc:
    """One Raft RPC: its field in the stream's frames, who sent the request, what answers it."""

    field: str
    sender: Callable[[Any], int]
    response: type[Response]
    response_pb: type[PbMessage]


_RPC_BY_REQUEST: dict[type, _Rpc] = {
    VoteRequest: _Rpc("vote", attrgetter("candidate_id"), VoteResponse, raft_pb2.VoteResponse),
    BeginQuorumEpochRequest: _Rpc(
        "begin_quorum_epoch",
        attrgetter("leader_id"),
        BeginQuorumEpochResponse,
        raft_pb2.BeginQuorumEpochResponse,
    ),
    EndQuorumEpochRequest: _Rpc(
        "end_quorum_epoch", attrgetter("leader_id"), EndQuorumEpochResponse, raft_pb2.EndQuorumEpochResponse
    ),
    FetchRequest: _Rpc("fetch", attrgetter("replica_id"), FetchResponse, raft_pb2.FetchResponse),
    FetchSnapshotRequest: _Rpc(
        "fetch_snapshot", attrgetter("replica_id"), FetchSnapshotResponse, raft_pb2.FetchSnapshotResponse
    ),
}
_RPC_BY_FIELD: dict[str, _Rpc] = {rpc.field: rpc for rpc in _RPC_BY_REQUEST.values()}
# The methods admitted against the Raft budget ("/package.Service/Method", as grpc names them).
_RAFT_METHODS = frozenset({f"/{raft_pb2.DESCRIPTOR.services_by_name['Raft'].full_name}/Exchange"})


class GrpcTransport:
    """``raftka.raft.transport.base.Transport`` over gRPC; also serves DescribeQuorum.

    Other services (the Journal, the controller's) share the server: pass ``servicers``,
    callables run as ``add(server)`` in ``start`` before the server starts, e.g.
    ``lambda s: raft_pb2_grpc.add_JournalServicer_to_server(journal, s)``. Their methods
    are asyncio coroutines or async generators (see ``_CallBudgets``).
    """

    def __init__(
        self,
        node_id: int,
        listen: str,
        peers: Mapping[int, str],
        cluster_id: str,
        *,
        describe: DescribeCallback | None = None,
        voter_changes: VoterChangeCallback | None = None,
        servicers: Sequence[AddServicer] = (),
        request_timeout_ms: int = 2000,
        fetch_timeout_margin_ms: int = 1000,
        peer_calls_max: int = 64,
        inbound_calls_max: int = 1024,
        service_calls_max: int = 1024,
        server_credentials: grpc.ServerCredentials | None = None,
        channel_credentials: grpc.ChannelCredentials | None = None,
        exchange_gate: ExchangeGate | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        connections_max: int = 0,
    ) -> None:
        """``listen`` and the ``peers`` values are "host:port"; ``peers`` maps every voter's
        id to its address and may include this node. Timeouts: a Fetch call's deadline is
        its ``max_wait_ms`` plus ``fetch_timeout_margin_ms``, any other call's is
        ``request_timeout_ms``. ``peer_calls_max`` bounds the calls on one stream, each
        way: this node's calls in flight to a peer (more are dropped, as a lossy network
        would) and a peer's requests waiting for this node's core. ``inbound_calls_max``
        bounds the Raft requests waiting for the core over all streams, and the Exchange
        streams open at once (each is one call). Apart from those, the server runs at most
        ``service_calls_max`` calls of its other methods at once; more are refused. With
        ``server_credentials`` the server speaks TLS only, with ``channel_credentials`` so
        do this node's calls to its peers (``raftka.security.tls``); without, plaintext.
        ``exchange_gate`` decides who may open an Exchange stream and send what on it
        (a refused request is answered INVALID_REQUEST and never reaches the core);
        ``interceptors`` run on every call after the budgets (authorization). The server
        holds at most ``connections_max`` connections (0: no bound).
        """
        assert request_timeout_ms > 0 and fetch_timeout_margin_ms > 0
        assert peer_calls_max > 0 and inbound_calls_max > 0
        self._node_id = node_id
        self._listen = listen
        self._peers = {peer_id: _Peer(address, channel_credentials) for peer_id, address in peers.items()}
        self._server_credentials = server_credentials
        self._channel_credentials = channel_credentials
        self._exchange_gate = exchange_gate
        self._interceptors = tuple(interceptors)
        self._connections_max = connections_max
        self._cluster_id = cluster_id
        self._describe = describe
        self._voter_changes = voter_changes
        self._servicers = tuple(servicers)
        self._request_timeout_s = request_timeout_ms / 1000
        self._fetch_timeout_margin_s = fetch_timeout_margin_ms / 1000
        self._peer_calls_max = peer_calls_max
        self._inbound_calls_max = inbound_calls_max
        self._budgets = _CallBudgets(inbound_calls_max, service_calls_max)
        self._log = structlog.get_logger(__name__).bind(node_id=node_id)
        self._inbox: Inbox | None = None
        self._server: grpc.aio.Server | None = None
        self._port = 0
        self._closed = False
        self._call_ids = itertools.count(1)  # outbound, on every stream
        self._rpc_ids = itertools.count(1)  # inbound, as the core sees them
        self._streams: set[_InboundStream] = set()
        # Open inbound streams per sender (the id their requests name), for peer_connected
        # and peer_disconnected.
        self._streams_by_sender: collections.Counter[int] = collections.Counter()
        # Inbound requests waiting for the core's answer, by rpc_id; bounded by
        # ``inbound_calls_max``, and by ``peer_calls_max`` per stream.
        self._pending: dict[int, _InboundCall] = {}

    @property
    def port(self) -> int:
        """The port the server listens on (useful when ``listen`` asked for port 0)."""
        return self._port

    async def start(self, inbox: Inbox) -> None:
        assert self._inbox is None, "start() called twice"
        self._inbox = inbox
        server = grpc.aio.server(
            options=server_options(self._connections_max), interceptors=[self._budgets, *self._interceptors]
        )
        raft_pb2_grpc.add_RaftServicer_to_server(
            _RaftServicer(self._exchange, self._describe, self._voter_changes), server
        )
        for add in self._servicers:
            add(server)
        try:
            if self._server_credentials is None:
                self._port = server.add_insecure_port(self._listen)
            else:
                self._port = server.add_secure_port(self._listen, self._server_credentials)
        except RuntimeError as e:
            raise OSError(f"cannot listen on {self._listen}: {e}") from e
        await server.start()
        self._server = server
        self._log.info("raft transport listening", listen=self._listen, port=self._port)

    def add_peer(self, peer_id: int, address: str) -> None:
        if peer_id != self._node_id and peer_id not in self._peers and not self._closed:
            self._peers[peer_id] = _Peer(address, self._channel_credentials)
            self._log.info("raft peer added", peer_id=peer_id, address=address)

    def send(self, envelope: Envelope) -> None:
        if self._closed:
            return
        if isinstance(envelope.msg, Response):
            self._complete(envelope.rpc_id, envelope.msg)
        else:
            self._call(envelope.dst, envelope.msg, envelope.rpc_id)

    async def close(self) -> None:
        """End every stream, inbound with UNAVAILABLE; calls still waiting are lost."""
        if self._closed:
            return
        self._closed = True
        for inbound in self._streams:
            inbound.close()
        self._pending.clear()
        tasks = []
        for peer in self._peers.values():
            if peer.stream is not None:
                tasks.extend(peer.stream.cancel())
                peer.stream = None
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.stop(_STOP_GRACE_S)
        await asyncio.gather(*(peer.close() for peer in self._peers.values()))

    def _timeout_s(self, request: Request) -> float:
        if isinstance(request, FetchRequest):
            return request.max_wait_ms / 1000 + self._fetch_timeout_margin_s
        return self._request_timeout_s

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log.error("raft stream task crashed", exc_info=task.exception())

    # client side ----------------------------------------------------------------------

    def _call(self, peer_id: int, request: Request, rpc_id: int) -> None:
        inbox = self._inbox
        assert inbox is not None, "send() before start()"
        peer = self._peers.get(peer_id)
        if peer is None:
            self._log.error("request to a node that is not a known peer", peer_id=peer_id)
            asyncio.get_running_loop().call_soon(inbox.unreachable, peer_id)
            return
        stream = peer.stream or self._open_stream(peer_id, peer)
        now_s = asyncio.get_running_loop().time()
        if not stream.has_room(now_s, self._peer_calls_max):
            self._log.warning("too many calls in flight to peer; request dropped", peer_id=peer_id)
            return
        rpc = _RPC_BY_REQUEST[type(request)]
        call_id = next(self._call_ids)
        stream.calls[call_id] = _OutboundCall(rpc, rpc_id, now_s + self._timeout_s(request))
        frame = raft_pb2.RaftRequest(call_id=call_id)
        getattr(frame, rpc.field).CopyFrom(codec.encode(request))  # cheaper than a constructor keyword
        stream.requests.put_nowait(frame)

    def _open_stream(self, peer_id: int, peer: _Peer) -> _OutboundStream:
        stream = peer.stream = _OutboundStream(peer.stub(), self._peer_calls_max)
        for work in (self._write_requests(stream), self._read_answers(peer_id, peer, stream)):
            task = asyncio.create_task(work)
            task.add_done_callback(self._task_done)
            stream.tasks.append(task)
        self._log.debug("raft stream opened", peer_id=peer_id)
        return stream

    async def _write_requests(self, stream: _OutboundStream) -> None:
        """Write the queued requests in order; how the stream ended is the reader's to tell."""
        while True:
            frame = await stream.requests.get()
            if frame.call_id not in stream.calls:
                continue  # given up (past its deadline) while it waited
            try:
                await stream.call.write(frame)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                return

    async def _read_answers(self, peer_id: int, peer: _Peer, stream: _OutboundStream) -> None:
        try:
            while (frame := await stream.call.read()) is not grpc.aio.EOF:
                self._receive(peer_id, stream, frame)
        except grpc.aio.AioRpcError as e:
            self._stream_ended(peer_id, peer, stream, e.code())
        else:
            self._stream_ended(peer_id, peer, stream, grpc.StatusCode.OK)

    def _receive(self, peer_id: int, stream: _OutboundStream, frame: raft_pb2.RaftResponse) -> None:
        inbox = self._inbox
        assert inbox is not None
        call = stream.calls.pop(frame.call_id, None)
        if call is None:
            self._log.debug("answer to no call in flight", peer_id=peer_id, call_id=frame.call_id)
            return
        kind = frame.WhichOneof("response")
        if kind != call.rpc.field:
            reason = f"{kind or 'nothing'} does not answer {call.rpc.field}"
            self._log.warning("invalid response", peer_id=peer_id, field="response", reason=reason)
            return
        try:
            response = codec.decode(getattr(frame, kind))
        except codec.CodecError as e:
            self._log.warning("invalid response", peer_id=peer_id, rpc=kind, field=e.field, reason=e.reason)
            return
        inbox.deliver(Envelope(src=peer_id, dst=self._node_id, msg=response, rpc_id=call.rpc_id))

    def _stream_ended(
        self, peer_id: int, peer: _Peer, stream: _OutboundStream, code: grpc.StatusCode
    ) -> None:
        """Forget the stream (the next request opens another); report a peer that is gone."""
        inbox = self._inbox
        assert inbox is not None
        if peer.stream is stream:
            peer.stream = None
        stream.cancel()
        calls_lost = len(stream.calls)
        stream.calls.clear()
        if code == grpc.StatusCode.UNAVAILABLE:
            # A channel that failed once fails fast until its reconnect backoff ends,
            # even after the peer is back: start afresh so the next stream really tries.
            peer.reset(stream.stub)
            if calls_lost:
                inbox.unreachable(peer_id)
        else:
            self._log.debug("raft stream ended", peer_id=peer_id, code=code.name, calls_lost=calls_lost)

    # server side ----------------------------------------------------------------------

    async def _exchange(self, context: grpc.aio.ServicerContext) -> None:
        """Serve one peer's stream: read its requests, write the core's answers."""
        check = None
        if self._exchange_gate is not None:
            try:
                check = self._exchange_gate(context)
            except PermissionError as e:
                self._log.warning("raft stream refused", peer=context.peer(), reason=str(e))
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        stream = _InboundStream(context.peer(), self._peer_calls_max, check)
        if self._closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the node is shutting down")
        self._streams.add(stream)
        reader = asyncio.create_task(self._read_requests(stream, context))
        reader.add_done_callback(self._task_done)
        self._log.debug("inbound raft stream opened", peer=stream.peer)
        try:
            while (frame := await stream.next_answer()) is not None:
                await context.write(frame)
        finally:
            reader.cancel()
            self._streams.discard(stream)
            for rpc_id in stream.pending:
                self._pending.pop(rpc_id, None)
            self._forget_sender(stream)
            self._log.debug("inbound raft stream closed", peer=stream.peer)
        if stream.closing:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the node is shutting down")

    async def _read_requests(self, stream: _InboundStream, context: grpc.aio.ServicerContext) -> None:
        """Read with ``context.read`` (not the request iterator), so that a frame that does
        not parse is skipped and the stream keeps serving."""
        try:
            while True:
                try:
                    frame = await context.read()
                except DecodeError as e:
                    self._log.warning("invalid request", field="frame", reason=str(e), peer=stream.peer)
                    continue
                if frame is grpc.aio.EOF:
                    return
                self._accept(stream, frame)
        finally:
            stream.end()

    def _accept(self, stream: _InboundStream, frame: raft_pb2.RaftRequest) -> None:
        """Check one inbound request and hand it to the core, or answer why not."""
        kind = frame.WhichOneof("request")
        if kind is None:
            self._log.warning("invalid request", field="request", reason="missing", peer=stream.peer)
            return
        rpc = _RPC_BY_FIELD[kind]
        request_pb = getattr(frame, kind)
        if request_pb.cluster_id != self._cluster_id:
            self._log.warning(
                "request from another cluster", rpc=kind, cluster_id=request_pb.cluster_id, peer=stream.peer
            )
            error = codec.error_response(rpc.response_pb, Error.INCONSISTENT_CLUSTER_ID)
            self._answer(stream, frame.call_id, rpc, error)
            return
        try:
            request = codec.decode(request_pb)
        except codec.CodecError as e:
            self._log.warning("invalid request", rpc=kind, field=e.field, reason=e.reason, peer=stream.peer)
            error = codec.error_response(rpc.response_pb, Error.INVALID_REQUEST)
            self._answer(stream, frame.call_id, rpc, error)
            return
        if stream.check is not None and (refused := stream.check(kind, rpc.sender(request))) is not None:
            self._log.warning("raft request refused", rpc=kind, reason=refused, peer=stream.peer)
            self._answer(
                stream, frame.call_id, rpc, codec.error_response(rpc.response_pb, Error.INVALID_REQUEST)
            )
            return
        self._learn_sender(stream, rpc.sender(request))
        self._ask_core(stream, frame.call_id, rpc, request)

    def _learn_sender(self, stream: _InboundStream, sender: int) -> None:
        """The first accepted request names who the stream is from; a stream that names
        another sender later still counts for its first."""
        if stream.sender is not None or self._inbox is None:
            return
        stream.sender = sender
        self._streams_by_sender[sender] += 1
        if self._streams_by_sender[sender] == 1:
            self._inbox.peer_connected(sender)

    def _forget_sender(self, stream: _InboundStream) -> None:
        sender = stream.sender
        if sender is None or self._inbox is None:
            return
        self._streams_by_sender[sender] -= 1
        if self._streams_by_sender[sender] == 0:
            del self._streams_by_sender[sender]
            if not self._closed:
                self._inbox.peer_disconnected(sender)

    def _ask_core(self, stream: _InboundStream, call_id: int, rpc: _Rpc, request: Request) -> None:
        inbox = self._inbox
        assert inbox is not None, "the server runs only after start()"
        now_s = asyncio.get_running_loop().time()
        if not self._has_room(stream, now_s):
            self._log.warning("too many requests waiting for the core; request dropped", peer=stream.peer)
            return
        rpc_id = next(self._rpc_ids)
        self._pending[rpc_id] = _InboundCall(stream, call_id, rpc, now_s + self._timeout_s(request))
        stream.pending.add(rpc_id)
        inbox.deliver(Envelope(src=rpc.sender(request), dst=self._node_id, msg=request, rpc_id=rpc_id))

    def _has_room(self, stream: _InboundStream, now_s: float) -> bool:
        """Room for one more request from ``stream``, once requests past their deadline are forgotten."""
        if len(stream.pending) >= self._peer_calls_max or len(self._pending) >= self._inbound_calls_max:
            for rpc_id, call in list(self._pending.items()):
                if call.deadline_s < now_s:
                    del self._pending[rpc_id]
                    call.stream.pending.discard(rpc_id)
        return len(stream.pending) < self._peer_calls_max and len(self._pending) < self._inbound_calls_max

    def _complete(self, rpc_id: int, response: Response) -> None:
        call = self._pending.pop(rpc_id, None)
        if call is None:
            return  # unknown, or given up: its stream ended or it made room past its deadline
        call.stream.pending.discard(rpc_id)
        if not isinstance(response, call.rpc.response):
            self._log.error(
                "core answered with the wrong type", rpc=call.rpc.field, response=type(response).__name__
            )
            return
        self._answer(call.stream, call.call_id, call.rpc, codec.encode(response))

    def _answer(self, stream: _InboundStream, call_id: int, rpc: _Rpc, response_pb: PbMessage) -> None:
        frame = raft_pb2.RaftResponse(call_id=call_id)
        getattr(frame, rpc.field).CopyFrom(response_pb)
        if not stream.answer(frame):
            self._log.warning("answers not read by the peer; answer dropped", peer=stream.peer)


@dataclass(frozen=True, slots=True)
class _OutboundCall:
    """A request on its way to a peer, or waiting for the answer."""

    rpc: _Rpc
    rpc_id: int  # the core's, put on the answer
    deadline_s: float  # loop time


class _OutboundStream:
    """This node's Exchange stream to one peer: the requests for the writer, the calls in
    flight by ``call_id``, and the writer and reader tasks."""

    __slots__ = ("stub", "call", "requests", "calls", "tasks")

    def __init__(self, stub: raft_pb2_grpc.RaftStub, calls_max: int) -> None:
        self.stub = stub
        self.call = stub.Exchange()
        # Every queued request is a call in flight, so ``has_room`` bounds the queue too.
        self.requests: asyncio.Queue[raft_pb2.RaftRequest] = asyncio.Queue(calls_max)
        self.calls: dict[int, _OutboundCall] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def has_room(self, now_s: float, calls_max: int) -> bool:
        """Room for one more call, once calls past their deadline are forgotten."""
        if len(self.calls) >= calls_max:
            self.forget_expired(now_s)
        return len(self.calls) < calls_max and not self.requests.full()

    def forget_expired(self, now_s: float) -> None:
        for call_id in [call_id for call_id, call in self.calls.items() if call.deadline_s < now_s]:
            del self.calls[call_id]

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the call and the tasks (not the one running this); return them to await."""
        self.call.cancel()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        return [task for task in self.tasks if task is not current]


class _Peer:
    """A peer's channel, made on first use and reused, and this node's stream to the peer."""

    __slots__ = ("address", "stream", "_credentials", "_channel", "_stub", "_closing")

    def __init__(self, address: str, credentials: grpc.ChannelCredentials | None) -> None:
        self.address = address
        self._credentials = credentials
        self.stream: _OutboundStream | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._channel: grpc.aio.Channel | None = None
        self._stub: raft_pb2_grpc.RaftStub | None = None

    def stub(self) -> raft_pb2_grpc.RaftStub:
        if self._stub is None:
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
            else:
                self._channel = grpc.aio.secure_channel(
                    self.address, self._credentials, options=_CHANNEL_OPTIONS
                )
            self._stub = raft_pb2_grpc.RaftStub(self._channel)
        return self._stub

    def reset(self, failed: raft_pb2_grpc.RaftStub) -> None:
        """Drop the channel ``failed`` came from (unless already replaced); close it soon."""
        if self._stub is not failed or self._channel is None:
            return
        channel, self._channel, self._stub = self._channel, None, None
        task = asyncio.get_running_loop().create_task(channel.close(grace=1.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        for task in list(self._closing):
            await task


@dataclass(frozen=True, slots=True)
class _InboundCall:
    """A peer's request waiting for the core's answer."""

    stream: _InboundStream
    call_id: int  # the caller's, put on the answer
    rpc: _Rpc
    deadline_s: float  # loop time


class _InboundStream:
    """A peer's Exchange stream into this node: the rpc_ids of its requests waiting for the
    core, and the answers waiting to be written."""

    __slots__ = ("peer", "check", "sender", "pending", "closing", "_answers", "_answers_max")

    def __init__(self, peer: str, answers_max: int, check: ExchangeCheck | None = None) -> None:
        self.peer = peer  # the caller's address, for logs
        self.sender: int | None = None  # the node its first accepted request came from
        self.check = check  # who the caller is allowed to speak for (None: anyone)
        self.pending: set[int] = set()
        self.closing = False  # end with UNAVAILABLE: this node is shutting down
        # None ends the stream; ``answer`` bounds the rest.
        self._answers: asyncio.Queue[raft_pb2.RaftResponse | None] = asyncio.Queue()
        self._answers_max = answers_max

    def answer(self, frame: raft_pb2.RaftResponse) -> bool:
        """Queue ``frame`` for the writer; False if the peer has left too many unread."""
        if self._answers.qsize() >= self._answers_max:
            return False
        self._answers.put_nowait(frame)
        return True

    async def next_answer(self) -> raft_pb2.RaftResponse | None:
        return await self._answers.get()

    def end(self) -> None:
        """The caller is done: stop after the answers already queued."""
        self._answers.put_nowait(None)

    def close(self) -> None:
        """This node is shutting down: stop, and tell the caller so."""
        self.closing = True
        self.end()


_Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class _CallBudgets(grpc.aio.ServerInterceptor):
    """Admits each call against its method's budget: the Raft protocol's, or the services'.

    grpc's own ``maximum_concurrent_rpcs`` counts every call of the server together, so
    clients holding their calls open (writes waiting for a commit) could use it all up
    and have a peer's Exchange stream refused. Here each budget is counted on its own;
    an Exchange stream is one Raft call however many requests it carries.
    """

    def __init__(self, raft_calls_max: int, service_calls_max: int) -> None:
        assert raft_calls_max > 0 and service_calls_max > 0, (raft_calls_max, service_calls_max)
        self._raft = _Budget("Raft protocol", raft_calls_max)
        self._services = _Budget("service", service_calls_max)
        self._admitting: dict[str, grpc.RpcMethodHandler] = {}  # one per method the server has

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        admitting = self._admitting.get(method)
        if admitting is not None:
            return admitting
        handler = await continuation(handler_call_details)
        if handler is None:  # a method the server does not have: grpc answers UNIMPLEMENTED
            return None
        budget = self._raft if method in _RAFT_METHODS else self._services
        if handler.unary_unary is not None:
            make, behavior = grpc.unary_unary_rpc_method_handler, handler.unary_unary
        elif handler.unary_stream is not None:  # health's Watch: one call however long it watches
            make, behavior = grpc.unary_stream_rpc_method_handler, handler.unary_stream
        else:  # the Exchange stream, reflection's: one call however many requests it carries
            assert handler.stream_stream is not None, f"{method}: no budget for this kind of method"
            make, behavior = grpc.stream_stream_rpc_method_handler, handler.stream_stream
        admitting = self._admitting[method] = make(
            budget.admit(behavior),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        return admitting


class _Budget:
    """At most ``calls_max`` calls in progress; one more is refused RESOURCE_EXHAUSTED."""

    __slots__ = ("_name", "_calls_max", "_in_progress")

    def __init__(self, name: str, calls_max: int) -> None:
        self._name = name
        self._calls_max = calls_max
        self._in_progress = 0

    def admit(self, behavior: _Behavior) -> _Behavior:
        """``behavior`` wrapped, of the same kind: grpc tells a coroutine (which answers, or
        writes with ``context.write``) from an async generator (which yields its answers)."""
        if inspect.isasyncgenfunction(behavior):
            return self._admit_generator(behavior)

        async def admitted(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await self._enter(context)
            try:
                return await behavior(request, context)
            finally:
                self._in_progress -= 1

        return admitted

    def _admit_generator(self, behavior: Callable[..., AsyncIterator[Any]]) -> _Behavior:
        async def admitted(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await self._enter(context)
            try:
                async for answer in behavior(request, context):
                    yield answer
            finally:
                self._in_progress -= 1

        return admitted  # type: ignore[return-value]

    async def _enter(self, context: grpc.aio.ServicerContext) -> None:
        if self._in_progress >= self._calls_max:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"node busy: {self._calls_max} {self._name} calls in progress already; retry later",
            )
        self._in_progress += 1


_Exchange = Callable[[grpc.aio.ServicerContext], Awaitable[None]]


class _RaftServicer(raft_pb2_grpc.RaftServicer):
    """Routes the Raft service to the transport; the generated base class names the methods."""

    def __init__(
        self,
        exchange: _Exchange,
        describe: DescribeCallback | None,
        voter_changes: VoterChangeCallback | None,
    ) -> None:
        self._exchange = exchange
        self._describe = describe
        self._voter_changes = voter_changes

    async def _change_voters(
        self, request: PbMessage, context: grpc.aio.ServicerContext
    ) -> raft_pb2.RaftVoterChangeResponse:
        if self._voter_changes is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "this node does not change its quorum's voters"
            )
        return await self._voter_changes(request)  # type: ignore[misc]

    async def AddRaftVoter(
        self, request: raft_pb2.AddRaftVoterRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.RaftVoterChangeResponse:
        return await self._change_voters(request, context)

    async def RemoveRaftVoter(
        self, request: raft_pb2.RemoveRaftVoterRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.RaftVoterChangeResponse:
        return await self._change_voters(request, context)

    async def UpdateRaftVoter(
        self, request: raft_pb2.UpdateRaftVoterRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.RaftVoterChangeResponse:
        return await self._change_voters(request, context)

    async def Exchange(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await self._exchange(context)  # it reads the requests with context.read()

    async def DescribeQuorum(
        self, request: raft_pb2.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.DescribeQuorumResponse:
        if self._describe is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this node does not describe its quorum")
        return self._describe()
