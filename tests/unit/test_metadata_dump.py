"""``raftka metadata dump``: a real data dir decoded record by record, damage shown in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.metadata import records
from raftka.metadata.dump import iter_metadata_dump
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import Snapshot, Write
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage import layout
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.file import FileStorage
from tests.unit import metadata_support as m
from tests.unit.storage_support import flip_byte

T1 = m.topic_id(1)
TS = 1_700_000_000_000


def _batch(base: int, kind: BatchKind, *raw: bytes, epoch: int = 1) -> Batch:
    return Batch(base, epoch, TS + base, kind, raw)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Offsets 0-5 archived under a snapshot at 6 (epoch 1), then 6-7 live with a bad record at 6."""
    batches = [
        _batch(0, BatchKind.LEADER_CHANGE, control.encode_leader_change(1, frozenset({1, 2, 3}), 1)),
        _batch(
            1,
            BatchKind.DATA,
            *map(records.encode, [m.register(101, 1), m.topic("a", T1), m.partition(T1, 0, [101])]),
        ),
        _batch(4, BatchKind.NOOP, control.NOOP_RECORD),
        _batch(5, BatchKind.DATA, records.encode(m.commit("g", T1, 0, 42))),
    ]
    snapshots: list[Snapshot] = []
    state = MetadataStateMachine(SnapshotPolicy(snapshot_interval_records=4), snapshots.append)
    for batch in batches:
        state.apply(batch)
    storage = FileStorage(tmp_path, segment_bytes=64, archive=True)
    storage.load()
    storage.write(Write(write_id=1, append=tuple(batches)))
    [snapshot] = snapshots
    storage.save_snapshot(snapshot)
    storage.write(
        Write(write_id=2, append=(_batch(6, BatchKind.DATA, b"\xff\xff", records.encode(m.no_op())),))
    )
    storage.close()
    return tmp_path


def test_dumps_log_and_snapshot_records_in_order(data_dir: Path) -> None:
    lines = list(iter_metadata_dump(data_dir))
    summary = [(line["offset"], line["type"], line.get("snapshot")) for line in lines]
    assert summary == [
        (0, "LEADER_CHANGE", None),
        (1, "REGISTER_BROKER_RECORD", None),
        (2, "TOPIC_RECORD", None),
        (3, "PARTITION_RECORD", None),
        (4, "NO_OP", None),
        (5, "OFFSET_COMMIT_RECORD", None),
        (6, "REGISTER_BROKER_RECORD", "6-1"),
        (6, "TOPIC_RECORD", "6-1"),
        (6, "PARTITION_RECORD", "6-1"),
        (6, "OFFSET_COMMIT_RECORD", "6-1"),
        (6, "DAMAGED", None),
        (7, "NO_OP_RECORD", None),
    ]


def test_a_line_is_shaped_like_kafka_dump_log(data_dir: Path) -> None:
    lines = list(iter_metadata_dump(data_dir))
    assert lines[2] == {
        "offset": 2,
        "epoch": 1,
        "timestamp": TS + 1,
        "type": "TOPIC_RECORD",
        "data": {"name": "a", "topic_id": records.topic_id_str(T1)},
    }
    assert lines[0]["data"] == {"leader_id": 1, "epoch": 1, "voters": [1, 2, 3]}
    assert lines[4]["data"] == {}
    snapshot_line = lines[9]
    assert snapshot_line == {
        "offset": 6,
        "epoch": 1,
        "timestamp": TS + 5,  # the last batch the snapshot includes
        "type": "OFFSET_COMMIT_RECORD",
        "data": records.to_json(m.commit("g", T1, 0, 42)),
        "snapshot": "6-1",
    }
    assert lines[10]["error"].startswith("not a MetadataRecord")


def test_a_single_segment_or_the_log_dir(data_dir: Path) -> None:
    live = layout.log_dir(data_dir) / layout.segment_name(6)
    assert [line["offset"] for line in iter_metadata_dump(live)] == [6, 7]
    assert list(iter_metadata_dump(layout.log_dir(data_dir))) == list(iter_metadata_dump(data_dir))


def test_damaged_files_are_reported_and_the_dump_goes_on(data_dir: Path) -> None:
    log_dir = layout.log_dir(data_dir)
    [snapshot] = log_dir.glob("*.checkpoint")
    flip_byte(snapshot, snapshot.stat().st_size - 1)
    flip_byte(log_dir / layout.segment_name(6), 30)
    lines = list(iter_metadata_dump(data_dir))
    damaged = [line for line in lines if line["type"] == "DAMAGED"]
    assert [line["file"] for line in damaged] == [str(snapshot), str(log_dir / layout.segment_name(6))]
    assert "CRC-32C" in damaged[0]["error"] and "CRC-32C" in damaged[1]["error"]
    assert [line["offset"] for line in lines if line["type"] != "DAMAGED"] == [0, 1, 2, 3, 4, 5]


def test_a_snapshot_that_is_not_a_metadata_image(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    storage.load()
    storage.write(Write(write_id=1, append=(_batch(0, BatchKind.DATA, records.encode(m.no_op())),)))
    storage.save_snapshot(Snapshot(SnapshotId(1, 1), b"journal entries: anything but a metadata image"))
    storage.close()
    [line] = list(iter_metadata_dump(tmp_path))
    assert line["type"] == "DAMAGED" and line["snapshot"] == "1-1"
    assert "not a version 1 metadata snapshot" in line["error"]


def test_removed_group_offsets_are_dumped_with_the_group(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    storage.load()
    removal = records.encode(m.remove_group_offsets("g"))
    storage.write(Write(write_id=1, append=(_batch(0, BatchKind.DATA, removal),)))
    storage.close()
    [line] = list(iter_metadata_dump(tmp_path))
    assert (line["type"], line["data"]) == ("REMOVE_GROUP_OFFSETS_RECORD", {"group": "g"})


def test_an_empty_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no segment or snapshot files"):
        list(iter_metadata_dump(tmp_path))
