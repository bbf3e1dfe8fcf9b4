"""A metadata log file (or its bytes) as rows, decoded with the controllers' own code.

Segments are framed by ``raftka.raft.storage.batch_codec`` and records decoded by
``raftka.metadata.records`` (the same checks every replica runs before replay); snapshots by
``raftka.raft.storage.snapshot_file`` and ``raftka.metadata.snapshot``. Nothing here raises on bad
data: damage becomes a DAMAGED row naming the file and the byte where it starts, and
reading goes on at the next valid batch, as ``raftka metadata dump`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from raftka.audit.files import SNAPSHOT, LogFile
from raftka.audit.schema import EMPTY, Row
from raftka.metadata import records
from raftka.metadata.records import RecordError, topic_id_str
from raftka.metadata.snapshot import SnapshotError, read_snapshot
from raftka.raft.batch import BatchKind
from raftka.raft.control import decode_control
from raftka.raft.storage import batch_codec, layout, snapshot_file
from raftka.v1 import metadata_pb2

DAMAGED = "DAMAGED"
LEADER_CHANGE = "LEADER_CHANGE"
NO_OP = "NO_OP"
SNAPSHOT_KIND = "SNAPSHOT"
_CONTROL_TYPES = {BatchKind.LEADER_CHANGE: LEADER_CHANGE, BatchKind.NOOP: NO_OP}
_CONFIG_TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC

# The typed columns of one record: (topic_id, topic, partition, broker, broker_epoch,
# leader, isr, replicas, group, committed_offset)
_Typed = tuple[Any, ...]
_NONE: _Typed = (None,) * 10


def decode_file(file: LogFile, *, with_json: bool = True) -> Iterator[Row]:
    """Every row of ``file``; a file that cannot be read is one DAMAGED row."""
    try:
        data = Path(file.path).read_bytes()
    except OSError as exc:
        yield _damaged(file, None, f"cannot read the file: {exc.strerror or exc}")
        return
    if file.source == SNAPSHOT:
        yield from decode_snapshot_bytes(file, data, with_json=with_json)
    else:
        yield from decode_segment_bytes(file, data, with_json=with_json)


def decode_segment_bytes(file: LogFile, data: bytes, *, with_json: bool = True) -> Iterator[Row]:
    """The rows of a segment's bytes: one per record, one per damaged region."""
    prefix = (file.node, file.path, file.seq, file.source, file.archived)
    for frame, span_bytes in batch_codec.scan_frames(data):
        batch = frame.batch
        if batch is None:
            ends_file = frame.position + span_bytes == len(data)
            torn = file.newest_segment and ends_file and not frame.crc_valid
            yield _damaged(file, frame.position, f"{span_bytes} bytes: {frame.error}", torn)
            continue
        assert frame.header is not None
        head = (*prefix, frame.position, batch.kind.name, batch.base_offset)
        count, crc, epoch, timestamp = len(batch.records), frame.header.crc, batch.epoch, batch.timestamp_ms
        control = _CONTROL_TYPES.get(batch.kind)
        for index, raw in enumerate(batch.records):
            batch_fields = (*head, index, count, crc, batch.base_offset + index, epoch, timestamp)
            if control:
                yield _control_row(
                    Row._make((*batch_fields, None, *_NONE, None, None, None, None, raw)), control, raw
                )
            else:
                yield _record_row(batch_fields, raw, with_json)


def decode_snapshot_bytes(file: LogFile, data: bytes, *, with_json: bool = True) -> Iterator[Row]:
    """The rows of a snapshot file: its image's records, all at the snapshot's offset."""
    try:
        snapshot = snapshot_file.decode_snapshot(data)
        if layout.parse_snapshot_name(Path(file.path).name) not in (None, snapshot.id):
            raise snapshot_file.SnapshotFileError(
                f"the header says offset {snapshot.id.offset} epoch {snapshot.id.epoch}, not what the name says"
            )
        contents = read_snapshot(snapshot.data)
    except (snapshot_file.SnapshotFileError, SnapshotError) as exc:
        yield _damaged(file, 0, str(exc))
        return
    sid, count = snapshot.id, len(contents.records)
    timestamp = contents.timestamp_ms if contents.timestamp_ms >= 0 else None
    head = (file.node, file.path, file.seq, file.source, file.archived, None, SNAPSHOT_KIND, sid.offset)
    for index, raw in enumerate(contents.records):
        yield _record_row((*head, index, count, None, sid.offset, sid.epoch, timestamp), raw, with_json)


