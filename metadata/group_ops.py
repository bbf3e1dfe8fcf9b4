"""Consumer groups in the quorum: what a group's coordinator (a broker) writes.

The coordinator holds a group's membership in memory (Kafka's classic protocol); the
quorum holds what must outlive it: the committed offsets (``offset_ops``), each
completed rebalance (``GroupRebalanceRecord``: the group's history, and the generation a
new coordinator starts above), and the deletion of a group. Each handler is a pure
function of the image and the request, like the other ``*_ops`` modules.

A coordinator checks commits against its in-memory group, but its view may be stale: the
group may have moved to another broker, or another coordinator may have recorded newer
generations. So the controller fences too, on its image: commits and rebalances are taken
only from the group's current coordinator (``raftka.metadata.group_placement``) at its
current registration, and a member's commit only at a generation not older than the
recorded one. Commits from outside the group (no generation: a standalone consumer or a
reset, which the coordinator takes only while the group has no members) need no
generation, only the right coordinator.
"""

from __future__ import annotations

from raftka.metadata import offset_ops
from raftka.metadata.broker_ops import registered
from raftka.metadata.group_placement import check_coordinator
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates, refuse, refuse_with
from raftka.metadata.validation import ValidationError, validate_group_id
from raftka.v1 import controller_pb2, metadata_pb2


def record_rebalance(
    image: MetadataImage, request: controller_pb2.RecordGroupRebalanceRequest, now_wall_ms: int
) -> Plan:
    """One record per completed rebalance from the group's coordinator, its generation
    above every recorded one; the controller stamps who ran it and when."""
    response = controller_pb2.RecordGroupRebalanceResponse()
    rebalance = request.rebalance
    try:
        validate_group_id(rebalance.group)
        registered(image, request.broker_id, request.broker_epoch)
        check_coordinator(image, rebalance.group, request.broker_id)
    except ValidationError as e:
        return refuse_with(response, e)
    previous = image.groups.get(rebalance.group)
    if previous is not None and rebalance.generation_id <= previous.generation_id:
        response.recorded_generation_id = previous.generation_id
        return refuse(
            response,
            ErrorCode.ILLEGAL_GENERATION,
            f"group {rebalance.group!r}: generation {rebalance.generation_id} is not above the recorded "
            f"{previous.generation_id}",
        )
    record = metadata_pb2.GroupRebalanceRecord()
    record.CopyFrom(rebalance)
    record.coordinator = request.broker_id
    record.timestamp_ms = now_wall_ms
    return Plan(response, [MetadataRecord(group_rebalance=record)])


def commit_batch(
    image: MetadataImage, request: controller_pb2.CommitGroupOffsetsRequest, now_wall_ms: int
) -> Plan:
    """Several groups' commits in one batch, from one coordinator; each group answered as
    its own OffsetCommit, a fenced one (see the module doc) with nothing written."""
    response = controller_pb2.CommitGroupOffsetsResponse()
    try:
        registered(image, request.broker_id, request.broker_epoch)
    except ValidationError as e:
        return refuse_with(response, e)
    records: list[MetadataRecord] = []
    for commit in request.groups:
        try:
            validate_group_id(commit.group)
            check_coordinator(image, commit.group, request.broker_id)
            check_generation(image, commit)
        except ValidationError as e:
            response.groups.append(refuse_with(controller_pb2.OffsetCommitResponse(), e).response)
            continue
        plan = offset_ops.commit(image, commit, now_wall_ms)
        response.groups.append(plan.response)
        records += plan.records
    return Plan(response, records)


def check_generation(image: MetadataImage, commit: controller_pb2.OffsetCommitRequest) -> None:
    """ValidationError if a member's commit comes from a generation older than the recorded one."""
    recorded = image.groups.get(commit.group)
    if recorded is None or not commit.HasField("generation_id") or commit.generation_id < 0:
        return
    if commit.generation_id < recorded.generation_id:
        raise ValidationError(
            ErrorCode.ILLEGAL_GENERATION,
            f"group {commit.group!r}: generation {commit.generation_id} is older than the recorded "
            f"{recorded.generation_id}",
        )


def delete(image: MetadataImage, request: controller_pb2.DeleteGroupsRequest) -> Plan:
    """Remove groups' offsets and last rebalance; the coordinator checked they have no members."""
    response = controller_pb2.DeleteGroupsResponse()
    repeated = duplicates(request.groups)
    records: list[MetadataRecord] = []
    for group in request.groups:
        result = response.groups.add(group=group)
        try:
            validate_group_id(group)
            if group in repeated:
                raise ValidationError(ErrorCode.INVALID_REQUEST, "group appears more than once")
            if group not in image.offsets and group not in image.groups:
                raise ValidationError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group!r}")
        except ValidationError as e:
            result.error, result.message = e.code, e.message
            continue
        records.append(
            MetadataRecord(remove_group_offsets=metadata_pb2.RemoveGroupOffsetsRecord(group=group))
        )
    return Plan(response, records)
