from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RaftError(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RAFT_ERROR_NONE: _ClassVar[RaftError]
    RAFT_ERROR_FENCED_LEADER_EPOCH: _ClassVar[RaftError]
    RAFT_ERROR_NOT_LEADER: _ClassVar[RaftError]
    RAFT_ERROR_INCONSISTENT_CLUSTER_ID: _ClassVar[RaftError]
    RAFT_ERROR_UNKNOWN_SNAPSHOT: _ClassVar[RaftError]
    RAFT_ERROR_INVALID_REQUEST: _ClassVar[RaftError]

class BatchKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_KIND_DATA: _ClassVar[BatchKind]
    BATCH_KIND_LEADER_CHANGE: _ClassVar[BatchKind]
    BATCH_KIND_NOOP: _ClassVar[BatchKind]
    BATCH_KIND_VOTERS: _ClassVar[BatchKind]
RAFT_ERROR_NONE: RaftError
RAFT_ERROR_FENCED_LEADER_EPOCH: RaftError
RAFT_ERROR_NOT_LEADER: RaftError
RAFT_ERROR_INCONSISTENT_CLUSTER_ID: RaftError
RAFT_ERROR_UNKNOWN_SNAPSHOT: RaftError
RAFT_ERROR_INVALID_REQUEST: RaftError
BATCH_KIND_DATA: BatchKind
BATCH_KIND_LEADER_CHANGE: BatchKind
BATCH_KIND_NOOP: BatchKind
BATCH_KIND_VOTERS: BatchKind

class RecordBatch(_message.Message):
    __slots__ = ("base_offset", "epoch", "timestamp_ms", "kind", "records")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    epoch: int
    timestamp_ms: int
    kind: BatchKind
    records: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, base_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., kind: _Optional[_Union[BatchKind, str]] = ..., records: _Optional[_Iterable[bytes]] = ...) -> None: ...

