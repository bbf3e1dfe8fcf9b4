"""Map the quorum's messages (``raftka.raft.messages``) to and from their protobuf form.

Encoding trusts its input: the core built it. Decoding does not: the bytes came from
the network, so every field that our types constrain is checked and the first bad one
raises ``CodecError`` naming it. Nothing a peer sends may trip an assertion in a
constructor (``Batch`` asserts its invariants) or reach the core out of range.

Fetch responses carry the log, so their path is kept lean: one ``add`` per batch on
encode, one ``tuple`` of the repeated records field per batch on decode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from google.protobuf.message import Message as PbMessage

from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch, SnapshotId
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
from raftka.v1 import raft_pb2

__all__ = ["CodecError", "decode", "encode", "error_response"]

_ERRORS = {e.value: e for e in Error}
_KINDS = {k.value: k for k in BatchKind}
_NO_HIGH_WATERMARK = -1


class CodecError(ValueError):
    """A decoded message is invalid; ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


# encoding ------------------------------------------------------------------------------


def encode(msg: Message) -> PbMessage:
    """The protobuf form of ``msg``."""
    return _ENCODERS[type(msg)](msg)


def _encode_offset_and_epoch(target: raft_pb2.OffsetAndEpoch, value: OffsetAndEpoch) -> None:
    target.offset = value.offset
    target.epoch = value.epoch


def _encode_vote_request(m: VoteRequest) -> raft_pb2.VoteRequest:
    return raft_pb2.VoteRequest(
        cluster_id=m.cluster_id,
        candidate_epoch=m.candidate_epoch,
        candidate_id=m.candidate_id,
        last_epoch=m.last_epoch,
        log_end_offset=m.log_end_offset,
        pre_vote=m.pre_vote,
        candidate_directory_id=m.candidate_directory_id,
        voter_directory_id=m.voter_directory_id,
    )


def _encode_vote_response(m: VoteResponse) -> raft_pb2.VoteResponse:
    return raft_pb2.VoteResponse(
        error=m.error, epoch=m.epoch, leader_id=m.leader_id, vote_granted=m.vote_granted, pre_vote=m.pre_vote
    )


def _encode_begin_request(m: BeginQuorumEpochRequest) -> raft_pb2.BeginQuorumEpochRequest:
    return raft_pb2.BeginQuorumEpochRequest(cluster_id=m.cluster_id, epoch=m.epoch, leader_id=m.leader_id)


def _encode_begin_response(m: BeginQuorumEpochResponse) -> raft_pb2.BeginQuorumEpochResponse:
    return raft_pb2.BeginQuorumEpochResponse(error=m.error, epoch=m.epoch, leader_id=m.leader_id)


def _encode_end_request(m: EndQuorumEpochRequest) -> raft_pb2.EndQuorumEpochRequest:
    return raft_pb2.EndQuorumEpochRequest(
        cluster_id=m.cluster_id,
        epoch=m.epoch,
        leader_id=m.leader_id,
        preferred_successors=m.preferred_successors,
    )


def _encode_end_response(m: EndQuorumEpochResponse) -> raft_pb2.EndQuorumEpochResponse:
    return raft_pb2.EndQuorumEpochResponse(error=m.error, epoch=m.epoch, leader_id=m.leader_id)


def _encode_fetch_request(m: FetchRequest) -> raft_pb2.FetchRequest:
    return raft_pb2.FetchRequest(
        cluster_id=m.cluster_id,
        replica_id=m.replica_id,
        epoch=m.epoch,
        fetch_offset=m.fetch_offset,
        last_fetched_epoch=m.last_fetched_epoch,
        max_wait_ms=m.max_wait_ms,
        replica_directory_id=m.replica_directory_id,
    )


