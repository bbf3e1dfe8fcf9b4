"""Each node's walk as a Spark task, and the merge of what they wrote: the audit's driver
holds no batch of the history.

A node's log is walked in the order it was written (``raftka.audit.walk``), so one task per
node reads that node's files, archive first, a file's heads at a time. What the merge needs of
them, the copies the node did not replace itself, it writes in offset order to a Parquet file
(``raftka.audit.copies``); what it returns is small: the walk's violations, the snapshots, the
newest voter set, and what it could not read. The driver then merges the nodes' files as
streams (``raftka.audit.merge.merge_streams``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from raftka.audit import copies
from raftka.audit.copies import (
    COPY_SCHEMA,
    ORDER_FILE_SHIFT,
    ROW_GROUP_ROWS,
    copy_of,
    is_copy,
    write_effective,
)
from raftka.audit.decode import SNAPSHOT_KIND, UNREADABLE
from raftka.audit.files import LogFile
from raftka.audit.merge import MergeResult, merge_streams
from raftka.audit.schema import to_batch
from raftka.audit.walk import Head, check_readable, read_heads, walk_node


def node_groups(files: Sequence[LogFile]) -> list[list[tuple[int, LogFile]]]:
    """Each node's files in history order, each with its place in ``files``; nodes by name."""
    return [
        sorted(((place, f) for place, f in enumerate(files) if f.node == node), key=lambda p: p[1].seq)
        for node in sorted({f.node for f in files})
    ]


def walk_files(files: Sequence[tuple[int, LogFile]], folder: str) -> dict[str, Any]:
    """One node's walk (``node_groups``), its copies written to ``folder``: a Spark task."""
    heads = ((place, map(Head._make, read_heads([file]))) for place, file in files)
    return walk_heads(heads, Path(folder) / f"copies-{files[0][0]:06d}.parquet")  # named by its first file


def walk_heads(
    files: Iterable[tuple[int, Iterable[Head]]], path: Path, rows_per_group: int = ROW_GROUP_ROWS
) -> dict[str, Any]:
    """Walk one node's heads, a file's at a time in history order with the file's place in
    the input. Returns the walk's ``violations``; ``snapshots`` (node, file_seq, offset) of its
    readable snapshot files; ``voters`` (``copies.newest_voters``); ``copies``, the path of
    the copies it wrote (to ``path``, ``rows_per_group`` at a time); ``unreadable``: (place,
    head) of each file it could not read (the walk is then not to be used:
    ``walk.check_readable``). It holds a row group of copies at a time (and a file's heads,
    as read): they go to a file in the order met, and from there to ``path`` in offset order
    (``copies.write_effective``)."""
    unreadable: list[tuple[int, tuple[Any, ...]]] = []
    snapshots: list[tuple[str, int, int]] = []
    found: list[tuple[Any, ...]] = []
    path.parent.mkdir(parents=True, exist_ok=True)
    met = path.parent / f".{path.name}.{os.getpid()}.met"  # a task's attempts may overlap

    def heads(writer: pq.ParquetWriter) -> Iterator[Head]:
        for place, file_heads in files:
            for frame, head in enumerate(file_heads):
                if head.type == UNREADABLE:
                    unreadable.append((place, tuple(head)))
                    continue
                if is_copy(head):
                    found.append(copy_of(head, frame, place << ORDER_FILE_SHIFT | head.position))
                    if len(found) == rows_per_group:
                        writer.write_batch(to_batch(found, COPY_SCHEMA))
                        found.clear()
                elif head.kind == SNAPSHOT_KIND and head.batch_offset is not None:
                    snapshots.append((head.node, head.file_seq, head.offset))
                yield head

    with pq.ParquetWriter(met, COPY_SCHEMA) as writer:
        walked = walk_node(heads(writer))
        if found:
            writer.write_batch(to_batch(found, COPY_SCHEMA))
    voters = write_effective(met, walked.rewinds, path, rows_per_group)
    met.unlink()
    return {
        "violations": walked.violations,
        "snapshots": snapshots,
        "voters": voters,
        "copies": str(path),
        "unreadable": unreadable,
    }


def merge_walked(
    walked: Sequence[dict[str, Any]], files: int
) -> tuple[list[dict[str, Any]], list[tuple[str, int, int]], MergeResult]:
    """The walks' and the merge's violations, the snapshots, and the merge of the nodes'
    copies, from every node's ``walk_heads`` (in ``node_groups`` order) of ``files`` files."""
    unreadable = sorted((u for w in walked for u in w["unreadable"]), key=lambda u: u[0])
    check_readable([Head._make(head) for _, head in unreadable], files)
    snapshots = [s for w in walked for s in w["snapshots"]]
    merged = merge_streams(
        [copies.read(w["copies"]) for w in walked],
        copies.voters_of(w["voters"] for w in walked),
        [offset for _, _, offset in snapshots],
    )
    return [v for w in walked for v in w["violations"]] + merged.violations, snapshots, merged
