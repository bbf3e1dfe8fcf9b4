"""The driver-side join of the replay's commit folds the audit job used before Spark tasks
joined them (``raftka.audit.commit_job``): kept only as the oracle the Spark join is checked
against."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import pyarrow as pa

from raftka.audit.commits import SERIES_KEY, Folded, Key, Progress, Series


class Combined(NamedTuple):
    rows: list[tuple[Any, ...]]  # one per series, SERIES_SCHEMA
    progress: Progress  # at the width ``combine`` was given


def combine(pieces: Iterable[Folded], width: int) -> Combined:
    """One row per series (``SERIES_SCHEMA``) from the pieces' folds, given in piece order,
    and the groups' progress at ``width`` (a multiple of every piece's bucket width)."""
    whole: dict[Key, Series] = {}
    moved: dict[tuple[int, str], int] = {}
    for piece in pieces:
        for row in piece.progress.to_pylist():
            key = (row["bucket_ms"] // width * width, row["group"])
            moved[key] = moved.get(key, 0) + row["moved"]
        for key, part in piece.series.items():
            found = whole.get(key)
            if found is None:
                whole[key] = part
                continue
            if found.last:  # the piece counted this series from zero: from where it stood instead
                at = (part.first_ms // width * width, key[0])
                moved[at] = moved.get(at, 0) - found.last
            found.then(part)
    progress = [(bucket, group, by) for (bucket, group), by in moved.items()]
    return Combined([series.row(key) for key, series in whole.items()], progress)


def unfold(table: pa.Table, progress: pa.Table) -> Folded:
    """A chunk's fold as the driver got it before, from the tables the piece wrote
    (``fold_table``, and its progress)."""
    rows = table.to_pylist()
    return Folded(
        {tuple(r[k] for k in SERIES_KEY): Series([r[k] for k in Series.__slots__]) for r in rows}, progress
    )