class OffsetAndEpoch(_message.Message):
    __slots__ = ("offset", "epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: int
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("cluster_id", "candidate_epoch", "candidate_id", "last_epoch", "log_end_offset", "pre_vote", "candidate_directory_id", "voter_directory_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    candidate_epoch: int
    candidate_id: int
    last_epoch: int
    log_end_offset: int
    pre_vote: bool
    candidate_directory_id: str
    voter_directory_id: str
    def __init__(self, cluster_id: _Optional[str] = ..., candidate_epoch: _Optional[int] = ..., candidate_id: _Optional[int] = ..., last_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., pre_vote: _Optional[bool] = ..., candidate_directory_id: _Optional[str] = ..., voter_directory_id: _Optional[str] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("error", "epoch", "leader_id", "vote_granted", "pre_vote")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTE_GRANTED_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    epoch: int
    leader_id: int
    vote_granted: bool
    pre_vote: bool
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., vote_granted: _Optional[bool] = ..., pre_vote: _Optional[bool] = ...) -> None: ...

class BeginQuorumEpochRequest(_message.Message):
    __slots__ = ("cluster_id", "epoch", "leader_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    epoch: int
    leader_id: int
    def __init__(self, cluster_id: _Optional[str] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class BeginQuorumEpochResponse(_message.Message):
    __slots__ = ("error", "epoch", "leader_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    epoch: int
    leader_id: int
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class EndQuorumEpochRequest(_message.Message):
    __slots__ = ("cluster_id", "epoch", "leader_id", "preferred_successors")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_SUCCESSORS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    epoch: int
    leader_id: int
    preferred_successors: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, cluster_id: _Optional[str] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., preferred_successors: _Optional[_Iterable[int]] = ...) -> None: ...

class EndQuorumEpochResponse(_message.Message):
    __slots__ = ("error", "epoch", "leader_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    epoch: int
    leader_id: int
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("cluster_id", "replica_id", "epoch", "fetch_offset", "last_fetched_epoch", "max_wait_ms", "replica_directory_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    replica_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    replica_directory_id: str
    def __init__(self, cluster_id: _Optional[str] = ..., replica_id: _Optional[int] = ..., epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., replica_directory_id: _Optional[str] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("error", "epoch", "leader_id", "high_watermark", "log_start_offset", "batches", "diverging", "snapshot_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    epoch: int
    leader_id: int
    high_watermark: int
    log_start_offset: int
    batches: _containers.RepeatedCompositeFieldContainer[RecordBatch]
    diverging: OffsetAndEpoch
    snapshot_id: OffsetAndEpoch
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[RecordBatch, _Mapping]]] = ..., diverging: _Optional[_Union[OffsetAndEpoch, _Mapping]] = ..., snapshot_id: _Optional[_Union[OffsetAndEpoch, _Mapping]] = ...) -> None: ...

class FetchSnapshotRequest(_message.Message):
    __slots__ = ("cluster_id", "replica_id", "epoch", "snapshot_id", "position", "max_bytes")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    replica_id: int
    epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int
    def __init__(self, cluster_id: _Optional[str] = ..., replica_id: _Optional[int] = ..., epoch: _Optional[int] = ..., snapshot_id: _Optional[_Union[OffsetAndEpoch, _Mapping]] = ..., position: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchSnapshotResponse(_message.Message):
    __slots__ = ("error", "epoch", "leader_id", "snapshot_id", "size", "position", "chunk", "voters")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    epoch: int
    leader_id: int
    snapshot_id: OffsetAndEpoch
    size: int
    position: int
    chunk: bytes
    voters: bytes
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., snapshot_id: _Optional[_Union[OffsetAndEpoch, _Mapping]] = ..., size: _Optional[int] = ..., position: _Optional[int] = ..., chunk: _Optional[bytes] = ..., voters: _Optional[bytes] = ...) -> None: ...

class DescribeQuorumRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplicaDescription(_message.Message):
    __slots__ = ("node_id", "log_end_offset", "last_fetch_timestamp_ms", "last_caught_up_timestamp_ms", "address", "directory_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCH_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CAUGHT_UP_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    log_end_offset: int
    last_fetch_timestamp_ms: int
    last_caught_up_timestamp_ms: int
    address: str
    directory_id: str
    def __init__(self, node_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., last_fetch_timestamp_ms: _Optional[int] = ..., last_caught_up_timestamp_ms: _Optional[int] = ..., address: _Optional[str] = ..., directory_id: _Optional[str] = ...) -> None: ...

class DescribeQuorumResponse(_message.Message):
    __slots__ = ("error", "cluster_id", "node_id", "leader_id", "leader_epoch", "high_watermark", "voters", "observers", "role", "leader_address", "directory_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    cluster_id: str
    node_id: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: _containers.RepeatedCompositeFieldContainer[ReplicaDescription]
    observers: _containers.RepeatedCompositeFieldContainer[ReplicaDescription]
    role: str
    leader_address: str
    directory_id: str
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., cluster_id: _Optional[str] = ..., node_id: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., high_watermark: _Optional[int] = ..., voters: _Optional[_Iterable[_Union[ReplicaDescription, _Mapping]]] = ..., observers: _Optional[_Iterable[_Union[ReplicaDescription, _Mapping]]] = ..., role: _Optional[str] = ..., leader_address: _Optional[str] = ..., directory_id: _Optional[str] = ...) -> None: ...

class RaftRequest(_message.Message):
    __slots__ = ("call_id", "vote", "begin_quorum_epoch", "end_quorum_epoch", "fetch", "fetch_snapshot")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    VOTE_FIELD_NUMBER: _ClassVar[int]
    BEGIN_QUORUM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_QUORUM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    vote: VoteRequest
    begin_quorum_epoch: BeginQuorumEpochRequest
    end_quorum_epoch: EndQuorumEpochRequest
    fetch: FetchRequest
    fetch_snapshot: FetchSnapshotRequest
    def __init__(self, call_id: _Optional[int] = ..., vote: _Optional[_Union[VoteRequest, _Mapping]] = ..., begin_quorum_epoch: _Optional[_Union[BeginQuorumEpochRequest, _Mapping]] = ..., end_quorum_epoch: _Optional[_Union[EndQuorumEpochRequest, _Mapping]] = ..., fetch: _Optional[_Union[FetchRequest, _Mapping]] = ..., fetch_snapshot: _Optional[_Union[FetchSnapshotRequest, _Mapping]] = ...) -> None: ...

class RaftResponse(_message.Message):
    __slots__ = ("call_id", "vote", "begin_quorum_epoch", "end_quorum_epoch", "fetch", "fetch_snapshot")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    VOTE_FIELD_NUMBER: _ClassVar[int]
    BEGIN_QUORUM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_QUORUM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    vote: VoteResponse
    begin_quorum_epoch: BeginQuorumEpochResponse
    end_quorum_epoch: EndQuorumEpochResponse
    fetch: FetchResponse
    fetch_snapshot: FetchSnapshotResponse
    def __init__(self, call_id: _Optional[int] = ..., vote: _Optional[_Union[VoteResponse, _Mapping]] = ..., begin_quorum_epoch: _Optional[_Union[BeginQuorumEpochResponse, _Mapping]] = ..., end_quorum_epoch: _Optional[_Union[EndQuorumEpochResponse, _Mapping]] = ..., fetch: _Optional[_Union[FetchResponse, _Mapping]] = ..., fetch_snapshot: _Optional[_Union[FetchSnapshotResponse, _Mapping]] = ...) -> None: ...

class AddRaftVoterRequest(_message.Message):
    __slots__ = ("cluster_id", "voter_id", "voter_directory_id", "endpoints")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    voter_id: int
    voter_directory_id: str
    endpoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_id: _Optional[str] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[str] = ..., endpoints: _Optional[_Iterable[str]] = ...) -> None: ...

class RemoveRaftVoterRequest(_message.Message):
    __slots__ = ("cluster_id", "voter_id", "voter_directory_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    voter_id: int
    voter_directory_id: str
    def __init__(self, cluster_id: _Optional[str] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[str] = ...) -> None: ...

class UpdateRaftVoterRequest(_message.Message):
    __slots__ = ("cluster_id", "voter_id", "voter_directory_id", "endpoints")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    voter_id: int
    voter_directory_id: str
    endpoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_id: _Optional[str] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[str] = ..., endpoints: _Optional[_Iterable[str]] = ...) -> None: ...

class RaftVoterChangeResponse(_message.Message):
    __slots__ = ("error", "refusal", "message", "leader_id", "leader_address", "offset")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    refusal: str
    message: str
    leader_id: int
    leader_address: str
    offset: int
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., refusal: _Optional[str] = ..., message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_address: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class JournalAppendRequest(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ...) -> None: ...

class JournalAppendResponse(_message.Message):
    __slots__ = ("error", "leader_id", "leader_address", "offset", "epoch")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    error: RaftError
    leader_id: int
    leader_address: str
    offset: int
    epoch: int
    def __init__(self, error: _Optional[_Union[RaftError, str]] = ..., leader_id: _Optional[int] = ..., leader_address: _Optional[str] = ..., offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class JournalReadRequest(_message.Message):
    __slots__ = ("from_index", "max_entries")
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    max_entries: int
    def __init__(self, from_index: _Optional[int] = ..., max_entries: _Optional[int] = ...) -> None: ...

class JournalReadResponse(_message.Message):
    __slots__ = ("applied_offset", "entry_count", "entries", "loaded_snapshot")
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LOADED_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    applied_offset: int
    entry_count: int
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    loaded_snapshot: bool
    def __init__(self, applied_offset: _Optional[int] = ..., entry_count: _Optional[int] = ..., entries: _Optional[_Iterable[bytes]] = ..., loaded_snapshot: _Optional[bool] = ...) -> None: ...
