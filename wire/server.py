"""A data-protocol listener: frames in, handlers called, answers out (``wire.frames``).

Each request becomes a task, started in arrival order, so a handler's synchronous part
(a produce's validation and append) runs in the order the requests arrived on the
connection; answers go back as each finishes. Bad input never stops the listener: an
unknown API or version gets ``UNSUPPORTED_VERSION``, a message that does not decode
``INVALID_REQUEST``, a handler that fails ``UNKNOWN_SERVER_ERROR`` (logged), and only
bytes that cannot be frames (a length over the limit, a header cut short) close that
one connection.

Bounds: at most ``connections_max`` connections (more are closed at once), at most
``in_flight_max`` requests being handled per connection (the connection is not read
meanwhile, so TCP pushes back on the client), no reading while the client is not
reading its answers (asyncio's write-buffer limits), and requests of at most
``REQUEST_FRAME_MAX_BYTES``.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Mapping

import structlog
from google.protobuf.message import DecodeError, Message
from raftka.v1 import controller_pb2

from wire.frames import (
    APIS,
    REQUEST_FRAME_MAX_BYTES,
    REQUEST_HEADER,
    VERSION,
    FrameDecoder,
    FrameError,
    encode_response,
    status_only,
)

E = controller_pb2.ErrorCode
log = structlog.get_logger("wire.server")

Handler = Callable[[Message], Awaitable[Message | None]]  # None: the request gets no answer


class CloseConnection(Exception):
    """Raised by a handler that cannot answer but must tell the client something went
    wrong (Kafka's rule for a refused acks=0 produce): the connection is closed."""
CONNECTIONS_MAX = 4_096
IN_FLIGHT_MAX = 64
WRITE_BUFFER_HIGH_BYTES = 4 << 20
REFUSAL_LOG_INTERVAL_S = 60.0
# The address of the client whose request a handler is serving ("host:port"): each
# request's task starts with it set (a group coordinator shows it as the member's host).
current_peer: contextvars.ContextVar[str] = contextvars.ContextVar("current_peer", default="")


class FrameServer:
    """Serves ``handlers`` (API key to handler) on one TCP listener."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        *,
        connections_max: int = CONNECTIONS_MAX,
        in_flight_max: int = IN_FLIGHT_MAX,
        request_max_bytes: int = REQUEST_FRAME_MAX_BYTES,
    ) -> None:
        unknown = set(handlers) - set(APIS)
        assert not unknown, f"handlers for APIs the protocol does not define: {unknown}"
        self.handlers = dict(handlers)
        self.connections_max = connections_max
        self.in_flight_max = in_flight_max
        self.request_max_bytes = request_max_bytes
        self.connections: set[_Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._refusals_logged_at = -REFUSAL_LOG_INTERVAL_S

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound (``port`` 0 picks a free one)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, reuse_address=True)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening, drop every connection and cancel what they were handling."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()

    def _admit(self, connection: _Connection) -> bool:
        if len(self.connections) >= self.connections_max:
            now = time.monotonic()
            if now - self._refusals_logged_at >= REFUSAL_LOG_INTERVAL_S:
                self._refusals_logged_at = now
                log.warning("data listener full; closing new connections", connections_max=self.connections_max)
            return False
        self.connections.add(connection)
        return True


class _Connection(asyncio.Protocol):
    def __init__(self, server: FrameServer) -> None:
        self._server = server
        self._decoder = FrameDecoder(server.request_max_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading = True
        self._writable = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self._server._admit(self):
            transport.abort()
            return
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        for task in self._tasks:
            task.cancel()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def pause_writing(self) -> None:
        self._writable = False
        self._update_reading()

    def resume_writing(self) -> None:
        self._writable = True
        self._dispatch()

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        self._dispatch()

    def _dispatch(self) -> None:
        """Start requests while the bounds allow, then read on only if they still do."""
        transport = self._transport
        assert transport is not None
        while self._writable and len(self._tasks) < self._server.in_flight_max and not transport.is_closing():
            try:
                frame = self._decoder.next_frame()
            except FrameError as e:
                self._close_for(str(e))
                return
            if frame is None:
                break
            try:
                self._start(frame)
            finally:
                frame.release()
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        want = self._writable and len(self._tasks) < self._server.in_flight_max
        if want and not self._reading:
            transport.resume_reading()
        elif not want and self._reading:
            transport.pause_reading()
        self._reading = want

    def _start(self, frame: memoryview) -> None:
        if len(frame) < REQUEST_HEADER.size:
            self._close_for(f"a request frame of {len(frame)} bytes is shorter than its header")
            return
        api_key, version, correlation_id = REQUEST_HEADER.unpack_from(frame)
        spec = APIS.get(api_key)
        handler = self._server.handlers.get(api_key)
        if spec is None or handler is None or version != VERSION:
            self._answer(
                correlation_id,
                status_only(E.UNSUPPORTED_VERSION, f"api {api_key} version {version} is not served here"),
            )
            return
        try:
            request = spec.request.FromString(frame[REQUEST_HEADER.size :])
        except DecodeError as e:
            self._answer(correlation_id, status_only(E.INVALID_REQUEST, f"{spec.name} request does not decode: {e}"))
            return
        context = contextvars.copy_context()
        context.run(current_peer.set, self._peer)
        task = asyncio.get_running_loop().create_task(
            self._handle(handler, spec.name, correlation_id, request), context=context
        )
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    async def _handle(self, handler: Handler, name: str, correlation_id: int, request: Message) -> None:
        try:
            response = await handler(request)
        except CloseConnection as e:
            log.debug("closing a data connection", peer=self._peer, reason=str(e))
            self.abort()
            return
        except Exception as e:  # a bug in a handler must not take the listener down
            log.exception("data request failed", api=name, peer=self._peer)
            response = status_only(E.UNKNOWN_SERVER_ERROR, f"{name} failed on the broker: {type(e).__name__}")
        if response is not None:
            self._answer(correlation_id, response)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._transport is not None and not self._transport.is_closing():
            self._dispatch()

    def _answer(self, correlation_id: int, response: Message) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(encode_response(correlation_id, response))

    def _close_for(self, why: str) -> None:
        log.warning("closing a data connection: bad frame", peer=self._peer, reason=why)
        assert self._transport is not None
        self._transport.abort()
