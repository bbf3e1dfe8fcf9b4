"""The client side of the data protocol (``raftka.wire.frames``): one pipelined TCP connection
per broker, with typed calls shaped like the gRPC ``BrokerStub``.

With ``sasl``, a connection logs in (SaslHandshake, then SaslAuthenticate with the
mechanism's tokens, checking the server's proof for SCRAM) before any call is sent on it;
a refused login fails the calls waiting for it with ``WireError("SASL_AUTHENTICATION_FAILED")``.

A call is sent at once, whatever else is in flight, and its answer is matched by
correlation id (aiokafka's connection works the same way). A call that outlives its
timeout closes the connection, as Kafka's clients do: the broker is stuck or gone, and
nothing queued on that connection should reach it later. A lost connection fails every
call in flight on it with ``WireError("UNAVAILABLE")``; the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import Callable

from google.protobuf.message import DecodeError, Message

from raftka.security import scram
from raftka.security.sasl import PLAIN, SaslCredentials, server_nonce
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.frames import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    LIST_TRANSACTIONS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    RESPONSE_FRAME_MAX_BYTES,
    RESPONSE_HEADER,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
    ApiSpec,
    FrameDecoder,
    FrameError,
    encode_request,
)

CONNECT_TIMEOUT_S = 5.0
IN_FLIGHT_MAX = 1_024
_CORRELATION_ID_MODULUS = 1 << 32


class WireError(Exception):
    """A call that got no answer: ``code`` is ``UNAVAILABLE`` (no connection, or it was
    lost), ``DEADLINE_EXCEEDED`` or ``RESOURCE_EXHAUSTED`` (too many calls in flight)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Connection(asyncio.Protocol):
    """One open connection; calls in flight are futures keyed by correlation id."""

    def __init__(self, address: str, max_frame_bytes: int = RESPONSE_FRAME_MAX_BYTES) -> None:
        self.address = address
        self._decoder = FrameDecoder(max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, tuple[ApiSpec, asyncio.Future[Message], asyncio.TimerHandle]] = {}
        self._ids = itertools.count(1)
        self._lost: WireError | None = None
        self._writable: asyncio.Future[None] | None = None  # set while the socket's buffer is over its limit

    @classmethod
    async def open(
        cls, address: str, *, timeout_s: float = CONNECT_TIMEOUT_S, tls: ssl.SSLContext | None = None
    ) -> Connection:
        """Connect; with ``tls``, the TLS handshake (both certificates checked) is part of it."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: cls(address), host, int(port), ssl=tls, server_hostname=host if tls else None
                ),
                timeout_s,
            )
        except TimeoutError:
            raise WireError("UNAVAILABLE", f"{address}: no connection within {timeout_s:g} s") from None
        except ssl.SSLError as e:
            raise WireError("UNAVAILABLE", f"{address}: TLS handshake failed: {e.reason or e}") from None
        except OSError as e:
            raise WireError("UNAVAILABLE", f"{address}: {e.strerror or e}") from None
        return connection

    @property
    def closed(self) -> bool:
        return self._lost is not None

    @property
    def lost(self) -> WireError:
        assert self._lost is not None, "the connection is open"
        return self._lost

    def call(self, spec: ApiSpec, request: Message, timeout_s: float) -> asyncio.Future[Message]:
        """Send ``request``; a future of its answer (``WireError`` if none comes)."""
        if self._lost is not None:
            raise self._lost
        if len(self._pending) >= IN_FLIGHT_MAX:
            raise WireError("RESOURCE_EXHAUSTED", f"{self.address}: {IN_FLIGHT_MAX} calls already in flight")
        assert self._transport is not None
        correlation_id = next(self._ids) % _CORRELATION_ID_MODULUS
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        timer = loop.call_later(timeout_s, self._expire, correlation_id, spec, timeout_s)
        self._pending[correlation_id] = (spec, future, timer)
        self._transport.write(encode_request(spec, correlation_id, request))
        return future

    async def send(self, spec: ApiSpec, request: Message) -> None:
        """Send a request that gets no answer (a produce with acks=0); waits while the
        socket's buffer is full, so a fast sender is held back by a slow broker."""
        if self._lost is not None:
            raise self._lost
        assert self._transport is not None
        self._transport.write(encode_request(spec, next(self._ids) % _CORRELATION_ID_MODULUS, request))
        if self._writable is not None:
            await asyncio.shield(self._writable)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"{self.address}: connection lost" + (f" ({exc})" if exc else "")
        self._fail_all(WireError("UNAVAILABLE", reason))
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            self._writable.set_result(None)
            self._writable = None

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        while True:
            try:
                frame = self._decoder.next_frame()
            except FrameError as e:
                self._fail_all(WireError("UNAVAILABLE", f"{self.address}: {e}"))
                self.close()
                return
            if frame is None:
                return
            try:
                self._settle(frame)
            finally:
                frame.release()

    # ------------------------------------------------------------------------------------

    def _settle(self, frame: memoryview) -> None:
        if len(frame) < RESPONSE_HEADER.size:
            return
        (correlation_id,) = RESPONSE_HEADER.unpack_from(frame)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return  # its call timed out and the connection is closing
        spec, future, timer = entry
        timer.cancel()
        if future.done():
            return
        try:
            future.set_result(spec.response.FromString(frame[RESPONSE_HEADER.size :]))
        except DecodeError as e:
            future.set_exception(
                WireError("UNAVAILABLE", f"{self.address}: a {spec.name} answer does not decode: {e}")
            )

    def _expire(self, correlation_id: int, spec: ApiSpec, timeout_s: float) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is not None and not entry[1].done():
            entry[1].set_exception(
                WireError(
                    "DEADLINE_EXCEEDED", f"{self.address}: no {spec.name} answer within {timeout_s:g} s"
                )
            )
        self.close()

    def _fail_all(self, error: WireError) -> None:
        self._lost = self._lost or error
        pending, self._pending = self._pending, {}
        for _, future, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(error)


