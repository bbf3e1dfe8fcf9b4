"""A segment's sparse indexes (Kafka's OffsetIndex and TimeIndex): files beside the
segment, their entries held in memory only while lookups use them.

An offset index entry maps a relative offset to the byte position of the batch that
starts there; a time index entry maps a timestamp to the relative offset of the batch
where the segment's largest timestamp first reached it. The segment adds an entry to
each every ``index.interval.bytes``. Both only grow, so lookups are
a bisect. The files exist so a cleanly closed segment does not need a scan at start;
``load`` refuses entries a log could not have produced, and the caller then rebuilds
from the log, which is always the truth.

The file is opened for each read, append, truncation or sync and closed again, so a
partition's indexes hold no descriptor (two per segment were the largest share of a
broker's open files: 400 partitions took 1,200 of a default 1,024).

Entries are loaded from the file on the first lookup that needs them, not at open, and
dropped again when the indexes loaded in this process pass ``INDEX_MEMORY_BYTES_MAX``,
those used longest ago first (Kafka maps index files lazily and lets the page cache
choose; holding every entry of every segment grew with the log). Appends go to the file
and, if loaded, to memory; the last entry is always at hand.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import os
import struct
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
RELATIVE_OFFSET_MAX = 2**31 - 1  # entries hold offsets relative to their segment's base in 4 bytes
ENTRIES_MAX = 10 * 1024 * 1024 // OFFSET_ENTRY.size  # Kafka's segment.index.bytes (10 MiB): the segment rolls
ENTRY_MEMORY_BYTES = 2 * array("q").itemsize  # a loaded entry: its key and its value
INDEX_MEMORY_BYTES_MAX = 256 << 20  # loaded entries of all indexes in this process


class IndexError_(ValueError):
    """An index file that does not fit its log: rebuild it."""


class LoadedIndexes:
    """The indexes whose entries are in memory, least recently used first, bounded in bytes."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._loaded: collections.OrderedDict[_Index, int] = collections.OrderedDict()  # -> its bytes
        self._lock = threading.Lock()  # a log is used on its loop, but a process may run brokers on several

    def used(self, index: _Index, size: int) -> None:
        """``index`` was looked up and holds ``size`` bytes: the most recent now; the least
        recent others are dropped while the total is over the bound."""
        with self._lock:
            self.bytes += size - self._loaded.get(index, 0)
            self._loaded[index] = size
            self._loaded.move_to_end(index)
            evicted = []
            while self.bytes > self.bytes_max and len(self._loaded) > 1:
                oldest, oldest_size = self._loaded.popitem(last=False)
                self.bytes -= oldest_size
                evicted.append(oldest)
        for oldest in evicted:
            oldest.forget()

    def dropped(self, index: _Index) -> None:
        with self._lock:
            self.bytes -= self._loaded.pop(index, 0)


