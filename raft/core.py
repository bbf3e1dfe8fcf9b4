"""RaftCore: the sans-I/O KRaft protocol engine (implementation follows the API)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from raft.batch import OffsetAndEpoch
from raft.config import RaftConfig
from raft.effects import Ready, Snapshot
from raft.messages import Envelope
from raft.storage.base import LoadedState


class NotLeaderError(Exception):
    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader is {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class ClusterIdMismatchError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ReplicaState:
    node_id: int
    log_end_offset: int  # -1 when never fetched
    last_fetch_ms: int  # core clock (monotonic ms); -1 when never
    last_caught_up_ms: int  # core clock; -1 when never


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int],
        cluster_id: str,
        config: RaftConfig,
        loaded: LoadedState,
        rng: random.Random,
        now_ms: int,
    ) -> None:
        raise NotImplementedError

    # events -------------------------------------------------------------------------
    def step(self, envelope: Envelope, now_ms: int) -> None: ...
    def unreachable(self, peer_id: int, now_ms: int) -> None: ...
    def poll(self, now_ms: int) -> int: ...
    def propose(self, records: Sequence[bytes], now_ms: int) -> OffsetAndEpoch: ...
    def persisted(self, write_id: int, now_ms: int) -> None: ...
    def snapshot_saved(self, snapshot: Snapshot) -> None: ...
    def resign(self, now_ms: int) -> None: ...
    def ready(self) -> Ready: ...
    def describe(self) -> QuorumDescription: ...
