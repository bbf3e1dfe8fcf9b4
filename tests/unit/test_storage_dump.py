"""Dumping the log: every batch and snapshot as a dict, damage reported, nothing modified."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from raftka.raft.batch import SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.storage import layout
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.batch_codec import encode_batch
from raftka.raft.storage.dump import iter_dump
from raftka.raft.storage.file import FileStorage
from tests.unit.storage_support import append, flip_byte, make_batches, segment_files


def _fingerprint(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    storage = FileStorage(tmp_path, segment_bytes=150, archive=True)
    storage.load()
    append(storage, make_batches(0, 10))
    storage.save_snapshot(Snapshot(SnapshotId(8, 1), b"state"))
    return tmp_path


def test_dumps_archive_then_live_files_in_log_order(data_dir: Path) -> None:
    entries = list(iter_dump(data_dir))
    batches = [e for e in entries if e["type"] == "batch"]
    assert [e["base_offset"] for e in batches] == [b.base_offset for b in make_batches(0, 10)]
    assert [e["type"] for e in entries].count("snapshot") == 1
    snapshot = next(e for e in entries if e["type"] == "snapshot")
    assert snapshot | {"file": None} == {
        "type": "snapshot",
        "file": None,
        "size_bytes": snapshot["size_bytes"],
        "offset": 8,
        "epoch": 1,
        "data_bytes": 5,
        "valid": True,
    }
    assert "/archive/" in batches[0]["file"] and "/archive/" not in batches[-1]["file"]


def test_a_batch_entry_has_every_field(data_dir: Path) -> None:
    segment = layout.log_dir(data_dir) / "archive" / layout.segment_name(0)
    first = next(iter_dump(segment))
    batch = make_batches(0, 1)[0]
    assert first == {
        "type": "batch",
        "file": str(segment),
        "position": 0,
        "size_bytes": len(encode_batch(batch)),
        "base_offset": 0,
        "last_offset": 1,
        "epoch": 1,
        "timestamp_ms": batch.timestamp_ms,
        "kind": "DATA",
        "record_count": 2,
        "crc_valid": True,
        "records": [base64.b64encode(r).decode() for r in batch.records],
    }
    assert "records" not in next(iter_dump(segment, with_records=False))


def test_damage_is_reported_and_dumping_goes_on(data_dir: Path) -> None:
    segment = segment_files(data_dir)[-1]
    first_size = len(encode_batch(make_batches(int(segment.name[:20]), 1)[0]))
    flip_byte(segment, 30)  # inside the first batch: a CRC mismatch
    with segment.open("ab") as f:
        f.write(b"\x00\x00\x00\x60torn")
    before = _fingerprint(data_dir)

    entries = list(iter_dump(segment))
    assert [e["type"] for e in entries] == ["damaged", "batch", "damaged"]
    assert entries[0]["crc_valid"] is False and "CRC-32C mismatch" in entries[0]["error"]
    assert entries[0]["size_bytes"] == first_size and entries[1]["position"] == first_size
    assert entries[2]["size_bytes"] == 8 and "incomplete batch header" in entries[2]["error"]
    assert _fingerprint(data_dir) == before  # read-only: the torn tail is still there


def test_a_damaged_snapshot_is_listed_as_invalid(data_dir: Path) -> None:
    path = layout.log_dir(data_dir) / layout.snapshot_name(SnapshotId(8, 1))
    os.truncate(path, path.stat().st_size - 1)
    entry = next(e for e in iter_dump(data_dir) if e["type"] == "snapshot")
    assert entry["valid"] is False and "data bytes" in entry["error"]


def test_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no segment or snapshot files"):
        list(iter_dump(tmp_path))
