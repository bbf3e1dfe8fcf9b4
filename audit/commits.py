"""Burrow's evaluation of offset commits, and each group's progress over time, computed where
the replay already reads them.

Each replay piece sees its offset commits in log order, a chunk at a time: it folds each
chunk's into one ``Series`` per (group, topic_id, partition) and writes the folds as Parquet
(``fold_table``); Spark tasks join each series' folds in order (``join_folds``: pieces and
their chunks are consecutive ranges of the history), which gives exactly what a window over
all commits ordered by offset gives, without Spark shuffling and sorting every commit of the
history, and without the driver holding a series (``raftka.audit.commit_job``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raftka.audit.counts import bucket_ms
from raftka.audit.schema import to_batch

STALL_COMMITS = 3  # a partition whose last this many commits did not move is stalled (Burrow)
COMMIT = "OFFSET_COMMIT_RECORD"
# One row per series: the columns ``raftka.audit.tables.group_offsets`` starts from.
SERIES_SCHEMA = pa.schema([
    ("group", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()), ("commits", pa.int64()),
    ("first_offset", pa.int64()), ("last_offset", pa.int64()), ("first_ms", pa.int64()), ("last_ms", pa.int64()),
    ("rewinds", pa.int64()), ("rewound_by", pa.int64()), ("stalled_commits", pa.int64()),
    ("max_gap_ms", pa.int64()), ("mean_gap_ms", pa.float64()), ("recent_moves", pa.int64()),
])  # fmt: skip

SERIES_KEY = ["group", "topic_id", "partition"]
FOLD_ORDER = ["piece", "chunk"]  # a series' folds join in this order
# One row per series of a chunk: the key, where the chunk is in the history, ``Series.__slots__``.
FOLD_SCHEMA = pa.schema([
    *(SERIES_SCHEMA.field(name) for name in SERIES_KEY), ("piece", pa.int32()), ("chunk", pa.int32()),
    ("commits", pa.int64()), ("first", pa.int64()), ("first_ms", pa.int64()), ("last", pa.int64()),
    ("last_ms", pa.int64()), ("min_ms", pa.int64()), ("max_ms", pa.int64()), ("rewinds", pa.int64()),
    ("rewound_by", pa.int64()), ("stalled", pa.int64()), ("max_gap", pa.int64()), ("gap_sum", pa.int64()),
    ("tail", pa.list_(pa.int64())),
])  # fmt: skip
PROGRESS_BUCKETS = 200  # the consumer-progress chart's buckets across the history
# What a group's commits moved its partitions' committed offsets by, per time bucket.
PROGRESS_SCHEMA = pa.schema([("bucket_ms", pa.int64()), ("group", pa.string()), ("moved", pa.int64())])
Key = tuple[Any, Any, Any]  # group, topic_id, partition
# (bucket start ms, group, what the group's commits in it moved its partitions' offsets by)
Progress = list[tuple[int, str, int]]


class Folded(NamedTuple):
    """One chunk's commits: a series per partition of a group, and the groups' progress
    (``PROGRESS_SCHEMA``) bucketed at the chunk's own width (``bucket_ms``: Spark re-buckets
    it exactly, ``raftka.audit.job``)."""

    series: dict[Key, Series]
    progress: pa.Table


def fold_table(series: dict[Key, Series], piece: int, chunk: int) -> pa.Table:
    """A chunk's series (``FOLD_SCHEMA``), chunk ``chunk`` of piece ``piece``."""
    rows = [
        (*key, piece, chunk, *(getattr(part, name) for name in Series.__slots__))
        for key, part in series.items()
    ]
    return pa.Table.from_batches([to_batch(rows, FOLD_SCHEMA)])


