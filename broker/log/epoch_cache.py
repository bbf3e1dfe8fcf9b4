"""The leader-epoch cache (Kafka's LeaderEpochFileCache): which leader epoch began at
which offset, persisted as ``leader-epoch-checkpoint``.

It answers "where does epoch E end in this log?", which is how a follower finds where
its log and its new leader's part ways (truncation by epoch, never by high watermark).
"""

from __future__ import annotations

import bisect
from pathlib import Path

from raftka.broker.log import checkpoint

FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self._path = directory / FILE_NAME
        entries = checkpoint.read(self._path)
        self._epochs = [int(epoch) for epoch, _ in entries]
        self._starts = [start for _, start in entries]

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def entries(self) -> list[tuple[int, int]]:
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

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()
        self._save()

    def _save(self) -> None:
        checkpoint.write(self._path, self.entries())
