"""A segment's sparse indexes (Kafka's OffsetIndex and TimeIndex), kept in memory and
appended to a file beside the segment.

An offset index entry maps a relative offset to the byte position of the batch that
starts there; a time index entry maps a timestamp to the relative offset of the batch
where the segment's largest timestamp first reached it. The segment adds an entry to
each every ``index.interval.bytes``. Both only grow, so lookups are
a bisect. The files exist so a cleanly closed segment does not need a scan at start;
``load`` refuses entries a log could not have produced, and the caller then rebuilds
from the log, which is always the truth.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
ENTRIES_MAX = 10 * 1024 * 1024 // OFFSET_ENTRY.size  # Kafka's segment.index.bytes (10 MiB): the segment rolls


class IndexError_(ValueError):
    """An index file that does not fit its log: rebuild it."""


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys = array("q")  # 8 bytes an entry, not a Python int object each: a segment may hold
        self.values = array("q")  # a million entries, and inactive segments keep theirs
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def full(self) -> bool:
        return len(self.keys) >= ENTRIES_MAX

    def append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        os.write(self._fd, self.entry.pack(*self._pair(key, value)))

    def floor(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is at most ``key``."""
        i = bisect.bisect_right(self.keys, key) - 1
        return (self.keys[i], self.values[i]) if i >= 0 else None

    def truncate_after(self, key: int) -> None:
        """Drop entries whose key is ``key`` or more."""
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys):
            del self.keys[i:], self.values[i:]
            os.ftruncate(self._fd, i * self.entry.size)

    def reset(self) -> None:
        del self.keys[:], self.values[:]
        os.ftruncate(self._fd, 0)

    def read_entries(self) -> list[tuple[int, int]]:
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        usable = len(data) - len(data) % self.entry.size
        return [self._unpair(*self.entry.unpack_from(data, i)) for i in range(0, usable, self.entry.size)]

    def flush(self) -> None:
        os.fsync(self._fd)

    def duplicate_fd(self) -> int:
        return os.dup(self._fd)

    def close(self) -> None:
        os.close(self._fd)

    def _pair(self, key: int, value: int) -> tuple[int, int]:
        return key, value

    def _unpair(self, a: int, b: int) -> tuple[int, int]:
        return a, b


class OffsetIndex(_Index):
    """relative offset -> byte position of the batch starting there."""

    entry = OFFSET_ENTRY

    def load(self, log_size: int) -> None:
        entries = self.read_entries()
        last_key, last_position = -1, -1
        for key, position in entries:
            if key <= last_key or position <= last_position or position >= log_size:
                raise IndexError_(f"{self.path}: entry ({key}, {position}) out of order or past the log")
            last_key, last_position = key, position
        self.keys = array("q", (k for k, _ in entries))
        self.values = array("q", (p for _, p in entries))


class TimeIndex(_Index):
    """timestamp -> relative offset of the batch where the segment's largest timestamp
    first reached it; keys are timestamps. Whether the last entry lies within the log is
    the segment's to check, once it knows its end."""

    entry = TIME_ENTRY

    def load(self) -> None:
        entries = self.read_entries()
        last_ts, last_key = -(2**63), -1
        for timestamp, relative in entries:
            if timestamp <= last_ts or relative < last_key:
                raise IndexError_(f"{self.path}: entry ({timestamp}, {relative}) out of order")
            last_ts, last_key = timestamp, relative
        self.keys = array("q", (t for t, _ in entries))
        self.values = array("q", (r for _, r in entries))

    def truncate_to_offset(self, relative: int) -> None:
        """Drop entries pointing at ``relative`` or later."""
        keep = bisect.bisect_left(self.values, relative)
        if keep < len(self.values):
            del self.keys[keep:], self.values[keep:]
            os.ftruncate(self._fd, keep * self.entry.size)
