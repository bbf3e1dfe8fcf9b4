"""The codec: every message survives the wire unchanged, and bad input is named, never crashes."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as PbMessage
from hypothesis import given
from hypothesis import strategies as st

from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch
from raftka.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from raftka.raft.transport.codec import CodecError, decode, encode, error_response
from raftka.v1 import raft_pb2

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

epochs = st.integers(0, INT32_MAX)
offsets = st.integers(0, INT64_MAX)
node_ids = st.integers(0, INT32_MAX)
leader_ids = st.integers(NO_LEADER, INT32_MAX)
errors = st.sampled_from(Error)
cluster_ids = st.text(max_size=40)
directory_ids = st.text(max_size=22)  # KIP-853
positions = st.builds(OffsetAndEpoch, offsets, epochs)


@st.composite
def batch_runs(draw: st.DrawFn) -> tuple[Batch, ...]:
    """Contiguous batches, as a log holds them."""
    offset = draw(st.integers(0, 2**40))
    batches = []
    for _ in range(draw(st.integers(0, 4))):
        records = tuple(draw(st.lists(st.binary(max_size=20), min_size=1, max_size=5)))
        ts = draw(st.integers(-1, 2**45))
        batches.append(Batch(offset, draw(epochs), ts, draw(st.sampled_from(BatchKind)), records))
        offset += len(records)
    return tuple(batches)


@st.composite
def fetch_responses(draw: st.DrawFn) -> FetchResponse:
    """Records, or a diverging epoch, or a snapshot id, or none: never two."""
    header = (draw(errors), draw(epochs), draw(leader_ids), draw(st.integers(-1, INT64_MAX)), draw(offsets))
    answer = draw(st.sampled_from(["batches", "diverging", "snapshot_id", "none"]))
    if answer == "batches":
        return FetchResponse(*header, batches=draw(batch_runs()))
    if answer == "none":
        return FetchResponse(*header)
    return FetchResponse(*header, **{answer: draw(positions)})


@st.composite
def fetch_snapshot_responses(draw: st.DrawFn) -> FetchSnapshotResponse:
    chunk = draw(st.binary(max_size=64))
    position = draw(st.integers(0, 2**40))
    size = position + len(chunk) + draw(st.integers(0, 2**40))
    return FetchSnapshotResponse(
        draw(errors),
        draw(epochs),
        draw(leader_ids),
        draw(positions),
        size,
        position,
        chunk,
        draw(st.binary(max_size=40)),
    )


messages = st.one_of(
    st.builds(
        VoteRequest,
        cluster_ids,
        epochs,
        node_ids,
        epochs,
        offsets,
        st.booleans(),
        directory_ids,
        directory_ids,
    ),
    st.builds(VoteResponse, errors, epochs, leader_ids, st.booleans(), st.booleans()),
    st.builds(BeginQuorumEpochRequest, cluster_ids, epochs, node_ids),
    st.builds(BeginQuorumEpochResponse, errors, epochs, leader_ids),
    st.builds(
        EndQuorumEpochRequest, cluster_ids, epochs, node_ids, st.lists(node_ids, max_size=5).map(tuple)
    ),
    st.builds(EndQuorumEpochResponse, errors, epochs, leader_ids),
    st.builds(
        FetchRequest, cluster_ids, node_ids, epochs, offsets, epochs, st.integers(0, INT32_MAX), directory_ids
    ),
    fetch_responses(),
    st.builds(
        FetchSnapshotRequest, cluster_ids, node_ids, epochs, positions, offsets, st.integers(1, INT32_MAX)
    ),
    fetch_snapshot_responses(),
)


@given(messages)
def test_every_message_survives_the_wire(msg: Message) -> None:
    pb = encode(msg)
    assert decode(type(pb).FromString(pb.SerializeToString())) == msg


def test_every_message_type_is_covered() -> None:
    covered = {VoteRequest, VoteResponse, BeginQuorumEpochRequest, BeginQuorumEpochResponse}
    covered |= {EndQuorumEpochRequest, EndQuorumEpochResponse, FetchRequest, FetchResponse}
    covered |= {FetchSnapshotRequest, FetchSnapshotResponse}
    assert covered == set(Message.__args__)


# Whatever a peer sends, decoding returns a message or raises CodecError; nothing else.


def arbitrary(descriptor: Descriptor) -> st.SearchStrategy[dict[str, Any]]:
    """Field values for a protobuf message of this type, in the wire types' full ranges."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        value = _arbitrary_value(field)
        if field.is_repeated:
            value = st.lists(value, max_size=3)
        elif field.message_type is not None:
            value = st.none() | value
        fields[field.name] = value
    return st.fixed_dictionaries({}, optional=fields)


def _arbitrary_value(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    match field.type:
        case FieldDescriptor.TYPE_INT32 | FieldDescriptor.TYPE_ENUM:
            return st.integers(-(2**31), INT32_MAX)
        case FieldDescriptor.TYPE_INT64:
            return st.integers(-(2**63), INT64_MAX)
        case FieldDescriptor.TYPE_BOOL:
            return st.booleans()
        case FieldDescriptor.TYPE_STRING:
            return st.text(max_size=8)
        case FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=8)
        case FieldDescriptor.TYPE_MESSAGE:
            return arbitrary(field.message_type)
    raise AssertionError(field.type)


