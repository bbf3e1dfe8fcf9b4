"""Where the metadata log lives on disk, named the KRaft way so Kafka operators recognise it.

```
data_dir/meta.properties
data_dir/__cluster_metadata-0/00000000000000000000.log             segment: base offset
data_dir/__cluster_metadata-0/00000000000000001000-0000000003.checkpoint   snapshot: offset-epoch
data_dir/__cluster_metadata-0/quorum-state
data_dir/__cluster_metadata-0/archive/                              retired segments and snapshots
```

An archived file whose name is already taken in ``archive/`` gets a generation before its
suffix (``00000000000000000100.1.log``) so history is never overwritten.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

from raftka.raft.batch import SnapshotId

METADATA_LOG_DIR = "__cluster_metadata-0"
ARCHIVE_DIR = "archive"
QUORUM_STATE_FILE = "quorum-state"
SEGMENT_SUFFIX = ".log"
SNAPSHOT_SUFFIX = ".checkpoint"
PART_SUFFIX = ".part"  # a snapshot being written; never loaded
TMP_SUFFIX = ".tmp"  # a small file being replaced atomically

_Key = TypeVar("_Key", int, SnapshotId)

_SEGMENT_RE = re.compile(r"(\d{20})(?:\.(\d+))?\.log")
_SNAPSHOT_RE = re.compile(r"(\d{20})-(\d{10})(?:\.(\d+))?\.checkpoint")


def log_dir(data_dir: Path) -> Path:
    return data_dir / METADATA_LOG_DIR


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def snapshot_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset a segment file name encodes, or None if it names no segment."""
    match = _SEGMENT_RE.fullmatch(name)
    return int(match[1]) if match else None


def parse_snapshot_name(name: str) -> SnapshotId | None:
    """The snapshot id a file name encodes, or None if it names no snapshot."""
    match = _SNAPSHOT_RE.fullmatch(name)
    return SnapshotId(int(match[1]), int(match[2])) if match else None


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """Segment files in ``directory``, by base offset, then archive generation."""
    found = [(parse_segment_name(p.name), p) for p in directory.iterdir() if p.is_file()]
    return sorted(((base, p) for base, p in found if base is not None), key=_log_order)


def list_snapshots(directory: Path) -> list[tuple[SnapshotId, Path]]:
    """Complete snapshot files in ``directory`` (not ``.part``), oldest first."""
    found = [(parse_snapshot_name(p.name), p) for p in directory.iterdir() if p.is_file()]
    return sorted(((sid, p) for sid, p in found if sid is not None), key=_log_order)


def log_files(directory: Path) -> list[Path]:
    """Segments and snapshots in ``directory`` by offset; a snapshot at N (the state below N)
    comes before the segment at N."""
    entries = [(base, 1, p) for base, p in list_segments(directory)]
    entries += [(sid.offset, 0, p) for sid, p in list_snapshots(directory)]
    return [p for _, _, p in sorted(entries, key=lambda e: (e[0], e[1], _log_order((e[0], e[2]))[1]))]


def history_files(path: Path, *, include_archive: bool = True) -> list[Path]:
    """Every log file of a node in history order: ``archive/`` (older history) first, then the live log.

    ``path`` is a data dir or its ``__cluster_metadata-0`` log dir. Read-only tools (dump,
    audit, collect) find files here, so they agree on what a node's history is.
    """
    directory = log_dir(path) if log_dir(path).is_dir() else path
    folders = (directory / ARCHIVE_DIR, directory) if include_archive else (directory,)
    return [f for d in folders if d.is_dir() for f in log_files(d)]


def _log_order(entry: tuple[_Key, Path]) -> tuple[_Key, int]:
    """Sort by what the name encodes, then by archive generation (none, 1, 2, ...)."""
    parts = entry[1].name.split(".")  # the name matched a pattern: "stem.log" or "stem.N.log"
    return entry[0], int(parts[1]) if len(parts) == 3 else 0


def free_archive_path(archive: Path, name: str) -> Path:
    """``archive/name``, or the first free ``stem.N.suffix`` when an older file already holds it."""
    target = archive / name
    stem, _, suffix = name.partition(".")
    generation = 1
    while target.exists():
        target = archive / f"{stem}.{generation}.{suffix}"
        generation += 1
    return target