def join_folds(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One row per series (``SERIES_SCHEMA``) from folds (``FOLD_SCHEMA``) sorted by
    ``SERIES_KEY`` then ``FOLD_ORDER``: each series' folds joined in history order, as a run
    of consecutive rows that may cross batches."""
    key: Key | None = None
    whole: Series | None = None
    slots = len(SERIES_KEY) + len(FOLD_ORDER)
    for batch in batches:
        rows = []
        for values in zip(*(batch.column(name).to_pylist() for name in FOLD_SCHEMA.names), strict=True):
            here, part = values[: len(SERIES_KEY)], Series(values[slots:])
            if whole is not None and here == key:
                whole.then(part)
                continue
            if whole is not None:
                rows.append(whole.row(key))  # type: ignore[arg-type]
            key, whole = here, part
        if rows:
            yield to_batch(rows, SERIES_SCHEMA)
    if whole is not None:
        yield to_batch([whole.row(key)], SERIES_SCHEMA)  # type: ignore[arg-type]


class Series:
    """The commits of one partition of one group so far, in offset order. ``committed`` may be
    None (SQL's NULL): it then compares with nothing, as in the window it replaces."""

    __slots__ = ("commits", "first", "first_ms", "last", "last_ms", "min_ms", "max_ms", "rewinds", "rewound_by",
                 "stalled", "max_gap", "gap_sum", "tail")  # fmt: skip

    def __init__(self, values: Sequence[Any]) -> None:
        (self.commits, self.first, self.first_ms, self.last, self.last_ms, self.min_ms, self.max_ms, self.rewinds,
         self.rewound_by, self.stalled, self.max_gap, self.gap_sum, self.tail) = values  # fmt: skip

    def __reduce__(self) -> tuple[type[Series], tuple[tuple[Any, ...]]]:
        """Pickled as its values: a piece hands back tens of thousands, and the default for a
        slotted object (a state dict per object) takes five times as long to load."""
        return Series, (tuple(getattr(self, name) for name in Series.__slots__),)

    def then(self, later: Series) -> None:
        """Append ``later``, the same series' commits in the next piece."""
        self._step(self.last, self.last_ms, later.first, later.first_ms)
        self.commits += later.commits
        self.last, self.last_ms = later.last, later.last_ms
        self.min_ms, self.max_ms = min(self.min_ms, later.min_ms), max(self.max_ms, later.max_ms)
        self.rewinds += later.rewinds
        self.stalled += later.stalled
        self.gap_sum += later.gap_sum
        self.rewound_by = _plus(self.rewound_by, later.rewound_by)
        if later.max_gap is not None:  # ours is set: the step between the pieces made a gap
            self.max_gap = max(self.max_gap, later.max_gap)  # type: ignore[type-var]
        self.tail = (self.tail + later.tail)[-(STALL_COMMITS + 1) :]

    def _step(self, previous: int | None, previous_ms: int, committed: int | None, timestamp_ms: int) -> None:
        gap = timestamp_ms - previous_ms
        self.max_gap = gap if self.max_gap is None else max(self.max_gap, gap)
        self.gap_sum += gap
        if committed is None or previous is None:
            return
        if committed < previous:
            self.rewinds += 1
            self.rewound_by = _plus(self.rewound_by, previous - committed)
        elif committed == previous:
            self.stalled += 1

    def row(self, key: Key) -> tuple[Any, ...]:
        gaps = self.commits - 1
        tail = self.tail
        moves = sum(
            1
            for i in range(max(1, len(tail) - STALL_COMMITS), len(tail))
            if tail[i] is not None and tail[i - 1] is not None and tail[i] != tail[i - 1]
        )
        return (*key, self.commits, self.first, self.last, self.min_ms, self.max_ms, self.rewinds, self.rewound_by,
                self.stalled, self.max_gap, self.gap_sum / gaps if gaps else None, moves)  # fmt: skip


def _plus(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def fold(canonical: pa.RecordBatch, skipped: set[int]) -> Folded:
    """The series of the offset commits among ``canonical`` rows (``CANONICAL_SCHEMA``, in
    offset order), leaving out those of batches the replay skipped (based at ``skipped``),
    and the groups' progress: a piece's million commits in a few array passes, not a
    Python step per commit."""
    table = pa.Table.from_batches([canonical])
    keep = pc.equal(table["type"], COMMIT)
    if skipped:
        keep = pc.and_(
            keep, pc.invert(pc.is_in(table["batch_offset"], pa.array(sorted(skipped), pa.int64())))
        )
    commits = table.filter(keep)
    if not commits.num_rows:
        return Folded({}, PROGRESS_SCHEMA.empty_table())
    # each series' rows in offset order: the single-threaded group-by lists them as it meets them
    rows = pa.array(np.arange(commits.num_rows, dtype=np.int64))
    grouped = (
        commits.select(SERIES_KEY).append_column("row", rows).group_by(SERIES_KEY, use_threads=False)
        .aggregate([("row", "list")])
    )  # fmt: skip
    lists = grouped["row_list"].combine_chunks()
    order = lists.values.to_numpy()
    bounds = lists.offsets.to_numpy()
    starts, ends = bounds[:-1], bounds[1:]
    ms = commits["timestamp_ms"].to_numpy()[order]
    column = commits["committed_offset"]
    known = column.is_valid().to_numpy(zero_copy_only=False)[order]
    committed = column.fill_null(0).to_numpy()[order]
    step = np.ones(len(order), dtype=bool)  # a commit after another of its series
    step[starts] = False
    previous = np.roll(committed, 1)
    compared = step & known & np.roll(known, 1)  # SQL: a NULL compares with nothing
    rewind = compared & (committed < previous)
    gap = np.where(step, ms - np.roll(ms, 1), 0)
    columns = (
        ends - starts,
        np.add.reduceat(rewind.astype(np.int64), starts),
        np.add.reduceat(np.where(rewind, previous - committed, 0), starts),
        np.add.reduceat((compared & (committed == previous)).astype(np.int64), starts),
        np.maximum.reduceat(np.where(step, gap, np.iinfo(np.int64).min), starts),
        np.add.reduceat(gap, starts),
        np.minimum.reduceat(ms, starts),
        np.maximum.reduceat(ms, starts),
    )

    def at(positions: np.ndarray) -> list[int | None]:
        return [
            c if k else None
            for c, k in zip(committed[positions].tolist(), known[positions].tolist(), strict=True)
        ]

    firsts, lasts = at(starts), at(ends - 1)
    first_ms, last_ms = ms[starts].tolist(), ms[ends - 1].tolist()
    # the last STALL_COMMITS + 1 of each series (fewer in a shorter one), as consecutive runs
    tail_starts = np.maximum(starts, ends - STALL_COMMITS - 1)
    tails = at(
        np.concatenate([np.arange(a, b) for a, b in zip(tail_starts.tolist(), ends.tolist(), strict=True)])
    )
    tail_bounds = np.concatenate([[0], np.cumsum(ends - tail_starts)]).tolist()
    progress = _progress(grouped["group"], ends - starts, ms, committed - np.where(step, previous, 0))
    keys = zip(*(grouped[name].to_pylist() for name in SERIES_KEY), strict=True)
    series = {}
    for i, (key, (count, rewinds, rewound_by, stalled, max_gap, gap_sum, min_ms, max_ms)) in enumerate(
        zip(keys, zip(*(c.tolist() for c in columns), strict=True), strict=True)
    ):
        series[key] = Series((count, firsts[i], first_ms[i], lasts[i], last_ms[i], min_ms, max_ms, rewinds,
                              rewound_by if rewinds else None, stalled, max_gap if count > 1 else None, gap_sum,
                              tails[tail_bounds[i] : tail_bounds[i + 1]]))  # fmt: skip
    return Folded(series, progress)


def _progress(groups: pa.ChunkedArray, lengths: np.ndarray, ms: np.ndarray, moved: np.ndarray) -> pa.Table:
    """Per group and time bucket, what its commits moved its partitions' committed offsets
    by (a series' first commit in the piece counts from zero: ``raftka.audit.commit_job``
    takes back where the series stood). Its running sum is the sum of the group's committed offsets."""
    width = bucket_ms(int(ms.min()), int(ms.max()), PROGRESS_BUCKETS)
    rows = pa.table({
        "bucket_ms": ms // width * width, "group": groups.take(np.repeat(np.arange(len(lengths)), lengths)),
        "moved": moved,
    })  # fmt: skip
    summed = rows.group_by(["bucket_ms", "group"], use_threads=False).aggregate([("moved", "sum")])
    return summed.select(["bucket_ms", "group", "moved_sum"]).rename_columns(PROGRESS_SCHEMA.names).cast(
        PROGRESS_SCHEMA
    )


def committed_over_time(progress: Progress) -> list[tuple[str, int, int]]:
    """(group, bucket start ms, sum of the group's committed offsets at the bucket's end), in
    bucket order per group: the running sums of the groups' progress at one width."""
    out = []
    running: dict[str, int] = {}
    for bucket, group, by in sorted(progress, key=lambda p: (p[1], p[0])):
        running[group] = running.get(group, 0) + by
        out.append((group, bucket, running[group]))
    return out
