"""Snapshot files: a small checked header, then the state machine's bytes.

Header, big-endian: magic ``RKSN``, version u16, offset i64, epoch i32, data length u64,
CRC-32C of the data u32. A snapshot is written to ``<name>.part`` and renamed only once it
is fsynced, so a complete name always holds a complete file; the header still lets a reader
refuse a file that was damaged afterwards, or whose header disagrees with its name.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from raft.batch import SnapshotId
from raft.effects import Snapshot
from raft.storage import fsio, layout
from raft.storage.base import StorageError

_HEADER = struct.Struct(">4sHqiQI")
_MAGIC = b"RKSN"
_VERSION = 1


class SnapshotFileError(StorageError):
    """A snapshot file that must not be loaded: torn, damaged, or not a snapshot at all."""


def encode_snapshot(snapshot: Snapshot) -> bytes:
    sid = snapshot.id
    header = _HEADER.pack(
        _MAGIC, _VERSION, sid.offset, sid.epoch, len(snapshot.data), crc32c.crc32c(snapshot.data)
    )
    return header + snapshot.data


def decode_snapshot(raw: bytes) -> Snapshot:
    if len(raw) < _HEADER.size:
        raise SnapshotFileError(f"{len(raw)} bytes is too short for a snapshot header")
    magic, version, offset, epoch, length, crc = _HEADER.unpack_from(raw)
    if magic != _MAGIC or version != _VERSION:
        raise SnapshotFileError(f"not a version {_VERSION} snapshot (magic {magic!r}, version {version})")
    if length != len(raw) - _HEADER.size:
        raise SnapshotFileError(f"header says {length} data bytes, file holds {len(raw) - _HEADER.size}")
    data = raw[_HEADER.size :]
    if crc32c.crc32c(data) != crc:
        raise SnapshotFileError("CRC-32C of the snapshot data does not match its header")
    if offset < 0 or epoch < 0:
        raise SnapshotFileError(f"negative offset {offset} or epoch {epoch}")
    return Snapshot(SnapshotId(offset, epoch), data)


def read_snapshot(path: Path) -> Snapshot:
    """Load and check the snapshot at ``path``, including that its header matches its name."""
    snapshot = decode_snapshot(path.read_bytes())
    if layout.parse_snapshot_name(path.name) != snapshot.id:
        raise SnapshotFileError(f"{path.name} holds snapshot {snapshot.id}, not the one its name says")
    return snapshot


def write_snapshot(directory: Path, snapshot: Snapshot) -> Path:
    """Write ``snapshot`` under its KRaft name, atomically and durably; returns the path."""
    path = directory / layout.snapshot_name(snapshot.id)
    fsio.write_atomically(path, encode_snapshot(snapshot), temp_suffix=layout.PART_SUFFIX)
    return path
