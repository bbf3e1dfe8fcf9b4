"""The canonical history replayed through ``MetadataDelta``: what changed, record by record.

The replay applies batches exactly as every node's state machine does (a batch that does
not decode or replay is skipped whole) and reads what each record did from the images
before and after it, never from its own idea of the rules: a partition's new leader is
the one the image holds after the record, and whether an election was clean compares
that leader with the ISR the image held before it. Batches that hold only offset commits,
NoOps, producer id blocks or feature levels are replayed as one delta (nothing in them
makes an event); the others record by record, each on the image the previous one made.

Out come event rows (``EVENT_SCHEMA``): partition transitions and state samples, broker,
topic, config and group events, and violations; ``raftka.audit.tables`` turns them into tables.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Iterator
from itertools import groupby
from typing import Any, NamedTuple

import pyarrow as pa

from raftka.audit.checks import ERROR, INFO, VIOLATION_COLUMNS, violation
from raftka.audit.decode import DAMAGED, SNAPSHOT_KIND
from raftka.audit.schema import INT_LIST
from raftka.metadata import records
from raftka.metadata.delta import MetadataDelta, ReplayError
from raftka.metadata.image import EMPTY, NO_LEADER, TOPIC, MetadataImage, PartitionState
from raftka.metadata.records import MetadataRecord, RecordError, topic_id_str
from raftka.metadata.snapshot import SnapshotContents, SnapshotError, rebuild_image
from raftka.metadata.topic_configs import MIN_INSYNC_REPLICAS, TOPIC_CONFIGS

TRANSITION, STATE, BROKER, TOPIC_EVENT, CONFIG, GROUP, REBALANCE, VIOLATION, SKIPPED, START = (
    "TRANSITION", "STATE", "BROKER", "TOPIC", "CONFIG", "GROUP", "REBALANCE", "VIOLATION", "SKIPPED", "START",
)  # fmt: skip
# Batches made only of these replay as one delta: they change no partition, broker, topic or config.
_QUIET = frozenset({"offset_commit", "no_op", "producer_ids", "feature_level"})
_DEFAULT_MIN_ISR = int(TOPIC_CONFIGS[MIN_INSYNC_REPLICAS].default)
_RESOURCE_TYPES = {TOPIC: "TOPIC", 4: "BROKER"}

EVENT_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("event", pa.string()),
    ("seq", pa.int64()),
    ("offset", pa.int64()),
    ("epoch", pa.int32()),
    ("timestamp_ms", pa.int64()),
    ("topic_id", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("cause", pa.string()),
    ("isr_change", pa.string()),
    ("leader_before", pa.int32()),
    ("leader_after", pa.int32()),
    ("isr_before", INT_LIST),
    ("isr_after", INT_LIST),
    ("replicas_before", INT_LIST),
    ("replicas_after", INT_LIST),
    ("leader_epoch_before", pa.int32()),
    ("leader_epoch_after", pa.int32()),
    ("partition_epoch_before", pa.int32()),
    ("partition_epoch_after", pa.int32()),
    ("clean", pa.bool_()),
    ("offline", pa.bool_()),
    ("under_replicated", pa.bool_()),
    ("under_min_isr", pa.bool_()),
    ("non_preferred", pa.bool_()),
    ("min_isr", pa.int32()),
    ("broker", pa.int32()),
    ("broker_epoch", pa.int64()),
    ("incarnation", pa.string()),
    ("fenced", pa.bool_()),
    ("partitions_led", pa.int32()),
    ("resource_type", pa.string()),
    ("resource", pa.string()),
    ("key", pa.string()),
    ("value_before", pa.string()),
    ("value_after", pa.string()),
    ("count", pa.int64()),
    ("generation", pa.int32()),
    ("protocol", pa.string()),
    ("group_leader", pa.string()),
    ("members", pa.list_(pa.string())),
    *((name, kind) for name, kind in VIOLATION_COLUMNS if name != "offset"),
)
# What the replay reads of a record: the columns of ``raftka.audit.schema.Row`` it needs and the
# ``role`` of a snapshot's records.
REPLAY_FIELDS = ("node", "file", "file_seq", "position", "kind", "batch_offset", "batch_index", "batch_records",
                 "offset", "epoch", "timestamp_ms", "type", "error", "raw", "role")  # fmt: skip
# ``role`` of a snapshot's rows: BASE copies only start a replay that begins mid-history
# (a parallel piece of it); any other snapshot starts the history or is compared with it.
BASE = "base"
SEQ_PER_OFFSET = 1 << 20  # event order: offset first, then the order of the events of one record
Row = namedtuple("Row", REPLAY_FIELDS)  # type: ignore[misc]
# A record of a Batch: (type, error, raw, the decoded message or None: the replay decodes raw)
Record = tuple[str | None, str | None, bytes, MetadataRecord | None]


class Batch(NamedTuple):
    """One canonical batch, or one snapshot's records, as the replay reads it: the first
    record's row holds what the records share; a row per record is made only where an
    event needs one (a quiet batch of offset commits needs none)."""

    first: Row
    records: list[Record]


EVENT_SCHEMA = pa.schema([pa.field(n, t) for n, t in EVENT_COLUMNS])
EVENT_NAMES = tuple(n for n, _ in EVENT_COLUMNS)


def replay_row(row: Any, role: str | None = None) -> Row:
    """A decoded row (``raftka.audit.schema.Row``) as the replay reads it."""
    return Row(row.node, row.file, row.file_seq, row.position, row.kind, row.batch_offset, row.batch_index,
               row.batch_records, row.offset, row.epoch, row.timestamp_ms, row.type, row.error, row.raw, role)  # fmt: skip


def replay_order(row: Row) -> tuple[Any, ...]:
    """How replay input is sorted: by offset, a snapshot at N before the batch at N."""
    return (row.batch_offset, row.kind != SNAPSHOT_KIND, row.node, row.file_seq, row.batch_index)


def replay(rows: Iterable[Row]) -> Iterator[tuple[Any, ...]]:
    """Event rows (tuples in ``EVENT_SCHEMA`` order) for ``rows`` given in ``replay_order``:
    the canonical batches (every record) and every node's snapshot records."""
    key = lambda r: (r.kind == SNAPSHOT_KIND, r.node, r.file, r.batch_offset, r.role)  # noqa: E731
    for_batches = (list(group) for _, group in groupby(rows, key=key))
    yield from replay_batches(Batch(b[0], [(r.type, r.error, r.raw, None) for r in b]) for b in for_batches)