class BrokerClient:
    """Typed calls to one broker over a connection opened on first use and again after
    it is lost; concurrent callers share one connection attempt."""

    def __init__(
        self,
        address: str,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        tls: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.address = address
        self._connect_timeout_s = connect_timeout_s
        self._tls = tls
        self._sasl = sasl
        self._connection: Connection | None = None
        self._connecting: asyncio.Future[Connection] | None = None

    async def Metadata(
        self, request: broker_pb2.MetadataRequest, *, timeout: float
    ) -> broker_pb2.MetadataResponse:
        return await self._call(METADATA, request, timeout)

    async def Produce(
        self, request: broker_pb2.ProduceRequest, *, timeout: float
    ) -> broker_pb2.ProduceResponse:
        return await self._call(PRODUCE, request, timeout)

    async def ProduceWithoutAnswer(self, request: broker_pb2.ProduceRequest) -> None:
        """acks=0: the broker answers nothing (Kafka's rule) and closes the connection if
        a partition was refused, which the next send sees as ``UNAVAILABLE``."""
        assert request.acks == 0, "only an acks=0 produce goes unanswered"
        connection = self._connection
        if connection is not None and connection.closed:
            self._connection = None
            raise connection.lost  # once: the next send connects again
        if connection is None:
            connection = await self._connect()
        await connection.send(PRODUCE, request)

    async def Fetch(self, request: broker_pb2.FetchRequest, *, timeout: float) -> broker_pb2.FetchResponse:
        return await self._call(FETCH, request, timeout)

    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, *, timeout: float
    ) -> broker_pb2.ListOffsetsResponse:
        return await self._call(LIST_OFFSETS, request, timeout)

    async def InitProducerId(
        self, request: broker_pb2.InitProducerIdRequest, *, timeout: float
    ) -> broker_pb2.InitProducerIdResponse:
        return await self._call(INIT_PRODUCER_ID, request, timeout)

    async def OffsetCommit(
        self, request: controller_pb2.OffsetCommitRequest, *, timeout: float
    ) -> controller_pb2.OffsetCommitResponse:
        return await self._call(OFFSET_COMMIT, request, timeout)

    async def OffsetFetch(
        self, request: controller_pb2.OffsetFetchRequest, *, timeout: float
    ) -> controller_pb2.OffsetFetchResponse:
        return await self._call(OFFSET_FETCH, request, timeout)

    async def FindCoordinator(
        self, request: broker_pb2.FindCoordinatorRequest, *, timeout: float
    ) -> broker_pb2.FindCoordinatorResponse:
        return await self._call(FIND_COORDINATOR, request, timeout)

    async def JoinGroup(
        self, request: broker_pb2.JoinGroupRequest, *, timeout: float
    ) -> broker_pb2.JoinGroupResponse:
        return await self._call(JOIN_GROUP, request, timeout)

    async def SyncGroup(
        self, request: broker_pb2.SyncGroupRequest, *, timeout: float
    ) -> broker_pb2.SyncGroupResponse:
        return await self._call(SYNC_GROUP, request, timeout)

    async def Heartbeat(
        self, request: broker_pb2.HeartbeatRequest, *, timeout: float
    ) -> broker_pb2.HeartbeatResponse:
        return await self._call(HEARTBEAT, request, timeout)

    async def LeaveGroup(
        self, request: broker_pb2.LeaveGroupRequest, *, timeout: float
    ) -> broker_pb2.LeaveGroupResponse:
        return await self._call(LEAVE_GROUP, request, timeout)

    async def DescribeGroups(
        self, request: broker_pb2.DescribeGroupsRequest, *, timeout: float
    ) -> broker_pb2.DescribeGroupsResponse:
        return await self._call(DESCRIBE_GROUPS, request, timeout)

    async def ListGroups(
        self, request: broker_pb2.ListGroupsRequest, *, timeout: float
    ) -> broker_pb2.ListGroupsResponse:
        return await self._call(LIST_GROUPS, request, timeout)

    async def DeleteGroups(
        self, request: controller_pb2.DeleteGroupsRequest, *, timeout: float
    ) -> controller_pb2.DeleteGroupsResponse:
        return await self._call(DELETE_GROUPS, request, timeout)

    async def WriteTxnMarkers(
        self, request: broker_pb2.WriteTxnMarkersRequest, *, timeout: float
    ) -> broker_pb2.WriteTxnMarkersResponse:
        return await self._call(WRITE_TXN_MARKERS, request, timeout)

    async def AddPartitionsToTxn(
        self, request: broker_pb2.AddPartitionsToTxnRequest, *, timeout: float
    ) -> broker_pb2.AddPartitionsToTxnResponse:
        return await self._call(ADD_PARTITIONS_TO_TXN, request, timeout)

    async def AddOffsetsToTxn(
        self, request: broker_pb2.AddOffsetsToTxnRequest, *, timeout: float
    ) -> broker_pb2.AddOffsetsToTxnResponse:
        return await self._call(ADD_OFFSETS_TO_TXN, request, timeout)

    async def TxnOffsetCommit(
        self, request: controller_pb2.TxnOffsetCommitRequest, *, timeout: float
    ) -> controller_pb2.OffsetCommitResponse:
        return await self._call(TXN_OFFSET_COMMIT, request, timeout)

    async def EndTxn(self, request: broker_pb2.EndTxnRequest, *, timeout: float) -> broker_pb2.EndTxnResponse:
        return await self._call(END_TXN, request, timeout)

    async def DescribeTransactions(
        self, request: broker_pb2.DescribeTransactionsRequest, *, timeout: float
    ) -> broker_pb2.DescribeTransactionsResponse:
        return await self._call(DESCRIBE_TRANSACTIONS, request, timeout)

    async def ListTransactions(
        self, request: broker_pb2.ListTransactionsRequest, *, timeout: float
    ) -> broker_pb2.ListTransactionsResponse:
        return await self._call(LIST_TRANSACTIONS, request, timeout)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _call(self, spec: ApiSpec, request: Message, timeout_s: float) -> Message:
        connection = self._connection
        if connection is None or connection.closed:
            connection = await self._connect()
        return await connection.call(spec, request, timeout_s)

    async def _connect(self) -> Connection:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._connected)
        return await asyncio.shield(self._connecting)

    async def _open(self) -> Connection:
        connection = await Connection.open(self.address, timeout_s=self._connect_timeout_s, tls=self._tls)
        if self._sasl is not None:
            try:
                await log_in(connection, self._sasl, self._connect_timeout_s)
            except BaseException:
                connection.close()
                raise
        return connection

    def _connected(self, attempt: asyncio.Future[Connection]) -> None:
        self._connecting = None
        if not attempt.cancelled() and attempt.exception() is None:
            self.close()
            self._connection = attempt.result()


