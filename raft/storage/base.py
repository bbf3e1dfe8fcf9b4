"""The storage interface the driver uses; ``FileStorage`` and ``MemoryStorage`` implement it.

Calls are synchronous and blocking (the driver runs them on a worker thread) and are
never concurrent with each other. When a call returns, what it wrote is durable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from raftka.raft.batch import Batch, SnapshotId
from raftka.raft.effects import QuorumStateData, Snapshot, Write

RESTORE_FROM_PEERS = (
    "Restore the node from its peers: stop it, move its data dir away, run `raftka storage format` "
    "with the same cluster id and node id, and start it so it fetches the log from the leader."
)


class StorageError(Exception):
    """Storage cannot be used as it is; the message says what the operator should do."""


class NotFormattedError(StorageError):
    pass


class CorruptLogError(StorageError):
    pass


@dataclass(slots=True)
class LoadedState:
    """Everything recovered at start: the core is rebuilt from this alone."""

    quorum_state: QuorumStateData
    snapshot: Snapshot | None
    batches: list[Batch] = field(default_factory=list)  # every batch after the snapshot, in order


def covered_by_snapshot(batches: tuple[Batch, ...], snapshot_id: SnapshotId | None) -> tuple[Batch, ...]:
    """The batches a write still has to append: those the snapshot does not already cover."""
    if snapshot_id is None or not batches or batches[0].base_offset >= snapshot_id.offset:
        return batches
    return tuple(b for b in batches if b.next_offset > snapshot_id.offset)


class Storage(Protocol):
    def load(self) -> LoadedState:
        """Recover: truncate a torn tail, raise CorruptLogError for any other damage (snapshots too)."""
        ...

    def write(self, write: Write) -> None:
        """Apply ``write`` in the order its docstring gives and fsync before returning."""
        ...

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Write the snapshot atomically, then drop (or archive) segments wholly below it."""
        ...

    def close(self) -> None: ...
