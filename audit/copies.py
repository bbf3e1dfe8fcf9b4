"""A node's copies of batches as the merge reads them: Arrow columns, in offset order.

Of every batch a node holds and did not replace itself (its walk's rewinds), the merge needs
the batch's identity (offsets, epoch, CRC), what the report says of it, and where the copy is:
file, position, and frame (its place among the file's frames, so that consecutive copies are
a range a replay reads in one go). In offset order, each node's copies are a stream; the merge
reads the nodes' streams together a group of copies at one offset at a time, so it holds a few
copies per node, never the history (``raftka.audit.merge.merge_streams``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raftka.audit.decode import LEADER_CHANGE, SNAPSHOT_KIND
from raftka.audit.schema import Row

COPY_SCHEMA = pa.schema([("base", pa.int64()), ("last", pa.int64()), ("epoch", pa.int64()), ("crc", pa.int64()),
                         ("kind", pa.string()), ("type", pa.string()), ("leader", pa.int64()),
                         ("timestamp_ms", pa.int64()), ("voters", pa.list_(pa.int64())), ("node", pa.string()),
                         ("file_seq", pa.int64()), ("position", pa.int64()), ("frame", pa.int64()),
                         ("order", pa.int64())])  # fmt: skip
ORDER_FILE_SHIFT = 40  # a copy's order: its file's place in the input << 40 | its position in it
READ_ROWS = 4_096  # copies the merge holds in Python at a time from each node's file
ROW_GROUP_ROWS = 65_536  # and in Arrow: a node's file is read a row group at a time


class Copy(NamedTuple):
    base: int
    last: int
    epoch: int
    crc: int
    kind: str
    type: str | None
    leader: int | None
    timestamp_ms: int | None
    voters: list[int] | None  # a LeaderChange's
    node: str
    file_seq: int
    position: int
    frame: int
    order: int  # where the heads come in the input: which of two equal candidates the merge meets first


def is_copy(head: Row) -> bool:
    """A batch of the log: not damage, not a snapshot."""
    return head.batch_offset is not None and head.kind != SNAPSHOT_KIND


def copy_of(head: Row, frame: int, order: int) -> tuple[Any, ...]:
    """A ``Copy``'s fields for ``head`` (``is_copy``)."""
    voters = head.voters if head.type == LEADER_CHANGE else None
    return (head.batch_offset, head.batch_offset + head.batch_records - 1, head.epoch, head.batch_crc, head.kind,
            head.type, head.leader, head.timestamp_ms, voters, head.node, head.file_seq, head.position, frame,
            order)  # fmt: skip


def effective(copies: pa.Table, rewinds: Sequence[tuple[int, int]]) -> pa.Table:
    """The copies their node did not replace, by offset then order: a copy is replaced when a
    later file of its node starts at or below its last offset (``rewinds``: (file_seq, offset))."""
    if rewinds:
        seqs, offsets = zip(*sorted(rewinds), strict=True)
        # the lowest rewind offset of the files after each: what replaces a copy of an earlier file
        after = np.minimum.accumulate(np.array(offsets + (np.iinfo(np.int64).max,), dtype=np.int64)[::-1])[
            ::-1
        ]
        starts = np.searchsorted(np.array(seqs, dtype=np.int64), copies["file_seq"].to_numpy(), side="right")
        copies = copies.filter(pa.array(copies["last"].to_numpy() < after[starts]))
    return copies.sort_by([("base", "ascending"), ("order", "ascending")])


def newest_voters(copies: pa.Table) -> tuple[int, int, list[int]] | None:
    """(epoch, order, voters) of the LeaderChange of the highest epoch that names voters, the
    first in order of those: the voter set the merge counts a majority of."""
    named = copies.filter(
        pc.and_(
            pc.equal(copies["type"], LEADER_CHANGE), pc.greater(pc.list_value_length(copies["voters"]), 0)
        )
    )
    if not named.num_rows:
        return None
    top = named.sort_by([("epoch", "descending"), ("order", "ascending")]).slice(0, 1).to_pylist()[0]
    return top["epoch"], top["order"], top["voters"]


def voters_of(found: Iterable[tuple[int, int, list[int]] | None]) -> list[int]:
    """The voters of the newest LeaderChange of all nodes' ``newest_voters``."""
    named = [f for f in found if f is not None]
    return sorted(max(named, key=lambda f: (f[0], -f[1]))[2]) if named else []


def rows(copies: pa.Table) -> Iterator[Copy]:
    for batch in copies.to_batches(READ_ROWS):
        yield from map(Copy._make, zip(*(column.to_pylist() for column in batch.columns), strict=True))


def read(path: str) -> Iterator[Copy]:
    """The copies a node's task wrote to ``path``, a row group at a time: ``iter_batches``
    holds on to what it read (410 MiB of Arrow memory after a file of ten million copies)."""
    copies = pq.ParquetFile(path)
    for group in range(copies.num_row_groups):
        yield from rows(copies.read_row_group(group))
