"""The journal: the quorum's own state machine, an ordered list of opaque entries.

Before the metadata layer sits on the quorum, the journal is what a controller
replicates: operators and tests write entries through the leader and read back
exactly what committed, on any node, so lost or duplicated entries show at once.
Its entries are the DATA records; every committed batch, raft's control batches too,
moves its offset on. It snapshots itself when its ``SnapshotPolicy`` says so
(``raftka.raft.snapshot_schedule``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from raftka.raft.batch import Batch, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.snapshot_schedule import SnapshotPolicy, SnapshotSchedule

_LENGTH = struct.Struct(">I")
_HEADER = struct.Struct(">Q")  # entry count


def encode_entries(entries: list[bytes]) -> bytes:
    parts = [_HEADER.pack(len(entries))]
    for entry in entries:
        parts.append(_LENGTH.pack(len(entry)))
        parts.append(entry)
    return b"".join(parts)


def decode_entries(data: bytes) -> list[bytes]:
    (count,) = _HEADER.unpack_from(data, 0)
    position = _HEADER.size
    entries = []
    for _ in range(count):
        (length,) = _LENGTH.unpack_from(data, position)
        position += _LENGTH.size
        entries.append(data[position : position + length])
        position += length
    if position != len(data):
        raise ValueError(f"journal snapshot has {len(data) - position} trailing bytes")
    return entries


class Journal:
    def __init__(self, snapshot_policy: SnapshotPolicy, save_snapshot: Callable[[Snapshot], None]) -> None:
        self.entries: list[bytes] = []
        self.applied_offset = 0  # next offset to apply
        self.loaded_snapshot = False
        self._schedule = SnapshotSchedule(snapshot_policy)
        self._save_snapshot = save_snapshot

    def apply(self, batch: Batch) -> None:
        if not batch.is_control:
            self.entries.extend(batch.records)
        self.applied_offset = batch.next_offset
        if self._schedule.due(batch):
            self._schedule.restart(batch.timestamp_ms)
            snapshot_id = SnapshotId(batch.next_offset, batch.epoch)
            self._save_snapshot(Snapshot(snapshot_id, encode_entries(self.entries)))

    def restore(self, snapshot: Snapshot) -> None:
        self.entries = decode_entries(snapshot.data)
        self.applied_offset = snapshot.id.offset
        self.loaded_snapshot = True
        self._schedule.restart(None)  # the snapshot holds no time: count from the next batch
