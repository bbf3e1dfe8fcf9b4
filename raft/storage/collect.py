"""Copy a node's metadata log files somewhere else, read-only, with a manifest of checksums.

For audits on another machine (a Spark cluster reads the copies): every segment and
snapshot, live and archived, plus ``meta.properties`` (it names the node), laid out as a
data dir so the copy reads like the original. Safe on a running node: files are only
read; a segment being appended may be caught mid-write, which a reader sees as a torn
last batch. Each copy is written to a temporary name, fsynced and renamed, then made
read-only; ``MANIFEST.json`` lists every file with its size and SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from raftka.raft.storage import fsio, layout
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.meta import META_PROPERTIES, read_meta

MANIFEST = "MANIFEST.json"
READ_ONLY = 0o444


def collect(data_dir: Path, out: Path) -> dict[str, Any]:
    """Copy ``data_dir``'s history into ``out/node-<id>/``; returns the manifest."""
    meta = read_meta(data_dir)
    target = out / f"node-{meta.node_id}"
    if target.exists():
        raise StorageError(
            f"{target} exists: node {meta.node_id} was collected there already; use another --out"
        )
    files = layout.history_files(data_dir)
    if not files:
        raise StorageError(f"no segment or snapshot files in {layout.log_dir(data_dir)}")
    entries = [_copy(data_dir / META_PROPERTIES, target / "data" / META_PROPERTIES, target)]
    for path in files:
        relative = path.relative_to(data_dir)
        entries.append(_copy(path, target / "data" / relative, target))
    manifest = {
        "node_id": meta.node_id,
        "cluster_id": meta.cluster_id,
        "source": str(data_dir.absolute()),
        "collected_ms": time.time_ns() // 1_000_000,
        "files": entries,
    }
    fsio.write_atomically(
        target / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode(), temp_suffix=layout.TMP_SUFFIX
    )
    return manifest


def _copy(source: Path, destination: Path, root: Path) -> dict[str, Any]:
    data = source.read_bytes()
    destination.parent.mkdir(parents=True, exist_ok=True)
    fsio.write_atomically(destination, data, temp_suffix=layout.TMP_SUFFIX)
    os.chmod(destination, READ_ONLY)
    return {
        "path": destination.relative_to(root).as_posix(),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
