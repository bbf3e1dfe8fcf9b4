"""One node's log, batch by batch in the order it wrote them: the checks that need no replay.

The walk sees each batch's first row (a "head") and each damaged region, file after file,
archive first. It keeps the node's effective log: where a later file starts below the
end of an earlier one (a snapshot was installed over a tail, which went to the archive),
the later copy replaces the earlier from that offset on; such a rewind is returned so
the merge knows which copies the node itself replaced.
"""

from __future__ import annotations

import bisect
import json
from array import array
from collections import namedtuple
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raftka.audit.checks import ERROR, INFO, violation
from raftka.audit.decode import DAMAGED, LEADER_CHANGE, SNAPSHOT_KIND, UNREADABLE, decode_file
from raftka.audit.files import SNAPSHOT, AuditInputError, LogFile
from raftka.audit.schema import Row
from raftka.raft.batch import BatchKind


@dataclass
class WalkResult:
    violations: list[dict[str, Any]] = field(default_factory=list)
    rewinds: list[tuple[int, int]] = field(
        default_factory=list
    )  # (file_seq, offset): later copies win from here


# The columns of a head that the walk and the merge read: all the job brings to the driver.
UNREADABLE_SHOWN = 3  # files named in the error when some could not be read
HEAD_COLUMNS = ("node", "file", "file_seq", "source", "position", "kind", "batch_offset", "batch_records", "batch_crc",
                "offset", "epoch", "timestamp_ms", "type", "leader", "voters", "json", "error", "torn_tail")  # fmt: skip
Head = namedtuple("Head", HEAD_COLUMNS)  # type: ignore[misc]  # raftka.audit.schema.Row has these fields too
_HEAD_INDEXES = tuple(Row._fields.index(name) for name in HEAD_COLUMNS)


def read_heads(files: Sequence[LogFile]) -> list[tuple[Any, ...]]:
    """The heads (``is_head``) of ``files``, as tuples of ``HEAD_COLUMNS`` (``Head._make``
    makes them heads again): what one Spark task of the job reads. Every frame is still
    read and checked, so damage is found as in a full read."""
    return [
        tuple(row[i] for i in _HEAD_INDEXES)
        for file in files
        for row in decode_file(file, with_json=False, heads_only=True)
    ]


def is_head(row: Row) -> bool:
    """The rows the walk and the merge need: a batch's first record, a snapshot's, damage, or
    a file that could not be read."""
    return row.batch_index == 0 or (row.type in (DAMAGED, UNREADABLE) and row.batch_offset is None)


def check_readable(heads: Iterable[Row], files: int) -> None:
    """AuditInputError naming the files (of ``files``) that could not be read: the walk
    needs every file, and an unreadable one says nothing about the history, so it is not
    damage but an audit that cannot run (where the driver lists a file the executors
    cannot open, e.g. a path that is not on every worker)."""
    unreadable = [h for h in heads if h.type == UNREADABLE]
    if not unreadable:
        return
    which = "any" if len(unreadable) == files else f"{len(unreadable)}"
    shown = "; ".join(f"{h.file}: {h.error}" for h in unreadable[:UNREADABLE_SHOWN])
    more = ", ..." if len(unreadable) > UNREADABLE_SHOWN else ""
    raise AuditInputError(
        f"paths: could not read {which} of the {files} files ({shown}{more}); every Spark executor "
        "reads the files at the paths the driver lists, so they must be there on every worker"
    )


def walk_node(heads: Iterable[Row]) -> WalkResult:
    """Check one node's heads, given in history order (``file_seq``, then ``position``)."""
    walker = _Walker()
    for head in heads:
        walker.see(head)
    return walker.result


