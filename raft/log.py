"""The core's view of the replicated log: the latest snapshot plus the batches after it.

Everything since the last snapshot is held in memory (the layer above snapshots on
records, bytes and time, which bounds it: ``raftka.raft.snapshot_schedule``), so the core can
answer fetches and compare logs without I/O; reads walk it by index and copy no more
than they return. An epoch index maps each epoch to its first offset, which is what
diverging-fetch truncation and fetch validation need.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from raftka.raft.batch import Batch, OffsetAndEpoch, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.storage.batch_codec import frame_bytes


@dataclass(frozen=True, slots=True)
class FetchValidation:
    """How a leader answers a fetch position: valid, diverging at ``diverging``, or snapshot."""

    diverging: OffsetAndEpoch | None = None
    snapshot_id: SnapshotId | None = None

    @property
    def valid(self) -> bool:
        return self.diverging is None and self.snapshot_id is None


class RaftLog:
    def __init__(self, snapshot: Snapshot | None, batches: list[Batch]) -> None:
        self.snapshot = snapshot
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        self._epochs: list[int] = []  # epochs present, ascending
        self._epoch_starts: list[int] = []  # first offset of each epoch in _epochs
        for batch in batches:
            if batch.next_offset <= self.start_offset:
                continue
            self.append(batch)

    # positions ------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self.snapshot.id.offset if self.snapshot else 0

    @property
    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self.start_offset

    @property
    def last_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        return self.snapshot.id.epoch if self.snapshot else 0

    @property
    def end(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.end_offset, self.last_epoch)

    def is_empty(self) -> bool:
        return self.snapshot is None and not self._batches

    # changes --------------------------------------------------------------------------
    def append(self, batch: Batch) -> None:
        assert batch.base_offset == self.end_offset, (batch.base_offset, self.end_offset)
        assert batch.epoch >= self.last_epoch, (batch.epoch, self.last_epoch)
        if not self._epochs or batch.epoch != self._epochs[-1]:
            self._epochs.append(batch.epoch)
            self._epoch_starts.append(batch.base_offset)
        self._batches.append(batch)
        self._bases.append(batch.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after ``offset``, a batch boundary at or above the start."""
        assert offset >= self.start_offset, (offset, self.start_offset)
        if offset >= self.end_offset:
            return
        index = bisect.bisect_left(self._bases, offset)
        assert index < len(self._bases) and self._bases[index] == offset, f"{offset} is not a batch boundary"
        del self._batches[index:]
        del self._bases[index:]
        keep = bisect.bisect_left(self._epoch_starts, offset)
        del self._epochs[keep:]
        del self._epoch_starts[keep:]

    def install(self, snapshot: Snapshot) -> None:
        """Replace everything with ``snapshot`` (a follower that fetched one)."""
        self.snapshot = snapshot
        self._batches.clear()
        self._bases.clear()
        self._epochs.clear()
        self._epoch_starts.clear()

    def compact(self, snapshot: Snapshot) -> None:
        """Adopt a snapshot of our own committed state and drop the batches it covers."""
        offset = snapshot.id.offset
        assert self.start_offset <= offset <= self.end_offset, snapshot.id
        cut = bisect.bisect_left(self._bases, offset)
        assert cut == len(self._bases) or self._bases[cut] == offset, "snapshot inside a batch"
        self.snapshot = snapshot
        del self._batches[:cut]
        del self._bases[:cut]
        if not self._batches:
            self._epochs.clear()
            self._epoch_starts.clear()
            return
        # The epoch of the first batch kept now starts where the snapshot ends.
        first = bisect.bisect_right(self._epoch_starts, offset) - 1
        del self._epochs[:first]
        del self._epoch_starts[:first]
        self._epoch_starts[0] = offset

    # reads ----------------------------------------------------------------------------
    def read(
        self, offset: int, max_bytes: int, max_batches: int, *, end: int | None = None
    ) -> tuple[Batch, ...]:
        """Batches from ``offset`` (a boundary) on: at least one, then no more than
        ``max_batches`` and ``max_bytes`` encoded (what each costs on disk and on the wire);
        none that begins at or after ``end``."""
        index = bisect.bisect_left(self._bases, offset)
        if index == len(self._bases) or self._bases[index] != offset:
            return ()
        limit = len(self._batches) if end is None else bisect.bisect_left(self._bases, end)
        if index >= limit:
            return ()
        last = min(limit, index + max_batches)
        size = frame_bytes(self._batches[index])
        stop = index + 1
        while stop < last:
            size += frame_bytes(self._batches[stop])
            if size > max_bytes:
                break
            stop += 1
        return tuple(self._batches[index:stop])

    def batches_between(self, start: int, end: int) -> list[Batch]:
        """Batches that begin in [start, end): the newly committed ones."""
        lo = bisect.bisect_left(self._bases, start)
        hi = bisect.bisect_left(self._bases, end)
        return self._batches[lo:hi]

    def batch_at(self, offset: int) -> Batch | None:
        index = bisect.bisect_right(self._bases, offset) - 1
        if index < 0:
            return None
        batch = self._batches[index]
        return batch if batch.base_offset <= offset <= batch.last_offset else None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= ``epoch`` in this log and the offset where it ends.

        An epoch older than every batch ends where the log starts (the snapshot's epoch
        if the snapshot is at or below it).
        """
        index = bisect.bisect_right(self._epochs, epoch) - 1
        if index >= 0:
            found = self._epochs[index]
            end = self._epoch_starts[index + 1] if index + 1 < len(self._epochs) else self.end_offset
            return OffsetAndEpoch(end, found)
        if self.snapshot is not None and self.snapshot.id.epoch <= epoch:
            return OffsetAndEpoch(self.start_offset, self.snapshot.id.epoch)
        return OffsetAndEpoch(self.start_offset, 0)

    def validate_fetch(self, fetch_offset: int, last_fetched_epoch: int) -> FetchValidation:
        """Kafka's rule for a follower's position: valid, diverging, or needs the snapshot."""
        if fetch_offset < self.start_offset:
            return FetchValidation(snapshot_id=self._snapshot_id())
        at_snapshot = self.snapshot is not None and fetch_offset == self.start_offset
        if at_snapshot and last_fetched_epoch == self._snapshot_id().epoch:
            return FetchValidation()
        if fetch_offset == 0 and last_fetched_epoch == 0:
            return FetchValidation()
        end = self.end_offset_for_epoch(last_fetched_epoch)
        if end.epoch != last_fetched_epoch or end.offset < fetch_offset:
            if end.epoch == 0 and self.snapshot is not None:
                # Every epoch the fetcher shares with us is inside the snapshot.
                return FetchValidation(snapshot_id=self._snapshot_id())
            return FetchValidation(diverging=end)
        return FetchValidation()

    def _snapshot_id(self) -> SnapshotId:
        assert self.snapshot is not None
        return self.snapshot.id
