"""The audit's ordered steps without Spark: decode, walk each node, merge, replay.

The Spark job runs these same functions: the walks in a task per node, the merge on its
driver over the copies they wrote, the replay in pieces on its tasks; here they run in one process, which is what the JVM-free
tests check and what a small history needs. Tables that Spark computes with window
functions are not built here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from raftka.audit.decode import decode_file
from raftka.audit.files import SEGMENT, discover
from raftka.audit.merge import ChosenRun, MergeResult, merge
from raftka.audit.replay import Row as ReplayRow
from raftka.audit.replay import event_dicts, replay_order, replay_row
from raftka.audit.schema import Row
from raftka.audit.walk import Head, check_readable, is_head, walk_node


@dataclass
class PlainAudit:
    rows: list[Row]
    merged: MergeResult
    violations: list[dict[str, Any]]  # the walks' and the merge's
    events: list[dict[str, Any]]  # the replay's

    @property
    def all_violations(self) -> list[dict[str, Any]]:
        return self.violations + [e for e in self.events if e["event"] == "VIOLATION"]


def audit_paths(paths: Sequence[str | Path]) -> PlainAudit:
    files = discover(paths)
    rows = [row for file in files for row in decode_file(file, with_json=True)]
    heads = [row for row in rows if is_head(row)]
    check_readable(heads, len(files))
    violations, merged = walk_and_merge(heads)
    return PlainAudit(
        rows, merged, violations, event_dicts(sorted(replay_input(rows, merged), key=replay_order))
    )


def walk_and_merge(heads: Sequence[Head | Row]) -> tuple[list[dict[str, Any]], MergeResult]:
    """Every node's walk, then the merge of their copies: their violations, and the merge."""
    violations: list[dict[str, Any]] = []
    rewinds: dict[str, list[tuple[int, int]]] = {}
    for node, node_heads in groupby(sorted(heads, key=head_order), key=lambda r: r.node):
        walked = walk_node(node_heads)
        violations += walked.violations
        rewinds[node] = walked.rewinds
    merged = merge(heads, rewinds)
    return violations + merged.violations, merged


def head_order(row: Row) -> tuple[Any, ...]:
    """A node's heads in history order: by node, file, then position (a snapshot has none)."""
    return (row.node, row.file_seq, row.position if row.position is not None else -1)


def replay_input(rows: Sequence[Row], merged: MergeResult) -> list[ReplayRow]:
    """The chosen copy of every canonical batch, and every snapshot's records."""
    chosen = in_chosen(merged.chosen)
    return [
        replay_row(row)
        for row in rows
        if row.batch_offset is not None and (row.source != SEGMENT or chosen(row))
    ]


def in_chosen(chosen: Sequence[ChosenRun]) -> Callable[[Row], bool]:
    """Whether a segment's row is of a chosen copy: in the frames of a chosen run."""
    runs: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for c in chosen:
        runs.setdefault((c.node, c.file_seq), []).append((c.position, c.last_position))

    def test(row: Row) -> bool:
        return any(first <= row.position <= last for first, last in runs.get((row.node, row.file_seq), ()))

    return test
