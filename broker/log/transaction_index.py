"""The aborted transactions whose markers lie in one segment: ``<base>.txnindex`` beside
its ``.log`` (Kafka's ``TransactionIndex``, the same 34-byte entries)::

    version i16 (0) | producer id i64 | first offset i64 | last offset i64 |
    last stable offset i64

``last offset`` is the ABORT marker's; ``last stable offset`` what it was once the
transaction ended, which lets a read stop looking (Kafka's ``isComplete``). Entries are
in marker order. The file is created with its first entry, appended to as markers are
written (page cache), fsynced with its segment, cut with the log, deleted with the
segment. After a crash the log's recovery rebuilds the index of every segment it scans
(a torn tail entry is dropped when read).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".txnindex"
VERSION = 0
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.entries: list[AbortedTxn] = self._read()

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries = []
        for at in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):
            version, *fields = _ENTRY.unpack_from(data, at)
            if version != VERSION:
                break
            entries.append(AbortedTxn(*fields))
        return entries

    def append(self, entry: AbortedTxn) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            if os.fstat(self._fd).st_size != len(self.entries) * _ENTRY.size:  # a torn tail read away
                self._rewrite()
        os.write(self._fd, _ENTRY.pack(VERSION, *_fields(entry)))
        self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Drop the transactions whose markers are at ``offset`` or later."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._rewrite()

    def reset(self) -> None:
        """Forget every entry (recovery writes them again from the batches)."""
        if self.entries or self.path.exists():
            self.entries = []
            self._rewrite()

    def _rewrite(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, b"".join(_ENTRY.pack(VERSION, *_fields(e)) for e in self.entries))

    def collect(self, start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """The transactions overlapping [start, upper), and whether no later segment can
        hold one (an entry's last stable offset reached ``upper``)."""
        found = [e for e in self.entries if e.last_offset >= start and e.first_offset < upper]
        return found, any(e.last_stable_offset >= upper for e in self.entries)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def duplicate_fds(self) -> list[int]:
        return [] if self._fd is None else [os.dup(self._fd)]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _fields(entry: AbortedTxn) -> tuple[int, int, int, int]:
    return entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
