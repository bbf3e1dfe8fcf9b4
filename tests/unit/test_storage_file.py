"""FileStorage on a real disk: layout, durability, and recovery from crashes and damage."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from raftka.raft.batch import SnapshotId
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.storage import fsio, layout, snapshot_file
from raftka.raft.storage.base import CorruptLogError, StorageError
from raftka.raft.storage.batch_codec import encode_batch
from raftka.raft.storage.file import FileStorage
from tests.unit.storage_support import append, flip_byte, make_batches, raw_frame, segment_files

SMALL_SEGMENT = 200  # bytes: a few batches per segment, so tests cross segment boundaries


def open_storage(data_dir: Path, **options: object) -> FileStorage:
    storage = FileStorage(data_dir, **options)  # type: ignore[arg-type]
    storage.load()
    return storage


def reload(data_dir: Path, **options: object) -> list:
    return FileStorage(data_dir, **options).load().batches  # type: ignore[arg-type]


def test_layout_is_krafts(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    batches = make_batches(0, 10)
    append(storage, batches)
    storage.write(Write(write_id=2, quorum_state=QuorumStateData(epoch=4, voted_id=2, leader_id=3)))
    storage.save_snapshot(Snapshot(SnapshotId(6, 1), b"state"))

    log_dir = tmp_path / "__cluster_metadata-0"
    names = sorted(p.name for p in log_dir.iterdir())
    assert "00000000000000000006-0000000001.checkpoint" in names
    assert "quorum-state" in names
    segments = [n for n in names if n.endswith(".log")]
    assert segments and all(len(n) == 24 for n in segments)
    bases = [b.base_offset for b in batches]
    assert all(int(n[:20]) in bases for n in segments)
    newest = max(
        (
            json.loads(line.strip().rpartition(" ")[0])
            for line in (log_dir / "quorum-state").read_text().split("\n")
            if line.strip()
        ),
        key=lambda document: document["sequence"],
    )
    assert newest == {
        "epoch": 4,
        "voted_id": 2,
        "leader_id": 3,
        "data_version": 1,
        "sequence": newest["sequence"],
        "recovering": False,
    }


def test_batches_survive_restarts_and_segment_rolls(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    batches = make_batches(0, 30)
    for write_id, start in enumerate(range(0, 30, 7)):
        append(storage, batches[start : start + 7], write_id)
    storage.close()
    assert len(segment_files(tmp_path)) > 3
    assert all(f.stat().st_size <= SMALL_SEGMENT for f in segment_files(tmp_path))
    assert reload(tmp_path) == batches

    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    more = make_batches(60, 5)
    append(storage, more)
    assert reload(tmp_path) == batches + more


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=10)
    batches = make_batches(0, 3)
    append(storage, batches)
    assert len(segment_files(tmp_path)) == 3
    assert reload(tmp_path) == batches


def _record_data_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file names fdatasync is called on, in order."""
    synced: list[str] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced


def test_an_unsynced_append_is_synced_by_the_next_synced_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An observer's appends are written without fsync; the next synced write (a voter's,
    or a quorum-state change) makes them durable first."""
    storage = open_storage(tmp_path)
    synced = _record_data_syncs(monkeypatch)
    batches = make_batches(0, 3)
    storage.write(Write(write_id=1, append=tuple(batches), sync=False))
    assert synced == []
    assert reload(tmp_path) == batches  # written: the page cache holds it
    synced.clear()
    storage.write(Write(write_id=2, quorum_state=QuorumStateData(epoch=1, voted_id=-1, leader_id=2)))
    assert [layout.segment_name(0)] == synced[:1]


def test_a_segment_is_synced_before_unsynced_appends_roll_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So a power cut keeps a prefix of the log: never a later segment without an earlier one."""
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    synced = _record_data_syncs(monkeypatch)
    storage.write(Write(write_id=1, append=tuple(make_batches(0, 10)), sync=False))
    segments = [p.name for p in segment_files(tmp_path)]
    assert len(segments) > 2
    assert synced == segments[:-1]