async def log_in(connection: Connection, sasl: SaslCredentials, timeout_s: float) -> None:
    """Kafka's SASL exchange on a new connection; raises ``WireError`` if it is refused."""
    shaken = await connection.call(
        SASL_HANDSHAKE, broker_pb2.SaslHandshakeRequest(mechanism=sasl.mechanism), timeout_s
    )
    _refused(connection, shaken.status)
    if sasl.mechanism == PLAIN:
        token = b"\0" + sasl.username.encode() + b"\0" + sasl.password.encode()
        _refused(connection, (await _token(connection, token, timeout_s)).status)
        return
    client = scram.ScramClient(sasl.mechanism, sasl.username, sasl.password, server_nonce())
    first = await _token(connection, client.first(), timeout_s)
    _refused(connection, first.status)
    try:
        final = await asyncio.to_thread(client.final, first.auth_bytes)  # PBKDF2: thousands of hashes
        last = await _token(connection, final, timeout_s)
        _refused(connection, last.status)
        client.verify(last.auth_bytes)
    except scram.AuthenticationFailed as e:
        raise WireError("SASL_AUTHENTICATION_FAILED", f"{connection.address}: {e}") from None


async def _token(
    connection: Connection, token: bytes, timeout_s: float
) -> broker_pb2.SaslAuthenticateResponse:
    return await connection.call(
        SASL_AUTHENTICATE, broker_pb2.SaslAuthenticateRequest(auth_bytes=token), timeout_s
    )


def _refused(connection: Connection, status: controller_pb2.Status) -> None:
    if status.error != controller_pb2.NONE:
        code = controller_pb2.ErrorCode.Name(status.error)
        raise WireError(code, f"{connection.address}: SASL login: {status.message}")


class BrokerClients:
    """One ``BrokerClient`` per address, shared by everything a client process sends."""

    def __init__(self, factory: Callable[[str], BrokerClient] = BrokerClient) -> None:
        self._factory = factory
        self._clients: dict[str, BrokerClient] = {}

    def get(self, address: str) -> BrokerClient:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self._factory(address)
        return client

    def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            client.close()
