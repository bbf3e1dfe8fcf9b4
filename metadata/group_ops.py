"""Consumer groups in the quorum: what a group's coordinator (a broker) writes.

The coordinator holds a group's membership in memory (Kafka's classic protocol); the
quorum holds what must outlive it: the committed offsets (``offset_ops``), each
completed rebalance (``GroupRebalanceRecord``: the group's history, and the generation a
new coordinator starts above), and the deletion of a group. Each handler is a pure
function of the image and the request, like the other ``*_ops`` modules.
"""

from __future__ import annotations

from raftka.metadata import offset_ops
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates, refuse, refuse_with
from raftka.metadata.validation import ValidationError, validate_group_id
from raftka.v1 import controller_pb2, metadata_pb2


def record_rebalance(
    image: MetadataImage, request: controller_pb2.RecordGroupRebalanceRequest, now_wall_ms: int
) -> Plan:
    """One record per completed rebalance, its generation above every recorded one."""
    response = controller_pb2.RecordGroupRebalanceResponse()
    rebalance = request.rebalance
    try:
        validate_group_id(rebalance.group)
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
    record.timestamp_ms = now_wall_ms
    return Plan(response, [MetadataRecord(group_rebalance=record)])


def commit_batch(
    image: MetadataImage, request: controller_pb2.CommitGroupOffsetsRequest, now_wall_ms: int
) -> Plan:
    """Several groups' commits in one batch; each group answered as its own OffsetCommit."""
    response = controller_pb2.CommitGroupOffsetsResponse()
    records: list[MetadataRecord] = []
    for commit in request.groups:
        plan = offset_ops.commit(image, commit, now_wall_ms)
        response.groups.append(plan.response)
        records += plan.records
    return Plan(response, records)


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
