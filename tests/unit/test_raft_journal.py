"""The journal state machine: entries from DATA batches, its offset from every batch."""

from __future__ import annotations

from raft.journal import Journal
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.snapshot_schedule import SnapshotPolicy


def journal(**policy: int) -> tuple[Journal, list[Snapshot]]:
    saved: list[Snapshot] = []
    return Journal(SnapshotPolicy(**policy), saved.append), saved


def test_control_batches_move_the_applied_offset_and_add_no_entry() -> None:
    j, _ = journal()
    j.apply(Batch(0, 1, 0, BatchKind.LEADER_CHANGE, (control.encode_leader_change(1, frozenset({1}), 1),)))
    j.apply(Batch(1, 1, 0, BatchKind.DATA, (b"a", b"b")))
    j.apply(Batch(3, 1, 0, BatchKind.NOOP, (control.NOOP_RECORD,)))
    assert j.entries == [b"a", b"b"] and j.applied_offset == 4


def test_a_snapshot_at_the_end_of_a_noop_restores_at_its_offset() -> None:
    j, saved = journal(snapshot_interval_ms=100)
    j.apply(Batch(0, 2, 1_000, BatchKind.DATA, (b"a",)))
    j.apply(Batch(1, 2, 1_050, BatchKind.NOOP, (control.NOOP_RECORD,)))
    assert saved == []
    j.apply(Batch(2, 2, 1_100, BatchKind.NOOP, (control.NOOP_RECORD,)))
    assert [s.id for s in saved] == [SnapshotId(3, 2)]

    restarted, _ = journal()
    restarted.restore(saved[0])
    assert (restarted.entries, restarted.applied_offset) == ([b"a"], 3)