LOADED = LoadedIndexes(INDEX_MEMORY_BYTES_MAX)


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path, loaded: LoadedIndexes = LOADED) -> None:
        self.path = path
        self._loaded_indexes = loaded
        with self._opened(os.O_RDWR | os.O_CREAT) as fd:
            self._count = os.fstat(fd).st_size // self.entry.size
        self.last = self._read_last()  # (key, value) of the last entry, None when empty
        self._keys: array | None = None  # 8 bytes an entry, not a Python int object each:
        self._values: array | None = None  # a segment may hold a million entries

    def __len__(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        return self._count >= ENTRIES_MAX

    @property
    def loaded(self) -> bool:
        return self._keys is not None

    @property
    def keys(self) -> array:
        return self._entries()[0]

    @property
    def values(self) -> array:
        return self._entries()[1]

    def _entries(self) -> tuple[array, array]:
        """The entries in memory, read from the file if they are not; counted as used."""
        if self._keys is None or self._values is None:
            entries = self.read_entries()
            self._keys = array("q", (k for k, _ in entries))
            self._values = array("q", (v for _, v in entries))
        self._loaded_indexes.used(self, len(self._keys) * ENTRY_MEMORY_BYTES)
        return self._keys, self._values

    def unload(self) -> None:
        """Drop the entries from memory; the next lookup reads them again."""
        self.forget()
        self._loaded_indexes.dropped(self)

    def forget(self) -> None:
        """Out of memory, already uncounted (the bound let it go)."""
        self._keys = self._values = None

    @contextlib.contextmanager
    def _opened(self, flags: int = os.O_RDONLY) -> Iterator[int]:
        fd = os.open(self.path, flags, 0o644)
        try:
            yield fd
        finally:
            os.close(fd)

    def append(self, key: int, value: int) -> None:
        with self._opened(os.O_WRONLY | os.O_APPEND) as fd:
            os.write(fd, self.entry.pack(*self._pair(key, value)))
        self._count += 1
        self.last = (key, value)
        if self._keys is not None and self._values is not None:
            self._keys.append(key)
            self._values.append(value)

    def floor(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is at most ``key``."""
        keys, values = self._entries()
        i = bisect.bisect_right(keys, key) - 1
        return (keys[i], values[i]) if i >= 0 else None

    def truncate_after(self, key: int) -> None:
        """Drop entries whose key is ``key`` or more."""
        self._keep(bisect.bisect_left(self.keys, key))

    def _keep(self, count: int) -> None:
        """Keep the first ``count`` entries, in memory and on disk."""
        if count < self._count:
            os.truncate(self.path, count * self.entry.size)
            self._count = count
            self.last = self._read_last()
            self.unload()

    def reset(self) -> None:
        self._keep(0)

    def read_entries(self) -> list[tuple[int, int]]:
        with self._opened() as fd:
            data = os.pread(fd, self._count * self.entry.size, 0)
        return [self._unpair(*self.entry.unpack_from(data, i)) for i in range(0, len(data), self.entry.size)]

    def _read_last(self) -> tuple[int, int] | None:
        if not self._count:
            return None
        with self._opened() as fd:
            data = os.pread(fd, self.entry.size, (self._count - 1) * self.entry.size)
        return self._unpair(*self.entry.unpack(data))

    def flush(self) -> None:
        with self._opened() as fd:
            os.fsync(fd)  # a sync through any descriptor writes the file's dirty pages

    def duplicate_fd(self) -> int:
        """A descriptor of the file for a sync after this index is closed."""
        return os.open(self.path, os.O_RDONLY)

    def close(self) -> None:
        self.unload()

    def _pair(self, key: int, value: int) -> tuple[int, int]:
        return key, value

    def _unpair(self, a: int, b: int) -> tuple[int, int]:
        return a, b


class OffsetIndex(_Index):
    """relative offset -> byte position of the batch starting there."""

    entry = OFFSET_ENTRY

    def load(self, log_size: int) -> None:
        """Check every entry against a log of ``log_size`` bytes (kept on disk, not in memory)."""
        last_key, last_position = -1, -1
        for key, position in self.read_entries():
            if key <= last_key or position <= last_position or position >= log_size:
                raise IndexError_(f"{self.path}: entry ({key}, {position}) out of order or past the log")
            last_key, last_position = key, position


class TimeIndex(_Index):
    """timestamp -> relative offset of the batch where the segment's largest timestamp
    first reached it; keys are timestamps. Whether the last entry lies within the log is
    the segment's to check, once it knows its end."""

    entry = TIME_ENTRY

    def load(self) -> None:
        """Check that the entries are in order (kept on disk, not in memory)."""
        last_ts, last_key = -(2**63), -1
        for timestamp, relative in self.read_entries():
            if timestamp <= last_ts or relative < last_key:
                raise IndexError_(f"{self.path}: entry ({timestamp}, {relative}) out of order")
            last_ts, last_key = timestamp, relative

    def truncate_to_offset(self, relative: int) -> None:
        """Drop entries pointing at ``relative`` or later."""
        self._keep(bisect.bisect_left(self.values, relative))
