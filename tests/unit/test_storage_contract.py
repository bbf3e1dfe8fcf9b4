"""The Storage contract, held by FileStorage and MemoryStorage alike.

The simulator runs the core on MemoryStorage; these tests are what lets its results speak
for FileStorage too. Each test reloads through ``restart``, which for files is a new
instance over the same directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from raftka.raft.batch import SnapshotId
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.storage.base import LoadedState, Storage
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.memory import MemoryStorage
from tests.unit.storage_support import append, make_batches

Restart = Callable[[], LoadedState]


@pytest.fixture(params=["file", "memory"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Storage, Restart]:
    if request.param == "memory":
        memory = MemoryStorage()
        return memory, memory.load
    file = FileStorage(tmp_path, segment_bytes=150)
    file.load()
    return file, lambda: FileStorage(tmp_path, segment_bytes=150).load()


def test_a_new_storage_is_empty(storage: tuple[Storage, Restart]) -> None:
    _, restart = storage
    loaded = restart()
    assert loaded.quorum_state == QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=True)
    assert loaded.snapshot is None and loaded.batches == []


def test_one_write_applies_truncation_then_appends_then_quorum_state(
    storage: tuple[Storage, Restart],
) -> None:
    store, restart = storage
    append(store, make_batches(0, 6))
    state = QuorumStateData(epoch=2, voted_id=3, leader_id=3)
    store.write(
        Write(write_id=2, truncate_to=4, append=tuple(make_batches(4, 2, epoch=2)), quorum_state=state)
    )
    loaded = restart()
    assert loaded.batches == make_batches(0, 2) + make_batches(4, 2, epoch=2)
    assert loaded.quorum_state == state


def test_truncating_at_or_past_the_end_changes_nothing(storage: tuple[Storage, Restart]) -> None:
    store, restart = storage
    append(store, make_batches(0, 3))
    store.write(Write(write_id=2, truncate_to=6))
    store.write(Write(write_id=3, truncate_to=100))
    assert restart().batches == make_batches(0, 3)


def test_install_snapshot_then_append_in_one_write(storage: tuple[Storage, Restart]) -> None:
    store, restart = storage
    append(store, make_batches(0, 3))
    installed = Snapshot(SnapshotId(20, 4), b"leader state")
    store.write(Write(write_id=2, install_snapshot=installed, append=tuple(make_batches(20, 2, epoch=4))))
    loaded = restart()
    assert loaded.snapshot == installed and loaded.batches == make_batches(20, 2, epoch=4)


def test_save_snapshot_drops_the_batches_it_covers(storage: tuple[Storage, Restart]) -> None:
    store, restart = storage
    batches = make_batches(0, 10)
    append(store, batches)
    store.save_snapshot(Snapshot(SnapshotId(8, 1), b"at 8"))
    store.save_snapshot(Snapshot(SnapshotId(6, 1), b"older: ignored"))
    loaded = restart()
    assert loaded.snapshot == Snapshot(SnapshotId(8, 1), b"at 8")
    assert loaded.batches == batches[4:]


def test_truncate_after_a_snapshot(storage: tuple[Storage, Restart]) -> None:
    store, restart = storage
    append(store, make_batches(0, 10))
    store.save_snapshot(Snapshot(SnapshotId(8, 1), b"at 8"))
    store.write(Write(write_id=2, truncate_to=8))
    assert restart().batches == []
    append(store, make_batches(8, 1, epoch=2), write_id=3)
    assert restart().batches == make_batches(8, 1, epoch=2)


@pytest.mark.parametrize(
    "write",
    [
        Write(write_id=2, append=tuple(make_batches(10, 1))),  # a gap
        Write(write_id=2, append=tuple(make_batches(2, 1))),  # an overlap
        Write(write_id=2, truncate_to=3),  # inside a batch
        Write(write_id=2, truncate_to=1),  # below the snapshot
    ],
)
def test_contract_violations_are_assertions(storage: tuple[Storage, Restart], write: Write) -> None:
    store, _ = storage
    append(store, make_batches(0, 3))
    store.save_snapshot(Snapshot(SnapshotId(2, 1), b""))
    with pytest.raises(AssertionError):
        store.write(write)
