"""Producer state snapshots: ``<20-digit offset>.snapshot`` in a partition's folder holds
every producer's entry as it was before that offset (Kafka's producer snapshots).

A log takes one when a segment rolls, named after the new segment's base offset, and one
at its end on a clean close; a restart loads the newest it can read and replays the
batch headers after it, so it reads at most the active segment (after a clean close,
nothing). A snapshot is deleted with the segment it starts, and every one past the log
end when the log is cut shorter. The file::

    version u16 | crc32c u32 of the rest | producers u32 |
    per producer: producer id i64 | epoch i16 | coordinator epoch i32 |
                  open transaction's first offset i64 (-1: none) | last timestamp i64 |
                  batches u8 |
                  per batch: first sequence i32 | last sequence i32 | first offset i64 |
                             last offset i64 | max timestamp i64

Version 2 added the transaction fields (so a restart knows the open transactions);
version 1, without them, is still read.

It is written whole to a temporary name and renamed into place; the caller fsyncs it
(with the rolled segment, off the event loop). One that was torn by a crash fails its
CRC and is deleted, and the next older is used.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c

from raftka.broker.log.producer_state import BATCHES_KEPT, BatchMetadata, ProducerEntry, ProducerState

SUFFIX = ".snapshot"
VERSION = 2
_HEADER = struct.Struct(">HII")  # version, crc, producer count
_PRODUCER = {1: struct.Struct(">qhB"), 2: struct.Struct(">qhiqqB")}
_BATCH = struct.Struct(">iiqqq")


class SnapshotError(ValueError):
    """A snapshot file that cannot be read back (torn, damaged, another version)."""


def path_for(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def offsets(directory: Path) -> list[int]:
    """The offsets of the snapshots in ``directory``, ascending."""
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        if path.stem.isdigit():
            found.append(int(path.stem))
    return sorted(found)


def encode(state: ProducerState) -> bytes:
    body = bytearray()
    for producer_id, entry in state.producers.items():
        body += _PRODUCER[VERSION].pack(
            producer_id,
            entry.epoch,
            entry.coordinator_epoch,
            entry.txn_first_offset,
            entry.last_timestamp,
            len(entry.batches),
        )
        for b in entry.batches:
            body += _BATCH.pack(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset, b.timestamp)
    count = struct.pack(">I", len(state.producers))
    crc = crc32c.crc32c(count + body)
    return _HEADER.pack(VERSION, crc, len(state.producers)) + body


def decode(data: bytes) -> ProducerState:
    if len(data) < _HEADER.size:
        raise SnapshotError(f"{len(data)} bytes: shorter than the header")
    version, crc, count = _HEADER.unpack_from(data)
    if version not in _PRODUCER:
        raise SnapshotError(f"version {version}, only {sorted(_PRODUCER)} are read")
    producer = _PRODUCER[version]
    if crc32c.crc32c(data[_HEADER.size - 4 :]) != crc:
        raise SnapshotError("CRC-32C mismatch")
    producers: dict[int, ProducerEntry] = {}
    position = _HEADER.size
    try:
        for _ in range(count):
            fields = producer.unpack_from(data, position)
            position += producer.size
            producer_id, epoch, batches = fields[0], fields[1], fields[-1]
            if not 0 <= batches <= BATCHES_KEPT or (batches == 0 and version == 1):
                raise SnapshotError(f"producer {producer_id} with {batches} batches")
            entry = ProducerEntry(epoch)
            for _ in range(batches):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, position)))
                position += _BATCH.size
            if version == 1:
                entry.last_timestamp = entry.last.timestamp
            else:
                entry.coordinator_epoch, entry.txn_first_offset, entry.last_timestamp = fields[2:5]
            producers[producer_id] = entry
    except struct.error as e:
        raise SnapshotError(f"cut short: {e}") from None
    if position != len(data):
        raise SnapshotError(f"{len(data) - position} bytes after the last producer")
    return ProducerState(producers)


def write(directory: Path, offset: int, state: ProducerState) -> Path:
    """The snapshot at ``offset``, in place but not fsynced (see the module docstring)."""
    path = path_for(directory, offset)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        f.write(encode(state))
    os.replace(temporary, path)
    return path


def read(directory: Path, offset: int) -> ProducerState:
    try:
        data = path_for(directory, offset).read_bytes()
    except OSError as e:
        raise SnapshotError(str(e)) from None
    return decode(data)


def delete(directory: Path, offset: int) -> None:
    path_for(directory, offset).unlink(missing_ok=True)
