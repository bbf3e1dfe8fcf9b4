"""gRPC calls to one node, straight to its listener (never through the fault proxy).

The tests observe every node directly, including one the proxy has cut off, so what a
test sees is each node's own view. Every call has a deadline; a node that is down,
stopped or slow shows up as an outcome (None, UNAVAILABLE, DEADLINE), never as a hang.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from raftka.v1 import raft_pb2, raft_pb2_grpc

DESCRIBE_TIMEOUT_S = 0.5
READ_TIMEOUT_S = 2.0
READ_PAGE_ENTRIES = 10_000  # the server's limit per Read
_CHANNEL_OPTIONS = (
    # A restarted node is dialled again within a fraction of a second.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
)


class AppendStatus(enum.Enum):
    ACKED = "acked"  # committed: must survive anything
    NOT_LEADER = "not_leader"  # maybe appended, maybe not: the node may have lost the lead after
    FAILED = "failed"  # no answer (down, stopped, deadline): maybe appended, maybe not


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    status: AppendStatus
    leader_id: int = -1  # on NOT_LEADER: the leader the node knows, -1 if none
    epoch: int = -1
    detail: str = ""


@dataclass(frozen=True, slots=True)
class JournalView:
    entries: tuple[bytes, ...]
    applied_offset: int
    loaded_snapshot: bool


class NodeClient:
    """Raft.DescribeQuorum and the Journal service of one node."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        self._raft = raft_pb2_grpc.RaftStub(self._channel)
        self._journal = raft_pb2_grpc.JournalStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def describe(self) -> raft_pb2.DescribeQuorumResponse | None:
        """The node's view of the quorum, or None if it does not answer in time."""
        try:
            return self._raft.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=DESCRIBE_TIMEOUT_S)
        except grpc.RpcError:
            return None

    def append(self, entries: Sequence[bytes], timeout_s: float) -> AppendOutcome:
        try:
            response = self._journal.Append(raft_pb2.JournalAppendRequest(entries=entries), timeout=timeout_s)
        except grpc.RpcError as e:
            return AppendOutcome(AppendStatus.FAILED, detail=f"{e.code().name}: {e.details()}")
        if response.error == raft_pb2.RAFT_ERROR_NOT_LEADER:
            return AppendOutcome(AppendStatus.NOT_LEADER, response.leader_id, response.epoch)
        assert response.error == raft_pb2.RAFT_ERROR_NONE, response
        return AppendOutcome(AppendStatus.ACKED, epoch=response.epoch)

    def read_journal(self) -> JournalView | None:
        """Every entry the node has applied, or None if it does not answer."""
        entries: list[bytes] = []
        try:
            while True:
                page = self._journal.Read(
                    raft_pb2.JournalReadRequest(from_index=len(entries), max_entries=READ_PAGE_ENTRIES),
                    timeout=READ_TIMEOUT_S,
                )
                entries.extend(page.entries)
                if not page.entries or len(entries) >= page.entry_count:
                    return JournalView(tuple(entries), page.applied_offset, page.loaded_snapshot)
        except grpc.RpcError:
            return None
