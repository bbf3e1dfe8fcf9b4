"""Consumer offsets: commit, fetch and expiry, kept in the quorum (DESIGN.md "Metadata").

A commit writes one OffsetCommitRecord per partition, all in one batch; partitions of
unknown topics, or beyond a topic's partitions, get UNKNOWN_TOPIC_OR_PARTITION and
write nothing while the rest of the request goes ahead. A commit a coordinator forwards
on its own names that broker (``coordinator_id``) and is taken only from the group's
current coordinator at its current registration, as the batches of ``group_ops`` are.

Offsets expire as Kafka's do after ``offsets.retention.minutes``, so groups that are
gone cannot grow the image without bound. Kafka expires a group's offsets once the
group has no members and the retention has passed; the quorum knows no members, so here
the group's newest activity decides: a group that has neither committed nor completed a
rebalance for the retention loses all its offsets and its last rebalance (one
RemoveGroupOffsetsRecord), a group with any recent commit or rebalance keeps everything.
"""

from __future__ import annotations

from raftka.metadata.broker_ops import registered
from raftka.metadata.group_placement import check_coordinator
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates, refuse_with
from raftka.metadata.validation import ValidationError, validate_committed_offset, validate_group_id
from raftka.v1 import controller_pb2, metadata_pb2

NOTHING_COMMITTED = -1


def commit(image: MetadataImage, request: controller_pb2.OffsetCommitRequest, now_wall_ms: int) -> Plan:
    response = controller_pb2.OffsetCommitResponse()
    try:
        validate_group_id(request.group)
        if request.HasField("coordinator_id"):
            registered(image, request.coordinator_id, request.coordinator_epoch)
            check_coordinator(image, request.group, request.coordinator_id)
    except ValidationError as e:
        return refuse_with(response, e)
    repeated = duplicates((t.topic, p.partition) for t in request.topics for p in t.partitions)
    records: list[MetadataRecord] = []
    for topic in request.topics:
        topic_id = image.topic_ids_by_name.get(topic.topic)
        partitions = {} if topic_id is None else image.topics_by_id[topic_id].partitions
        for entry in topic.partitions:
            result = response.partitions.add(topic=topic.topic, partition=entry.partition)
            try:
                if (topic.topic, entry.partition) in repeated:
                    raise ValidationError(ErrorCode.INVALID_REQUEST, "partition appears more than once")
                if entry.partition not in partitions:
                    raise ValidationError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic.topic}-{entry.partition}"
                    )
                validate_committed_offset(entry.offset, entry.metadata)
            except ValidationError as e:
                result.error, result.message = e.code, e.message
                continue
            assert topic_id is not None
            record = metadata_pb2.OffsetCommitRecord(
                group=request.group,
                topic_id=topic_id,
                partition=entry.partition,
                offset=entry.offset,
                metadata=entry.metadata,
                commit_timestamp_ms=now_wall_ms,
            )
            records.append(MetadataRecord(offset_commit=record))
    return Plan(response, records)


def expire(image: MetadataImage, now_wall_ms: int, retention_ms: int, records_max: int) -> Plan:
    """Remove the offsets of groups whose newest commit is ``retention_ms`` old or more.

    At most ``records_max`` groups per call, by name: the rest go next time. The answer
    is for no one (the controller expires on its own), so it is an empty response.
    """
    cutoff_ms = now_wall_ms - retention_ms

    def idle(group: str) -> bool:
        rebalance = image.groups.get(group)
        committed = image.offsets.get(group, {})
        return (rebalance is None or rebalance.timestamp_ms <= cutoff_ms) and all(
            c.commit_timestamp_ms <= cutoff_ms for c in committed.values()
        )

    expired = sorted(group for group in {*image.offsets, *image.groups} if idle(group))
    records = [
        MetadataRecord(remove_group_offsets=metadata_pb2.RemoveGroupOffsetsRecord(group=group))
        for group in expired[:records_max]
    ]
    return Plan(controller_pb2.OffsetCommitResponse(), records)


def fetch(
    image: MetadataImage, request: controller_pb2.OffsetFetchRequest
) -> controller_pb2.OffsetFetchResponse:
    """Everything the group committed when ``topics`` is empty; a topic with no
    partitions listed means all of its partitions."""
    response = controller_pb2.OffsetFetchResponse()
    try:
        validate_group_id(request.group)
    except ValidationError as e:
        return refuse_with(response, e).response
    committed = image.offsets.get(request.group, {})
    unstable = _held_by_transactions(image, request.group) if request.require_stable else set()
    if not request.topics:
        names = {topic_id: topic.name for topic_id, topic in image.topics_by_id.items()}
        for (topic_id, partition), offset in sorted(
            committed.items(), key=lambda kv: (names[kv[0][0]], kv[0][1])
        ):
            entry = response.offsets.add(
                topic=names[topic_id], partition=partition, offset=offset.offset, metadata=offset.metadata
            )
            if (topic_id, partition) in unstable:
                entry.offset, entry.metadata, entry.error = (
                    NOTHING_COMMITTED,
                    "",
                    ErrorCode.UNSTABLE_OFFSET_COMMIT,
                )
        return response
    for wanted in request.topics:
        topic = image.topic(wanted.topic)
        if topic is None:
            response.offsets.add(
                topic=wanted.topic,
                offset=NOTHING_COMMITTED,
                error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                message=f"topic {wanted.topic!r} does not exist",
            )
            continue
        for partition in list(wanted.partitions) or sorted(topic.partitions):
            entry = response.offsets.add(topic=wanted.topic, partition=partition, offset=NOTHING_COMMITTED)
            if partition not in topic.partitions:
                entry.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                entry.message = f"no partition {wanted.topic}-{partition}"
                continue
            if (topic.topic_id, partition) in unstable:
                entry.error = ErrorCode.UNSTABLE_OFFSET_COMMIT
                entry.message = (
                    f"an open transaction commits {wanted.topic}-{partition} for {request.group!r}"
                )
                continue
            offset = committed.get((topic.topic_id, partition))
            if offset is not None:
                entry.offset, entry.metadata = offset.offset, offset.metadata
    return response


def _held_by_transactions(image: MetadataImage, group: str) -> set[tuple[bytes, int]]:
    """The group's partitions an open transaction holds an offset for (Kafka's
    require_stable answers those UNSTABLE_OFFSET_COMMIT until the transaction ends)."""
    return {
        (topic_id, partition)
        for pending in image.txn_offsets.values()
        for (held_group, topic_id, partition) in pending
        if held_group == group
    }
