"""metadata dump: a data dir's metadata log as JSON lines (kafka-dump-log's fields) or
one readable line per record; a record that does not decode is shown, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftka.cli.main import main
from raftka.metadata import records
from raftka.raft.batch import Batch, BatchKind
from raftka.raft.control import encode_leader_change
from raftka.raft.effects import Write
from raftka.raft.storage.file import FileStorage
from raftka.v1 import metadata_pb2

TOPIC_ID = bytes(range(16))


def write_log(data_dir: Path) -> None:
    topic = metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="orders", topic_id=TOPIC_ID))
    storage = FileStorage(data_dir)
    storage.load()
    leader_change = Batch(
        0, 1, 1_000, BatchKind.LEADER_CHANGE, (encode_leader_change(2, frozenset({1, 2, 3}), 1),)
    )
    data = Batch(1, 1, 2_000, BatchKind.DATA, (records.encode(topic), b"\xff not a record"))
    storage.write(Write(write_id=1, append=(leader_change, data)))
    storage.close()


def test_dump_as_json_lines_and_as_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path)
    capsys.readouterr()  # what the storage logged while writing
    assert main(["metadata", "dump", str(tmp_path), "--output", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["offset"], e["epoch"], e["timestamp"], e["type"]) for e in lines] == [
        (0, 1, 1_000, "LEADER_CHANGE"),
        (1, 1, 2_000, "TOPIC_RECORD"),
        (2, 1, 2_000, "DAMAGED"),
    ]
    assert lines[1]["data"] == {"name": "orders", "topic_id": "AAECAwQFBgcICQoLDA0ODw"}

    assert main(["metadata", "dump", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1] == (
        "offset: 1 epoch: 1 CreateTime: 2000 payload: "
        '{"type":"TOPIC_RECORD","data":{"name":"orders","topic_id":"AAECAwQFBgcICQoLDA0ODw"}}'
    )
    assert table[2].startswith("offset: 2 epoch: 1 CreateTime: 2000 type: DAMAGED error: ")


def test_a_missing_path_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["metadata", "dump", str(tmp_path / "nope")])
    assert exit_.value.code == 1
    assert capsys.readouterr().err == f"raftka: error: {tmp_path / 'nope'}: no such file or directory\n"
