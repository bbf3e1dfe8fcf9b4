"""The cluster's history from every node's copy: one batch per offset, chosen the Raft way.

Nodes hold the same committed batches (equal CRCs), but each may also hold what others do
not: an archive reaching further back, or an uncommitted tail that a new leader replaced.
At each offset the merge takes the copy with the highest epoch (a Raft leader never
overwrites an entry of an older committed epoch, so the highest epoch is the one that
won), then the one most nodes hold. A copy is committed when a majority of the voters
hold it, or any observer does (observers fetch committed batches only); two different
committed copies of one offset are the one real disagreement.

The merge reads the nodes' copies as streams in offset order (``raftka.audit.copies``), one
offset's copies at a time, and gives the history as ranges of consecutive frames of one file
(``ChosenRun``): what it holds grows with the files, snapshots and violations, not the batches.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import Any, NamedTuple

import pyarrow as pa

from raftka.audit.checks import ERROR, INFO, violation
from raftka.audit.copies import COPY_SCHEMA, Copy, copy_of, effective, is_copy, newest_voters, rows, voters_of
from raftka.audit.decode import LEADER_CHANGE, SNAPSHOT_KIND
from raftka.audit.schema import Row, to_batch

CopyKey = tuple[str, int, int, int]  # node, file_seq, position, frame


class ChosenRun(NamedTuple):
    """Consecutive frames of one file, the copies the history takes of ``batches`` canonical
    batches from ``base_offset`` to ``last_base`` (the last one's base offset). A run never
    holds batches on both sides of a snapshot's offset: the replay is cut there."""

    node: str
    file_seq: int
    position: int  # of the first frame
    last_position: int  # of the last
    base_offset: int
    last_base: int
    batches: int


@dataclass(slots=True)
class _Candidate:
    base: int
    last: int
    epoch: int
    crc: int
    kind: str
    leader: int | None
    timestamp_ms: int
    copies: list[CopyKey] = field(default_factory=list)

    @property
    def holders(self) -> set[str]:
        return {copy[0] for copy in self.copies}


@dataclass
class MergeResult:
    chosen: list[ChosenRun] = field(default_factory=list)  # the canonical batches' copies, in offset order
    violations: list[dict[str, Any]] = field(default_factory=list)
    uncommitted_leader_changes: list[dict[str, Any]] = field(default_factory=list)
    start_offset: int | None = None
    end_offset: int | None = None  # the next offset after the canonical history
    gaps: list[tuple[int, int]] = field(default_factory=list)  # [start, end) no input holds
    voters: list[int] = field(default_factory=list)


def merge(heads: Sequence[Row], rewinds: Mapping[str, Sequence[tuple[int, int]]]) -> MergeResult:
    """``heads``: every node's batch heads (``walk.is_head``), each file's in position order;
    ``rewinds``: each node's, from its walk. The merge of a history held in memory, through
    the same streams as the job's (``merge_streams``)."""
    frames: dict[tuple[str, int], int] = {}
    by_node: dict[str, list[tuple[Any, ...]]] = {}
    for order, head in enumerate(heads):
        if head.position is None:
            continue  # an unreadable file, a snapshot: no frame
        key = (head.node, head.file_seq)
        frame = frames[key] = frames.get(key, -1) + 1
        if is_copy(head):
            by_node.setdefault(head.node, []).append(copy_of(head, frame, order))
    nodes = [
        effective(pa.Table.from_batches([to_batch(copies, COPY_SCHEMA)]), rewinds.get(node, ()))
        for node, copies in sorted(by_node.items())
    ]
    cuts = [h.batch_offset for h in heads if h.kind == SNAPSHOT_KIND and h.batch_offset is not None]
    return merge_streams([rows(copies) for copies in nodes], voters_of(map(newest_voters, nodes)), cuts)


def merge_streams(streams: Sequence[Iterable[Copy]], voters: list[int], cuts: Iterable[int]) -> MergeResult:
    """The history from each node's copies in offset order (``raftka.audit.copies.effective``):
    at each offset the copy of the highest epoch, then the one most nodes hold, then the one
    met first; ``voters``: the newest LeaderChange's (``copies.voters_of``); ``cuts``: the
    snapshots' offsets, where no chosen run goes across."""
    chooser = _Chooser(MergeResult(voters=list(voters)), sorted(set(cuts)))
    for _, group in groupby(heapq.merge(*streams, key=attrgetter("base", "order")), key=attrgetter("base")):
        candidates: dict[tuple[int, int, int, int], _Candidate] = {}
        for copy in group:
            key = (copy.base, copy.last, copy.epoch, copy.crc)
            candidate = candidates.get(key)
            if candidate is None:
                leader = copy.leader if copy.type == LEADER_CHANGE else None
                candidate = candidates[key] = _Candidate(*key, copy.kind, leader, copy.timestamp_ms)
            candidate.copies.append((copy.node, copy.file_seq, copy.position, copy.frame))
        chooser.choose(sorted(candidates.values(), key=lambda c: (-c.epoch, -len(c.copies))))
    return chooser.finish()


class _Chooser:
    """The merge's walk along the offsets: the history so far, and the run it is extending."""

    def __init__(self, result: MergeResult, cuts: list[int]) -> None:
        self.result = result
        self.committed = _committed_test(result.voters)
        self.cuts = cuts
        self.position: int | None = None  # the canonical history's end so far
        self.epoch = -1  # of its last batch: a Raft log's epochs never go back
        self.winner: _Candidate | None = None  # the last batch chosen
        self.run: list[Any] | None = None  # ChosenRun's fields, then the frame of its last copy

    def choose(self, candidates: list[_Candidate]) -> None:
        """One offset's candidates, the likeliest first: the first that continues the history
        is its batch there, every other is a copy the history did not take."""
        others: list[_Candidate] = []
        for candidate in candidates:
            if self.position is None:
                self.result.start_offset = self.position = candidate.base
            if candidate.base < self.position or candidate.epoch < self.epoch:
                # another copy, or an older leader's tail longer than what replaced it
                others.append(candidate)
                continue
            if candidate.base > self.position:
                self.result.gaps.append((self.position, candidate.base))
            self._take(candidate)
            self.position, self.epoch = candidate.last + 1, candidate.epoch
        for other in others:
            assert self.winner is not None  # the first candidate of all is taken
            _report_divergence(other, self.winner, self.committed, self.result)

    def _take(self, candidate: _Candidate) -> None:
        self.winner = candidate
        node, file_seq, position, frame = min(candidate.copies)
        run = self.run
        if (
            run is not None
            and (run[0], run[1], run[7] + 1) == (node, file_seq, frame)
            and not self._cut(run[5], candidate.base)
        ):
            run[3], run[5], run[6], run[7] = position, candidate.base, run[6] + 1, frame
            return
        self._close()
        self.run = [node, file_seq, position, position, candidate.base, candidate.base, 1, frame]

    def _cut(self, after: int, base: int) -> bool:
        """Whether a snapshot's offset lies in (``after``, ``base``]: the replay is cut there."""
        i = bisect.bisect_right(self.cuts, after)
        return i < len(self.cuts) and self.cuts[i] <= base

    def _close(self) -> None:
        if self.run is not None:
            self.result.chosen.append(ChosenRun(*self.run[:7]))
            self.run = None

    def finish(self) -> MergeResult:
        self._close()
        self.result.end_offset = self.position
        return self.result


def _committed_test(voters: list[int]) -> Callable[[_Candidate], bool]:
    names = {str(v) for v in voters}
    majority = len(names) // 2 + 1 if names else None

    def committed(candidate: _Candidate) -> bool:
        holders = candidate.holders
        if holders - names and names:
            return True  # an observer holds it: observers fetch committed batches only
        return majority is not None and len(holders & names) >= majority

    return committed


def _report_divergence(
    other: _Candidate,
    winner: _Candidate,
    committed: Callable[[_Candidate], bool],
    result: MergeResult,
) -> None:
    """A copy the merge did not take, against the batch the history holds there (the last
    chosen at or below its offset): an error if both are committed."""
    nodes = ",".join(sorted(other.holders))
    span = f"offsets {other.base}-{other.last} (epoch {other.epoch})"
    if committed(other) and committed(winner):
        message = (
            f"nodes {nodes} hold a committed batch at {span} that differs from the committed batch "
            f"at {winner.base}-{winner.last} (epoch {winner.epoch}) on nodes {','.join(sorted(winner.holders))}"
        )
        result.violations.append(
            violation("nodes_agree", ERROR, message, offset=other.base, entity=f"offset {other.base}")
        )
    else:
        message = (
            f"nodes {nodes} hold an uncommitted batch at {span} that the leader of epoch {winner.epoch} "
            f"replaced (a diverging tail, truncated or archived by the node)"
        )
        result.violations.append(
            violation("nodes_agree", INFO, message, offset=other.base, entity=f"offset {other.base}")
        )
    if other.kind == LEADER_CHANGE:
        result.uncommitted_leader_changes.append(
            {
                "epoch": other.epoch,
                "leader": other.leader,
                "offset": other.base,
                "timestamp_ms": other.timestamp_ms,
                "nodes": sorted(other.holders),
            }
        )
