"""A fault-injecting TCP proxy between nodes: one listener per directed link.

Why per link and not one proxy per node: a proxy in front of node B carries both A's and
C's connections to B and cannot tell them apart (every node dials from 127.0.0.1), so it
could only cut B off from everyone. With one listener per ordered pair (A dials B through
link A->B), cutting A off is cutting exactly the links that touch A, and the rest of the
cluster keeps talking. Node A's config lists each peer at the A->peer link's port.

A link is open, blackholed or rejecting:

- blackhole models a real partition: bytes stop moving both ways, nothing is closed, and
  a connection made meanwhile is accepted but not forwarded (like a SYN into the void).
  Unread bytes wait in the proxy and the kernel's buffers, so after ``heal`` whatever TCP
  would still deliver is delivered. Only the endpoints' own timeouts notice the cut.
- reject models a crashed host or a firewall that answers: every connection on the link
  is reset (RST, SO_LINGER 0) and new ones are reset as soon as they are accepted.

The proxies run on their own asyncio loop in a daemon thread, so the tests stay
synchronous; each control call returns once the change is in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

LOOPBACK = "127.0.0.1"
_CHUNK_BYTES = 64 * 1024
_CONTROL_TIMEOUT_S = 5.0
_T = TypeVar("_T")


class LinkState(enum.Enum):
    OPEN = "open"
    BLACKHOLE = "blackhole"
    REJECT = "reject"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST rather than a FIN, as a crashed peer or a firewall reject does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed by the other end
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """Forwards connections made to its own port on to ``target_port``, unless cut."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.state = LinkState.OPEN
        self.port = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # one per accepted connection
        self._writers: set[asyncio.StreamWriter] = set()  # both ends of every live connection

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def set_state(self, state: LinkState) -> None:
        self.state = state
        if state is LinkState.OPEN:
            self._open.set()
            return
        self._open.clear()
        if state is LinkState.REJECT:
            self._reset_all()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _reset_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        for writer in self._writers:
            _reset(writer)
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.state is LinkState.REJECT:
            _reset(writer)
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._forward(reader, writer)
        except asyncio.CancelledError:
            pass  # the link was reset or closed: the writers are already aborted
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.transport.abort()

    async def _forward(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        await self._open.wait()  # blackholed: hold the new connection, dial nothing
        try:
            upstream_reader, upstream = await asyncio.open_connection(LOOPBACK, self.target_port)
        except OSError:
            _reset(client)  # the node is down: the dialer sees a reset, as it would without us
            return
        self._writers.add(upstream)
        try:
            pumps = [
                asyncio.create_task(self._pump(client_reader, upstream)),
                asyncio.create_task(self._pump(upstream_reader, client)),
            ]
            try:
                # One side closing ends the connection: gRPC never half-closes on purpose.
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._writers.discard(upstream)
            upstream.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy bytes one way, holding each chunk while the link is blackholed."""
        try:
            while chunk := await reader.read(_CHUNK_BYTES):
                await self._open.wait()
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass  # a reset on either side ends this connection, nothing more


class ProxyNetwork:
    """Every directed link between the nodes, on one loop in a background thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._links: dict[tuple[int, int], _Link] = {}

    def add_link(self, src: int, dst: int, target_port: int) -> int:
        """Start the proxy for connections ``src`` makes to ``dst``; returns its port."""
        link = _Link(target_port)
        self._run(link.start())
        self._links[(src, dst)] = link
        return link.port

    def cut(self, src: int, dst: int, state: LinkState = LinkState.BLACKHOLE) -> None:
        """Cut the link ``src`` dials ``dst`` on (requests and their responses alike)."""
        self._set([self._links[(src, dst)]], state)

    def isolate(self, node_id: int, state: LinkState = LinkState.BLACKHOLE) -> None:
        """Cut ``node_id`` off from every peer, in both directions."""
        self._set([link for (src, dst), link in self._links.items() if node_id in (src, dst)], state)

    def heal(self) -> None:
        self._set(self._links.values(), LinkState.OPEN)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._close_links())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CONTROL_TIMEOUT_S)
        self._loop.close()

    async def _close_links(self) -> None:
        await asyncio.gather(*(link.close() for link in self._links.values()))

    def _set(self, links: Iterable[_Link], state: LinkState) -> None:
        async def apply() -> None:
            for link in links:
                link.set_state(state)

        self._run(apply())

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_CONTROL_TIMEOUT_S)
