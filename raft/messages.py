"""The quorum's RPCs as plain values, independent of the wire.

The core speaks these; ``raftka.raft.transport.codec`` maps them to and from protobuf. Every
response carries the responder's epoch and the leader it knows, so any message can
teach the receiver a newer epoch (KRaft's rule).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from raftka.raft.batch import Batch, OffsetAndEpoch, SnapshotId


class Error(enum.IntEnum):
    NONE = 0
    FENCED_LEADER_EPOCH = 1  # the request's epoch is older than the receiver's
    NOT_LEADER = 2  # the receiver does not lead this epoch (leader_id says who does)
    INCONSISTENT_CLUSTER_ID = 3
    UNKNOWN_SNAPSHOT = 4
    INVALID_REQUEST = 5  # a field is out of range; message names it


NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str
    candidate_epoch: int  # for a pre-vote: the epoch the sender would campaign in
    candidate_id: int
    last_epoch: int
    log_end_offset: int
    pre_vote: bool
    candidate_directory_id: str = ""  # KIP-853: the candidate's storage, "" in a static quorum
    voter_directory_id: str = ""  # the storage the candidate believes the receiver votes with


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: Error
    epoch: int
    leader_id: int
    vote_granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: Error
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: Error
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str
    replica_id: int
    epoch: int  # the epoch the fetcher believes is current
    fetch_offset: int  # also the fetcher's durable log end: the leader's acknowledgement
    last_fetched_epoch: int
    max_wait_ms: int
    replica_directory_id: str = ""  # KIP-853: a voter counts only with its own storage


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: Error
    epoch: int
    leader_id: int
    high_watermark: int  # -1 when the leader does not yet expose one
    log_start_offset: int
    batches: tuple[Batch, ...] = ()
    diverging: OffsetAndEpoch | None = None  # truncate to the end of this epoch
    snapshot_id: SnapshotId | None = None  # fetch this snapshot first


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    cluster_id: str
    replica_id: int
    epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error: Error
    epoch: int
    leader_id: int
    snapshot_id: SnapshotId
    size: int
    position: int
    chunk: bytes = field(default=b"", repr=False)
    voters: bytes = field(default=b"", repr=False)  # the snapshot's voter set (Snapshot.voters)


Request = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
Response = (
    VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse | FetchSnapshotResponse
)
Message = Request | Response


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message in flight. ``rpc_id`` pairs a response with the request it answers.

    On a request the core sends, it is the core's own number for it, and the transport
    puts it back on the response it delivers, so a late answer to an older request is
    never taken for the answer to the current one. On an inbound request it is the
    transport's number, which the core copies onto its response.
    """

    src: int
    dst: int
    msg: Message
    rpc_id: int = 0
