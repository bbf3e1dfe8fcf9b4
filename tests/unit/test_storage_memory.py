"""MemoryStorage's own extra: a wipe, as when a node's disk is replaced."""

from __future__ import annotations

from raftka.raft.batch import SnapshotId
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.storage.memory import MemoryStorage
from tests.unit.storage_support import append, make_batches


def test_wipe_loses_everything() -> None:
    storage = MemoryStorage()
    append(storage, make_batches(0, 4))
    storage.save_snapshot(Snapshot(SnapshotId(4, 1), b"s"))
    storage.write(Write(write_id=2, quorum_state=QuorumStateData(epoch=3, voted_id=1, leader_id=1)))
    storage.wipe()
    loaded = storage.load()
    assert loaded.quorum_state == QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=True)
    assert loaded.snapshot is None and loaded.batches == []
    append(storage, make_batches(0, 1))
    assert storage.load().batches == make_batches(0, 1)


def test_load_hands_out_a_copy() -> None:
    storage = MemoryStorage()
    append(storage, make_batches(0, 2))
    storage.load().batches.clear()
    assert storage.load().batches == make_batches(0, 2)
