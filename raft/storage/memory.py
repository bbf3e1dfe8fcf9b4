"""MemoryStorage: the ``Storage`` protocol in memory, for the deterministic simulator.

Durable on return by definition: the simulator decides what a crash loses by choosing
which writes reach it. Same rules as ``FileStorage`` (the shared contract tests prove it),
without the disk.
"""

from __future__ import annotations

from raftka.raft.batch import Batch
from raftka.raft.effects import Snapshot, Write
from raftka.raft.storage.base import LoadedState, covered_by_snapshot
from raftka.raft.storage.quorum_file import INITIAL


class MemoryStorage:
    def __init__(self) -> None:
        self.wipe()

    def wipe(self) -> None:
        """Lose everything, as a node whose disk was replaced."""
        self._quorum_state = INITIAL
        self._snapshot: Snapshot | None = None
        self._batches: list[Batch] = []

    def load(self) -> LoadedState:
        return LoadedState(self._quorum_state, self._snapshot, list(self._batches))

    def write(self, write: Write) -> None:
        if write.install_snapshot is not None:
            self._snapshot = write.install_snapshot
            self._batches = []
        if write.truncate_to is not None:
            self._truncate(write.truncate_to)
        for batch in covered_by_snapshot(write.append, self._snapshot and self._snapshot.id):
            assert batch.base_offset == self._log_end, (
                f"appending offset {batch.base_offset} at {self._log_end}"
            )
            self._batches.append(batch)
        if write.quorum_state is not None:
            self._quorum_state = write.quorum_state

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` unless the current one is as new; then drop the batches it covers."""
        if self._snapshot is not None and snapshot.id.offset <= self._snapshot.id.offset:
            return
        self._snapshot = snapshot
        self._batches = [b for b in self._batches if b.next_offset > snapshot.id.offset]

    def close(self) -> None:
        """Nothing to release; the contents stay, as a disk's do."""

    @property
    def _log_start(self) -> int:
        return self._snapshot.id.offset if self._snapshot is not None else 0

    @property
    def _log_end(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._log_start

    def _truncate(self, offset: int) -> None:
        assert offset >= self._log_start, f"truncating to {offset}, below the snapshot at {self._log_start}"
        keep = len(self._batches)
        while keep and self._batches[keep - 1].base_offset >= offset:
            keep -= 1
        assert keep == 0 or self._batches[keep - 1].next_offset <= offset, (
            f"offset {offset} is inside a batch"
        )
        del self._batches[keep:]
