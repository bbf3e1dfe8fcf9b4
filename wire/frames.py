"""The raftka data protocol: broker.proto messages in length-prefixed frames over TCP.

Why not gRPC for the data path: in Python a grpc.aio unary call costs about 0.5 ms of
server CPU and 0.37 ms of client CPU, a message on an open bidirectional stream about
0.25 ms a side, and a frame on a plain asyncio connection about a twentieth of that.
Producers, consumers and follower brokers exchange many messages per record batch
acknowledged (produce, two follower fetches, a consumer fetch), so they speak this
protocol on each broker's data listener; the same messages stay available over gRPC
(the ``Broker`` service) for tools.

A frame is Kafka's shape: a 4-byte big-endian length of what follows, then::

    request:  api_key u16 | api_version u16 | correlation_id u32 | message
    response: correlation_id u32 | message

``message`` is the protobuf encoding of the API's request or response type. A client
may send requests without waiting for answers (pipelining); a broker answers each as
soon as it is done, so answers may come back in another order, matched by correlation
id. A Produce with acks=0 gets no answer at all; if the broker refuses any of it, it
closes the connection instead (Kafka's rule), which is how such a producer learns. Every response type has ``Status status = 1``, so an answer about the frame itself
(an unknown API or version, a message that does not decode) is a message holding that
field alone, which reads as any response type. This module does no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import Message

from raftka.v1 import broker_pb2, controller_pb2

VERSION = 0
DATA_LISTENER = "DATA"  # the name a broker registers its data listener under
LENGTH = struct.Struct(">I")
REQUEST_HEADER = struct.Struct(">HHI")  # after the length
RESPONSE_HEADER = struct.Struct(">I")  # after the length
REQUEST_FRAME_MAX_BYTES = 16 << 20  # a broker refuses (closes on) a longer request
RESPONSE_FRAME_MAX_BYTES = 256 << 20  # a fetch answer is at most 64 MiB of records plus framing


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    request: type[Message]
    response: type[Message]


METADATA = ApiSpec(1, "Metadata", broker_pb2.MetadataRequest, broker_pb2.MetadataResponse)
PRODUCE = ApiSpec(2, "Produce", broker_pb2.ProduceRequest, broker_pb2.ProduceResponse)
FETCH = ApiSpec(3, "Fetch", broker_pb2.FetchRequest, broker_pb2.FetchResponse)
LIST_OFFSETS = ApiSpec(4, "ListOffsets", broker_pb2.ListOffsetsRequest, broker_pb2.ListOffsetsResponse)
OFFSET_COMMIT = ApiSpec(
    5, "OffsetCommit", controller_pb2.OffsetCommitRequest, controller_pb2.OffsetCommitResponse
)
OFFSET_FETCH = ApiSpec(
    6, "OffsetFetch", controller_pb2.OffsetFetchRequest, controller_pb2.OffsetFetchResponse
)
INIT_PRODUCER_ID = ApiSpec(
    7, "InitProducerId", broker_pb2.InitProducerIdRequest, broker_pb2.InitProducerIdResponse
)
FIND_COORDINATOR = ApiSpec(
    10, "FindCoordinator", broker_pb2.FindCoordinatorRequest, broker_pb2.FindCoordinatorResponse
)
JOIN_GROUP = ApiSpec(11, "JoinGroup", broker_pb2.JoinGroupRequest, broker_pb2.JoinGroupResponse)
SYNC_GROUP = ApiSpec(12, "SyncGroup", broker_pb2.SyncGroupRequest, broker_pb2.SyncGroupResponse)
HEARTBEAT = ApiSpec(13, "Heartbeat", broker_pb2.HeartbeatRequest, broker_pb2.HeartbeatResponse)
LEAVE_GROUP = ApiSpec(14, "LeaveGroup", broker_pb2.LeaveGroupRequest, broker_pb2.LeaveGroupResponse)
DESCRIBE_GROUPS = ApiSpec(
    15, "DescribeGroups", broker_pb2.DescribeGroupsRequest, broker_pb2.DescribeGroupsResponse
)
LIST_GROUPS = ApiSpec(16, "ListGroups", broker_pb2.ListGroupsRequest, broker_pb2.ListGroupsResponse)
DELETE_GROUPS = ApiSpec(
    17, "DeleteGroups", controller_pb2.DeleteGroupsRequest, controller_pb2.DeleteGroupsResponse
)
SASL_HANDSHAKE = ApiSpec(
    18, "SaslHandshake", broker_pb2.SaslHandshakeRequest, broker_pb2.SaslHandshakeResponse
)
SASL_AUTHENTICATE = ApiSpec(
    19, "SaslAuthenticate", broker_pb2.SaslAuthenticateRequest, broker_pb2.SaslAuthenticateResponse
)
WRITE_TXN_MARKERS = ApiSpec(  # Kafka's key; only brokers call it (transaction coordinators)
    27, "WriteTxnMarkers", broker_pb2.WriteTxnMarkersRequest, broker_pb2.WriteTxnMarkersResponse
)
# the coordinator's transaction APIs, under Kafka's keys too
ADD_PARTITIONS_TO_TXN = ApiSpec(
    24, "AddPartitionsToTxn", broker_pb2.AddPartitionsToTxnRequest, broker_pb2.AddPartitionsToTxnResponse
)
ADD_OFFSETS_TO_TXN = ApiSpec(
    25, "AddOffsetsToTxn", broker_pb2.AddOffsetsToTxnRequest, broker_pb2.AddOffsetsToTxnResponse
)
END_TXN = ApiSpec(26, "EndTxn", broker_pb2.EndTxnRequest, broker_pb2.EndTxnResponse)
TXN_OFFSET_COMMIT = ApiSpec(
    28, "TxnOffsetCommit", controller_pb2.TxnOffsetCommitRequest, controller_pb2.OffsetCommitResponse
)
DESCRIBE_TRANSACTIONS = ApiSpec(
    65,
    "DescribeTransactions",
    broker_pb2.DescribeTransactionsRequest,
    broker_pb2.DescribeTransactionsResponse,
)
LIST_TRANSACTIONS = ApiSpec(
    66, "ListTransactions", broker_pb2.ListTransactionsRequest, broker_pb2.ListTransactionsResponse
)
APIS: dict[int, ApiSpec] = {
    spec.key: spec
    for spec in (
        METADATA,
        PRODUCE,
        FETCH,
        LIST_OFFSETS,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        INIT_PRODUCER_ID,
        FIND_COORDINATOR,
        JOIN_GROUP,
        SYNC_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        DESCRIBE_GROUPS,
        LIST_GROUPS,
        DELETE_GROUPS,
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
        WRITE_TXN_MARKERS,
        ADD_PARTITIONS_TO_TXN,
        ADD_OFFSETS_TO_TXN,
        TXN_OFFSET_COMMIT,
        END_TXN,
        DESCRIBE_TRANSACTIONS,
        LIST_TRANSACTIONS,
    )
}


class FrameError(ValueError):
    """Bytes that cannot be frames of this protocol: the connection cannot go on."""


def encode_request(spec: ApiSpec, correlation_id: int, message: Message) -> bytes:
    body = message.SerializeToString()
    return (
        LENGTH.pack(REQUEST_HEADER.size + len(body))
        + REQUEST_HEADER.pack(spec.key, VERSION, correlation_id)
        + body
    )


def encode_response(correlation_id: int, message: Message) -> bytes:
    body = message.SerializeToString()
    return LENGTH.pack(RESPONSE_HEADER.size + len(body)) + RESPONSE_HEADER.pack(correlation_id) + body


def status_only(error: int, message: str) -> Message:
    """An answer that holds only ``status``: it decodes as every response type."""
    response = broker_pb2.MetadataResponse()
    response.status.error = error
    response.status.message = message
    return response


class FrameDecoder:
    """Splits a byte stream into frames (without their length prefix), refusing any
    longer than ``max_frame_bytes`` before buffering it."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0  # where the next frame's length prefix begins in _buffer

    def feed(self, data: bytes) -> None:
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    def next_frame(self) -> memoryview | None:
        """The next whole frame, or None until more bytes arrive. The view is valid until
        the next ``feed``: decode it before then."""
        available = len(self._buffer) - self._start
        if available < LENGTH.size:
            self._compact()
            return None
        (length,) = LENGTH.unpack_from(self._buffer, self._start)
        if length > self._max_frame_bytes:
            raise FrameError(f"a frame of {length} bytes is over the limit of {self._max_frame_bytes}")
        if available < LENGTH.size + length:
            self._compact()
            return None
        begin = self._start + LENGTH.size
        self._start = begin + length
        return memoryview(self._buffer)[begin : self._start]

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._start

    def _compact(self) -> None:
        """Drop consumed bytes once nothing refers to them (views are decoded by now)."""
        if self._start:
            del self._buffer[: self._start]
            self._start = 0