def _encode_fetch_response(m: FetchResponse) -> raft_pb2.FetchResponse:
    pb = raft_pb2.FetchResponse(
        error=m.error,
        epoch=m.epoch,
        leader_id=m.leader_id,
        high_watermark=m.high_watermark,
        log_start_offset=m.log_start_offset,
    )
    # ``add`` with keywords is several times faster than building RecordBatch objects
    # and handing them to the constructor (measured with upb: 0.4 ms vs 1.6 ms for
    # 100 batches of 100 records).
    add = pb.batches.add
    for b in m.batches:
        add(
            base_offset=b.base_offset,
            epoch=b.epoch,
            timestamp_ms=b.timestamp_ms,
            kind=b.kind,
            records=b.records,
        )
    if m.diverging is not None:
        _encode_offset_and_epoch(pb.diverging, m.diverging)
    if m.snapshot_id is not None:
        _encode_offset_and_epoch(pb.snapshot_id, m.snapshot_id)
    return pb


def _encode_fetch_snapshot_request(m: FetchSnapshotRequest) -> raft_pb2.FetchSnapshotRequest:
    pb = raft_pb2.FetchSnapshotRequest(
        cluster_id=m.cluster_id,
        replica_id=m.replica_id,
        epoch=m.epoch,
        position=m.position,
        max_bytes=m.max_bytes,
    )
    _encode_offset_and_epoch(pb.snapshot_id, m.snapshot_id)
    return pb


def _encode_fetch_snapshot_response(m: FetchSnapshotResponse) -> raft_pb2.FetchSnapshotResponse:
    pb = raft_pb2.FetchSnapshotResponse(
        error=m.error,
        epoch=m.epoch,
        leader_id=m.leader_id,
        size=m.size,
        position=m.position,
        chunk=m.chunk,
        voters=m.voters,
    )
    _encode_offset_and_epoch(pb.snapshot_id, m.snapshot_id)
    return pb


_ENCODERS: dict[type, Callable[[Any], PbMessage]] = {
    VoteRequest: _encode_vote_request,
    VoteResponse: _encode_vote_response,
    BeginQuorumEpochRequest: _encode_begin_request,
    BeginQuorumEpochResponse: _encode_begin_response,
    EndQuorumEpochRequest: _encode_end_request,
    EndQuorumEpochResponse: _encode_end_response,
    FetchRequest: _encode_fetch_request,
    FetchResponse: _encode_fetch_response,
    FetchSnapshotRequest: _encode_fetch_snapshot_request,
    FetchSnapshotResponse: _encode_fetch_snapshot_response,
}


def error_response(response_pb: type[PbMessage], error: Error) -> PbMessage:
    """A response of type ``response_pb`` that carries only ``error``.

    The transport answers with this when it rejects a request before the core sees it
    (another cluster's request, an invalid one): it knows no epoch and no leader.
    """
    pb = response_pb(error=error, leader_id=NO_LEADER)
    if isinstance(pb, raft_pb2.FetchResponse):
        pb.high_watermark = _NO_HIGH_WATERMARK
    elif isinstance(pb, raft_pb2.FetchSnapshotResponse):
        pb.snapshot_id.SetInParent()  # required on decode, even for an all-zero id
    return pb


# decoding ------------------------------------------------------------------------------


def decode(pb: PbMessage) -> Message:
    """The message ``pb`` carries; raises ``CodecError`` for the first invalid field."""
    try:
        decoder = _DECODERS[type(pb)]
    except KeyError:
        raise CodecError("message", f"not a raft message: {type(pb).__name__}") from None
    return decoder(pb)


def _at_least(field: str, value: int, minimum: int) -> int:
    if value < minimum:
        raise CodecError(field, f"must be >= {minimum}, got {value}")
    return value


def _error(value: int) -> Error:
    try:
        return _ERRORS[value]
    except KeyError:
        raise CodecError("error", f"unknown error code {value}") from None


def _offset_and_epoch(pb: PbMessage, field: str) -> OffsetAndEpoch:
    sub = getattr(pb, field)
    offset = _at_least(f"{field}.offset", sub.offset, 0)
    return OffsetAndEpoch(offset, _at_least(f"{field}.epoch", sub.epoch, 0))