class _Walker:
    def __init__(self) -> None:
        self.result = WalkResult()
        # the effective log's epochs as runs: where each run of batches of one epoch starts
        # (increasing), and the epoch; a run per epoch, not an entry per batch
        self._run_offsets = array("q")
        self._run_epochs = array("q")
        self._next: int | None = None  # the effective log's end
        self._file_seq = -1
        # the voter set in effect along the effective log: (offset, ids) of its changes, the
        # first LeaderChange's or a VotersRecord's (KIP-853); unknown after a snapshot until
        # the next one names it
        self._voter_offsets = array("q")
        self._voter_sets: list[list[int] | None] = []

    def see(self, head: Row) -> None:
        assert head.type != UNREADABLE, "check_readable before the walk: an unreadable file is not damage"
        new_file = head.file_seq != self._file_seq
        self._file_seq = head.file_seq
        if head.type == DAMAGED and head.batch_offset is None:
            self._damage(head)
        elif head.kind == SNAPSHOT_KIND:
            self._snapshot(head)
        else:
            self._batch(head, new_file)

    def _damage(self, head: Row) -> None:
        if head.torn_tail:
            message = (
                f"torn last write at the end of the newest segment {head.file} (the node truncates it at "
                f"its next start): {head.error}"
            )
            self._report("no_damage", INFO, message, head)
        else:
            where = "snapshot" if head.source == SNAPSHOT else "segment"
            self._report("no_damage", ERROR, f"damaged {where} {head.file}: {head.error}", head)

    def _snapshot(self, head: Row) -> None:
        """A node that holds a snapshot at S needs nothing below S: the log may start there."""
        offset = head.offset
        if self._next is None or offset > self._next:
            self._truncate(offset)
            self._note_voters(offset, None)
            # the snapshot stands for the log below it: its epoch is the epoch the next batch
            # continues or opens
            self._note_epoch(offset, head.epoch)
            self._next = offset

    def _batch(self, head: Row, new_file: bool) -> None:
        base, epoch = head.batch_offset, head.epoch
        if self._next is not None and base > self._next:
            message = f"offsets {self._next} to {base - 1} are missing: the batch at {base} follows a log ending at {self._next}"
            self._report("offsets_contiguous", ERROR, message, head)
        elif self._next is not None and base < self._next:
            if not new_file:
                message = f"offset {base} follows a batch ending at {self._next} in the same file"
                self._report("offsets_contiguous", ERROR, message, head)
                return
            self.result.rewinds.append((head.file_seq, base))
            self._truncate(base)
        previous_epoch = self._run_epochs[-1] if self._run_epochs else None
        if previous_epoch is not None and epoch < previous_epoch:
            message = f"epoch {epoch} at offset {base} follows epoch {previous_epoch}"
            self._report("epochs_monotonic", ERROR, message, head)
        starts_epoch = (previous_epoch is None and base == 0) or (
            previous_epoch is not None and epoch > previous_epoch
        )
        if starts_epoch:
            self._check_leader_change(head)
        if head.kind == BatchKind.VOTERS.name:
            self._check_voter_change(head)
        self._note_epoch(base, epoch)
        self._next = base + head.batch_records

    def _note_epoch(self, offset: int, epoch: int) -> None:
        if not self._run_epochs or self._run_epochs[-1] != epoch:
            self._run_offsets.append(offset)
            self._run_epochs.append(epoch)

    def _check_leader_change(self, head: Row) -> None:
        if head.type != LEADER_CHANGE:
            what = "an unreadable LeaderChange" if head.type == DAMAGED else f"a {head.kind} batch"
            message = (
                f"epoch {head.epoch} starts at offset {head.batch_offset} with {what}, not a LeaderChange"
            )
            self._report("epoch_starts_with_leader_change", ERROR, message, head)
            return
        declared = json.loads(head.json).get("epoch") if head.json else None
        voters = sorted(head.voters or ())
        current = self._current_voters()
        if current is None:
            self._note_voters(head.batch_offset, voters)
            current = voters
        if head.leader not in voters:
            message = (
                f"epoch {head.epoch}: LeaderChange names leader {head.leader}, not one of the voters {voters}"
            )
            self._report("epoch_starts_with_leader_change", ERROR, message, head)
        elif voters != current:
            message = (
                f"epoch {head.epoch}: LeaderChange names voters {voters}, but the voter set in effect is "
                f"{current} (it changes only through a VotersRecord)"
            )
            self._report("epoch_starts_with_leader_change", ERROR, message, head)
        elif declared is not None and declared != head.epoch:
            message = f"a LeaderChange for epoch {declared} opens epoch {head.epoch}"
            self._report("epoch_starts_with_leader_change", ERROR, message, head)

    def _check_voter_change(self, head: Row) -> None:
        if head.type == DAMAGED or head.voters is None:
            return  # reported as damage
        voters = sorted(head.voters)
        current = self._current_voters()
        if current is not None and len(set(voters) ^ set(current)) > 1:
            message = f"a VotersRecord changes the voter set from {current} to {voters}: more than one member"
            self._report("voter_changes_one_at_a_time", ERROR, message, head)
        self._note_voters(head.batch_offset, voters)

    def _current_voters(self) -> list[int] | None:
        return self._voter_sets[-1] if self._voter_sets else None

    def _note_voters(self, offset: int, voters: list[int] | None) -> None:
        self._voter_offsets.append(offset)
        self._voter_sets.append(voters)

    def _truncate(self, offset: int) -> None:
        keep = bisect.bisect_left(self._run_offsets, offset)  # a run cut short keeps its epoch
        del self._run_offsets[keep:]
        del self._run_epochs[keep:]
        keep = bisect.bisect_left(self._voter_offsets, offset)  # an undone change undoes its set
        del self._voter_offsets[keep:]
        del self._voter_sets[keep:]

    def _report(self, check: str, severity: str, message: str, head: Row) -> None:
        self.result.violations.append(
            violation(
                check,
                severity,
                f"node {head.node}: {message}",
                node=head.node,
                offset=head.batch_offset,
                entity=f"node {head.node}",
                file=head.file,
                position=head.position,
            )
        )
