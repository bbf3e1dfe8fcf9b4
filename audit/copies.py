"""A node's copies of batches as the merge reads them: Arrow columns, in offset order.

Of every batch a node holds and did not replace itself (its walk's rewinds), the merge needs
the batch's identity (offsets, epoch, CRC), what the report says of it, and where the copy is:
file, position, and frame (its place among the file's frames, so that consecutive copies are
a range a replay reads in one go). In offset order, each node's copies are a stream; the merge
reads the nodes' streams together a group of copies at one offset at a time, so it holds a few
copies per node, never the history (``raftka.audit.merge.merge_streams``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from functools import reduce
from pathlib import Path
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
ORDER = [("base", "ascending"), ("order", "ascending")]  # of a node's copies
READ_ROWS = 4_096  # copies the merge holds in Python at a time from each node's file
ROW_GROUP_ROWS = 65_536  # and in Arrow: a node's file is read a row group at a time


Voters = tuple[int, int, list[int]] | None  # (epoch, order, voters) of a LeaderChange: ``newest_voters``


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


class Replaced:
    """Which copies a node replaced itself: a copy is replaced when a later file of its node
    starts at or below its last offset (``rewinds``: (file_seq, offset), from its walk)."""

    def __init__(self, rewinds: Sequence[tuple[int, int]]) -> None:
        self._seqs: np.ndarray | None = None
        if rewinds:
            seqs, offsets = zip(*sorted(rewinds), strict=True)
            self._seqs = np.array(seqs, dtype=np.int64)
            # the lowest rewind offset of the files after each: what replaces a copy of an earlier file
            ends = np.array(offsets + (np.iinfo(np.int64).max,), dtype=np.int64)
            self._after = np.minimum.accumulate(ends[::-1])[::-1]

    def kept(self, copies: pa.Table) -> pa.Table:
        """``copies`` less those replaced, in the order given."""
        if self._seqs is None:
            return copies
        starts = np.searchsorted(self._seqs, copies["file_seq"].to_numpy(), side="right")
        return copies.filter(pa.array(copies["last"].to_numpy() < self._after[starts]))


def effective(copies: pa.Table, rewinds: Sequence[tuple[int, int]]) -> pa.Table:
    """The copies their node did not replace (``Replaced``), by offset then order."""
    return Replaced(rewinds).kept(copies).sort_by(ORDER)


def write_effective(
    walked: Path, rewinds: Sequence[tuple[int, int]], path: Path, rows_per_group: int
) -> Voters:
    """What ``effective`` gives of the copies in ``walked`` (a node's, in the order its walk met
    them), written to ``path`` without holding them: a node's log in the order it was written
    is in offset order once its replaced copies are gone, so only the copies that break that
    order (a batch at or below one before it: damage within a file, which the walk reports)
    are held, sorted, and merged in, a row group at a time. The newest voters among them
    (``newest_voters``)."""
    replaced, strays, newest = Replaced(rewinds), [], None
    in_order = path.parent / f".{path.name}.{os.getpid()}.in-order"  # a task's attempts may overlap
    top = np.iinfo(np.int64).min  # the highest base offset met so far
    with pq.ParquetWriter(in_order, COPY_SCHEMA) as writer:
        source = pq.ParquetFile(walked)
        for group in range(source.num_row_groups):
            copies = replaced.kept(source.read_row_group(group))
            if not copies.num_rows:
                continue
            newest = _newer(newest, newest_voters(copies))
            bases = copies["base"].to_numpy()
            ahead = bases > np.maximum.accumulate(np.concatenate([[top], bases[:-1]]))
            if ahead.any():
                writer.write_table(copies.filter(pa.array(ahead)), rows_per_group)
            if not ahead.all():
                strays.append(copies.filter(pa.array(~ahead)))
            top = max(top, int(bases.max()))
    if not strays:
        os.replace(in_order, path)
        return newest
    partial = path.parent / f".{path.name}.{os.getpid()}.partial"
    with pq.ParquetWriter(partial, COPY_SCHEMA) as writer:
        for merged in _merged(pq.ParquetFile(in_order), pa.concat_tables(strays).sort_by(ORDER)):
            writer.write_table(merged, rows_per_group)
    os.replace(partial, path)
    in_order.unlink()
    return newest


def _merged(in_order: pq.ParquetFile, strays: pa.Table) -> Iterator[pa.Table]:
    """``in_order``'s copies (strictly increasing base offsets) with ``strays`` (sorted) among
    them, in ``ORDER``, a row group at a time: each group with the strays up to its last base."""
    bases, taken = strays["base"].to_numpy(), 0
    for group in range(in_order.num_row_groups):
        copies = in_order.read_row_group(group)
        if not copies.num_rows:
            continue
        upto = int(np.searchsorted(bases, copies["base"][-1].as_py(), side="right"))
        yield pa.concat_tables([copies, strays.slice(taken, upto - taken)]).sort_by(ORDER)
        taken = upto
    if taken < strays.num_rows:
        yield strays.slice(taken)


def newest_voters(copies: pa.Table) -> Voters:
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


def _newer(a: Voters, b: Voters) -> Voters:
    """The newer of two ``newest_voters``: the higher epoch, then the first in order."""
    named = [f for f in (a, b) if f is not None]
    return max(named, key=lambda f: (f[0], -f[1])) if named else None


def voters_of(found: Iterable[Voters]) -> list[int]:
    """The voters of the newest LeaderChange of all nodes' ``newest_voters``."""
    newest = reduce(_newer, found, None)
    return sorted(newest[2]) if newest is not None else []


def rows(copies: pa.Table) -> Iterator[Copy]:
    for batch in copies.to_batches(READ_ROWS):
        yield from map(Copy._make, zip(*(column.to_pylist() for column in batch.columns), strict=True))


def read(path: str) -> Iterator[Copy]:
    """The copies a node's task wrote to ``path``, a row group at a time: ``iter_batches``
    holds on to what it read (410 MiB of Arrow memory after a file of ten million copies)."""
    copies = pq.ParquetFile(path)
    for group in range(copies.num_row_groups):
        yield from rows(copies.read_row_group(group))