def _optional_offset_and_epoch(pb: PbMessage, field: str) -> OffsetAndEpoch | None:
    return _offset_and_epoch(pb, field) if pb.HasField(field) else None


def _required_offset_and_epoch(pb: PbMessage, field: str) -> SnapshotId:
    if not pb.HasField(field):
        raise CodecError(field, "missing")
    return _offset_and_epoch(pb, field)


def _decode_vote_request(pb: raft_pb2.VoteRequest) -> VoteRequest:
    return VoteRequest(
        cluster_id=pb.cluster_id,
        candidate_epoch=_at_least("candidate_epoch", pb.candidate_epoch, 0),
        candidate_id=_at_least("candidate_id", pb.candidate_id, 0),
        last_epoch=_at_least("last_epoch", pb.last_epoch, 0),
        log_end_offset=_at_least("log_end_offset", pb.log_end_offset, 0),
        pre_vote=pb.pre_vote,
        candidate_directory_id=pb.candidate_directory_id,
        voter_directory_id=pb.voter_directory_id,
    )


def _decode_vote_response(pb: raft_pb2.VoteResponse) -> VoteResponse:
    return VoteResponse(
        error=_error(pb.error),
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, NO_LEADER),
        vote_granted=pb.vote_granted,
        pre_vote=pb.pre_vote,
    )


def _decode_begin_request(pb: raft_pb2.BeginQuorumEpochRequest) -> BeginQuorumEpochRequest:
    return BeginQuorumEpochRequest(
        cluster_id=pb.cluster_id,
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, 0),
    )


def _decode_begin_response(pb: raft_pb2.BeginQuorumEpochResponse) -> BeginQuorumEpochResponse:
    return BeginQuorumEpochResponse(
        error=_error(pb.error),
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, NO_LEADER),
    )


def _decode_end_request(pb: raft_pb2.EndQuorumEpochRequest) -> EndQuorumEpochRequest:
    return EndQuorumEpochRequest(
        cluster_id=pb.cluster_id,
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, 0),
        preferred_successors=_node_ids("preferred_successors", pb.preferred_successors),
    )


def _node_ids(field: str, values: Iterable[int]) -> tuple[int, ...]:
    ids = tuple(values)
    for i, node_id in enumerate(ids):
        _at_least(f"{field}[{i}]", node_id, 0)
    return ids


def _decode_end_response(pb: raft_pb2.EndQuorumEpochResponse) -> EndQuorumEpochResponse:
    return EndQuorumEpochResponse(
        error=_error(pb.error),
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, NO_LEADER),
    )


def _decode_fetch_request(pb: raft_pb2.FetchRequest) -> FetchRequest:
    return FetchRequest(
        cluster_id=pb.cluster_id,
        replica_id=_at_least("replica_id", pb.replica_id, 0),
        epoch=_at_least("epoch", pb.epoch, 0),
        fetch_offset=_at_least("fetch_offset", pb.fetch_offset, 0),
        last_fetched_epoch=_at_least("last_fetched_epoch", pb.last_fetched_epoch, 0),
        max_wait_ms=_at_least("max_wait_ms", pb.max_wait_ms, 0),
        replica_directory_id=pb.replica_directory_id,
    )


def _decode_fetch_response(pb: raft_pb2.FetchResponse) -> FetchResponse:
    batches = _decode_batches(pb.batches)
    diverging = _optional_offset_and_epoch(pb, "diverging")
    snapshot_id = _optional_offset_and_epoch(pb, "snapshot_id")
    # KRaft answers a fetch with records, or a diverging epoch, or a snapshot id: never two.
    if (bool(batches) + (diverging is not None) + (snapshot_id is not None)) > 1:
        raise CodecError("batches", "at most one of batches, diverging and snapshot_id may be set")
    return FetchResponse(
        error=_error(pb.error),
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, NO_LEADER),
        high_watermark=_at_least("high_watermark", pb.high_watermark, _NO_HIGH_WATERMARK),
        log_start_offset=_at_least("log_start_offset", pb.log_start_offset, 0),
        batches=batches,
        diverging=diverging,
        snapshot_id=snapshot_id,
    )