def replay_batches(batches: Iterable[Batch]) -> Iterator[tuple[Any, ...]]:
    """``replay`` for records already grouped into batches."""
    yield from Replay().run(batches)


def event_dicts(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """``replay`` as dicts: for tests and small histories."""
    return [dict(zip(EVENT_NAMES, event, strict=True)) for event in replay(rows)]


class Replay:
    """One replay of the history. ``run`` may be called again with the batches that follow
    the last it was given: the image and the events' seqs carry on, so a piece of the history
    can be replayed a chunk at a time (``raftka.audit.pieces``) without holding it whole."""

    def __init__(self) -> None:
        self.image: MetadataImage | None = None  # None: not started (no offset 0, no snapshot yet)
        self._waiting_since: int | None = None  # first offset that could not be replayed
        self._last: tuple[int, int] = (-1, 0)  # (offset, events at it so far): for seq

    def run(self, batches: Iterable[Batch]) -> Iterator[tuple[Any, ...]]:
        """Events carry ``seq``, their place in the history's order: offset, then order at
        that offset. It needs no counter shared between replays, so pieces of one history
        replayed in parallel (each from a snapshot) give the same seqs as one replay."""
        for batch in batches:
            events = self._snapshot(batch) if batch.first.kind == SNAPSHOT_KIND else self._batch(batch)
            for event in events:
                offset = event["offset"] if event["offset"] is not None else batch.first.batch_offset
                count = self._last[1] + 1 if self._last[0] == offset else 0
                self._last = (offset, count)
                event["seq"] = offset * SEQ_PER_OFFSET + count
                yield tuple(event.get(name) for name in EVENT_NAMES)

    # batches ---------------------------------------------------------------------------

    def _batch(self, batch: Batch) -> list[dict[str, Any]]:
        first = batch.first
        base, end = first.batch_offset, first.batch_offset + first.batch_records
        if self.image is None and base == 0:
            self.image = EMPTY
        if self.image is None or base != self.image.offset:
            return self._cannot_replay(first)
        if first.kind != "DATA":
            self.image = MetadataDelta(self.image).apply(end)
            return []
        decoded: list[MetadataRecord] = []
        for index, (type_name, error, raw, record) in enumerate(batch.records):
            if record is None:
                try:
                    if type_name == DAMAGED:
                        raise RecordError(error)
                    record = records.decode(raw)
                except RecordError as exc:
                    offset = base + index
                    return self._skip(
                        first, offset, f"record at offset {offset} does not decode: {exc}", None
                    )
            decoded.append(record)
        kinds = [r.WhichOneof("record") for r in decoded]
        if _QUIET.issuperset(kinds):
            delta = MetadataDelta(self.image)
            for index, (record, kind) in enumerate(zip(decoded, kinds, strict=True)):
                try:
                    delta.replay(record)
                except ReplayError as exc:
                    return self._skip(first, base + index, str(exc), kind)
            self.image = delta.apply(end)
            return []
        return self._record_by_record(first, decoded, kinds)

    def _record_by_record(
        self, first: Row, decoded: list[MetadataRecord], kinds: list[str]
    ) -> list[dict[str, Any]]:
        start = image = self.image
        assert start is not None
        events: list[dict[str, Any]] = []
        for index, (record, kind) in enumerate(zip(decoded, kinds, strict=True)):
            row = first._replace(batch_index=index, offset=first.offset + index) if index else first
            delta = MetadataDelta(image)
            try:
                delta.replay(record)
            except ReplayError as exc:
                return self._skip(first, row.offset, str(exc), kind)
            after = delta.apply(row.offset + 1)
            events += _EventBuilder(row, start, image, after).build(kind, getattr(record, kind))
            image = after
        events += _fenced_checks(first, image, events)
        self.image = image
        return events

    def _skip(self, first: Row, offset: int, error: str, kind: str | None) -> list[dict[str, Any]]:
        """The batch is skipped whole, as every node's state machine skips it."""
        assert self.image is not None
        self.image = MetadataDelta(self.image).apply(first.batch_offset + first.batch_records)
        check = "records_replay"
        if kind == "producer_ids":
            check = "producer_ids_increase"
        elif kind == "register_broker" and "is not above" in error:
            check = "broker_epochs"
        message = f"the batch at {first.batch_offset} ({first.batch_records} records) is skipped by every node: {error}"
        return [
            _violation(first, check, ERROR, message, offset, f"offset {offset}"),
            _at(first) | {"event": SKIPPED, "count": first.batch_records},
        ]

    def _cannot_replay(self, first: Row) -> list[dict[str, Any]]:
        """No image to replay this batch on: the history starts later than offset 0 without a
        snapshot, or has a gap. Replay resumes at the next snapshot."""
        events = []
        if self._waiting_since is None:
            self._waiting_since = first.batch_offset
            where = "before any snapshot" if self.image is None else f"after a gap at {self.image.offset}"
            message = (
                f"the history from offset {first.batch_offset} cannot be replayed ({where}): "
                "tables start at the next snapshot"
            )
            events.append(_violation(first, "records_replay", INFO, message, first.batch_offset, "history"))
        self.image = None
        return events

    # snapshots -------------------------------------------------------------------------

    def _snapshot(self, batch: Batch) -> list[dict[str, Any]]:
        first = batch.first
        offset = first.offset
        contents = SnapshotContents(
            offset, first.timestamp_ms or -1, tuple(raw for _, _, raw, _ in batch.records)
        )
        try:
            image = rebuild_image(contents)
        except SnapshotError as exc:
            message = f"snapshot {_name(first)} of node {first.node} does not rebuild an image: {exc}"
            return [_violation(first, "snapshot_equals_replay", ERROR, message, offset, f"node {first.node}")]
        base = first.role == BASE
        if self.image is None or self.image.offset < offset:
            self.image = image
            self._waiting_since = None
            return [] if base else _start_events(first, image)
        if base or self.image.offset > offset:
            return []
        difference = _difference(image, self.image)
        if difference is None:
            return []
        message = f"snapshot {_name(first)} of node {first.node} differs from the replayed log at {offset}: {difference}"
        return [_violation(first, "snapshot_equals_replay", ERROR, message, offset, f"node {first.node}")]


class _EventBuilder:
    """The events of one record, read off the images before and after it."""

    def __init__(
        self, row: Row, batch_start: MetadataImage, before: MetadataImage, after: MetadataImage
    ) -> None:
        self.row, self.batch_start, self.before, self.after = row, batch_start, before, after

    def build(self, kind: str, r: Any) -> list[dict[str, Any]]:
        method = getattr(self, f"_{kind}", None)
        return method(r) if method is not None else []

    def _register_broker(self, r: Any) -> list[dict[str, Any]]:
        events = []
        if self.row.kind != SNAPSHOT_KIND and r.broker_epoch != self.row.offset:
            message = (
                f"broker {r.broker_id} registered at offset {self.row.offset} with epoch {r.broker_epoch}"
            )
            events.append(
                _violation(
                    self.row, "broker_epochs", ERROR, message, self.row.offset, f"broker {r.broker_id}"
                )
            )
        cause = "REREGISTER" if r.broker_id in self.before.brokers else "REGISTER"
        return [*events, self._broker(r.broker_id, cause)]

    def _fence_broker(self, r: Any) -> list[dict[str, Any]]:
        return [self._broker(r.id, "FENCE")]

    def _unfence_broker(self, r: Any) -> list[dict[str, Any]]:
        return [self._broker(r.id, "UNFENCE")]

    def _unregister_broker(self, r: Any) -> list[dict[str, Any]]:
        return [self._broker(r.broker_id, "UNREGISTER")]

    def _broker(self, broker_id: int, cause: str) -> dict[str, Any]:
        registration = self.after.brokers.get(broker_id) or self.before.brokers.get(broker_id)
        assert registration is not None
        return _at(self.row) | {
            "event": BROKER,
            "cause": cause,
            "broker": broker_id,
            "broker_epoch": registration.epoch,
            "incarnation": registration.incarnation_id,
            "fenced": cause != "UNREGISTER" and self.after.brokers[broker_id].fenced,
            "partitions_led": _partitions_led(self.batch_start, broker_id),
        }

    def _topic(self, r: Any) -> list[dict[str, Any]]:
        return [
            _at(self.row)
            | {"event": TOPIC_EVENT, "cause": "CREATE", "topic_id": topic_id_str(r.topic_id), "topic": r.name}
        ]

    def _partition(self, r: Any) -> list[dict[str, Any]]:
        return self._transition(r.topic_id, r.partition_id)

    def _partition_change(self, r: Any) -> list[dict[str, Any]]:
        return self._transition(r.topic_id, r.partition_id)

    def _transition(self, topic_id: bytes, partition_id: int) -> list[dict[str, Any]]:
        topic = self.after.topics_by_id[topic_id]
        before_topic = self.before.topics_by_id.get(topic_id)
        before = before_topic.partitions.get(partition_id) if before_topic else None
        after = topic.partitions[partition_id]
        event = _transition(
            self.row, topic.name, topic_id, partition_id, before, after, _min_isr(self.after, topic.name)
        )
        return [event, *_epoch_checks(self.row, event)]

    def _remove_topic(self, r: Any) -> list[dict[str, Any]]:
        topic = self.before.topics_by_id[r.topic_id]
        events = [
            _transition(self.row, topic.name, r.topic_id, pid, state, None, _min_isr(self.before, topic.name))
            for pid, state in sorted(topic.partitions.items())
        ]
        tid = topic_id_str(r.topic_id)
        return [*events, _at(self.row) | {"event": TOPIC_EVENT, "cause": "DELETE", "topic_id": tid,
                                          "topic": topic.name, "count": len(topic.partitions)}]  # fmt: skip

    def _config(self, r: Any) -> list[dict[str, Any]]:
        resource = (int(r.resource_type), r.resource_name)
        event = _at(self.row) | {
            "event": CONFIG,
            "resource_type": _RESOURCE_TYPES.get(resource[0], str(resource[0])),
            "resource": r.resource_name,
            "key": r.name,
            "value_before": self.before.configs.get(resource, {}).get(r.name),
            "value_after": self.after.configs.get(resource, {}).get(r.name),
        }
        events = [event]
        if resource[0] == TOPIC:
            topic = self.after.topic(r.resource_name)
            assert topic is not None
            event["topic"], event["topic_id"] = topic.name, topic_id_str(topic.topic_id)
            if r.name == MIN_INSYNC_REPLICAS:  # every partition's under-min-ISR state may change
                min_isr = _min_isr(self.after, topic.name)
                events += [
                    _state(self.row, topic.name, topic.topic_id, pid, state, min_isr)
                    for pid, state in sorted(topic.partitions.items())
                ]
        return events

    def _group_rebalance(self, r: Any) -> list[dict[str, Any]]:
        """A completed rebalance, as the image holds it after the record."""
        group = self.after.groups[r.group]
        assigned = sum(len(partitions) for m in group.members for _, partitions in m.assignment)
        return [_at(self.row) | {"event": REBALANCE, "resource_type": "GROUP", "resource": r.group,
                                 "generation": group.generation_id, "protocol": group.protocol_name,
                                 "group_leader": group.leader, "members": [m.member_id for m in group.members],
                                 "broker": group.coordinator, "count": assigned}]  # fmt: skip

    def _remove_group_offsets(self, r: Any) -> list[dict[str, Any]]:
        partitions = len(self.before.offsets.get(r.group, {}))
        return [_at(self.row) | {"event": GROUP, "cause": "EXPIRE", "resource_type": "GROUP", "resource": r.group,
                                 "count": partitions}]  # fmt: skip


# event rows ------------------------------------------------------------------------------


def _at(row: Row) -> dict[str, Any]:
    return {"offset": row.offset, "epoch": row.epoch, "timestamp_ms": row.timestamp_ms}


def _violation(
    row: Row, check: str, severity: str, message: str, offset: int | None, entity: str
) -> dict[str, Any]:
    found = violation(check, severity, message, node=row.node, offset=offset, entity=entity, file=row.file,
                      position=row.position)  # fmt: skip
    return (
        _at(row) | {k: v for k, v in found.items() if k != "offset"} | {"event": VIOLATION, "offset": offset}
    )


def _name(row: Row) -> str:
    return f"{row.offset}-{row.epoch}"


def _min_isr(image: MetadataImage, topic: str) -> int:
    return int(image.configs.get((TOPIC, topic), {}).get(MIN_INSYNC_REPLICAS, _DEFAULT_MIN_ISR))


def _flags(state: PartitionState | None, min_isr: int) -> dict[str, Any]:
    if state is None:  # deleted: the partition's intervals end here
        return {"offline": False, "under_replicated": False, "under_min_isr": False, "non_preferred": False}
    return {
        "offline": state.leader == NO_LEADER,
        "under_replicated": len(state.isr) < len(state.replicas),
        "under_min_isr": len(state.isr) < min_isr,
        "non_preferred": state.leader != NO_LEADER and state.leader != state.replicas[0],
        "min_isr": min_isr,
    }


def _state(
    row: Row, topic: str, topic_id: bytes, partition: int, state: PartitionState, min_isr: int
) -> dict[str, Any]:
    return _at(row) | {"event": STATE, "topic": topic, "topic_id": topic_id_str(topic_id), "partition": partition,
                       "leader_after": state.leader, "isr_after": list(state.isr),
                       "replicas_after": list(state.replicas)} | _flags(state, min_isr)  # fmt: skip


def _transition(
    row: Row,
    topic: str,
    topic_id: bytes,
    partition: int,
    before: PartitionState | None,
    after: PartitionState | None,
    min_isr: int,
) -> dict[str, Any]:
    cause, clean = _cause(before, after)
    event = _at(row) | {"event": TRANSITION, "topic": topic, "topic_id": topic_id_str(topic_id),
                        "partition": partition, "cause": cause, "clean": clean,
                        "isr_change": _isr_change(before, after)}  # fmt: skip
    for suffix, state in (("before", before), ("after", after)):
        if state is not None:
            event |= {
                f"leader_{suffix}": state.leader,
                f"isr_{suffix}": list(state.isr),
                f"replicas_{suffix}": list(state.replicas),
                f"leader_epoch_{suffix}": state.leader_epoch,
                f"partition_epoch_{suffix}": state.partition_epoch,
            }
    return event | _flags(after, min_isr)


def _cause(before: PartitionState | None, after: PartitionState | None) -> tuple[str, bool | None]:
    """Why a partition changed, and for an election whether it was clean: the new leader was
    in the ISR before, or in the ELR (KIP-966: it holds every committed record)."""
    if after is None:
        return "delete", None
    if before is None:
        return "create", None
    if after.leader != before.leader:
        if after.leader == NO_LEADER:
            return "offline", None
        return "election", after.leader in before.isr or after.leader in before.elr
    if after.replicas != before.replicas:
        return "reassign", None
    change = _isr_change(before, after)
    return (f"isr_{change}" if change else "unchanged"), None


def _isr_change(before: PartitionState | None, after: PartitionState | None) -> str | None:
    if before is None or after is None or set(before.isr) == set(after.isr):
        return None
    if set(after.isr) < set(before.isr):
        return "shrink"
    return "expand" if set(after.isr) > set(before.isr) else "change"


def _epoch_checks(row: Row, event: dict[str, Any]) -> list[dict[str, Any]]:
    """Leader and partition epochs strictly increase per partition (a record that resets a
    partition, a second PartitionRecord, must not take them back)."""
    if event["cause"] == "create":
        return []
    entity = f"{event['topic']}-{event['partition']}"
    problems = []
    if event["partition_epoch_after"] <= event["partition_epoch_before"]:
        problems.append(
            f"partition epoch {event['partition_epoch_before']} -> {event['partition_epoch_after']}"
        )
    leader_moved = event["leader_after"] != event["leader_before"]
    if event["leader_epoch_after"] < event["leader_epoch_before"] or (
        leader_moved and event["leader_epoch_after"] == event["leader_epoch_before"]
    ):
        problems.append(f"leader epoch {event['leader_epoch_before']} -> {event['leader_epoch_after']}")
    return [
        _violation(row, "partition_epochs_increase", ERROR, f"{entity}: {p}", row.offset, entity)
        for p in problems
    ]


def _partitions_led(image: MetadataImage, broker_id: int) -> int:
    return sum(
        1
        for topic in image.topics_by_id.values()
        for state in topic.partitions.values()
        if state.leader == broker_id
    )


def _fenced_checks(first: Row, end: MetadataImage, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """After the batch, no fenced broker leads or sits in an ISR (but as the last member of an
    offline partition's ISR). Looked at where it can break: the partitions this batch changed,
    and every partition for a broker this batch fenced."""
    fenced = {b for b, reg in end.brokers.items() if reg.fenced}
    if not fenced:
        return []
    newly = {e["broker"] for e in events if e.get("event") == BROKER and e["fenced"]} & fenced
    changed = {
        (e["topic_id"], e["partition"])
        for e in events
        if e.get("event") == TRANSITION and e["cause"] != "delete"
    }
    changed_topics = {tid for tid, _ in changed}
    found = []
    for topic in end.topics_by_id.values():
        tid = topic_id_str(topic.topic_id)
        if not newly and tid not in changed_topics:
            continue  # nothing in it changed and no broker was fenced: it cannot break here
        for pid, state in topic.partitions.items():
            if (tid, pid) not in changed and not newly & ({state.leader} | set(state.isr)):
                continue
            holders = [b for b in state.isr if b in fenced]
            last_member = state.leader == NO_LEADER and len(state.isr) == 1
            problems = [f"fenced broker {state.leader} leads it"] if state.leader in fenced else []
            problems += (
                [] if last_member else [f"fenced broker {b} is in its ISR {list(state.isr)}" for b in holders]
            )
            entity = f"{topic.name}-{pid}"
            found += [
                _violation(
                    first,
                    "fenced_brokers_hold_nothing",
                    ERROR,
                    f"{entity} after the batch at {first.batch_offset}: {p}",
                    first.batch_offset,
                    entity,
                )  # fmt: skip
                for p in problems
            ]
    return found


def _start_events(first: Row, image: MetadataImage) -> list[dict[str, Any]]:
    """Replay starts from a snapshot: the state it holds, so tables do not start empty."""
    message = f"replay starts from snapshot {_name(first)} of node {first.node}"
    events = [_at(first) | {"event": START, "node": first.node, "file": first.file, "message": message}]
    for broker_id, reg in sorted(image.brokers.items()):
        events.append(_at(first) | {"event": BROKER, "cause": "SNAPSHOT", "broker": broker_id,
                                    "broker_epoch": reg.epoch, "incarnation": reg.incarnation_id,
                                    "fenced": reg.fenced, "partitions_led": _partitions_led(image, broker_id)})  # fmt: skip
    for name, topic_id in sorted(image.topic_ids_by_name.items()):
        topic = image.topics_by_id[topic_id]
        events.append(_at(first) | {"event": TOPIC_EVENT, "cause": "SNAPSHOT", "topic": name,
                                    "topic_id": topic_id_str(topic_id), "count": len(topic.partitions)})  # fmt: skip
        min_isr = _min_isr(image, name)
        events += [
            _state(first, name, topic_id, pid, state, min_isr)
            for pid, state in sorted(topic.partitions.items())
        ]
    return events


def _difference(snapshot: MetadataImage, replayed: MetadataImage) -> str | None:
    """What differs between two images, named by part and first key; None when equal."""
    if snapshot == replayed:
        return None
    for part in ("brokers", "topics_by_id", "topic_ids_by_name", "configs", "offsets", "features"):
        mine, theirs = getattr(snapshot, part), getattr(replayed, part)
        if mine != theirs:
            keys = sorted(set(mine) ^ set(theirs), key=repr) or sorted(
                (k for k in mine if mine[k] != theirs.get(k)), key=repr
            )
            first = keys[0] if keys else "?"
            shown = topic_id_str(first) if isinstance(first, bytes) else first
            return f"{part} differ (first at {shown!r})"
    return (
        f"next producer id {snapshot.next_producer_id} in the snapshot, {replayed.next_producer_id} replayed"
    )