def test_load_syncs_what_an_earlier_process_left_unsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node restarted after a crash of its process (not of the machine) reads its unsynced
    appends back from the page cache: they must be durable before it acknowledges them."""
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    storage.write(Write(write_id=1, append=tuple(make_batches(0, 10)), sync=False))
    synced = _record_data_syncs(monkeypatch)
    open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    assert synced == [p.name for p in segment_files(tmp_path)]


def test_one_write_and_one_data_sync_per_write_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 1))
    calls: list[str] = []
    real_write, real_fsync, real_fdatasync = os.write, os.fsync, os.fdatasync
    monkeypatch.setattr(os, "write", lambda fd, data: calls.append("write") or real_write(fd, data))
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "fdatasync", lambda fd: calls.append("fdatasync") or real_fdatasync(fd))
    append(storage, make_batches(2, 50), write_id=2)
    assert calls == ["write", "fdatasync"]


def test_quorum_state_persists(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    assert FileStorage(tmp_path).load().quorum_state == QuorumStateData(
        epoch=0, voted_id=-1, leader_id=-1, recovering=True
    )
    storage.write(Write(write_id=1, quorum_state=QuorumStateData(epoch=7, voted_id=1, leader_id=-1)))
    storage.write(Write(write_id=2, quorum_state=QuorumStateData(epoch=7, voted_id=1, leader_id=1)))
    assert FileStorage(tmp_path).load().quorum_state == QuorumStateData(epoch=7, voted_id=1, leader_id=1)
    assert not list(layout.log_dir(tmp_path).glob("*.tmp"))


def test_a_damaged_quorum_state_refuses_to_start(tmp_path: Path) -> None:
    open_storage(tmp_path)
    (layout.log_dir(tmp_path) / "quorum-state").write_text('{"epoch": 1}')
    with pytest.raises(StorageError, match="quorum-state: both copies.*Restore the node"):
        FileStorage(tmp_path).load()


def test_a_torn_quorum_state_write_keeps_the_previous_state(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.write(Write(write_id=1, quorum_state=QuorumStateData(epoch=5, voted_id=2, leader_id=-1)))
    storage.write(Write(write_id=2, quorum_state=QuorumStateData(epoch=6, voted_id=3, leader_id=-1)))
    path = layout.log_dir(tmp_path) / "quorum-state"
    raw = bytearray(path.read_bytes())
    newest_slot = 0 if b'"epoch":6' in raw[:512] else 512
    raw[newest_slot + 10 : newest_slot + 20] = b"\0" * 10  # the crash tore the last write
    path.write_bytes(bytes(raw))
    assert FileStorage(tmp_path).load().quorum_state == QuorumStateData(epoch=5, voted_id=2, leader_id=-1)


def test_both_quorum_state_copies_damaged_after_they_were_written_refuses_to_start(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.write(Write(write_id=1, quorum_state=QuorumStateData(epoch=5, voted_id=2, leader_id=-1)))
    storage.write(Write(write_id=2, quorum_state=QuorumStateData(epoch=6, voted_id=3, leader_id=-1)))
    path = layout.log_dir(tmp_path) / "quorum-state"
    flip_byte(path, 10)
    flip_byte(path, 512 + 10)
    with pytest.raises(StorageError, match=f"{path}: both copies.*were written.*Restore the node"):
        FileStorage(tmp_path).load()


NEW_DISK = QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=True)
VOTE = QuorumStateData(epoch=1, voted_id=2, leader_id=-1)
SLOT_BYTES = 512


def first_quorum_state_write(data_dir: Path) -> tuple[Path, bytes]:
    """The quorum-state file of a new node once its first write (a vote) returned."""
    storage = open_storage(data_dir)
    storage.write(Write(write_id=1, quorum_state=VOTE))
    storage.close()
    path = layout.log_dir(data_dir) / "quorum-state"
    return path, path.read_bytes()


CRASHED_FIRST_WRITES = {  # what a power cut before the first write returned may leave on disk
    "creation's blank fill lost": lambda first: bytes(len(first)),
    "first slot write lost": lambda first: first[:SLOT_BYTES] * 2,  # slot 0 is still the blank fill
    "first slot write torn": lambda first: first[: SLOT_BYTES + 40] + first[40:SLOT_BYTES],
    "first slot write torn over zeros": lambda first: (
        bytes(SLOT_BYTES) + first[SLOT_BYTES:][:40].ljust(SLOT_BYTES, b"\0")
    ),
    "file cut short in the first slot": lambda first: first[: SLOT_BYTES + 40],
}


@pytest.mark.parametrize("left", CRASHED_FIRST_WRITES)
def test_a_crash_before_the_first_quorum_state_write_returned_starts_as_a_new_disk(
    tmp_path: Path, left: str
) -> None:
    path, first = first_quorum_state_write(tmp_path)
    path.write_bytes(CRASHED_FIRST_WRITES[left](first))

    storage = FileStorage(tmp_path)
    with capture_logs() as logs:
        assert storage.load().quorum_state == NEW_DISK  # recovering: it votes only once that is safe
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "no quorum-state write ever completed"
    ]
    storage.write(Write(write_id=2, quorum_state=VOTE))
    assert FileStorage(tmp_path).load().quorum_state == VOTE


def test_a_crash_right_after_the_quorum_state_file_was_created_starts_as_a_new_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(tmp_path)

    def power_lost(fd: int, data: bytes, offset: int) -> None:
        raise OSError(5, "power lost")

    with monkeypatch.context() as patch:
        patch.setattr(fsio, "pwrite_all", power_lost)
        with pytest.raises(OSError, match="power lost"):
            storage.write(Write(write_id=1, quorum_state=VOTE))
    assert (layout.log_dir(tmp_path) / "quorum-state").stat().st_size == 0
    assert FileStorage(tmp_path).load().quorum_state == NEW_DISK


@pytest.mark.parametrize("kept", [1, 10, 33, 40, -1])
def test_torn_tail_is_truncated_and_complete_batches_kept(tmp_path: Path, kept: int) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 4)
    append(storage, batches)
    segment = segment_files(tmp_path)[0]
    last_start = segment.stat().st_size - len(encode_batch(batches[-1]))
    os.truncate(segment, last_start + kept if kept > 0 else segment.stat().st_size + kept)

    with capture_logs() as logs:
        storage = open_storage(tmp_path)
    assert reload(tmp_path) == batches[:-1]
    assert segment.stat().st_size == last_start
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["truncating torn log tail"]

    append(storage, batches[-1:])
    assert reload(tmp_path) == batches


def test_a_torn_first_batch_of_a_new_segment_removes_the_segment(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    batches = make_batches(0, 10)
    append(storage, batches)
    last = segment_files(tmp_path)[-1]
    os.truncate(last, 5)
    kept = [b for b in batches if b.base_offset < int(last.name[:20])]
    assert reload(tmp_path) == kept
    assert not last.exists()


def test_corrupt_crc_at_the_tail_is_truncated(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 4)
    append(storage, batches)
    segment = segment_files(tmp_path)[0]
    flip_byte(segment, segment.stat().st_size - 2)
    assert reload(tmp_path) == batches[:-1]


def test_zeros_after_the_last_batch_are_truncated(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 3)
    append(storage, batches)
    segment = segment_files(tmp_path)[0]
    size = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(bytes(5000))
    assert reload(tmp_path) == batches
    assert segment.stat().st_size == size


@pytest.mark.parametrize("where", ["crc", "length"])
def test_corruption_in_the_middle_refuses_to_start(tmp_path: Path, where: str) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 5)
    append(storage, batches)
    segment = segment_files(tmp_path)[0]
    position = len(encode_batch(batches[0]))
    flip_byte(segment, position + (20 if where == "crc" else 0))  # a field, or the length's top byte
    before = segment.read_bytes()

    with pytest.raises(CorruptLogError) as error:
        FileStorage(tmp_path).load()
    message = str(error.value)
    assert str(segment) in message and f"at byte {position}" in message and "raftka storage format" in message
    assert segment.read_bytes() == before  # nothing truncated


def test_impossible_content_behind_a_valid_crc_at_the_tail_refuses_to_start(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 3))
    with segment_files(tmp_path)[0].open("ab") as f:
        f.write(raw_frame((6, 1, 1, 0, 9), b"\x00\x00\x00\x00"))  # kind 9 does not exist
    with pytest.raises(CorruptLogError, match="unknown batch kind 9.*its CRC matches"):
        FileStorage(tmp_path).load()


def test_a_bad_batch_at_the_end_of_an_older_segment_refuses_to_start(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    append(storage, make_batches(0, 10))
    first = segment_files(tmp_path)[0]
    flip_byte(first, first.stat().st_size - 1)
    with pytest.raises(CorruptLogError, match="later segments follow"):
        FileStorage(tmp_path).load()


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (make_batches(30, 1), "offset 30 follows a batch ending at 6"),
        (make_batches(6, 1, epoch=0), "epoch 0 follows epoch 1"),
    ],
)
def test_offsets_must_be_contiguous_and_epochs_must_not_go_back(
    tmp_path: Path, extra: list, problem: str
) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 3))
    with segment_files(tmp_path)[0].open("ab") as f:
        f.write(encode_batch(extra[0]))
    with pytest.raises(CorruptLogError, match=problem):
        FileStorage(tmp_path).load()


def test_a_segment_must_start_at_the_offset_its_name_says(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 3))
    segment = segment_files(tmp_path)[0]
    segment.rename(segment.with_name(layout.segment_name(4)))
    with pytest.raises(CorruptLogError, match="the file name says 4"):
        FileStorage(tmp_path).load()


def test_missing_records_before_the_first_segment_refuse_to_start(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    append(storage, make_batches(0, 10))
    segment_files(tmp_path)[0].unlink()
    with pytest.raises(CorruptLogError, match="no snapshot: the records in between are missing"):
        FileStorage(tmp_path).load()


def test_failed_fsync_keeps_earlier_data_and_stops_the_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 4)
    append(storage, batches)

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing_fsync)
        patch.setattr(os, "fdatasync", failing_fsync)
        with pytest.raises(OSError):
            append(storage, make_batches(8, 2), write_id=2)
    with pytest.raises(StorageError, match="an earlier write failed"):
        append(storage, make_batches(8, 2), write_id=3)
    assert reload(tmp_path)[:4] == batches


def test_power_loss_mid_write_keeps_earlier_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 4)
    append(storage, batches)
    real_write = os.write

    def half_write_then_die(fd: int, data: bytes) -> int:
        real_write(fd, data[: len(data) // 2])
        raise OSError(5, "power lost")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", half_write_then_die)
        with pytest.raises(OSError):
            append(storage, make_batches(8, 5), write_id=2)
    loaded = reload(tmp_path)
    assert loaded[:4] == batches and len(loaded) < 9  # whole batches of the torn write may survive


def test_save_snapshot_deletes_segments_below_it(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    batches = make_batches(0, 20)
    append(storage, batches)
    storage.save_snapshot(Snapshot(SnapshotId(10, 1), b"old"))
    before = segment_files(tmp_path)
    storage.save_snapshot(Snapshot(SnapshotId(24, 1), b"state"))

    assert min(int(p.name[:20]) for p in segment_files(tmp_path)) <= 24
    assert len(segment_files(tmp_path)) < len(before)
    assert [p.name for _, p in layout.list_snapshots(layout.log_dir(tmp_path))] == [
        "00000000000000000024-0000000001.checkpoint"
    ]
    loaded = FileStorage(tmp_path).load()
    assert loaded.snapshot == Snapshot(SnapshotId(24, 1), b"state")
    assert loaded.batches == [b for b in batches if b.next_offset > 24]


def test_archive_keeps_retired_segments_and_snapshots(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT, archive=True)
    append(storage, make_batches(0, 20))
    written = [p.name for p in segment_files(tmp_path)]
    storage.save_snapshot(Snapshot(SnapshotId(10, 1), b"old"))
    storage.save_snapshot(Snapshot(SnapshotId(40, 1), b"all"))

    archive = layout.log_dir(tmp_path) / "archive"
    archived = sorted(p.name for p in archive.iterdir())
    assert [n for n in archived if n.endswith(".log")] == written
    assert "00000000000000000010-0000000001.checkpoint" in archived
    assert segment_files(tmp_path) == []
    append(storage, make_batches(40, 2))
    assert reload(tmp_path, archive=True) == make_batches(40, 2)


def test_archive_never_overwrites_history(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, archive=True)
    for epoch in (1, 2):  # the same segment name twice, each retired by an install
        snapshot = Snapshot(SnapshotId(100, epoch), b"")
        storage.write(Write(write_id=epoch, install_snapshot=snapshot, append=tuple(make_batches(100, 1))))
    storage.write(Write(write_id=3, install_snapshot=Snapshot(SnapshotId(200, 3), b"")))
    archive = layout.log_dir(tmp_path) / "archive"
    assert layout.list_segments(archive) == [
        (100, archive / "00000000000000000100.log"),
        (100, archive / "00000000000000000100.1.log"),
    ]


def test_snapshot_larger_than_the_log_end_empties_the_log(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 3))
    storage.save_snapshot(Snapshot(SnapshotId(50, 2), b"ahead"))
    assert segment_files(tmp_path) == []
    append(storage, make_batches(50, 1, epoch=2))
    assert reload(tmp_path) == make_batches(50, 1, epoch=2)


def test_interrupted_snapshot_write_is_removed(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    batches = make_batches(0, 10)
    append(storage, batches)
    storage.save_snapshot(Snapshot(SnapshotId(6, 1), b"good"))
    newer = layout.log_dir(tmp_path) / layout.snapshot_name(SnapshotId(12, 1))
    full = snapshot_file.encode_snapshot(Snapshot(SnapshotId(12, 1), b"newer state"))
    newer.with_name(newer.name + ".part").write_bytes(full[:-3])  # the crash came before the rename

    loaded = FileStorage(tmp_path).load()
    assert loaded.snapshot == Snapshot(SnapshotId(6, 1), b"good")
    assert loaded.batches == [b for b in batches if b.next_offset > 6]
    assert [p.name for p in layout.log_dir(tmp_path).iterdir() if "0012" in p.name] == []


def _damage_crc(raw: bytes) -> bytes:
    return raw[:-1] + bytes([raw[-1] ^ 0xFF])


SNAPSHOT_DAMAGE = {  # how a complete snapshot file can be damaged, and what load() must say
    "data byte": (_damage_crc, r"CRC-32C of the data \(byte 30 to the end\) is \w{8}, its header says \w{8}"),
    "magic": (lambda raw: b"XKSN" + raw[4:], r"bytes 0-5 hold magic b'XKSN' version 1"),
    "truncated": (lambda raw: raw[:-3], r"the header \(bytes 18-25\) says \d+ data bytes, the file holds"),
    "emptied": (lambda raw: b"", "0 bytes is too short for the 30-byte snapshot header"),
}


def load_refused(data_dir: Path) -> CorruptLogError:
    """The error ``load()`` stops with; fails showing what it recovered if it did not stop."""
    try:
        loaded = FileStorage(data_dir).load()
    except CorruptLogError as exc:
        return exc
    pytest.fail(f"load() started the node on damaged storage with {loaded}")


@pytest.mark.parametrize("damage", SNAPSHOT_DAMAGE)
def test_a_damaged_snapshot_at_the_log_end_stops_the_node_and_is_kept(tmp_path: Path, damage: str) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 10))
    storage.save_snapshot(Snapshot(SnapshotId(20, 1), b"state"))  # covers the whole log: no segment left
    assert segment_files(tmp_path) == []
    path = layout.log_dir(tmp_path) / layout.snapshot_name(SnapshotId(20, 1))
    corrupt, problem = SNAPSHOT_DAMAGE[damage]
    path.write_bytes(corrupt(path.read_bytes()))
    damaged = path.read_bytes()

    message = str(load_refused(tmp_path))
    assert re.search(problem, message), message
    assert message.startswith(f"{path}: ") and "raftka storage format" in message
    assert path.read_bytes() == damaged  # nothing deleted or rewritten


def test_a_damaged_installed_snapshot_never_leaves_an_empty_log_that_votes(tmp_path: Path) -> None:
    """A follower that installed the leader's snapshot holds no segment: if load() dropped the
    damaged snapshot, the node would start with an empty log and a quorum state that lets it
    vote (not recovering), so a lagging candidate could win and committed records be lost."""
    storage = open_storage(tmp_path)
    storage.write(Write(write_id=1, quorum_state=QuorumStateData(epoch=3, voted_id=2, leader_id=2)))
    storage.write(Write(write_id=2, install_snapshot=Snapshot(SnapshotId(500, 3), b"leader's")))
    path = layout.log_dir(tmp_path) / layout.snapshot_name(SnapshotId(500, 3))
    flip_byte(path, path.stat().st_size - 1)

    assert str(load_refused(tmp_path)).startswith(f"{path}: ")
    assert path.exists()


def test_a_damaged_newest_snapshot_is_not_replaced_by_an_older_one(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    append(storage, make_batches(0, 20))
    storage.save_snapshot(Snapshot(SnapshotId(10, 1), b"old"))
    newest = snapshot_file.write_snapshot(layout.log_dir(tmp_path), Snapshot(SnapshotId(30, 1), b"new"))
    storage.close()  # a crash before the older snapshot and the segments below 30 were retired
    flip_byte(newest, newest.stat().st_size - 1)

    assert str(load_refused(tmp_path)).startswith(f"{newest}: ")
    assert [p.name for _, p in layout.list_snapshots(layout.log_dir(tmp_path))] == [
        layout.snapshot_name(SnapshotId(10, 1)),
        newest.name,
    ]


def test_a_snapshot_whose_header_disagrees_with_its_name_stops_the_node(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.write(Write(write_id=1, install_snapshot=Snapshot(SnapshotId(40, 2), b"s")))
    path = layout.log_dir(tmp_path) / layout.snapshot_name(SnapshotId(40, 2))
    path.rename(path.with_name(layout.snapshot_name(SnapshotId(50, 2))))

    problem = r"the header \(bytes 6-17\) says offset 40 epoch 2, not the snapshot the file name says"
    with pytest.raises(CorruptLogError, match=problem):
        FileStorage(tmp_path).load()


def test_crash_between_snapshot_and_segment_deletion_is_completed_at_load(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    batches = make_batches(0, 20)
    append(storage, batches)
    snapshot_file.write_snapshot(layout.log_dir(tmp_path), Snapshot(SnapshotId(30, 1), b"s"))
    count = len(segment_files(tmp_path))

    loaded = FileStorage(tmp_path, segment_bytes=SMALL_SEGMENT).load()
    assert loaded.snapshot is not None and loaded.snapshot.id == SnapshotId(30, 1)
    assert loaded.batches == [b for b in batches if b.next_offset > 30]
    assert len(segment_files(tmp_path)) < count


def test_install_snapshot_replaces_the_log(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    append(storage, make_batches(0, 20))
    storage.save_snapshot(Snapshot(SnapshotId(10, 1), b"mine"))
    installed = Snapshot(SnapshotId(500, 3), b"leader's")
    storage.write(Write(write_id=2, install_snapshot=installed, append=tuple(make_batches(500, 2, epoch=3))))

    assert [p.name for p in segment_files(tmp_path)] == ["00000000000000000500.log"]
    loaded = FileStorage(tmp_path).load()
    assert loaded.snapshot == installed
    assert loaded.batches == make_batches(500, 2, epoch=3)


def test_install_interrupted_before_the_old_log_was_dropped_drops_it_at_load(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 20, epoch=1))  # ends at 40, past the snapshot, in an older epoch
    snapshot_file.write_snapshot(layout.log_dir(tmp_path), Snapshot(SnapshotId(30, 2), b"leader's"))

    loaded = FileStorage(tmp_path).load()
    assert loaded.snapshot is not None and loaded.snapshot.id == SnapshotId(30, 2)
    assert loaded.batches == [] and segment_files(tmp_path) == []


@pytest.mark.parametrize("offset", [0, 8, 12, 14, 36, 40])
def test_truncate_across_segment_boundaries(tmp_path: Path, offset: int) -> None:
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT)
    batches = make_batches(0, 20)
    append(storage, batches)
    storage.write(Write(write_id=2, truncate_to=offset))

    kept = [b for b in batches if b.base_offset < offset]
    assert reload(tmp_path) == kept
    assert all(int(p.name[:20]) < offset for p in segment_files(tmp_path))
    storage.write(Write(write_id=3, append=tuple(make_batches(offset, 3, epoch=2))))
    assert reload(tmp_path) == kept + make_batches(offset, 3, epoch=2)


def test_truncate_inside_a_batch_is_a_contract_violation(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    append(storage, make_batches(0, 3))
    with pytest.raises(AssertionError, match="inside the batch"):
        storage.write(Write(write_id=2, truncate_to=3))


def test_writes_need_a_load_first(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="load"):
        append(FileStorage(tmp_path), make_batches(0, 1))


def test_leftover_temp_files_are_removed(tmp_path: Path) -> None:
    open_storage(tmp_path)
    log_dir = layout.log_dir(tmp_path)
    (log_dir / "quorum-state.tmp").write_text("{")
    (log_dir / "00000000000000000005-0000000001.checkpoint.part").write_bytes(b"x")
    assert FileStorage(tmp_path).load().snapshot is None
    assert sorted(p.name for p in log_dir.iterdir()) == []


def test_archive_is_pruned_oldest_first_down_to_a_leading_snapshot(tmp_path: Path) -> None:
    bound = 1500  # about one snapshot interval of segments
    storage = open_storage(tmp_path, segment_bytes=SMALL_SEGMENT, archive=True, archive_max_bytes=bound)
    for round_ in range(1, 6):
        append(storage, make_batches((round_ - 1) * 40, 20), write_id=round_)
        storage.save_snapshot(Snapshot(SnapshotId(round_ * 40, 1), b"state" * 10))
    archive = layout.log_dir(tmp_path) / layout.ARCHIVE_DIR
    kept = layout.log_files(archive)
    assert sum(p.stat().st_size for p in kept) <= bound
    assert kept[0].name.endswith(layout.SNAPSHOT_SUFFIX)  # history starts where it can be replayed
    # what stays is the newest stretch: it reaches the live snapshot at 200
    assert layout.parse_segment_name(kept[-1].name) is not None
    assert len(kept) < 5 * 8  # something was pruned
    assert reload(tmp_path, archive=True) == []


def test_history_files_list_archive_generations_oldest_first(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, archive=True)
    for epoch in (1, 2):
        snapshot = Snapshot(SnapshotId(100, epoch), b"")
        storage.write(Write(write_id=epoch, install_snapshot=snapshot, append=tuple(make_batches(100, 1))))
    storage.write(Write(write_id=3, install_snapshot=Snapshot(SnapshotId(200, 3), b"")))
    names = [p.relative_to(layout.log_dir(tmp_path)).as_posix() for p in layout.history_files(tmp_path)]
    assert names == [
        "archive/00000000000000000100-0000000001.checkpoint",  # snapshots at N before the segment at N
        "archive/00000000000000000100-0000000002.checkpoint",
        "archive/00000000000000000100.log",  # generation 0 is the older copy, .1 the newer
        "archive/00000000000000000100.1.log",
        "00000000000000000200-0000000003.checkpoint",
    ]
