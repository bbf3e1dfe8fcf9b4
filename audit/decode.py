"""A metadata log file (or its bytes) as rows, decoded with the controllers' own code.

Segments are framed by ``raftka.raft.storage.batch_codec`` and records decoded by
``raftka.metadata.records`` (the same checks every replica runs before replay); snapshots by
``raftka.raft.storage.snapshot_file`` and ``raftka.metadata.snapshot``. Nothing here raises on bad
data: damage becomes a DAMAGED row naming the file and the byte where it starts, and
reading goes on at the next valid batch, as ``raftka metadata dump`` does. A file that cannot
be opened is one UNREADABLE row: it says nothing about the history, so it is never damage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from raftka.audit.files import SNAPSHOT, LogFile
from raftka.audit.schema import EMPTY, Row
from raftka.metadata import records
from raftka.metadata.records import MetadataRecord, RecordError, topic_id_str
from raftka.metadata.snapshot import SnapshotContents, SnapshotError, read_snapshot
from raftka.raft.batch import BatchKind, SnapshotId
from raftka.raft.control import decode_control
from raftka.raft.storage import batch_codec, layout, snapshot_file
from raftka.raft.voters import VoterSet
from raftka.v1 import metadata_pb2

DAMAGED = "DAMAGED"
UNREADABLE = "UNREADABLE"
LEADER_CHANGE = "LEADER_CHANGE"
NO_OP = "NO_OP"
VOTERS = "VOTERS"  # KIP-853: a VotersRecord; its batch opens with a KRAFT_VERSION record
KRAFT_VERSION = "KRAFT_VERSION"
SNAPSHOT_KIND = "SNAPSHOT"
CONTROL_TYPES = {BatchKind.LEADER_CHANGE: LEADER_CHANGE, BatchKind.NOOP: NO_OP, BatchKind.VOTERS: VOTERS}
_CONFIG_TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC

# The typed columns of one record: (topic_id, topic, partition, broker, broker_epoch,
# leader, isr, replicas, group, committed_offset)
_Typed = tuple[Any, ...]
_NONE: _Typed = (None,) * 10
# A history names a few thousand topic ids millions of times: base64 once per id.
_topic_id = lru_cache(maxsize=1 << 16)(topic_id_str)


def decode_file(file: LogFile, *, with_json: bool = True, heads_only: bool = False) -> Iterator[Row]:
    """Every row of ``file``; a file that cannot be read is one UNREADABLE row. ``heads_only``:
    only the rows ``raftka.audit.walk.is_head`` keeps (each batch's first record, and damage),
    still checking every frame, so damage is found as in a full read."""
    try:
        data = Path(file.path).read_bytes()
    except OSError as exc:
        yield _damaged(file, None, f"cannot read the file: {exc.strerror or exc}")._replace(type=UNREADABLE)
        return
    if file.source == SNAPSHOT:
        yield from decode_snapshot_bytes(file, data, with_json=with_json, heads_only=heads_only)
    else:
        yield from decode_segment_bytes(file, data, with_json=with_json, heads_only=heads_only)


def decode_segment_bytes(
    file: LogFile, data: bytes, *, with_json: bool = True, heads_only: bool = False
) -> Iterator[Row]:
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
        control = CONTROL_TYPES.get(batch.kind)
        # every row of a voter change carries its voter set: the walk sees batch heads only
        batch_voters = _voter_ids(batch.records[-1]) if control == VOTERS else None
        for index, raw in enumerate(batch.records[:1] if heads_only else batch.records):
            batch_fields = (*head, index, count, crc, batch.base_offset + index, epoch, timestamp)
            if control:
                row = _control_row(
                    Row._make((*batch_fields, None, *_NONE, None, None, None, None, raw)), control, raw
                )
                yield (
                    row._replace(voters=batch_voters)
                    if batch_voters is not None and row.type != DAMAGED
                    else row
                )
            else:
                yield _record_row(batch_fields, raw, with_json)


def snapshot_contents(file: LogFile, data: bytes) -> tuple[SnapshotId, SnapshotContents]:
    """A snapshot file's id and records (not decoded); SnapshotError says what is wrong."""
    try:
        snapshot = snapshot_file.decode_snapshot(data)
    except snapshot_file.SnapshotFileError as exc:
        raise SnapshotError(str(exc)) from None
    if layout.parse_snapshot_name(Path(file.path).name) not in (None, snapshot.id):
        raise SnapshotError(
            f"the header says offset {snapshot.id.offset} epoch {snapshot.id.epoch}, not what the name says"
        )
    return snapshot.id, read_snapshot(snapshot.data)


def decode_snapshot_bytes(
    file: LogFile, data: bytes, *, with_json: bool = True, heads_only: bool = False
) -> Iterator[Row]:
    """The rows of a snapshot file: its image's records, all at the snapshot's offset."""
    try:
        sid, contents = snapshot_contents(file, data)
    except SnapshotError as exc:
        yield _damaged(file, 0, str(exc))
        return
    count = len(contents.records)
    timestamp = contents.timestamp_ms if contents.timestamp_ms >= 0 else None
    head = (file.node, file.path, file.seq, file.source, file.archived, None, SNAPSHOT_KIND, sid.offset)
    for index, raw in enumerate(contents.records[:1] if heads_only else contents.records):
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
    type_name, leader, voters, text, error = control_columns(control_type, raw)
    if error is not None:
        return row._replace(type=DAMAGED, error=error, torn_tail=False)
    return row._replace(type=type_name, leader=leader, voters=voters, json=text)


def control_columns(
    control_type: str, raw: bytes
) -> tuple[str, int | None, list[int] | None, str | None, str | None]:
    """A control record's (type, leader, voters, json, error); type DAMAGED with an error
    when it cannot be read."""
    value = decode_control(raw)
    if value.get("type") == "Unknown":
        return DAMAGED, None, None, None, f"unreadable {control_type} control record"
    if control_type == NO_OP:
        return NO_OP, None, None, None, None
    if control_type == VOTERS:
        kind = {"KRaftVersion": KRAFT_VERSION, "Voters": VOTERS}.get(value.get("type", ""))
        if kind is None:
            return DAMAGED, None, None, None, f"a {value.get('type')!r} record in a VOTERS batch"
        ids = _voter_ids(raw) if kind == VOTERS else None
        if kind == VOTERS and ids is None:
            return DAMAGED, None, None, None, "VotersRecord without voters"
        data = json.dumps({k: v for k, v in value.items() if k != "type"}, separators=(",", ":"))
        return kind, None, ids, data, None
    leader, voters = value.get("leader_id"), value.get("voters")
    if (
        not isinstance(leader, int)
        or not isinstance(voters, list)
        or not all(isinstance(v, int) for v in voters)
    ):
        return DAMAGED, None, None, None, "LEADER_CHANGE record without leader_id and voters"
    data = json.dumps({k: v for k, v in value.items() if k != "type"}, separators=(",", ":"))
    return LEADER_CHANGE, leader, voters, data, None


def _voter_ids(raw: bytes) -> list[int] | None:
    try:
        return sorted(VoterSet.decode(raw).ids)
    except ValueError:
        return None


def _record_row(batch_fields: tuple[Any, ...], raw: bytes, with_json: bool) -> Row:
    """``batch_fields``: every column up to ``timestamp_ms``."""
    type_name, typed, record, error = decode_record(raw)
    if record is None:
        return Row._make((*batch_fields, DAMAGED, *_NONE, None, None, error, False, raw))
    text = json.dumps(records.to_json(record), separators=(",", ":")) if with_json else None
    return Row._make((*batch_fields, type_name, *typed, None, text, None, None, raw))


def decode_record(raw: bytes) -> tuple[str, _Typed, MetadataRecord | None, str | None]:
    """A record's type, typed columns and message, decoded and checked as every controller
    does; a record that does not decode is (DAMAGED, no columns, None, why)."""
    try:
        record = records.decode(raw)
    except RecordError as exc:
        return DAMAGED, _NONE, None, str(exc)
    kind = record.WhichOneof("record")
    return _TYPE_NAMES[kind], _TYPED.get(kind, _no_columns)(getattr(record, kind)), record, None


def _no_columns(_: Message) -> _Typed:
    return _NONE


def _broker(broker_id: int, epoch: int) -> _Typed:
    return (None, None, None, broker_id, epoch, None, None, None, None, None)


def _partition(r: metadata_pb2.PartitionRecord) -> _Typed:
    return (
        _topic_id(r.topic_id),
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
    return (_topic_id(r.topic_id), None, r.partition_id, None, None, r.leader, isr, replicas, None, None)


def _config(r: metadata_pb2.ConfigRecord) -> _Typed:
    topic = r.resource_name if r.resource_type == _CONFIG_TOPIC else None
    return (None, topic, None, None, None, None, None, None, None, None)


def _offset_commit(r: metadata_pb2.OffsetCommitRecord) -> _Typed:
    return (_topic_id(r.topic_id), None, r.partition, None, None, None, None, None, r.group, r.offset)


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
    "topic": lambda r: (_topic_id(r.topic_id), r.name, None, None, None, None, None, None, None, None),
    "partition": _partition,
    "partition_change": _partition_change,
    "remove_topic": lambda r: (
        _topic_id(r.topic_id),
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