def _decode_batches(pbs: Sequence[raft_pb2.RecordBatch]) -> tuple[Batch, ...]:
    """Decode a fetch's batches; they must be contiguous, as a log is.

    The checks are one expression per batch; field names are built only on failure.
    """
    batches: list[Batch] = []
    next_offset = pbs[0].base_offset if pbs else 0
    for i, pb in enumerate(pbs):
        base_offset, epoch, kind, records = pb.base_offset, pb.epoch, _KINDS.get(pb.kind), tuple(pb.records)
        if base_offset != next_offset or base_offset < 0 or epoch < 0 or kind is None or not records:
            raise _batch_error(i, pb, next_offset)
        batches.append(Batch(base_offset, epoch, pb.timestamp_ms, kind, records))
        next_offset = base_offset + len(records)
    return tuple(batches)


def _batch_error(i: int, pb: raft_pb2.RecordBatch, next_offset: int) -> CodecError:
    field = f"batches[{i}]"
    if pb.base_offset < 0:
        return CodecError(f"{field}.base_offset", f"must be >= 0, got {pb.base_offset}")
    if pb.base_offset != next_offset:
        return CodecError(f"{field}.base_offset", f"must be {next_offset} (contiguous), got {pb.base_offset}")
    if pb.epoch < 0:
        return CodecError(f"{field}.epoch", f"must be >= 0, got {pb.epoch}")
    if not pb.records:
        return CodecError(f"{field}.records", "a batch holds at least one record")
    return CodecError(f"{field}.kind", f"unknown batch kind {pb.kind}")


def _decode_fetch_snapshot_request(pb: raft_pb2.FetchSnapshotRequest) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(
        cluster_id=pb.cluster_id,
        replica_id=_at_least("replica_id", pb.replica_id, 0),
        epoch=_at_least("epoch", pb.epoch, 0),
        snapshot_id=_required_offset_and_epoch(pb, "snapshot_id"),
        position=_at_least("position", pb.position, 0),
        max_bytes=_at_least("max_bytes", pb.max_bytes, 1),
    )


def _decode_fetch_snapshot_response(pb: raft_pb2.FetchSnapshotResponse) -> FetchSnapshotResponse:
    size = _at_least("size", pb.size, 0)
    position = _at_least("position", pb.position, 0)
    if position + len(pb.chunk) > size:
        raise CodecError("chunk", f"ends at {position + len(pb.chunk)}, past the snapshot's size {size}")
    return FetchSnapshotResponse(
        error=_error(pb.error),
        epoch=_at_least("epoch", pb.epoch, 0),
        leader_id=_at_least("leader_id", pb.leader_id, NO_LEADER),
        snapshot_id=_required_offset_and_epoch(pb, "snapshot_id"),
        size=size,
        position=position,
        chunk=pb.chunk,
        voters=pb.voters,
    )


_DECODERS: dict[type, Callable[[Any], Message]] = {
    raft_pb2.VoteRequest: _decode_vote_request,
    raft_pb2.VoteResponse: _decode_vote_response,
    raft_pb2.BeginQuorumEpochRequest: _decode_begin_request,
    raft_pb2.BeginQuorumEpochResponse: _decode_begin_response,
    raft_pb2.EndQuorumEpochRequest: _decode_end_request,
    raft_pb2.EndQuorumEpochResponse: _decode_end_response,
    raft_pb2.FetchRequest: _decode_fetch_request,
    raft_pb2.FetchResponse: _decode_fetch_response,
    raft_pb2.FetchSnapshotRequest: _decode_fetch_snapshot_request,
    raft_pb2.FetchSnapshotResponse: _decode_fetch_snapshot_response,
}