def _damaged(file: LogFile, position: int | None, error: str, torn: bool = False) -> Row:
    where = f"byte {position}: " if position is not None else ""
    return EMPTY._replace(
        node=file.node,
        file=file.path,
        file_seq=file.seq,
        source=file.source,
        archived=file.archived,
        position=position,
        type=DAMAGED,
        error=where + error,
        torn_tail=torn,
    )


def _control_row(row: Row, control_type: str, raw: bytes) -> Row:
    value = decode_control(raw)
    if value.get("type") == "Unknown":
        return row._replace(type=DAMAGED, error=f"unreadable {control_type} control record", torn_tail=False)
    if control_type == NO_OP:
        return row._replace(type=NO_OP)
    leader, voters = value.get("leader_id"), value.get("voters")
    if (
        not isinstance(leader, int)
        or not isinstance(voters, list)
        or not all(isinstance(v, int) for v in voters)
    ):
        return row._replace(
            type=DAMAGED, error="LEADER_CHANGE record without leader_id and voters", torn_tail=False
        )
    data = json.dumps({k: v for k, v in value.items() if k != "type"}, separators=(",", ":"))
    return row._replace(type=LEADER_CHANGE, leader=leader, voters=voters, json=data)


def _record_row(batch_fields: tuple[Any, ...], raw: bytes, with_json: bool) -> Row:
    """``batch_fields``: every column up to ``timestamp_ms``."""
    try:
        record = records.decode(raw)
    except RecordError as exc:
        return Row._make((*batch_fields, DAMAGED, *_NONE, None, None, str(exc), False, raw))
    kind = record.WhichOneof("record")
    typed = _TYPED.get(kind, _no_columns)(getattr(record, kind))
    text = json.dumps(records.to_json(record), separators=(",", ":")) if with_json else None
    return Row._make((*batch_fields, _TYPE_NAMES[kind], *typed, None, text, None, None, raw))


def _no_columns(_: Message) -> _Typed:
    return _NONE


def _broker(broker_id: int, epoch: int) -> _Typed:
    return (None, None, None, broker_id, epoch, None, None, None, None, None)


def _partition(r: metadata_pb2.PartitionRecord) -> _Typed:
    return (
        topic_id_str(r.topic_id),
        None,
        r.partition_id,
        None,
        None,
        r.leader,
        list(r.isr),
        list(r.replicas),
        None,
        None,
    )


def _partition_change(r: metadata_pb2.PartitionChangeRecord) -> _Typed:
    isr = list(r.isr.ids) if r.HasField("isr") else None
    replicas = list(r.replicas.ids) if r.HasField("replicas") else None
    return (topic_id_str(r.topic_id), None, r.partition_id, None, None, r.leader, isr, replicas, None, None)


def _config(r: metadata_pb2.ConfigRecord) -> _Typed:
    topic = r.resource_name if r.resource_type == _CONFIG_TOPIC else None
    return (None, topic, None, None, None, None, None, None, None, None)


def _offset_commit(r: metadata_pb2.OffsetCommitRecord) -> _Typed:
    return (topic_id_str(r.topic_id), None, r.partition, None, None, None, None, None, r.group, r.offset)


_TYPE_NAMES = {
    field.name: f"{field.name.upper()}_RECORD"
    for field in records.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields
}
_TYPED: dict[str, Callable[[Any], _Typed]] = {
    "register_broker": lambda r: _broker(r.broker_id, r.broker_epoch),
    "unregister_broker": lambda r: _broker(r.broker_id, r.broker_epoch),
    "fence_broker": lambda r: _broker(r.id, r.epoch),
    "unfence_broker": lambda r: _broker(r.id, r.epoch),
    "producer_ids": lambda r: _broker(r.broker_id, r.broker_epoch),
    "topic": lambda r: (topic_id_str(r.topic_id), r.name, None, None, None, None, None, None, None, None),
    "partition": _partition,
    "partition_change": _partition_change,
    "remove_topic": lambda r: (
        topic_id_str(r.topic_id),
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ),
    "config": _config,
    "offset_commit": _offset_commit,
    "remove_group_offsets": lambda r: (None, None, None, None, None, None, None, None, r.group, None),
    "group_rebalance": lambda r: (None, None, None, r.coordinator, None, None, None, None, r.group, None),
}
