"""Snapshot files: a small checked header, then the state machine's bytes.

Header, big-endian: magic ``RKSN`` and version u16 (bytes 0-5), offset i64, epoch i32, data
length u64 (bytes 18-25), CRC-32C of the data u32 (bytes 26-29). A snapshot is written to
``<name>.part`` and renamed only once it is fsynced, so a complete name always holds a
complete file: one that fails these checks was damaged afterwards, never torn by a crash.
The header lets a reader refuse it, or one whose header disagrees with its name.

Version 2 (a snapshot of a quorum whose voter set lives in the log, KIP-853) puts the
voter set in effect at the snapshot (a VotersRecord, ``raftka.raft.voters``) after the
header: its length u32, then its bytes, then the data; the CRC covers both. A static
quorum's snapshots stay version 1.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from raftka.raft.batch import SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.storage import fsio, layout
from raftka.raft.storage.base import StorageError

_HEADER = struct.Struct(">4sHqiQI")
_VOTERS_LENGTH = struct.Struct(">I")
_MAGIC = b"RKSN"
_VERSION = 1
_VERSION_WITH_VOTERS = 2


class SnapshotFileError(StorageError):
    """A snapshot file that must not be loaded: torn, damaged, or not a snapshot at all."""


def encode_snapshot(snapshot: Snapshot) -> bytes:
    sid = snapshot.id
    if not snapshot.voters:
        header = _HEADER.pack(
            _MAGIC, _VERSION, sid.offset, sid.epoch, len(snapshot.data), crc32c.crc32c(snapshot.data)
        )
        return header + snapshot.data
    body = _VOTERS_LENGTH.pack(len(snapshot.voters)) + snapshot.voters + snapshot.data
    header = _HEADER.pack(
        _MAGIC, _VERSION_WITH_VOTERS, sid.offset, sid.epoch, len(snapshot.data), crc32c.crc32c(body)
    )
    return header + body


def decode_snapshot(raw: bytes) -> Snapshot:
    if len(raw) < _HEADER.size:
        raise SnapshotFileError(f"{len(raw)} bytes is too short for the {_HEADER.size}-byte snapshot header")
    magic, version, offset, epoch, length, crc = _HEADER.unpack_from(raw)
    if magic != _MAGIC or version not in (_VERSION, _VERSION_WITH_VOTERS):
        raise SnapshotFileError(
            f"bytes 0-5 hold magic {magic!r} version {version}, not those of a version "
            f"{_VERSION} or {_VERSION_WITH_VOTERS} snapshot"
        )
    body = raw[_HEADER.size :]
    voters = b""
    start = 0
    if version == _VERSION_WITH_VOTERS:
        if len(body) < _VOTERS_LENGTH.size:
            raise SnapshotFileError(f"version 2 snapshot of {len(raw)} bytes has no voter set length")
        (voters_length,) = _VOTERS_LENGTH.unpack_from(body)
        start = _VOTERS_LENGTH.size + voters_length
        voters = body[_VOTERS_LENGTH.size : start]
    if length != len(body) - start:
        raise SnapshotFileError(
            f"the header (bytes 18-25) says {length} data bytes, the file holds {len(body) - start}"
        )
    data = body[start:]
    actual = crc32c.crc32c(body)
    if actual != crc:
        raise SnapshotFileError(
            f"the CRC-32C of the data (byte {_HEADER.size} to the end) is {actual:08x}, "
            f"its header says {crc:08x} (bytes 26-29)"
        )
    if offset < 0 or epoch < 0:
        raise SnapshotFileError(f"negative offset {offset} or epoch {epoch}")
    return Snapshot(SnapshotId(offset, epoch), data, voters)


def read_snapshot(path: Path) -> Snapshot:
    """Load and check the snapshot at ``path``, including that its header matches its name."""
    snapshot = decode_snapshot(path.read_bytes())
    if layout.parse_snapshot_name(path.name) != snapshot.id:
        raise SnapshotFileError(
            f"the header (bytes 6-17) says offset {snapshot.id.offset} epoch {snapshot.id.epoch}, "
            "not the snapshot the file name says"
        )
    return snapshot


def write_snapshot(directory: Path, snapshot: Snapshot) -> Path:
    """Write ``snapshot`` under its KRaft name, atomically and durably; returns the path."""
    path = directory / layout.snapshot_name(snapshot.id)
    fsio.write_atomically(path, encode_snapshot(snapshot), temp_suffix=layout.PART_SUFFIX)
    return path
