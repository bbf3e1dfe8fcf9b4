"""The replicated state machine: an ordered list of client record ids and a running hash.

Divergence shows at once: two nodes that applied different records at the same offset,
or the same records in another order, disagree on the hash. A snapshot is the count,
hash and next offset, so a node restored from one is checked against the history too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import Snapshot

GENESIS = b"\x00" * 8


def chain(prev: bytes, record: bytes) -> bytes:
    return hashlib.blake2b(prev + record, digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class SmState:
    next_offset: int  # the next offset the state machine expects
    count: int  # DATA records applied
    digest: bytes  # running hash over those records

    def encode(self) -> bytes:
        return f"{self.next_offset}:{self.count}:{self.digest.hex()}".encode()

    @staticmethod
    def decode(data: bytes) -> SmState:
        next_offset, count, digest = data.decode().split(":")
        return SmState(int(next_offset), int(count), bytes.fromhex(digest))


class StateMachineError(AssertionError):
    """Committed batches reached the state machine out of order (a core bug)."""


class StateMachine:
    """Applies committed batches in order; offers a snapshot every ``snapshot_every`` records
    (offsets: raft's control records included)."""

    def __init__(self, node_id: int, snapshot_every: int) -> None:
        self.node_id = node_id
        self.snapshot_every = snapshot_every  # 0: never snapshot
        self.state = SmState(0, 0, GENESIS)
        self.last_epoch = 0
        self.generation = 0  # bumped by every restore, so stale snapshot work is dropped
        self._since_snapshot = 0

    def reset(self, snapshot: Snapshot | None) -> None:
        self.generation += 1
        self._since_snapshot = 0
        if snapshot is None:
            self.state = SmState(0, 0, GENESIS)
            self.last_epoch = 0
            return
        self.state = SmState.decode(snapshot.data)
        if self.state.next_offset != snapshot.id.offset:
            raise StateMachineError(
                f"n{self.node_id}: snapshot {snapshot.id} carries state for offset {self.state.next_offset}"
            )
        self.last_epoch = snapshot.id.epoch

    def apply(self, batch: Batch) -> Snapshot | None:
        """Apply one committed batch; return a snapshot to save when one is due."""
        if batch.base_offset != self.state.next_offset:
            raise StateMachineError(
                f"n{self.node_id}: committed batch at {batch.base_offset}, expected {self.state.next_offset}"
            )
        count, digest = self.state.count, self.state.digest
        if batch.kind == BatchKind.DATA:
            for record in batch.records:
                digest = chain(digest, record)
            count += len(batch.records)
        # Control records count too, so that snapshots also end at a LeaderChange or a
        # NoOp, as the metadata image's do on an idle cluster.
        self._since_snapshot += len(batch.records)
        self.state = SmState(batch.next_offset, count, digest)
        self.last_epoch = batch.epoch
        if self.snapshot_every and self._since_snapshot >= self.snapshot_every:
            self._since_snapshot = 0
            return Snapshot(SnapshotId(batch.next_offset, batch.epoch), self.state.encode())
        return None