REQUEST_PB_TYPES = [
    raft_pb2.VoteRequest,
    raft_pb2.BeginQuorumEpochRequest,
    raft_pb2.EndQuorumEpochRequest,
    raft_pb2.FetchRequest,
    raft_pb2.FetchSnapshotRequest,
]
RESPONSE_PB_TYPES = [
    raft_pb2.VoteResponse,
    raft_pb2.BeginQuorumEpochResponse,
    raft_pb2.EndQuorumEpochResponse,
    raft_pb2.FetchResponse,
    raft_pb2.FetchSnapshotResponse,
]


@pytest.mark.parametrize("pb_type", REQUEST_PB_TYPES + RESPONSE_PB_TYPES, ids=lambda t: t.__name__)
@given(data=st.data())
def test_decoding_anything_raises_only_codec_error(pb_type: type[PbMessage], data: st.DataObject) -> None:
    pb = pb_type(**data.draw(arbitrary(pb_type.DESCRIPTOR)))
    try:
        decode(pb)
    except CodecError as e:
        assert e.field and e.reason


# Each check names its field.


def _fetch_response(*batches: raft_pb2.RecordBatch, **fields: Any) -> raft_pb2.FetchResponse:
    return raft_pb2.FetchResponse(batches=batches, **fields)


def _batch(base_offset: int = 0, records: tuple[bytes, ...] = (b"x",), **fields: Any) -> raft_pb2.RecordBatch:
    return raft_pb2.RecordBatch(base_offset=base_offset, records=records, **fields)


SNAPSHOT_ID = raft_pb2.OffsetAndEpoch(offset=5, epoch=1)

BAD = [
    (raft_pb2.VoteRequest(candidate_epoch=-1), "candidate_epoch"),
    (raft_pb2.VoteRequest(candidate_id=-1), "candidate_id"),
    (raft_pb2.VoteRequest(last_epoch=-1), "last_epoch"),
    (raft_pb2.VoteRequest(log_end_offset=-1), "log_end_offset"),
    (raft_pb2.VoteResponse(error=99), "error"),
    (raft_pb2.VoteResponse(epoch=-1), "epoch"),
    (raft_pb2.VoteResponse(leader_id=-2), "leader_id"),
    (raft_pb2.BeginQuorumEpochRequest(leader_id=-1), "leader_id"),
    (raft_pb2.BeginQuorumEpochResponse(error=-1), "error"),
    (raft_pb2.EndQuorumEpochRequest(preferred_successors=[2, -3]), "preferred_successors[1]"),
    (raft_pb2.EndQuorumEpochResponse(epoch=-5), "epoch"),
    (raft_pb2.FetchRequest(replica_id=-1), "replica_id"),
    (raft_pb2.FetchRequest(fetch_offset=-1), "fetch_offset"),
    (raft_pb2.FetchRequest(last_fetched_epoch=-1), "last_fetched_epoch"),
    (raft_pb2.FetchRequest(max_wait_ms=-1), "max_wait_ms"),
    (_fetch_response(high_watermark=-2), "high_watermark"),
    (_fetch_response(log_start_offset=-1), "log_start_offset"),
    (_fetch_response(_batch(base_offset=-1)), "batches[0].base_offset"),
    (_fetch_response(_batch(epoch=-1)), "batches[0].epoch"),
    (_fetch_response(_batch(kind=7)), "batches[0].kind"),
    (_fetch_response(_batch(records=())), "batches[0].records"),
    (_fetch_response(_batch(0, (b"a", b"b")), _batch(3)), "batches[1].base_offset"),
    (_fetch_response(diverging=raft_pb2.OffsetAndEpoch(offset=-1)), "diverging.offset"),
    (_fetch_response(snapshot_id=raft_pb2.OffsetAndEpoch(epoch=-1)), "snapshot_id.epoch"),
    (_fetch_response(diverging=SNAPSHOT_ID, snapshot_id=SNAPSHOT_ID), "batches"),
    (_fetch_response(_batch(), diverging=SNAPSHOT_ID), "batches"),
    (raft_pb2.FetchSnapshotRequest(max_bytes=1), "snapshot_id"),
    (raft_pb2.FetchSnapshotRequest(snapshot_id=SNAPSHOT_ID, max_bytes=0), "max_bytes"),
    (raft_pb2.FetchSnapshotRequest(snapshot_id=SNAPSHOT_ID, max_bytes=1, position=-1), "position"),
    (raft_pb2.FetchSnapshotResponse(size=10), "snapshot_id"),
    (raft_pb2.FetchSnapshotResponse(snapshot_id=SNAPSHOT_ID, size=4, position=2, chunk=b"abc"), "chunk"),
    (raft_pb2.FetchSnapshotResponse(snapshot_id=SNAPSHOT_ID, size=-1), "size"),
    (raft_pb2.DescribeQuorumRequest(), "message"),
]


@pytest.mark.parametrize(("pb", "field"), BAD, ids=[f"{type(pb).__name__}-{field}" for pb, field in BAD])
def test_invalid_field_is_named(pb: PbMessage, field: str) -> None:
    with pytest.raises(CodecError) as raised:
        decode(pb)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")


@pytest.mark.parametrize("pb_type", RESPONSE_PB_TYPES, ids=lambda t: t.__name__)
def test_error_response_decodes_with_only_the_error(pb_type: type[PbMessage]) -> None:
    msg = decode(error_response(pb_type, Error.INVALID_REQUEST))
    assert (msg.error, msg.epoch, msg.leader_id) == (Error.INVALID_REQUEST, 0, NO_LEADER)  # type: ignore[union-attr]
