"""The leader-epoch cache (Kafka's LeaderEpochFileCache): which leader epoch began at
which offset, persisted as ``leader-epoch-checkpoint``.

It answers "where does epoch E end in this log?", which is how a follower finds where
its log and its new leader's part ways (truncation by epoch, never by high watermark).

Every change is handed to ``save`` (the broker's: a write queued on its flusher thread,
in order with the segment syncs, so the file is durable before any recovery point that
counts on it). After a crash the file may lag the log; recovery re-reads the epochs of
the batches it scans (``rebuild_from``), as Kafka's segment recovery does.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from pathlib import Path

from raftka.broker.log import checkpoint

FILE_NAME = "leader-epoch-checkpoint"
Entries = list[tuple[int, int]]


class LeaderEpochCache:
    def __init__(self, directory: Path, save: Callable[[Entries], None] | None = None) -> None:
        self._path = directory / FILE_NAME
        self._save_entries = save or (lambda entries: checkpoint.write(self._path, entries))
        entries = checkpoint.read(self._path)
        self._epochs = [int(epoch) for epoch, _ in entries]
        self._starts = [start for _, start in entries]

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def entries(self) -> Entries:
        return list(zip(self._epochs, self._starts, strict=True))

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch ``epoch`` starts at ``start_offset`` (a no-op for the latest epoch)."""
        if self._epochs and epoch <= self._epochs[-1]:
            return
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest epoch at most ``epoch``, where it ends), or (-1, -1) if none."""
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return -1, -1
        end = self._starts[i + 1] if i + 1 < len(self._epochs) else log_end_offset
        return self._epochs[i], end

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was cut there)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:], self._starts[keep:]
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i <= 0 and (not self._starts or self._starts[0] >= start_offset):
            return
        del self._epochs[:i], self._starts[:i]
        self._starts[0] = start_offset
        self._save()

    def rebuild_from(self, offset: int, batches: Iterable[tuple[int, int]]) -> None:
        """Recovery scanned the log from ``offset``: from there the batches' own (epoch,
        base offset), not the checkpoint, say where each epoch starts."""
        before = self.entries()
        keep = bisect.bisect_left(self._starts, offset)
        del self._epochs[keep:], self._starts[keep:]
        for epoch, start in batches:
            if epoch >= 0 and (not self._epochs or epoch > self._epochs[-1]):
                self._epochs.append(epoch)
                self._starts.append(start)
        if self.entries() != before:
            self._save()

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()
        self._save()

    def _save(self) -> None:
        self._save_entries(self.entries())
