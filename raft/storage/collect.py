"""Copy a node's metadata log files somewhere else, read-only, with a manifest of checksums.

For audits on another machine (a Spark cluster reads the copies): every segment and
snapshot, live and archived, plus ``meta.properties`` (it names the node), laid out as a
data dir so the copy reads like the original. Safe on a running node: files are only
read; a segment being appended may be caught mid-write, which a reader sees as a torn
last batch, and a file the node archives or deletes between listing and reading is
looked for again in a new listing. The copy is built in a hidden staging folder beside
``node-<id>`` and renamed to it only once every file and ``MANIFEST.json`` (each file's
size and SHA-256) are fsynced, so ``node-<id>`` is complete or absent, and a failed
collect leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from raftka.raft.storage import fsio, layout
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.meta import META_PROPERTIES, read_meta

MANIFEST = "MANIFEST.json"
READ_ONLY = 0o444
MANIFEST_MODE = 0o644
FOLDER_MODE = 0o755  # the copies are for readers elsewhere, like the read-only files in them
LISTINGS_MAX = 5  # how often the history is listed when files keep vanishing before they are read


def collect(data_dir: Path, out: Path) -> dict[str, Any]:
    """Copy ``data_dir``'s history into ``out/node-<id>/``; returns the manifest."""
    meta = read_meta(data_dir)
    target = out / f"node-{meta.node_id}"
    if target.exists():
        raise _collected_already(target, meta.node_id)
    out.mkdir(parents=True, exist_ok=True)
    # a unique name: a staging folder left by a killed run, or one being written, is never ours
    staging = Path(tempfile.mkdtemp(prefix=f".node-{meta.node_id}.partial-{os.getpid()}-", dir=out))
    try:
        os.chmod(staging, FOLDER_MODE)
        meta_data = (data_dir / META_PROPERTIES).read_bytes()
        entries = [_write_copy(meta_data, Path(META_PROPERTIES), staging)]
        entries += _copy_history(data_dir, staging)
        manifest = {
            "node_id": meta.node_id,
            "cluster_id": meta.cluster_id,
            "source": str(data_dir.absolute()),
            "collected_ms": time.time_ns() // 1_000_000,
            "files": entries,
        }
        _write_new(staging / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode(), MANIFEST_MODE)
        _fsync_folders(staging)
        try:
            staging.rename(target)
        except OSError as exc:  # another collect of this node finished first
            raise _collected_already(target, meta.node_id) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsio.fsync_dir(out)
    return manifest


def _copy_history(data_dir: Path, staging: Path) -> list[dict[str, Any]]:
    """Copy every history file, listing again when one vanished before it was read.

    The node moves live files to ``archive/`` (same name, or a generation added) and deletes
    old archived ones, so a new listing finds a moved file where it is now. A file is known
    by its inode, which a move keeps, so one read before it moved is not copied again.
    """
    entries: list[dict[str, Any]] = []
    copied: set[tuple[int, int]] = set()
    for _ in range(LISTINGS_MAX):
        vanished = None
        for path in layout.history_files(data_dir):
            try:
                data = _read_unless_copied(path, copied)
            except FileNotFoundError:
                vanished = path
                break
            if data is not None:
                entries.append(_write_copy(data, path.relative_to(data_dir), staging))
        if vanished is None:
            if not entries:
                raise StorageError(f"no segment or snapshot files in {layout.log_dir(data_dir)}")
            return entries
    raise StorageError(
        f"{vanished} vanished before it could be read in each of {LISTINGS_MAX} listings of {data_dir}: "
        "the node moves or deletes its files faster than they are copied; try again"
    )


def _read_unless_copied(path: Path, copied: set[tuple[int, int]]) -> bytes | None:
    """The file's bytes, or None if its inode is in ``copied`` (read from another name); adds it."""
    with path.open("rb") as file:
        status = os.fstat(file.fileno())
        inode = (status.st_dev, status.st_ino)
        if inode in copied:
            return None
        copied.add(inode)
        return file.read()


def _write_copy(data: bytes, relative: Path, staging: Path) -> dict[str, Any]:
    """Write ``data`` read-only at ``relative`` in the copy's data dir; returns its manifest entry."""
    destination = staging / "data" / relative
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write_new(destination, data, READ_ONLY)
    except FileExistsError as exc:
        raise StorageError(
            f"{relative} was copied already, and now names another file: the node rewrote its log "
            "while it was copied; try again"
        ) from exc
    return {
        "path": destination.relative_to(staging).as_posix(),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` (never over another file) with ``data`` and ``mode``, and fsync it.

    Its folder is fsynced later, with every other folder of the copy, before the rename.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fsio.write_all(fd, data)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folders(root: Path) -> None:
    """fsync every folder under ``root``, deepest first, so every name in the copy is durable."""
    for folder, _, _ in os.walk(root, topdown=False):
        fsio.fsync_dir(Path(folder))


def _collected_already(target: Path, node_id: int) -> StorageError:
    return StorageError(f"{target} exists: node {node_id} was collected there already; use another --out")
