"""A TCP front for a node's gRPC server, so that its connections are bounded per client
address, as the Kafka and data listeners' are (``raftka.wire.guard``).

grpc.aio gives a server no hook at accept: its C core accepts on its own, bounded only in
total (``grpc.max_allowed_incoming_connections``). 5,200 sockets from one address that
never started TLS filled a controller's bound, and 14 of 21 admin calls failed. What was
looked at: channel arguments (``grpc.max_concurrent_streams``, ``grpc.max_connection_idle_ms``,
the resource quota, ``grpc.so_reuseport``) bound streams, idle time or memory, never
connections per address; an already-listening socket cannot be handed to a Python server
(only a port or a unix socket); closing grpc's sockets from outside (found through
``/proc``) acts only after they were accepted, and the flood refills the bound faster.

So the node's gRPC port is this front. Each socket is judged as it is accepted, before the
next (``raftka.wire.acceptor``): at most ``per_host_max`` from one address and
``connections_max`` in all, of which ``reserved`` are only for the cluster's own nodes
(``trusted()``: the controllers' and brokers' addresses the node knows), so clients cannot
take the places the quorum and the brokers need. A kept socket is relayed byte for byte to
the gRPC server on loopback: TLS passes through, gRPC still terminates it and sees the
client's certificate. The relay's upstream socket is bound to its own loopback port, and
``relayed_client`` maps that port back to the client's address, where ``host_of`` finds it
(an ACL's host is the client's, not the front's).

Cost: every byte crosses the event loop once more each way (two more system calls per read);
see docs/security.md for what was measured.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from raftka.node.descriptors import DESCRIPTORS
from raftka.node.logs import RateLimitedLog
from raftka.wire.acceptor import Acceptor, Verdict, bind

log = structlog.get_logger("raftka.wire.grpc_front")

LOG_INTERVAL_S = 60.0
WRITE_HIGH_BYTES = 1 << 20  # one side's unsent bytes past which the other side is not read
_relayed: dict[str, str] = {}  # "127.0.0.1:port" of an upstream socket -> its client's address


def relayed_client(local: str) -> str | None:
    """The client's address of the relay whose upstream socket is ``local`` ("host:port")."""
    return _relayed.get(local)


@dataclass(frozen=True, slots=True)
class FrontLimits:
    connections_max: int = 1_024
    per_host_max: int = 64  # Kafka's max.connections.per.ip
    reserved: int = 64  # of connections_max, only for the cluster's own nodes


class GrpcFront:
    """Listens on the node's gRPC address and relays what it keeps to ``upstream_port``."""

    def __init__(self, limits: FrontLimits, trusted: Callable[[], frozenset[str]] = frozenset) -> None:
        self.limits = limits
        self._trusted = trusted
        self._per_host: collections.Counter[str] = collections.Counter()
        self.closed = 0  # connections refused by a bound
        self._acceptors: list[Acceptor] = []
        self._relays: set[_Relay] = set()
        self._upstream_port = 0
        self._refusals = RateLimitedLog(log, LOG_INTERVAL_S)

    @property
    def connections(self) -> int:
        return sum(self._per_host.values())

    async def start(self, host: str, port: int, upstream_port: int) -> int:
        """Listen on ``host``:``port`` (0: any free one); the port bound."""
        self._upstream_port = upstream_port
        self._acceptors = [Acceptor(sock, self._judge, self._relay, "grpc") for sock in bind(host, port)]
        return self._acceptors[0].sock.getsockname()[1]

    async def close(self) -> None:
        for acceptor in self._acceptors:
            await acceptor.close()
        for relay in list(self._relays):
            relay.close()

    def _judge(self, sock: socket.socket, host: str) -> Verdict:
        trusted = host in self._trusted()
        room = self.limits.connections_max - (0 if trusted else self.limits.reserved)
        if not trusted and self._per_host[host] >= self.limits.per_host_max:
            return self._refuse(host, "connections_per_ip_max")
        if self.connections >= room:
            return self._refuse(host, "connections_max")
        if not DESCRIPTORS.room_for_connection(sock.fileno() + 1):  # and its upstream socket
            return self._refuse(host, "descriptors")
        self._per_host[host] += 1
        return Verdict.KEEP

    def _refuse(self, host: str, reason: str) -> Verdict:
        self.closed += 1
        self._refusals.log(logging.WARNING, "closing a gRPC connection", reason=reason, client=host)
        return Verdict.CLOSE

    async def _relay(self, downstream: socket.socket) -> None:
        host = downstream.getpeername()[0]
        loop = asyncio.get_running_loop()
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        local: str | None = None
        relay: _Relay | None = None
        try:
            upstream.setblocking(False)
            upstream.bind(("127.0.0.1", 0))  # a port of its own: the key to its client's address
            local = f"127.0.0.1:{upstream.getsockname()[1]}"
            _relayed[local] = host
            await loop.sock_connect(upstream, ("127.0.0.1", self._upstream_port))
            relay = _Relay(self, host, local)
            self._relays.add(relay)
            await loop.connect_accepted_socket(lambda: relay.down, downstream)
            await loop.create_connection(lambda: relay.up, sock=upstream)
        except BaseException:
            upstream.close()
            downstream.close()
            if relay is not None:
                relay.close()
            else:
                self._ended(host, local)
            raise

    def _ended(self, host: str, upstream_local: str | None) -> None:
        self._per_host[host] -= 1
        if not self._per_host[host]:
            del self._per_host[host]
        if upstream_local is not None:
            _relayed.pop(upstream_local, None)


class _Relay:
    """One client's connection and its upstream one: what one reads, the other writes."""

    def __init__(self, front: GrpcFront, host: str, local: str) -> None:
        self._front = front
        self._host = host
        self._local = local
        self.down = _Side(self)
        self.up = _Side(self)
        self.down.other, self.up.other = self.up, self.down
        self._ended = False

    def close(self) -> None:
        for side in (self.down, self.up):
            if side.transport is not None:
                side.transport.abort()
        self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._front._relays.discard(self)
        self._front._ended(self._host, self._local)


class _Side(asyncio.Protocol):
    """One socket of a relay. Its end (or end of file: HTTP/2 does not half-close) ends both."""

    def __init__(self, relay: _Relay) -> None:
        self._relay = relay
        self.other: _Side
        self.transport: asyncio.Transport | None = None
        self._pending: list[bytes] = []  # what arrived before the other side was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_BYTES)
        if self._pending:
            transport.write(b"".join(self._pending))
            self._pending.clear()

    def data_received(self, data: bytes) -> None:
        other = self.other.transport
        if other is None:
            self.other._pending.append(data)
        elif not other.is_closing():
            other.write(data)

    def pause_writing(self) -> None:
        if self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        other = self.other.transport
        if other is not None and not other.is_closing():
            other.close()
        if self.other.transport is None or self.other.transport.is_closing():
            self._relay._end()
