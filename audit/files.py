"""Which files hold a node's history, in the order the node wrote them.

A path given to the audit is a node's data dir, its ``__cluster_metadata-0`` log dir, or
a folder holding several of them (``.raftka/local``, or what ``raftka metadata collect``
wrote; hidden folders in it are skipped). Files are listed with the storage layout's own
functions (``raftka.raft.storage.layout``), archive first, so the audit and the node agree
on names and order. Spark's own file listing is not used: it skips names starting with
``_`` or ``.``, and the log folder is ``__cluster_metadata-0``.

Every path is made absolute here, on the driver, before a file is shipped to a task: Spark's
executors run in folders of their own (a standalone worker's ``work/app-.../N``), where a
relative path names nothing. Files are read with Python on the executors, so a path is a
local one, or a ``file:`` URI as Hadoop writes them; ``hdfs://`` and ``s3a://`` are refused
(docs/audit-on-a-cluster.md says what they would take).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from raftka.raft.storage import layout
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.meta import read_meta

SEGMENT = "segment"
SNAPSHOT = "snapshot"
SEARCH_DEPTH_MAX = 3  # how deep a folder of nodes is searched for log dirs
URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # scheme://...; a folder may have ':' in its name


class AuditInputError(ValueError):
    """A path or option the audit cannot use; the message names it."""


@dataclass(frozen=True, slots=True)
class LogFile:
    """One file of one node's history: one Spark input partition."""

    node: str
    path: str
    seq: int  # its place in the node's history, archive first
    source: str  # SEGMENT or SNAPSHOT
    archived: bool
    newest_segment: bool  # the live log's last segment: damage at its very end is a torn write


def discover(
    paths: Sequence[str | Path],
    *,
    node: str | None = None,
    include_archive: bool = True,
    include_snapshots: bool = True,
) -> list[LogFile]:
    """Every file of every node under ``paths``; raises AuditInputError naming a bad path."""
    if not paths:
        raise AuditInputError("paths: at least one node folder is needed")
    log_dirs = [d for p in paths for d in _log_dirs(local_path(p, "paths"))]
    if node is not None and len(log_dirs) != 1:
        raise AuditInputError(f"node: names one node, but the paths hold {len(log_dirs)} log folders")
    files: list[LogFile] = []
    owners: dict[str, Path] = {}
    for directory in log_dirs:
        node_id = node if node is not None else node_name(directory)
        if node_id in owners:
            raise AuditInputError(
                f"paths: {owners[node_id]} and {directory} are both node {node_id}; audit each node once"
            )
        owners[node_id] = directory
        files += node_files(
            directory, node_id, include_archive=include_archive, include_snapshots=include_snapshots
        )
    return files


def local_path(value: str | Path, name: str) -> Path:
    """``value`` as an absolute local path (a ``file:`` URI as its path); AuditInputError
    naming ``name`` for a URI of another scheme, which the audit cannot read."""
    text = str(value)
    if text.startswith("file:"):
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise AuditInputError(f"{name}: {text} is not a local file URI (file:///absolute/path)")
        text = unquote(parts.path)
    elif URI_RE.match(text):
        raise AuditInputError(
            f"{name}: {text}: the audit reads and writes local paths only (or file: URIs), on the driver "
            "and on every executor; copy the files to a folder every Spark worker sees at the same path"
        )
    return Path(os.path.abspath(text))


def node_files(
    directory: Path, node: str, *, include_archive: bool = True, include_snapshots: bool = True
) -> list[LogFile]:
    """The files of the node whose log dir is ``directory``, in history order."""
    found = layout.history_files(directory, include_archive=include_archive)
    live_segments = [p for p in found if p.parent == directory and p.name.endswith(layout.SEGMENT_SUFFIX)]
    newest = live_segments[-1] if live_segments else None
    files = []
    for path in found:
        source = SNAPSHOT if path.name.endswith(layout.SNAPSHOT_SUFFIX) else SEGMENT
        if source == SNAPSHOT and not include_snapshots:
            continue
        archived = path.parent != directory
        files.append(LogFile(node, str(path), len(files), source, archived, path == newest))
    return files


def node_name(log_dir: Path) -> str:
    """The node id its ``meta.properties`` gives, else the name of the folder above the log."""
    data_dir = log_dir.parent
    try:
        return str(read_meta(data_dir).node_id)
    except StorageError:
        return data_dir.name


def _log_dirs(path: Path) -> list[Path]:
    if not path.exists():
        raise AuditInputError(f"paths: {path} does not exist")
    if not path.is_dir():
        raise AuditInputError(f"paths: {path} is not a folder (give a node's data dir or a folder of nodes)")
    if path.name == layout.METADATA_LOG_DIR:
        return [path]
    if layout.log_dir(path).is_dir():
        return [layout.log_dir(path)]
    found = _search(path, SEARCH_DEPTH_MAX)
    if not found:
        raise AuditInputError(f"paths: no {layout.METADATA_LOG_DIR} folder in {path} or below it")
    return found


def _search(path: Path, depth: int) -> list[Path]:
    """Log dirs below ``path``, skipping hidden folders: ``metadata collect`` builds a copy in
    one (``.node-<id>.partial-...``), and a killed run leaves it, incomplete, beside the copy."""
    if depth == 0:
        return []
    found = []
    for child in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        log = layout.log_dir(child)
        found += [log] if log.is_dir() else _search(child, depth - 1)
    return found


def pack(files: Sequence[LogFile], max_bytes: int) -> list[list[LogFile]]:
    """Consecutive files in groups of up to ``max_bytes`` (a bigger file alone), as Spark's
    file sources pack files into partitions: a history has thousands of small files and a
    Spark task costs tens of milliseconds."""
    packed: list[list[LogFile]] = []
    size = 0
    for file in files:
        file_bytes = file_size(file)
        if not packed or size + file_bytes > max_bytes:
            packed.append([])
            size = 0
        packed[-1].append(file)
        size += file_bytes
    return packed


def file_size(file: LogFile) -> int:
    """Its bytes; 0 when it cannot be read (decoding reports it as an UNREADABLE row)."""
    try:
        return Path(file.path).stat().st_size
    except OSError:
        return 0
