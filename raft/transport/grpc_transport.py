"""GrpcTransport: the quorum's RPCs between processes, over grpc.aio.

Inbound: each Raft RPC is checked (cluster id, then ``codec.decode``), numbered with a
fresh ``rpc_id`` and handed to the inbox; the handler then waits for the core to send
the response with that ``rpc_id``. The transport never delays a call itself: a Fetch
long-polls because the core parks it, up to the request's ``max_wait_ms``.

Outbound: ``send`` starts a unary call on the peer's channel (one per peer, made on
first use and kept) in a task, so the driver never waits on the network. The response
goes to the inbox; a refused or reset connection (``UNAVAILABLE``) is reported with
``Inbox.unreachable``, the fast signal of a dead peer; any other failure is left to the
core's timeouts.

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
import functools
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import grpc
import structlog
from google.protobuf.message import Message as PbMessage
from raftka.v1 import raft_pb2, raft_pb2_grpc

from raft.messages import (
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
from raft.transport import codec
from raft.transport.base import Inbox

__all__ = ["AddServicer", "DescribeCallback", "GrpcTransport"]

DescribeCallback = Callable[[], raft_pb2.DescribeQuorumResponse]
AddServicer = Callable[[grpc.aio.Server], None]

_MESSAGE_BYTES_MAX = 64 << 20  # a 1 MiB fetch or snapshot chunk fits with a wide margin
# What the server takes from any caller: gRPC's default. Raft requests are tiny; clients'
# lists are bounded by their services (metadata/validation.py), journal entries by 1 MiB.
_REQUEST_BYTES_MAX = 4 << 20
_STOP_GRACE_S = 0.2
# The server gives up on the core this long before the caller's deadline, so the caller
# hears UNAVAILABLE (the node is going away) rather than a bare DEADLINE_EXCEEDED.
_SERVER_HEADROOM_S = 0.25

_CHANNEL_OPTIONS = (
    # A restarted peer is found again within half a second.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
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
    ("grpc.max_send_message_length", _MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", _REQUEST_BYTES_MAX),
)


@dataclass(frozen=True, slots=True)
class _Rpc:
    """One Raft RPC: the stub method, who sent the request, and what answers it."""

    method: str
    sender: Callable[[Any], int]
    response: type[Response]
    response_pb: type[PbMessage]


_VOTE = _Rpc("Vote", attrgetter("candidate_id"), VoteResponse, raft_pb2.VoteResponse)
_BEGIN = _Rpc(
    "BeginQuorumEpoch", attrgetter("leader_id"), BeginQuorumEpochResponse, raft_pb2.BeginQuorumEpochResponse
)
_END = _Rpc(
    "EndQuorumEpoch", attrgetter("leader_id"), EndQuorumEpochResponse, raft_pb2.EndQuorumEpochResponse
)
_FETCH = _Rpc("Fetch", attrgetter("replica_id"), FetchResponse, raft_pb2.FetchResponse)
_FETCH_SNAPSHOT = _Rpc(
    "FetchSnapshot", attrgetter("replica_id"), FetchSnapshotResponse, raft_pb2.FetchSnapshotResponse
)
_RPC_BY_REQUEST: dict[type, _Rpc] = {
    VoteRequest: _VOTE,
    BeginQuorumEpochRequest: _BEGIN,
    EndQuorumEpochRequest: _END,
    FetchRequest: _FETCH,
    FetchSnapshotRequest: _FETCH_SNAPSHOT,
}
# The methods admitted against the Raft budget ("/package.Service/Method", as grpc names them).
_RAFT_METHODS = frozenset(
    f"/{raft_pb2.DESCRIPTOR.services_by_name['Raft'].full_name}/{rpc.method}"
    for rpc in _RPC_BY_REQUEST.values()
)


class _ClosedError(Exception):
    """Fails the calls still waiting for the core when the transport closes."""


class GrpcTransport:
    """``raft.transport.base.Transport`` over gRPC; also serves DescribeQuorum.

    Other services (the Journal, the controller's) share the server: pass ``servicers``,
    callables run as ``add(server)`` in ``start`` before the server starts, e.g.
    ``lambda s: raft_pb2_grpc.add_JournalServicer_to_server(journal, s)``. Their methods
    must be asyncio unary-unary ones, as every method of ours is (see ``_CallBudgets``).
    """

    def __init__(
        self,
        node_id: int,
        listen: str,
        peers: Mapping[int, str],
        cluster_id: str,
        *,
        describe: DescribeCallback | None = None,
        servicers: Sequence[AddServicer] = (),
        request_timeout_ms: int = 2000,
        fetch_timeout_margin_ms: int = 1000,
        peer_calls_max: int = 64,
        raft_calls_max: int = 1024,
        service_calls_max: int = 1024,
    ) -> None:
        """``listen`` and the ``peers`` values are "host:port"; ``peers`` maps every voter's
        id to its address and may include this node. Timeouts: a Fetch call's deadline is
        its ``max_wait_ms`` plus ``fetch_timeout_margin_ms``, any other call's is
        ``request_timeout_ms``. ``peer_calls_max`` bounds the calls in flight to one
        peer (more are dropped, as a lossy network would). The server runs at most
        ``raft_calls_max`` Raft protocol calls and, apart from those, at most
        ``service_calls_max`` calls of its other methods at once; more are refused.
        """
        assert request_timeout_ms > _SERVER_HEADROOM_S * 1000, request_timeout_ms
        assert fetch_timeout_margin_ms > _SERVER_HEADROOM_S * 1000, fetch_timeout_margin_ms
        self._node_id = node_id
        self._listen = listen
        self._peers = {peer_id: _Peer(address) for peer_id, address in peers.items()}
        self._cluster_id = cluster_id
        self._describe = describe
        self._servicers = tuple(servicers)
        self._request_timeout_s = request_timeout_ms / 1000
        self._fetch_timeout_margin_s = fetch_timeout_margin_ms / 1000
        self._peer_calls_max = peer_calls_max
        self._budgets = _CallBudgets(raft_calls_max, service_calls_max)
        self._log = structlog.get_logger(__name__).bind(node_id=node_id)
        self._inbox: Inbox | None = None
        self._server: grpc.aio.Server | None = None
        self._port = 0
        self._closed = False
        self._rpc_ids = itertools.count(1)
        # Inbound calls waiting for the core's response, by rpc_id. Bounded by
        # ``raft_calls_max``: calls beyond it are refused (RESOURCE_EXHAUSTED).
        self._pending: dict[int, asyncio.Future[Response]] = {}

    @property
    def port(self) -> int:
        """The port the server listens on (useful when ``listen`` asked for port 0)."""
        return self._port

    async def start(self, inbox: Inbox) -> None:
        assert self._inbox is None, "start() called twice"
        self._inbox = inbox
        server = grpc.aio.server(options=_SERVER_OPTIONS, interceptors=[self._budgets])
        raft_pb2_grpc.add_RaftServicer_to_server(_RaftServicer(self._serve, self._describe), server)
        for add in self._servicers:
            add(server)
        try:
            self._port = server.add_insecure_port(self._listen)
        except RuntimeError as e:
            raise OSError(f"cannot listen on {self._listen}: {e}") from e
        await server.start()
        self._server = server
        self._log.info("raft transport listening", listen=self._listen, port=self._port)

    def send(self, envelope: Envelope) -> None:
        if self._closed:
            return
        if isinstance(envelope.msg, Response):
            self._complete(envelope.rpc_id, envelope.msg)
        else:
            self._call(envelope.dst, envelope.msg, envelope.rpc_id)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for future in self._pending.values():
            future.set_exception(_ClosedError())
        self._pending.clear()
        calls = [call for peer in self._peers.values() for call in peer.calls]
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        if self._server is not None:
            await self._server.stop(_STOP_GRACE_S)
        await asyncio.gather(*(peer.close() for peer in self._peers.values()))

    # client side ----------------------------------------------------------------------

    def _call(self, peer_id: int, request: Request, rpc_id: int) -> None:
        inbox = self._inbox
        assert inbox is not None, "send() before start()"
        peer = self._peers.get(peer_id)
        if peer is None:
            self._log.error("request to a node that is not a known peer", peer_id=peer_id)
            asyncio.get_running_loop().call_soon(inbox.unreachable, peer_id)
            return
        if len(peer.calls) >= self._peer_calls_max:
            self._log.warning("too many calls in flight to peer; request dropped", peer_id=peer_id)
            return
        rpc = _RPC_BY_REQUEST[type(request)]
        call = asyncio.create_task(
            self._round_trip(
                inbox, peer_id, peer, rpc, codec.encode(request), self._timeout_s(request), rpc_id
            )
        )
        peer.calls.add(call)
        call.add_done_callback(functools.partial(self._call_done, peer))

    async def _round_trip(
        self,
        inbox: Inbox,
        peer_id: int,
        peer: _Peer,
        rpc: _Rpc,
        request_pb: PbMessage,
        timeout_s: float,
        rpc_id: int,
    ) -> None:
        stub = peer.stub()
        try:
            response_pb = await getattr(stub, rpc.method)(request_pb, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                # A channel that failed once fails fast until its reconnect backoff ends,
                # even after the peer is back: start afresh so the next call really tries.
                peer.reset(stub)
                inbox.unreachable(peer_id)
            else:
                self._log.debug("call failed", peer_id=peer_id, rpc=rpc.method, code=e.code().name)
            return
        try:
            response = codec.decode(response_pb)
        except codec.CodecError as e:
            self._log.warning(
                "invalid response", peer_id=peer_id, rpc=rpc.method, field=e.field, reason=e.reason
            )
            return
        inbox.deliver(Envelope(src=peer_id, dst=self._node_id, msg=response, rpc_id=rpc_id))

    def _call_done(self, peer: _Peer, call: asyncio.Task[None]) -> None:
        peer.calls.discard(call)
        if not call.cancelled() and call.exception() is not None:
            self._log.error("raft call crashed", exc_info=call.exception())

    def _timeout_s(self, request: Request) -> float:
        if isinstance(request, FetchRequest):
            return request.max_wait_ms / 1000 + self._fetch_timeout_margin_s
        return self._request_timeout_s

    # server side ----------------------------------------------------------------------

    async def _serve(self, rpc: _Rpc, request_pb: Any, context: grpc.aio.ServicerContext) -> PbMessage:
        """Answer one inbound Raft call; never raises for anything the caller sent."""
        if request_pb.cluster_id != self._cluster_id:
            self._log.warning(
                "request from another cluster",
                rpc=rpc.method,
                cluster_id=request_pb.cluster_id,
                peer=context.peer(),
            )
            return codec.error_response(rpc.response_pb, Error.INCONSISTENT_CLUSTER_ID)
        try:
            request = codec.decode(request_pb)
        except codec.CodecError as e:
            self._log.warning(
                "invalid request", rpc=rpc.method, field=e.field, reason=e.reason, peer=context.peer()
            )
            return codec.error_response(rpc.response_pb, Error.INVALID_REQUEST)
        response = await self._ask_core(rpc, request)
        if response is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the node did not answer (shutting down?)")
        if not isinstance(response, rpc.response):
            self._log.error(
                "core answered with the wrong type", rpc=rpc.method, response=type(response).__name__
            )
            await context.abort(grpc.StatusCode.INTERNAL, "wrong response type")
        return codec.encode(response)

    async def _ask_core(self, rpc: _Rpc, request: Request) -> Response | None:
        """Hand ``request`` to the core and wait for its answer; None if none comes."""
        inbox = self._inbox
        assert inbox is not None, "the server runs only after start()"
        if self._closed:
            return None
        rpc_id = next(self._rpc_ids)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rpc_id] = future
        try:
            inbox.deliver(Envelope(src=rpc.sender(request), dst=self._node_id, msg=request, rpc_id=rpc_id))
            async with asyncio.timeout(self._timeout_s(request) - _SERVER_HEADROOM_S):
                return await future
        except (TimeoutError, _ClosedError):
            return None
        finally:
            self._pending.pop(rpc_id, None)

    def _complete(self, rpc_id: int, response: Response) -> None:
        future = self._pending.pop(rpc_id, None)
        if future is not None and not future.done():  # else the call has timed out: drop
            future.set_result(response)


class _Peer:
    """A peer's channel, made on first use and reused, and the calls in flight to it."""

    __slots__ = ("address", "calls", "_channel", "_stub", "_closing")

    def __init__(self, address: str) -> None:
        self.address = address
        self.calls: set[asyncio.Task[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._channel: grpc.aio.Channel | None = None
        self._stub: raft_pb2_grpc.RaftStub | None = None

    def stub(self) -> raft_pb2_grpc.RaftStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
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


_Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class _CallBudgets(grpc.aio.ServerInterceptor):
    """Admits each call against its method's budget: the Raft protocol's, or the services'.

    grpc's own ``maximum_concurrent_rpcs`` counts every call of the server together, so
    clients holding their calls open (writes waiting for a commit) could use it all up
    and have a Vote or a Fetch refused. Here each budget is counted on its own.
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
        assert handler.unary_unary is not None, f"{method}: only unary-unary methods have a budget"
        budget = self._raft if method in _RAFT_METHODS else self._services
        admitting = self._admitting[method] = grpc.unary_unary_rpc_method_handler(
            budget.admit(handler.unary_unary),
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
        async def admitted(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if self._in_progress >= self._calls_max:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"node busy: {self._calls_max} {self._name} calls in progress already; retry later",
                )
            self._in_progress += 1
            try:
                return await behavior(request, context)
            finally:
                self._in_progress -= 1

        return admitted


_Serve = Callable[[_Rpc, Any, grpc.aio.ServicerContext], Awaitable[PbMessage]]


class _RaftServicer(raft_pb2_grpc.RaftServicer):
    """Routes each Raft RPC to the transport; the generated base class names the methods."""

    def __init__(self, serve: _Serve, describe: DescribeCallback | None) -> None:
        self._serve = serve
        self._describe = describe

    async def Vote(self, request: Any, context: grpc.aio.ServicerContext) -> PbMessage:
        return await self._serve(_VOTE, request, context)

    async def BeginQuorumEpoch(self, request: Any, context: grpc.aio.ServicerContext) -> PbMessage:
        return await self._serve(_BEGIN, request, context)

    async def EndQuorumEpoch(self, request: Any, context: grpc.aio.ServicerContext) -> PbMessage:
        return await self._serve(_END, request, context)

    async def Fetch(self, request: Any, context: grpc.aio.ServicerContext) -> PbMessage:
        return await self._serve(_FETCH, request, context)

    async def FetchSnapshot(self, request: Any, context: grpc.aio.ServicerContext) -> PbMessage:
        return await self._serve(_FETCH_SNAPSHOT, request, context)

    async def DescribeQuorum(
        self, request: raft_pb2.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.DescribeQuorumResponse:
        if self._describe is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this node does not describe its quorum")
        return self._describe()
