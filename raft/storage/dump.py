"""The metadata log files as JSON-able dicts, for ``raftka log dump`` (like kafka-dump-log.sh).

Read-only: nothing is opened for writing and nothing is truncated, so it is safe on a live
node and on damaged storage, where it reports each damaged region and goes on from the next
valid batch, to help an operator decide what to restore.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raftka.raft.batch import BatchKind
from raftka.raft.storage import batch_codec, layout, snapshot_file
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.batch_codec import Frame


def iter_dump(path: Path, *, with_records: bool = True) -> Iterator[dict[str, Any]]:
    """One dict per batch, snapshot file and damaged region under ``path``, in log order.

    ``path`` is a data dir, its ``__cluster_metadata-0`` log dir, or one segment or snapshot
    file. For a directory, ``archive/`` (older history) comes first. Each dict has ``type``
    ``"batch"``, ``"snapshot"`` or ``"damaged"``, and ``file``; records are base64.
    """
    for file in _files(path):
        if file.name.endswith(layout.SNAPSHOT_SUFFIX):
            yield _snapshot_entry(file)
        else:
            yield from _segment_entries(file, with_records)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = layout.history_files(path)
    if not files:
        directory = layout.log_dir(path) if layout.log_dir(path).is_dir() else path
        raise StorageError(f"no segment or snapshot files in {directory}")
    return files


def _segment_entries(path: Path, with_records: bool) -> Iterator[dict[str, Any]]:
    for frame, span_bytes in batch_codec.scan_frames(path.read_bytes()):
        if frame.batch is not None:
            yield _batch_entry(path, frame, with_records)
        else:
            yield _damage_entry(path, frame, span_bytes)


def _batch_entry(path: Path, frame: Frame, with_records: bool) -> dict[str, Any]:
    batch = frame.batch
    assert batch is not None and frame.end is not None
    entry: dict[str, Any] = {
        "type": "batch",
        "file": str(path),
        "position": frame.position,
        "size_bytes": frame.end - frame.position,
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "epoch": batch.epoch,
        "timestamp_ms": batch.timestamp_ms,
        "kind": batch.kind.name,
        "record_count": len(batch.records),
        "crc_valid": True,
    }
    if with_records:
        entry["records"] = [base64.b64encode(r).decode() for r in batch.records]
    return entry


def _damage_entry(path: Path, frame: Frame, span_bytes: int) -> dict[str, Any]:
    """A region holding no valid batch; its header fields too when its length field was usable."""
    entry: dict[str, Any] = {
        "type": "damaged",
        "file": str(path),
        "position": frame.position,
        "size_bytes": span_bytes,
        "error": frame.error,
        "crc_valid": frame.crc_valid,
    }
    header = frame.header
    if header is not None and frame.end is not None:
        kinds = {k.value: k.name for k in BatchKind}
        entry |= {
            "base_offset": header.base_offset,
            "last_offset": header.base_offset + header.record_count - 1,
            "epoch": header.epoch,
            "timestamp_ms": header.timestamp_ms,
            "kind": kinds.get(header.kind, header.kind),
            "record_count": header.record_count,
        }
    return entry


def _snapshot_entry(path: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "snapshot", "file": str(path), "size_bytes": path.stat().st_size}
    try:
        snapshot = snapshot_file.decode_snapshot(path.read_bytes())
    except snapshot_file.SnapshotFileError as exc:
        return entry | {"valid": False, "error": str(exc)}
    return entry | {
        "offset": snapshot.id.offset,
        "epoch": snapshot.id.epoch,
        "data_bytes": len(snapshot.data),
        "valid": True,
    }
