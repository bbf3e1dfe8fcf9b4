"""Kafka's group APIs (the classic protocol) and OffsetCommit/OffsetFetch, answered by
the broker's group coordinator (``raftka.broker.groups``) through the same calls as raftka's
data protocol.

The coordinator already speaks Kafka's semantics; what is translated here is the shape
of each version: JoinGroup before version 4 adds a new member at once (those clients
cannot rejoin with an id handed back), LeaveGroup before 3 and FindCoordinator before 4
carry one member or key, OffsetFetch from 8 asks for several groups, and a coordinator
is named by its Kafka listener.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.endpoints import kafka_endpoints
from raftka.broker.kafka.errors import INVALID_REQUEST, kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.v1 import broker_pb2, controller_pb2

E = controller_pb2.ErrorCode
Pb = broker_pb2
C = controller_pb2
KEY_TYPES = (0, 1)  # FindCoordinator's key_type: a group, a transactional id
MEMBER_ID_REQUIRED_FROM = 4  # JoinGroup versions that answer a new member MEMBER_ID_REQUIRED
REQUIRE_STABLE_FROM = 7  # OffsetFetch versions with require_stable (KIP-447)
CLASSIC = "classic"  # ListGroups v5's group type
OR_TOPIC = OffsetFetchResponse.OffsetFetchResponseTopic
OR_GROUP = OffsetFetchResponse.OffsetFetchResponseGroup
OR_GROUP_TOPIC = OR_GROUP.OffsetFetchResponseTopics


class GroupApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(FindCoordinatorRequest, 0, 6, self.find_coordinator),
            KafkaApi(JoinGroupRequest, 0, 9, self.join_group),
            KafkaApi(SyncGroupRequest, 0, 5, self.sync_group),
            KafkaApi(HeartbeatRequest, 0, 4, self.heartbeat),
            KafkaApi(LeaveGroupRequest, 0, 5, self.leave_group),
            KafkaApi(DescribeGroupsRequest, 0, 6, self.describe_groups),
            KafkaApi(ListGroupsRequest, 0, 5, self.list_groups),
            KafkaApi(DeleteGroupsRequest, 0, 2, self.delete_groups),
            KafkaApi(OffsetCommitRequest, 0, 9, self.offset_commit),
            KafkaApi(OffsetFetchRequest, 0, 9, self.offset_fetch),
        ]

    async def find_coordinator(
        self, request: FindCoordinatorRequest, version: int
    ) -> FindCoordinatorResponse:
        keys = request.coordinator_keys if version >= 4 else [request.key]
        found = [await self._coordinator(key, request.key_type) for key in keys]
        if version >= 4:
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=found)
        only = found[0]
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            error_code=only.error_code,
            error_message=only.error_message,
            node_id=only.node_id,
            host=only.host,
            port=only.port,
        )

    async def _coordinator(self, key: str, key_type: int) -> FindCoordinatorResponse.Coordinator:
        if key_type not in KEY_TYPES:
            return _coordinator_error(
                key,
                INVALID_REQUEST,
                f"key_type: {key_type} is neither 0 (a group) nor 1 (a transactional id)",
            )
        answer = await self._api.find_coordinator(Pb.FindCoordinatorRequest(group_id=key, key_type=key_type))
        if answer.status.error != E.NONE:
            return _coordinator_error(key, kafka_error(answer.status.error), answer.status.message)
        endpoint = kafka_endpoints(self._api.image).get(answer.node_id)
        if endpoint is None:
            why = f"broker {answer.node_id} coordinates {key!r} but serves no Kafka listener"
            return _coordinator_error(key, kafka_error(E.COORDINATOR_NOT_AVAILABLE), why)
        return FindCoordinatorResponse.Coordinator(
            key=key,
            node_id=endpoint.broker_id,
            host=endpoint.host,
            port=endpoint.port,
            error_code=0,
            error_message=None,
        )

    async def join_group(self, request: JoinGroupRequest, version: int) -> JoinGroupResponse:
        ours = Pb.JoinGroupRequest(
            group_id=request.group_id,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=[Pb.JoinGroupProtocol(name=p.name, metadata=p.metadata) for p in request.protocols],
            client_id=request.header.client_id or "",
            add_new_member_at_once=version < MEMBER_ID_REQUIRED_FROM,
        )
        if request.group_instance_id is not None:
            ours.group_instance_id = request.group_instance_id
        answer = await self._api.join_group(ours)
        code = answer.status.error
        return JoinGroupResponse(
            throttle_time_ms=0,
            error_code=kafka_error(code),
            generation_id=answer.generation_id,
            protocol_type=answer.protocol_type or None,
            protocol_name=answer.protocol_name or (None if version >= 7 else ""),
            leader=answer.leader,
            skip_assignment=answer.skip_assignment,
            member_id=answer.member_id,
            members=[
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id if m.HasField("group_instance_id") else None,
                    metadata=m.metadata,
                )
                for m in answer.members
            ],
        )

    async def sync_group(self, request: SyncGroupRequest, version: int) -> SyncGroupResponse:
        ours = Pb.SyncGroupRequest(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            protocol_type=request.protocol_type or "",
            protocol_name=request.protocol_name or "",
            assignments=[
                Pb.SyncGroupAssignment(member_id=a.member_id, assignment=a.assignment)
                for a in request.assignments
            ],
        )
        if request.group_instance_id is not None:
            ours.group_instance_id = request.group_instance_id
        answer = await self._api.sync_group(ours)
        return SyncGroupResponse(
            throttle_time_ms=0,
            error_code=kafka_error(answer.status.error),
            protocol_type=answer.protocol_type or None,
            protocol_name=answer.protocol_name or None,
            assignment=answer.assignment,
        )

    async def heartbeat(self, request: HeartbeatRequest, version: int) -> HeartbeatResponse:
        ours = Pb.HeartbeatRequest(
            group_id=request.group_id, generation_id=request.generation_id, member_id=request.member_id
        )
        if request.group_instance_id is not None:
            ours.group_instance_id = request.group_instance_id
        answer = await self._api.heartbeat(ours)
        return HeartbeatResponse(throttle_time_ms=0, error_code=kafka_error(answer.status.error))

    async def leave_group(self, request: LeaveGroupRequest, version: int) -> LeaveGroupResponse:
        ours = Pb.LeaveGroupRequest(group_id=request.group_id)
        if version >= 3:
            for m in request.members:
                leaving = ours.members.add(member_id=m.member_id, reason=m.reason or "")
                if m.group_instance_id is not None:
                    leaving.group_instance_id = m.group_instance_id
        else:
            ours.members.add(member_id=request.member_id)
        answer = await self._api.leave_group(ours)
        code = answer.status.error
        members = [
            LeaveGroupResponse.MemberResponse(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id if m.HasField("group_instance_id") else None,
                error_code=kafka_error(m.error),
            )
            for m in answer.members
        ]
        if code == E.NONE and version < 3:  # one member: its own error is the answer's
            code = next((m.error for m in answer.members if m.error != E.NONE), E.NONE)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=kafka_error(code), members=members)

    async def describe_groups(self, request: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
        answer = await self._api.describe_groups(Pb.DescribeGroupsRequest(groups=request.groups))
        status = answer.status.error
        described = []
        for group in answer.groups:
            code = status if status != E.NONE else group.error
            described.append(
                DescribeGroupsResponse.DescribedGroup(
                    error_code=kafka_error(code),
                    error_message=kafka_message(code, group.message),
                    group_id=group.group_id,
                    group_state=group.state,
                    protocol_type=group.protocol_type,
                    protocol_data=group.protocol_name,
                    members=[
                        DescribeGroupsResponse.DescribedGroup.DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id
                            if m.HasField("group_instance_id")
                            else None,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in group.members
                    ],
                )
            )
        return DescribeGroupsResponse(throttle_time_ms=0, groups=described)

    async def list_groups(self, request: ListGroupsRequest, version: int) -> ListGroupsResponse:
        states = request.states_filter if version >= 4 else []
        types = {t.lower() for t in request.types_filter} if version >= 5 else set()
        answer = await self._api.list_groups(Pb.ListGroupsRequest(states=states))
        listed = []
        if not types or CLASSIC in types:
            listed = [
                ListGroupsResponse.ListedGroup(
                    group_id=g.group_id,
                    protocol_type=g.protocol_type,
                    group_state=g.state,
                    group_type=CLASSIC,
                )
                for g in answer.groups
            ]
        return ListGroupsResponse(
            throttle_time_ms=0, error_code=kafka_error(answer.status.error), groups=listed
        )

    async def delete_groups(self, request: DeleteGroupsRequest, version: int) -> DeleteGroupsResponse:
        answer = await self._api.delete_groups(C.DeleteGroupsRequest(groups=request.groups_names))
        status = answer.status.error
        results = {r.group: r.error for r in answer.groups}
        return DeleteGroupsResponse(
            throttle_time_ms=0,
            results=[
                DeleteGroupsResponse.DeletableGroupResult(
                    group_id=g,
                    error_code=kafka_error(
                        status if status != E.NONE else results.get(g, E.UNKNOWN_SERVER_ERROR)
                    ),
                )
                for g in request.groups_names
            ],
        )

    async def offset_commit(self, request: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
        ours = C.OffsetCommitRequest(group=request.group_id, member_id=request.member_id)
        if request.generation_id_or_member_epoch >= 0 or request.member_id:
            ours.generation_id = request.generation_id_or_member_epoch
        if request.group_instance_id is not None:
            ours.group_instance_id = request.group_instance_id
        for topic in request.topics:
            ours.topics.add(
                topic=topic.name,
                partitions=[
                    C.OffsetCommitPartition(
                        partition=p.partition_index,
                        offset=p.committed_offset,
                        metadata=p.committed_metadata or "",
                    )
                    for p in topic.partitions
                ],
            )
        answer = await self._api.offset_commit(ours)
        status = answer.status.error
        errors = {(r.topic, r.partition): r.error for r in answer.partitions}
        RT = OffsetCommitResponse.OffsetCommitResponseTopic
        return OffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                RT(
                    name=topic.name,
                    partitions=[
                        RT.OffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=kafka_error(
                                status
                                if status != E.NONE
                                else errors.get((topic.name, p.partition_index), E.NONE)
                            ),
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ],
        )

    async def offset_fetch(self, request: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
        if version < 8:
            code, topics = await self._group_offsets(
                request.group_id,
                request.topics,
                OR_TOPIC,
                OR_TOPIC.OffsetFetchResponsePartition,
                version >= REQUIRE_STABLE_FROM and request.require_stable,
            )
            return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=code)
        groups = []
        for group in request.groups:
            code, topics = await self._group_offsets(
                group.group_id,
                group.topics,
                OR_GROUP_TOPIC,
                OR_GROUP_TOPIC.OffsetFetchResponsePartitions,
                request.require_stable,
            )
            groups.append(OR_GROUP(group_id=group.group_id, topics=topics, error_code=code))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)

    async def _group_offsets(
        self, group_id: str, asked: list | None, topic_type: type, partition_type: type, require_stable: bool
    ) -> tuple[int, list]:
        """(the group's error, its committed offsets by topic) for the topics asked (None: all);
        ``require_stable``: UNSTABLE_OFFSET_COMMIT for those an open transaction commits."""
        if asked is not None and not asked:
            return 0, []
        ours = C.OffsetFetchRequest(group=group_id, require_stable=require_stable)
        for topic in asked or []:
            ours.topics.add(topic=topic.name, partitions=topic.partition_indexes)
        answer = await self._api.offset_fetch(ours)
        if answer.status.error != E.NONE:
            return kafka_error(answer.status.error), []
        by_topic: dict[str, list] = {}
        for o in answer.offsets:
            by_topic.setdefault(o.topic, []).append(
                partition_type(
                    partition_index=o.partition,
                    committed_offset=o.offset,
                    committed_leader_epoch=-1,
                    metadata=o.metadata,
                    error_code=kafka_error(o.error),
                )
            )
        return 0, [topic_type(name=name, partitions=partitions) for name, partitions in by_topic.items()]


def _coordinator_error(key: str, code: int, message: str) -> FindCoordinatorResponse.Coordinator:
    return FindCoordinatorResponse.Coordinator(
        key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message
    )
