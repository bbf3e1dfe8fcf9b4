"""The metadata log decoded, one dict per record, like ``kafka-dump-log --cluster-metadata-decoder``.

Each line is ``{"offset", "epoch", "timestamp", "type", "data"}``; the records of a
snapshot carry ``"snapshot": "<offset>-<epoch>"`` and the snapshot's offset. Raft's own
control records show as ``LEADER_CHANGE`` and ``NO_OP``. Damage (a torn batch, a
corrupt snapshot, a record that does not decode) shows as a ``DAMAGED`` line with the
error and the dump goes on, so an operator sees everything that is still readable.

Files are found and framed by ``raftka.raft.storage.dump`` (read-only); only the record
decoding is metadata's.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raftka.metadata import records
from raftka.metadata.records import RecordError
from raftka.metadata.snapshot import SnapshotError, read_snapshot
from raftka.raft.batch import BatchKind
from raftka.raft.control import decode_control
from raftka.raft.storage import snapshot_file
from raftka.raft.storage.dump import iter_dump

DAMAGED = "DAMAGED"
_CONTROL_TYPES = {
    BatchKind.LEADER_CHANGE.name: "LEADER_CHANGE",
    BatchKind.NOOP.name: "NO_OP",
    BatchKind.VOTERS.name: "VOTERS",  # KIP-853: its KRaftVersionRecord, then its VotersRecord
}
_VOTERS_RECORDS = {"KRaftVersion": "KRAFT_VERSION", "Voters": "VOTERS"}


def iter_metadata_dump(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of every snapshot and batch under ``path`` (data dir, log dir or one file), in log order.

    Raises ``raftka.raft.storage.base.StorageError`` when ``path`` holds no log files.
    """
    for entry in iter_dump(path):
        if entry["type"] == "snapshot":
            yield from _snapshot_lines(entry)
        elif entry["type"] == "batch":
            yield from _batch_lines(entry)
        else:
            yield _damaged_region(entry)


def _batch_lines(entry: dict[str, Any]) -> Iterator[dict[str, Any]]:
    control_type = _CONTROL_TYPES.get(entry["kind"])
    for index, encoded in enumerate(entry["records"]):
        line = {
            "offset": entry["base_offset"] + index,
            "epoch": entry["epoch"],
            "timestamp": entry["timestamp_ms"],
        }
        raw = base64.b64decode(encoded)
        if control_type is None:
            yield line | _record_fields(raw)
            continue
        control = decode_control(raw)
        if control.get("type") == "Unknown":
            yield line | {"type": DAMAGED, "error": f"unreadable {control_type} control record"}
        else:
            kind = (
                _VOTERS_RECORDS.get(control["type"], control_type)
                if control_type == "VOTERS"
                else control_type
            )
            yield line | {"type": kind, "data": {k: v for k, v in control.items() if k != "type"}}


def _snapshot_lines(entry: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if not entry["valid"]:
        yield {"type": DAMAGED, "file": entry["file"], "error": entry["error"]}
        return
    name = f"{entry['offset']}-{entry['epoch']}"
    try:
        raw = Path(entry["file"]).read_bytes()
        contents = read_snapshot(snapshot_file.decode_snapshot(raw).data)
    except (OSError, snapshot_file.SnapshotFileError, SnapshotError) as exc:
        yield {"type": DAMAGED, "file": entry["file"], "snapshot": name, "error": str(exc)}
        return
    for data in contents.records:
        line = {"offset": entry["offset"], "epoch": entry["epoch"], "timestamp": contents.timestamp_ms}
        yield line | _record_fields(data) | {"snapshot": name}


def _record_fields(raw: bytes) -> dict[str, Any]:
    try:
        record = records.decode(raw)
    except RecordError as exc:
        return {"type": DAMAGED, "error": str(exc)}
    return {"type": records.type_name(record), "data": records.to_json(record)}


def _damaged_region(entry: dict[str, Any]) -> dict[str, Any]:
    line: dict[str, Any] = {"type": DAMAGED, "file": entry["file"], "position": entry["position"]}
    if "base_offset" in entry:
        line |= {"offset": entry["base_offset"], "epoch": entry["epoch"], "timestamp": entry["timestamp_ms"]}
    return line | {"error": entry["error"]}
