"""Consumer groups as an operator sees them (kafka-consumer-groups): list, describe with
committed offsets, log ends and lag, delete, and reset offsets.

Groups live on their coordinators (brokers): a listing asks every broker, a description
or deletion asks the group's coordinator. Committed offsets are read through a broker
from the controller; log ends from each partition's leader (the high watermark). Offsets
are reset by committing from outside the group, which the coordinator takes only while
the group has no members, as Kafka requires.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from raftka.client.cluster_metadata import LIST_LATEST, ClusterMetadata
from raftka.client.errors import ConsumerError, KafkaError
from raftka.client.group import PROTOCOL_TYPE, find_coordinator
from raftka.client.types import (
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupPartitionOffsets,
    PartitionResult,
    TopicPartition,
)
from raftka.security.sasl import SaslCredentials
from raftka.security.tls import TlsFiles
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
BACKOFF_S = 0.1


class GroupAdmin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        request_timeout_s: float = 10.0,
        tls: TlsFiles | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.metadata = ClusterMetadata(
            bootstrap_servers, request_timeout_s=request_timeout_s, tls=tls, sasl=sasl
        )
        self._timeout_s = request_timeout_s

    async def close(self) -> None:
        await self.metadata.close()

    async def list_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        """Every group some broker coordinates (or knows from the metadata log)."""
        await self.metadata.refresh(force=True)
        request = broker_pb2.ListGroupsRequest(states=list(states))
        answers = await asyncio.gather(
            *(
                self.metadata.broker_at(a).ListGroups(request, timeout=self._timeout_s)
                for a in self.metadata.brokers.values()
            ),
            return_exceptions=True,
        )
        found: dict[str, GroupListing] = {}
        for answer in answers:
            if isinstance(answer, WireError | asyncio.TimeoutError):
                continue
            if isinstance(answer, BaseException):
                raise answer
            for g in answer.groups:
                if (
                    g.group_id not in found or found[g.group_id].state == "Empty"
                ):  # a moving group: the live view wins
                    found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.state)
        return sorted(found.values(), key=lambda g: g.group)

    async def describe_group(self, group: str) -> GroupDescription:
        described = (
            await self._coordinator_call(
                group,
                lambda b: b.DescribeGroups(
                    broker_pb2.DescribeGroupsRequest(groups=[group]), timeout=self._timeout_s
                ),
            )
        ).groups[0]
        if described.error != E.NONE:
            raise ConsumerError(E.Name(described.error), described.message)
        members = tuple(
            GroupMemberDescription(
                m.member_id,
                m.group_instance_id if m.HasField("group_instance_id") else None,
                m.client_id,
                m.client_host,
                _partitions(m.assignment) if described.protocol_type in (PROTOCOL_TYPE, "") else (),
            )
            for m in described.members
        )
        owners = {tp: m.member_id for m in members for tp in m.assignment}
        committed = await self._committed(group)
        partitions = sorted({*committed, *owners})
        log_ends = await self._log_ends(partitions)
        offsets = tuple(
            GroupPartitionOffsets(tp, committed.get(tp), log_ends.get(tp), owners.get(tp))
            for tp in partitions
        )
        return GroupDescription(
            group,
            described.state,
            described.protocol_type,
            described.protocol_name,
            described.generation_id,
            described.coordinator,
            members,
            offsets,
        )

    async def delete_groups(self, groups: Sequence[str]) -> list[PartitionResult]:
        """Each group through its coordinator; a group with members is refused (NON_EMPTY_GROUP)."""
        results = []
        for group in groups:
            try:
                answer = await self._coordinator_call(
                    group,
                    lambda b, g=group: b.DeleteGroups(
                        controller_pb2.DeleteGroupsRequest(groups=[g]), timeout=self._timeout_s
                    ),
                )
                outcome = answer.groups[0]
                error = None if outcome.error == E.NONE else E.Name(outcome.error)
                results.append(PartitionResult(group, -1, error, outcome.message))
            except KafkaError as e:
                results.append(PartitionResult(group, -1, e.code, e.message))
        return results

    async def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> list[PartitionResult]:
        """Commit ``offsets`` from outside the group: refused while it has members."""
        request = controller_pb2.OffsetCommitRequest(group=group)
        by_topic: dict[str, controller_pb2.OffsetCommitTopic] = {}
        for tp, offset in sorted(offsets.items()):
            if tp.topic not in by_topic:
                by_topic[tp.topic] = request.topics.add(topic=tp.topic)
            by_topic[tp.topic].partitions.add(partition=tp.partition, offset=offset)
        answer = await self._coordinator_call(
            group, lambda b: b.OffsetCommit(request, timeout=self._timeout_s)
        )
        if answer.status.error != E.NONE:
            raise ConsumerError(E.Name(answer.status.error), answer.status.message)
        return [
            PartitionResult(r.topic, r.partition, None if r.error == E.NONE else E.Name(r.error), r.message)
            for r in answer.partitions
        ]

    async def offsets_at(
        self, partitions: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """Each partition's offset at ``timestamp`` (-2 earliest, -1 latest, else ms)."""
        found = await self.metadata.list_offsets(partitions, timestamp)
        return {tp: offset for tp, (offset, _) in found.items()}

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        return await self._committed(group)

    # helpers --------------------------------------------------------------------------------

    async def _coordinator_call(self, group: str, call) -> object:  # noqa: ANN001
        deadline = time.monotonic() + self._timeout_s
        problem = ""
        while time.monotonic() < deadline:
            coordinator: BrokerClient = await find_coordinator(
                self.metadata, group, self._timeout_s, BACKOFF_S, give_up_after_s=self._timeout_s
            )
            try:
                answer = await call(coordinator)
            except WireError as e:
                problem = str(e)
            else:
                error = answer.status.error
                if error not in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT):
                    return answer
                problem = f"{E.Name(error)}: {answer.status.message}"
            await asyncio.sleep(BACKOFF_S)
        raise ConsumerError("COORDINATOR_NOT_AVAILABLE", f"group {group!r}: {problem}")

    async def _committed(self, group: str) -> dict[TopicPartition, int]:
        """Through any broker, from the controller; tried again while none answers."""
        request = controller_pb2.OffsetFetchRequest(group=group)
        deadline = time.monotonic() + self._timeout_s
        problem = ""
        while time.monotonic() < deadline:
            try:
                answer = await self.metadata.any_broker().OffsetFetch(request, timeout=self._timeout_s)
            except WireError as e:
                problem = str(e)
            else:
                if answer.status.error == E.NONE:
                    return {
                        TopicPartition(o.topic, o.partition): o.offset
                        for o in answer.offsets
                        if o.error == E.NONE and o.offset >= 0
                    }
                if answer.status.error not in (E.NOT_CONTROLLER, E.REQUEST_TIMED_OUT):
                    raise ConsumerError(E.Name(answer.status.error), answer.status.message)
                problem = f"{E.Name(answer.status.error)}: {answer.status.message}"
            await asyncio.sleep(BACKOFF_S)
        raise ConsumerError("REQUEST_TIMED_OUT", f"committed offsets of {group!r}: {problem}")

    async def _log_ends(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        try:
            return await self.offsets_at(partitions, LIST_LATEST)
        except KafkaError:
            return {}


def _partitions(assignment: bytes) -> tuple[TopicPartition, ...]:
    if not assignment:
        return ()
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
    except Exception:  # noqa: BLE001 - another protocol's bytes: shown without partitions
        return ()
    return tuple(
        sorted(TopicPartition(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions)
    )
