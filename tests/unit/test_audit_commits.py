"""Offset-commit series folded per piece and joined in piece order: any cut of the history
gives what the window over every commit in offset order gives, and each group's committed
offsets over time as summed from every commit so far (both written out plainly here), joined
as Spark's tasks join the folds the pieces wrote (``join_folds``) and as the driver did
(``commits_reference``, the oracle of ``tests/spark/test_commit_job.py``)."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from raftka.audit.commits import (
    COMMIT,
    FOLD_ORDER,
    PROGRESS_BUCKETS,
    SERIES_KEY,
    STALL_COMMITS,
    committed_over_time,
    fold,
    fold_table,
    join_folds,
)
from raftka.audit.counts import bucket_ms
from raftka.audit.pieces import CANONICAL_SCHEMA
from raftka.audit.schema import to_batch
from tests.unit.commits_reference import combine

KEYS = [("g1", "t1", 0), ("g1", "t1", 1), ("g2", "t1", 0)]


def _canonical(commits: list[tuple[int, int, int | None]], other_every: int) -> list[tuple[Any, ...]]:
    """Canonical rows, one batch per record, with a NoOp every ``other_every`` records."""
    rows = []
    for offset, (key, timestamp_ms, committed) in enumerate(commits):
        group, topic_id, partition = KEYS[key]
        kind = "NO_OP_RECORD" if offset % other_every == 0 else COMMIT
        rows.append(
            (offset, offset, 1, timestamp_ms, kind, None, None, topic_id, partition, group, committed)
        )
    return rows


def _window(rows: list[tuple[Any, ...]], skipped: set[int]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Each series' row as the SQL window computes it: lag over offset, NULLs compare with nothing."""
    series: dict[tuple[Any, ...], list[tuple[int, int | None]]] = {}
    for _, batch, _, ms, kind, _, _, topic_id, partition, group, committed in rows:
        if kind == COMMIT and batch not in skipped:
            series.setdefault((group, topic_id, partition), []).append((ms, committed))
    out = {}
    for key, commits in series.items():
        steps = list(zip(commits, commits[1:], strict=False))
        known = [(p, c) for (_, p), (_, c) in steps if p is not None and c is not None]
        gaps = [b - a for (a, _), (b, _) in steps]
        rewound = [p - c for p, c in known if c < p]
        values = [committed for _, committed in commits]
        moved = [values[i] != values[i - 1] for i in range(max(1, len(values) - STALL_COMMITS), len(values))
                 if values[i] is not None and values[i - 1] is not None]  # fmt: skip
        out[key] = (*key, len(commits), commits[0][1], commits[-1][1], min(ms for ms, _ in commits),
                    max(ms for ms, _ in commits), len(rewound), sum(rewound) if rewound else None,
                    sum(1 for p, c in known if c == p), max(gaps) if gaps else None,
                    sum(gaps) / len(gaps) if gaps else None, sum(moved))  # fmt: skip
    return out


commit = st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 10_000), st.none() | st.integers(0, 6))


@given(
    commits=st.lists(commit, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=5),
    skipped=st.sets(st.integers(0, 60), max_size=5),
    other_every=st.integers(2, 7),
    batch_rows=st.integers(1, 4),
)
def test_any_cut_into_pieces_gives_the_window_over_all_commits(
    commits: list[tuple[int, int, int | None]], cuts: list[int], skipped: set[int], other_every: int,
    batch_rows: int,
) -> None:  # fmt: skip
    rows = _canonical(commits, other_every)
    bounds = [0, *sorted(cuts), len(rows)]
    pieces = [
        fold(to_batch(rows[a:b], CANONICAL_SCHEMA), skipped) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    sorted_folds = pa.concat_tables(
        [fold_table(piece.series, 0, chunk) for chunk, piece in enumerate(pieces)]
    ).sort_by([(name, "ascending") for name in (*SERIES_KEY, *FOLD_ORDER)])
    joined = [
        tuple(row.values())
        for batch in join_folds(sorted_folds.to_batches(max_chunksize=batch_rows))
        for row in batch.to_pylist()
    ]
    assert {row[:3]: row for row in joined} == _window(rows, skipped)
    assert len(joined) == len(_window(rows, skipped))  # one row per series, however the batches cut them
    combined = {row[:3]: row for row in combine(pieces, 1000).rows}
    assert combined == _window(rows, skipped)


def test_a_series_travels_pickled_as_its_values() -> None:
    rows = _canonical([(0, 10, 5), (0, 20, 3), (1, 30, None), (0, 40, 3)], 1 << 30)
    [(key, series)] = [
        item for item in fold(to_batch(rows, CANONICAL_SCHEMA), set()).series.items() if item[0] == KEYS[0]
    ]
    assert pickle.loads(pickle.dumps(series)).row(key) == series.row(key) == _window(rows, set())[key]


def _committed_sums(rows: list[tuple[Any, ...]], skipped: set[int], width: int) -> list[tuple[str, int, int]]:
    """Per group, at the end of each bucket it committed in: the sum over its partitions of
    the offset each committed last (a NULL counts as 0)."""
    kept = [r for r in rows if r[4] == COMMIT and r[1] not in skipped]
    out = []
    for group in sorted({r[9] for r in kept}):
        mine = [r for r in kept if r[9] == group]
        for bucket in sorted({r[3] // width * width for r in mine}):
            last = {(r[7], r[8]): r[10] or 0 for r in mine if r[3] // width * width <= bucket}
            out.append((group, bucket, sum(last.values())))
    return out


@given(
    commits=st.lists(commit, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=5),
    skipped=st.sets(st.integers(0, 60), max_size=5),
    spread_ms=st.sampled_from([1, 1_000, 100_000]),
)
def test_any_cut_into_pieces_gives_each_groups_committed_offsets_over_time(
    commits: list[tuple[int, int, int | None]], cuts: list[int], skipped: set[int], spread_ms: int
) -> None:
    times = sorted(ms * spread_ms for _, ms, _ in commits)  # batch times go forward with offsets
    rows = _canonical([(key, ms, c) for (key, _, c), ms in zip(commits, times, strict=True)], 1 << 30)
    width = bucket_ms(min(times, default=0), max(times, default=0), PROGRESS_BUCKETS)
    bounds = [0, *sorted(cuts), len(rows)]
    pieces = [
        fold(to_batch(rows[a:b], CANONICAL_SCHEMA), skipped) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    assert committed_over_time(combine(pieces, width).progress) == _committed_sums(rows, skipped, width)
