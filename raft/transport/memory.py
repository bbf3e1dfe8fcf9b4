"""MemoryTransport: the gRPC transport's in-process twin, for drivers sharing one loop.

A ``MemoryNetwork`` routes envelopes between the transports registered with it.
Delivery is asynchronous (``loop.call_soon``) like a network's, ordered and lossless
unless a test cuts a link, and follows ``GrpcTransport``'s rules so that a driver
cannot tell the two apart:

- the destination's inbox gets a request numbered with a fresh ``rpc_id``; the
  response the core sends with that ``rpc_id`` reaches the requester with
  ``src`` = the responder;
- a request to a node that is not there (never started, or closed) is reported with
  ``Inbox.unreachable``, as a refused connection is; so is every call still waiting
  at a node when it closes, as a reset connection is;
- a cut link drops everything in both directions without a word, as a hung peer
  does: what is sent while it is cut, and what is in flight when it is cut.
"""

from __future__ import annotations

import asyncio
import itertools

from raftka.raft.messages import Envelope, Response
from raftka.raft.transport.base import Inbox

__all__ = ["MemoryNetwork", "MemoryTransport"]


class MemoryNetwork:
    """The hub: which nodes are up, and which links are cut."""

    def __init__(self) -> None:
        self._nodes: dict[int, MemoryTransport] = {}
        self._cuts: set[frozenset[int]] = set()

    def cut(self, a: int, b: int) -> None:
        """Drop every message between ``a`` and ``b`` (both ways) until healed."""
        self._cuts.add(frozenset((a, b)))

    def heal(self, a: int, b: int) -> None:
        self._cuts.discard(frozenset((a, b)))

    def heal_all(self) -> None:
        self._cuts.clear()

    def _connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self._cuts

    def _register(self, transport: MemoryTransport) -> None:
        current = self._nodes.get(transport.node_id)
        if current is not None and current.is_open:
            raise ValueError(f"node {transport.node_id} is already on the network")
        self._nodes[transport.node_id] = transport

    def _unregister(self, transport: MemoryTransport) -> None:
        if self._nodes.get(transport.node_id) is transport:
            del self._nodes[transport.node_id]

    def _route_request(self, requester: MemoryTransport, request: Envelope) -> None:
        """Runs one loop turn after ``send``: the destination is looked up on arrival."""
        dst = request.dst
        if not requester.is_open or not self._connected(requester.node_id, dst):
            return
        responder = self._nodes.get(dst)
        if responder is None:
            requester._report_unreachable(dst)
        else:
            responder._accept(requester, request)


class MemoryTransport:
    """One node's endpoint on a ``MemoryNetwork``; implements ``Transport``.

    ``pending_calls_max`` bounds the inbound calls waiting for this node's core; past
    it the oldest is forgotten (its requester hears nothing, as after a timeout).
    """

    def __init__(self, network: MemoryNetwork, node_id: int, *, pending_calls_max: int = 1024) -> None:
        self.node_id = node_id
        self._network = network
        self._pending_calls_max = pending_calls_max
        self._inbox: Inbox | None = None
        self._closed = False
        self._rpc_ids = itertools.count(1)
        self._pending: dict[int, tuple[MemoryTransport, int]] = {}  # rpc_id -> requester, its rpc_id

    @property
    def is_open(self) -> bool:
        return self._inbox is not None and not self._closed

    async def start(self, inbox: Inbox) -> None:
        assert self._inbox is None, "start() called twice"
        self._inbox = inbox
        self._network._register(self)

    def add_peer(self, peer_id: int, address: str) -> None:
        """Every node on the network is reachable by its id: nothing to learn."""

    def send(self, envelope: Envelope) -> None:
        if not self.is_open:
            return
        loop = asyncio.get_running_loop()
        if isinstance(envelope.msg, Response):
            call = self._pending.pop(envelope.rpc_id, None)  # None: unknown or forgotten
            if call is not None and self._network._connected(self.node_id, call[0].node_id):
                requester, requester_rpc_id = call
                reply = Envelope(self.node_id, requester.node_id, envelope.msg, requester_rpc_id)
                loop.call_soon(requester._receive, reply)
        elif self._network._connected(self.node_id, envelope.dst):
            loop.call_soon(self._network._route_request, self, envelope)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._network._unregister(self)
        loop = asyncio.get_running_loop()
        for requester in dict.fromkeys(r for r, _ in self._pending.values()):  # deduplicated, in call order
            loop.call_soon(requester._lost, self.node_id)
        self._pending.clear()

    def _accept(self, requester: MemoryTransport, request: Envelope) -> None:
        """A request arrives from ``requester``: number it and hand it to the core."""
        assert self._inbox is not None
        if len(self._pending) >= self._pending_calls_max:
            del self._pending[next(iter(self._pending))]
        rpc_id = next(self._rpc_ids)
        self._pending[rpc_id] = (requester, request.rpc_id)
        self._inbox.deliver(Envelope(src=requester.node_id, dst=self.node_id, msg=request.msg, rpc_id=rpc_id))

    def _report_unreachable(self, peer_id: int) -> None:
        if self.is_open:
            assert self._inbox is not None
            self._inbox.unreachable(peer_id)

    def _receive(self, reply: Envelope) -> None:
        if self.is_open and self._network._connected(reply.src, reply.dst):
            assert self._inbox is not None
            self._inbox.deliver(reply)

    def _lost(self, peer_id: int) -> None:
        """``peer_id`` closed while our call to it was pending: its connection reset."""
        if self._network._connected(self.node_id, peer_id):
            self._report_unreachable(peer_id)
