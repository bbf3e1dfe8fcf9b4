"""A framed-protocol listener: frames in, a dispatcher's calls run, answers out. It serves
the raftka data protocol (``raftka.wire.frames``, through ``FrameServer``) and, with another
dispatcher, Kafka's (``raftka.broker.kafka``).

Each request becomes a task, started in arrival order, so a handler's synchronous part
(a produce's validation and append) runs in the order the requests arrived on the
connection. A dispatcher says how answers go back: as each finishes (raftka's protocol,
matched by correlation id) or in request order (Kafka's, which clients rely on). Bad
input never stops the listener: the dispatcher answers what it can answer (an unknown
API or version, a message that does not decode), and only bytes that cannot be frames
close that one connection.

Bounds: connections by count, per client address, by time and by bytes buffered
(``raftka.wire.guard``: more are closed at once, or when they hold too much or too long), at most
``in_flight_max`` requests being handled or waiting to be answered per connection (the
connection is not read meanwhile, so TCP pushes back on the client), no reading while
4 MiB of its answers are unsent (in asyncio's write buffer, or finished and waiting for
an earlier answer), and requests of at most ``request_max_bytes``. A connection's
answers share ``answer_bytes_max`` (``answer_room``): it is not read while they reach
it, and its fetches read no more than what its queued answers and its other fetches
leave (a fetch's first batch still comes whole), so a client that sends 64 fetches at
once and reads nothing pins 64 MiB and a batch, not 64 times that; and all the
connections of a listener share the guard's ``answer_bytes_max`` the same way. A connection whose
client a handler throttled (``mute``: client quotas) is not read until the throttle ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import socket
import ssl
import time
from asyncio import sslproto
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

import structlog
from google.protobuf.message import DecodeError, Message

from raftka.node.logs import RateLimitedLog
from raftka.security.principal import Principal, current_host, current_principal, from_ssl
from raftka.security.sasl import SaslLogin, current_login
from raftka.v1 import controller_pb2
from raftka.wire.acceptor import Acceptor, bind
from raftka.wire.answer_room import AnswerBudget, AnswerRoom, current_answer_room
from raftka.wire.frames import (
    APIS,
    LENGTH,
    REQUEST_FRAME_MAX_BYTES,
    REQUEST_HEADER,
    VERSION,
    FrameDecoder,
    FrameError,
    encode_response,
    status_only,
)
from raftka.wire.guard import DEFAULT_LIMITS, LOG_INTERVAL_S, ConnectionGuard, ConnectionLimits
from raftka.wire.mute import Mute, current_mute

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.wire.server")

Handler = Callable[[Message], Awaitable[Message | None]]  # None: the request gets no answer
Call = Coroutine[Any, Any, bytes | None]  # a request being handled: its answer frame, or None for no answer


class CloseConnection(Exception):
    """Raised by a handler that cannot answer but must tell the client something went
    wrong (Kafka's rule for a refused acks=0 produce): the connection is closed."""


class Dispatcher(Protocol):
    """A protocol's requests: what a frame asks for, and how its answer is encoded."""

    ordered: bool  # answers go back in request order (else as each finishes)

    def dispatch(self, frame: memoryview) -> Call | bytes:
        """The call that will answer ``frame``, or an answer ready now. Raises
        ``FrameError`` for bytes the connection cannot go on after."""
        ...

    def api_key(self, frame: memoryview) -> int:
        """What ``frame`` asks for (-1: a frame too short to say)."""
        ...


IN_FLIGHT_MAX = 64
WRITE_BUFFER_HIGH_BYTES = 4 << 20  # unsent answers past which a connection is not read
TLS_READ_BYTES = 32 << 10  # asyncio's TLS read buffer per connection (its default: 256 KiB)
ANSWER_BYTES_MAX = 64 << 20  # a connection's answers, queued or being read: the largest fetch answer
# The address of the client whose request a handler is serving ("host:port"): each
# request's task starts with it set (a group coordinator shows it as the member's host).
current_peer: contextvars.ContextVar[str] = contextvars.ContextVar("current_peer", default="")
# The name of the listener that took the request (``Listener.name``): a Kafka answer names
# the brokers' addresses for the listener the client came in on, as Kafka's does.
current_listener: contextvars.ContextVar[str] = contextvars.ContextVar("current_listener", default="")


class Listener:
    """Serves one dispatcher's protocol on one TCP listener."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        name: str,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        in_flight_max: int = IN_FLIGHT_MAX,
        request_max_bytes: int = REQUEST_FRAME_MAX_BYTES,
        answer_bytes_max: int = ANSWER_BYTES_MAX,
        login: Callable[[Principal | None], SaslLogin] | None = None,
    ) -> None:
        """``login``: a new connection's SASL login, given its certificate's principal;
        None: connections need none."""
        self.dispatcher = dispatcher
        self.login = login
        self.login_refusals = RateLimitedLog(log, LOG_INTERVAL_S)
        self.name = name
        self.guard = ConnectionGuard(name, limits)
        self.in_flight_max = in_flight_max
        self.answer_bytes_max = answer_bytes_max
        self.request_max_bytes = request_max_bytes
        self._acceptors: list[Acceptor] = []
        self.bad_frames = RateLimitedLog(log, LOG_INTERVAL_S)  # a client sends them at will
        self.failures = RateLimitedLog(log, LOG_INTERVAL_S)  # a handler's bug a client can reach at will
        self.tls: ssl.SSLContext | None = None

    @property
    def connections(self) -> set[Any]:
        return self.guard.connections

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen; the port bound (``port`` 0 picks a free one). With ``tls``, a connection
        reaches the dispatcher only once its TLS handshake succeeded; it is judged by the
        guard before its handshake, so sockets that never finish one count like any other."""
        loop = asyncio.get_running_loop()
        self.tls = tls
        if tls is not None:
            small_tls_reads()

        async def serve(sock: socket.socket) -> None:
            await loop.connect_accepted_socket(lambda: _Connection(self), sock)

        judge = lambda sock, host: self.guard.room_for(sock.fileno(), host)  # noqa: E731
        self._acceptors = [Acceptor(sock, judge, serve, self.name) for sock in bind(host, port)]
        self.guard.start()
        return self._acceptors[0].sock.getsockname()[1]

    async def close(self) -> None:
        """Stop listening, drop every connection and cancel what they were handling."""
        for acceptor in self._acceptors:
            await acceptor.close()
        for connection in list(self.connections):
            connection.abort()
        await self.guard.stop()


def small_tls_reads() -> None:
    """asyncio gives every TLS connection a read buffer of ``SSLProtocol.max_size`` (256 KiB,
    zeroed, so resident) from the start of its handshake: ~290 KB per idle socket. A TLS
    record holds at most 16 KiB, so reading 32 KiB at a time costs little; it applies to
    every asyncio TLS connection of the process (a class attribute: asyncio has no
    per-connection setting)."""
    sslproto.SSLProtocol.max_size = TLS_READ_BYTES


class FrameServer(Listener):
    """The raftka data protocol: ``handlers`` by API key."""

    def __init__(self, handlers: Mapping[int, Handler], **options: Any) -> None:
        super().__init__(DataDispatcher(handlers), name="data", **options)


class DataDispatcher:
    """raftka's data protocol (``raftka.wire.frames``): answers as each finishes."""

    ordered = False

    def __init__(self, handlers: Mapping[int, Handler]) -> None:
        unknown = set(handlers) - set(APIS)
        assert not unknown, f"handlers for APIs the protocol does not define: {unknown}"
        self.handlers = dict(handlers)
        self._failures = RateLimitedLog(log, LOG_INTERVAL_S)  # a handler's bug a client can reach at will

    def dispatch(self, frame: memoryview) -> Call | bytes:
        if len(frame) < REQUEST_HEADER.size:
            raise FrameError(f"a request frame of {len(frame)} bytes is shorter than its header")
        api_key, version, correlation_id = REQUEST_HEADER.unpack_from(frame)
        spec = APIS.get(api_key)
        handler = self.handlers.get(api_key)
        if spec is None or handler is None or version != VERSION:
            why = f"api {api_key} version {version} is not served here"
            return encode_response(correlation_id, status_only(E.UNSUPPORTED_VERSION, why))
        try:
            request = spec.request.FromString(frame[REQUEST_HEADER.size :])
        except DecodeError as e:
            why = f"{spec.name} request does not decode: {e}"
            return encode_response(correlation_id, status_only(E.INVALID_REQUEST, why))
        return self._answer(handler, spec.name, correlation_id, request)

    def api_key(self, frame: memoryview) -> int:
        return REQUEST_HEADER.unpack_from(frame)[0] if len(frame) >= REQUEST_HEADER.size else -1

    async def _answer(
        self, handler: Handler, name: str, correlation_id: int, request: Message
    ) -> bytes | None:
        try:
            response = await handler(request)
        except CloseConnection:
            raise
        except Exception as e:  # a bug in a handler must not take the listener down
            self._failures.log(
                logging.ERROR, "data request failed", api=name, peer=current_peer.get(), exc_info=e
            )
            response = status_only(E.UNKNOWN_SERVER_ERROR, f"{name} failed on the broker: {type(e).__name__}")
        return None if response is None else encode_response(correlation_id, response)


class _Connection(asyncio.Protocol):
    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._dispatcher = listener.dispatcher
        self._decoder = FrameDecoder(listener.request_max_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self.host = "?"
        self.last_active_s = time.monotonic()
        self.partial_since_s: float | None = None
        self._principal: Principal | None = None  # from the client's certificate (TLS)
        self._login: SaslLogin | None = None
        self._tasks: set[asyncio.Task[bytes | None]] = set()
        # ordered answers: every request not yet answered, in arrival order (a task, or its answer)
        self._unanswered: collections.deque[asyncio.Task[bytes | None] | bytes] = collections.deque()
        self._ready_bytes = 0  # ordered answers finished but waiting for an earlier one
        self._unsent_high = min(WRITE_BUFFER_HIGH_BYTES, listener.answer_bytes_max)
        self.answers = AnswerBudget(
            listener.answer_bytes_max, self.queued_answer_bytes, listener.guard.answers
        )
        self._reading = True
        self._writable = True
        self.mute = Mute(self._dispatch)
        self._handshaking = False  # TLS: nothing is read as requests nor written until it is done
        self._handshake_task: asyncio.Task[None] | None = None  # held: the loop keeps tasks weakly

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = peer[0] if peer else "?"
        if not self._listener.guard.admit(self):
            transport.abort()
            return
        if self._listener.tls is None:
            self._serve(transport)
            return
        self._handshaking = True
        self._listener.guard.handshaking(self)
        transport.pause_reading()  # until start_tls puts the TLS layer in front of this protocol
        self._handshake_task = asyncio.get_running_loop().create_task(
            self._handshake(transport, self._listener.tls)
        )

    async def _handshake(self, plain: asyncio.Transport, tls: ssl.SSLContext) -> None:
        """Secure the connection. A handshake that fails, times out or is cut closes it, and
        asyncio then calls no ``connection_lost``: its place is given back here."""
        loop = asyncio.get_running_loop()
        try:
            secured = await loop.start_tls(
                plain,
                self,
                tls,
                server_side=True,
                ssl_handshake_timeout=self._listener.guard.handshake_timeout_s,
            )
        except OSError:  # refused, timed out or closed meanwhile: start_tls closed it
            secured = None
        if secured is None or secured.is_closing():
            self._listener.guard.release(self)
            return
        self._handshaking = False
        self._listener.guard.handshake_done(self)
        self._serve(secured)
        self._dispatch()  # what arrived with the end of the handshake

    def _serve(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._principal = from_ssl(transport.get_extra_info("ssl_object"))
        if self._listener.login is not None:  # SASL: the login knows the certificate, if any
            self._login = self._listener.login(self._principal)
            self._login.on_end = self.abort
        transport.set_write_buffer_limits(high=self._unsent_high)

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.guard.release(self)
        self.mute.cancel()
        for task in self._tasks:
            task.cancel()
        self._unanswered.clear()
        self._ready_bytes = 0

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def queued_answer_bytes(self) -> int:
        """Answers not yet sent: in the write buffer, or finished and waiting for their turn."""
        unsent = 0 if self._transport is None else self._transport.get_write_buffer_size()
        return unsent + self._ready_bytes

    def pause_writing(self) -> None:
        self._writable = False
        self._update_reading()

    def resume_writing(self) -> None:
        self._writable = True
        self._dispatch()

    def data_received(self, data: bytes) -> None:
        self.last_active_s = time.monotonic()
        self._decoder.feed(data)
        self._dispatch()

    def _busy(self) -> int:
        return len(self._unanswered) if self._dispatcher.ordered else len(self._tasks)

    def busy(self) -> bool:
        return self._busy() > 0

    def reading(self) -> bool:
        return self._reading

    def _may_start(self) -> bool:
        """Whether to start requests and read: not while 4 MiB of answers are unsent, the
        answers reach their bound, ``in_flight_max`` requests are in progress, or the
        client is throttled. Each stop ends with a call back here: asyncio's
        ``resume_writing``, a request finishing (which releases what it held, and sends
        what waited for it), or the mute ending."""
        return (
            not self.mute.muted()
            and self._writable
            and self.queued_answer_bytes() < self._unsent_high
            and self.answers.used < self.answers.limit
            and self._busy() < (1 if self.mute.throttled else self._listener.in_flight_max)
            and (self._login is None or self._login.principal is not None or self._busy() == 0)
        )

    def _dispatch(self) -> None:
        """Start requests while the bounds allow, then read on only if they still do."""
        transport = self._transport
        assert transport is not None
        if self._handshaking:
            return
        took = False
        while self._may_start() and not transport.is_closing():
            try:
                frame = self._decoder.next_frame()
                if frame is None:
                    break
                took = True
                try:
                    self._start(frame)
                finally:
                    frame.release()
            except FrameError as e:
                self._close_for(str(e))
                return
        self._held(took)
        self._update_reading()

    def _held(self, took_a_frame: bool) -> None:
        """Tell the guard what is buffered, and since when a frame is begun and not whole."""
        buffered = self._decoder.buffered_bytes
        if not buffered:
            self.partial_since_s = None
        elif took_a_frame or self.partial_since_s is None:
            self.partial_since_s = time.monotonic()
        self._listener.guard.holding(self, buffered)

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self._handshaking:
            return
        want = self._may_start()
        if want and not self._reading:
            transport.resume_reading()
        elif not want and self._reading:
            transport.pause_reading()
        self._reading = want

    def _start(self, frame: memoryview) -> None:
        login = self._login
        if login is not None and login.raw_step is not None and login.principal is None:
            call: Call | bytes | None = _bare_token_answer(login.raw_step, bytes(frame))
        else:
            call = self._checked_call(login, frame)
        if call is None:
            return
        if isinstance(call, bytes):
            if self._dispatcher.ordered and self._unanswered:
                self._unanswered.append(call)
                self._ready_bytes += len(call)
                self.answers.queued()
            else:
                self._write(call)
            return
        context = contextvars.copy_context()
        context.run(current_peer.set, self._peer)
        context.run(current_listener.set, self._listener.name)
        context.run(current_principal.set, self._principal if login is None else login.principal)
        context.run(current_host.set, self.host)
        context.run(current_login.set, login)
        room = AnswerRoom(self.answers)
        context.run(current_answer_room.set, room)
        context.run(current_mute.set, self.mute)
        task = asyncio.get_running_loop().create_task(call, context=context)
        self._tasks.add(task)
        if self._dispatcher.ordered:
            self._unanswered.append(task)
        task.add_done_callback(lambda done: self._finished(done, room))

    def _checked_call(self, login: SaslLogin | None, frame: memoryview) -> Call | bytes | None:
        """The dispatcher's call for ``frame``, or None (the connection closed) if the login
        does not allow its API yet."""
        if login is not None and (refusal := login.refusal(self._dispatcher.api_key(frame))) is not None:
            self._close_logged(self._listener.login_refusals, logging.INFO, "not logged in", refusal)
            return None
        return self._dispatcher.dispatch(frame)

    def _finished(self, task: asyncio.Task[bytes | None], room: AnswerRoom) -> None:
        self._tasks.discard(task)
        room.hold(0)  # the answer is queued now, or there is none
        if task.cancelled() or self._transport is None or self._transport.is_closing():
            return
        if (error := task.exception()) is not None:
            if isinstance(error, CloseConnection):
                log.debug(
                    "closing a connection", listener=self._listener.name, peer=self._peer, reason=str(error)
                )
            else:
                self._listener.failures.log(
                    logging.ERROR,
                    "a request failed; closing its connection",
                    listener=self._listener.name,
                    peer=self._peer,
                    exc_info=error,
                )
            self.abort()
            return
        if self._dispatcher.ordered:
            self._ready_bytes += len(task.result() or b"")
            self.answers.queued()
            self._write_answered()
        else:
            self._write(task.result())
        if self._login is not None and self._login.failed:
            self._transport.close()  # once the refusal is sent
            return
        self._dispatch()

    def _write_answered(self) -> None:
        """Ordered answers: write every answer ready at the head of the line."""
        unanswered = self._unanswered
        while unanswered:
            head = unanswered[0]
            if isinstance(head, asyncio.Task):
                if not head.done():
                    return
                head = head.result()
            unanswered.popleft()
            self._ready_bytes -= len(head or b"")
            self._write(head)

    def _write(self, answer: bytes | None) -> None:
        if answer is not None and self._transport is not None and not self._transport.is_closing():
            self.last_active_s = time.monotonic()
            self._transport.write(answer)
            self.answers.queued()

    def _close_for(self, why: str) -> None:
        self._close_logged(self._listener.bad_frames, logging.WARNING, "bad frame", why)

    def _close_logged(self, rate_log: RateLimitedLog, level: int, what: str, why: str) -> None:
        """Close the connection, saying why in ``rate_log`` (a client can make it happen at will)."""
        rate_log.log(
            level, f"closing a connection: {what}", listener=self._listener.name, peer=self._peer, reason=why
        )
        self.abort()


async def _bare_token_answer(step: Callable[[bytes], Awaitable[bytes | None]], token: bytes) -> bytes:
    """A login's token sent without a request header (after Kafka's SaslHandshake v0): the
    answer goes back as a bare frame too; a refused login closes the connection."""
    answer = await step(token)
    if answer is None:
        raise CloseConnection("the SASL login failed")
    return LENGTH.pack(len(answer)) + answer
