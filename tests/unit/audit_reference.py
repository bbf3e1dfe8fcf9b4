"""The audit's walk and merge as they were before the merge read streams: every head in
memory, one chosen copy per batch. Kept only as the oracle the streaming merge is checked
against (``test_audit_stream_merge``)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, NamedTuple

from raftka.audit.checks import ERROR, INFO, violation
from raftka.audit.decode import LEADER_CHANGE, SNAPSHOT_KIND
from raftka.audit.merge import ChosenRun
from raftka.audit.plain import head_order
from raftka.audit.schema import Row
from raftka.audit.walk import walk_node

CopyKey = tuple[str, int, int]  # node, file_seq, position


class Chosen(NamedTuple):
    """The copy of a canonical batch the history takes."""

    node: str
    file_seq: int
    position: int
    base_offset: int


def expand(chosen: Sequence[ChosenRun], heads: Iterable[Row]) -> list[Chosen]:
    """The streaming merge's runs as one ``Chosen`` per batch: the heads in each run's frames."""
    by_file: dict[tuple[str, int], list[Row]] = {}
    for head in heads:
        if head.position is not None:
            by_file.setdefault((head.node, head.file_seq), []).append(head)
    found = []
    for run in chosen:
        mine = [
            h for h in by_file[(run.node, run.file_seq)] if run.position <= h.position <= run.last_position
        ]
        assert len(mine) == run.batches, (run, mine)
        assert (mine[0].batch_offset, mine[-1].batch_offset) == (run.base_offset, run.last_base)
        found += [Chosen(h.node, h.file_seq, h.position, h.batch_offset) for h in mine]
    return found


def walk_and_merge(heads: Sequence[Row]) -> tuple[list[dict[str, Any]], MergeResult]:
    violations: list[dict[str, Any]] = []
    rewinds: dict[str, list[tuple[int, int]]] = {}
    for node, node_heads in groupby(sorted(heads, key=head_order), key=lambda r: r.node):
        walked = walk_node(node_heads)
        violations += walked.violations
        rewinds[node] = walked.rewinds
    merged = merge(heads, rewinds)
    return violations + merged.violations, merged


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
        return {node for node, _, _ in self.copies}


@dataclass
class MergeResult:
    chosen: list[Chosen] = field(default_factory=list)  # one copy per canonical batch, in offset order
    violations: list[dict[str, Any]] = field(default_factory=list)
    uncommitted_leader_changes: list[dict[str, Any]] = field(default_factory=list)
    start_offset: int | None = None
    end_offset: int | None = None  # the next offset after the canonical history
    gaps: list[tuple[int, int]] = field(default_factory=list)  # [start, end) no input holds
    voters: list[int] = field(default_factory=list)


def merge(heads: Iterable[Row], rewinds: Mapping[str, Sequence[tuple[int, int]]]) -> MergeResult:
    """``heads``: every node's batch heads (``walk.is_head``); ``rewinds``: each node's, from its walk."""
    result = MergeResult()
    candidates: dict[tuple[int, int, int, int], _Candidate] = {}
    voters: tuple[int, list[int]] = (-1, [])  # the newest LeaderChange's (epoch, voters)
    for head in heads:
        if head.batch_offset is None or head.kind == SNAPSHOT_KIND:
            continue
        last = head.batch_offset + head.batch_records - 1
        node_rewinds = rewinds.get(head.node)
        if node_rewinds and _superseded(head, last, node_rewinds):
            continue
        key = (head.batch_offset, last, head.epoch, head.batch_crc)
        candidate = candidates.get(key)
        if candidate is None:
            leader = head.leader if head.type == LEADER_CHANGE else None
            candidate = candidates[key] = _Candidate(*key, head.kind, leader, head.timestamp_ms)
        if head.type == LEADER_CHANGE and head.voters and head.epoch > voters[0]:
            voters = (head.epoch, head.voters)
        candidate.copies.append((head.node, head.file_seq, head.position))
    result.voters = sorted(voters[1])
    _choose(sorted(candidates.values(), key=lambda c: (c.base, -c.epoch, -len(c.copies))), result)
    return result


def _superseded(head: Row, last: int, rewinds: Sequence[tuple[int, int]]) -> bool:
    """A copy its own node replaced: a later file of that node starts at or below its last offset."""
    return any(file_seq > head.file_seq and last >= offset for file_seq, offset in rewinds)


def _choose(ordered: list[_Candidate], result: MergeResult) -> None:
    committed = _committed_test(result.voters)
    position = None  # the canonical history's end so far
    epoch = -1  # of its last batch: a Raft log's epochs never go back
    chosen_by_offset: list[_Candidate] = []
    others: list[_Candidate] = []
    for candidate in ordered:
        if position is None:
            result.start_offset = position = candidate.base
        if candidate.base < position or candidate.epoch < epoch:
            others.append(candidate)  # another copy, or an older leader's tail longer than what replaced it
            continue
        if candidate.base > position:
            result.gaps.append((position, candidate.base))
        chosen_by_offset.append(candidate)
        result.chosen.append(Chosen(*min(candidate.copies), candidate.base))
        position, epoch = candidate.last + 1, candidate.epoch
    result.end_offset = position
    _report_divergence(others, chosen_by_offset, committed, result)


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
    others: list[_Candidate],
    chosen: list[_Candidate],
    committed: Callable[[_Candidate], bool],
    result: MergeResult,
) -> None:
    """Each copy the merge did not take: an error if it and the chosen one are both committed."""
    bases = [c.base for c in chosen]
    for other in others:
        index = bisect.bisect_right(bases, other.base) - 1
        winner = chosen[index]
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
