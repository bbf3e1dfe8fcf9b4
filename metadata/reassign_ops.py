"""Partition reassignment, as Kafka's KIP-455: pure functions of the controller's image.

A reassignment moves a partition to its *target* replicas without ever having fewer
copies than before. Its whole state is in the partition record, so a controller that
takes over (or a broker that restarts) carries on from the log alone:

- Start (AlterPartitionReassignments with replicas): the replicas become the target
  followed by the current replicas not in it (``removing_replicas``); the target
  replicas that are new (``adding_replicas``) start as followers, fetch from the
  leader's log start and join the ISR through the leader's AlterPartition, as any
  follower catching up does. The ISR and the leader do not change.
- Completion, in the same change as the ISR expansion that brings the last target
  replica in (``complete``, called from ``broker_ops.alter_partition``), or at once when
  every target replica is already in the ISR: the removing replicas leave the
  replicas, the ISR and the ELR together; if the leader was one of them, the first
  target replica in the ISR leads (Kafka's order). It never completes while any target
  replica (adding or kept) is out of the ISR, so a removing replica only leaves once
  every replica that stays holds everything committed: never fewer full copies than
  before. Afterwards the partition has exactly the target replicas.
- Cancellation (replicas unset): the adding replicas leave (replicas, ISR, ELR); the
  removing ones stay. If the leader was an adding replica, the first remaining ISR
  member in replica order leads. Refused when every ISR member is an adding replica.
- A new target while one is in progress starts over from the original replicas (the
  replicas without those being added, as ZooKeeper-era Kafka's ``reassignTo`` keeps its
  origin replicas): the earlier adding replicas the new target drops leave at once (they
  were never needed), those it keeps must still join the ISR. So a later cancel goes
  back to the original replicas, not to a union of every target (RF 5 after a retarget
  and a cancel). Refused when the dropped ones are the whole ISR.

Bad input (an unknown partition, an empty, repeated or unregistered target replica, a
partition named twice) is answered per partition with the field named; the other
partitions go ahead, as Kafka's per-partition results do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from raftka.metadata import eligible_leaders
from raftka.metadata.image import LEADER_UNCHANGED, NO_LEADER, MetadataImage, PartitionState
from raftka.metadata.plan import (
    ErrorCode,
    MetadataRecord,
    Plan,
    crashed_broker_ids,
    duplicates,
    live_broker_ids,
    partition_change,
)
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2, metadata_pb2

Acceptable = Callable[[int], bool]  # may this broker lead the partition


def alter(
    image: MetadataImage,
    request: controller_pb2.AlterPartitionReassignmentsRequest,
    shutting_down: Collection[int] = (),
) -> Plan:
    """``shutting_down``: brokers in controlled shutdown, never elected by a move."""
    response = controller_pb2.AlterPartitionReassignmentsResponse()
    repeated = duplicates((t.name, p.partition) for t in request.topics for p in t.partitions)
    live = live_broker_ids(image) - set(shutting_down)
    records: list[MetadataRecord] = []
    for topic in request.topics:
        for asked in topic.partitions:
            result = response.partitions.add(topic=topic.name, partition=asked.partition)
            try:
                if (topic.name, asked.partition) in repeated:
                    raise ValidationError(
                        ErrorCode.INVALID_REQUEST,
                        f"topics: partition {topic.name}-{asked.partition} appears more than once",
                    )
                record = _reassign(image, topic.name, asked, live)
            except ValidationError as e:
                result.error, result.message = e.code, e.message
                continue
            if record is not None:
                records.append(record)
    return Plan(response, records)


def _reassign(
    image: MetadataImage, name: str, asked: controller_pb2.ReassignablePartition, live: frozenset[int]
) -> MetadataRecord | None:
    topic = image.topic(name)
    state = None if topic is None else topic.partitions.get(asked.partition)
    if topic is None or state is None:
        raise ValidationError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{asked.partition}")
    policy = eligible_leaders.topic_policy(image, name)
    crashed = crashed_broker_ids(image)
    if asked.HasField("replicas"):
        target = _valid_target(image, name, asked)
        dropped = set(state.adding_replicas) - set(target)
        current = _revert(state, dropped, policy, live.__contains__, crashed) if dropped else state
        if current is None:
            raise ValidationError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas: {list(target)} drops every ISR member {list(state.isr)} of {name}-{asked.partition} "
                "(all being added by the move in progress): let it complete first",
            )
        after = start(current, target, policy, live.__contains__, crashed)
    else:
        if not state.reassigning:
            raise ValidationError(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"replicas: unset (cancel) but {name}-{asked.partition} has no reassignment in progress",
            )
        after = cancel(state, policy, live.__contains__, crashed)
        if after is None:
            raise ValidationError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas: cancelling would leave {name}-{asked.partition} no in-sync replica (every ISR "
                f"member {list(state.isr)} is being added): let it complete, or reassign it again",
            )
    return change_record(topic.topic_id, asked.partition, state, after)


def _valid_target(
    image: MetadataImage, name: str, asked: controller_pb2.ReassignablePartition
) -> tuple[int, ...]:
    where = f"replicas of {name}-{asked.partition}"
    ids = asked.replicas.ids
    if not ids:
        raise ValidationError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where}: empty, at least one needed")
    if len(ids) > len(image.brokers):  # before the list is read: it cannot be distinct registered brokers
        raise ValidationError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{where}: {len(ids)} replicas, the cluster has {len(image.brokers)} brokers",
        )
    target = tuple(ids)
    repeated = duplicates(target)
    if repeated:
        raise ValidationError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where}: broker {min(repeated)} appears more than once"
        )
    for broker_id in target:  # registered, fenced or not (Kafka's validateManualPartitionAssignment)
        if broker_id not in image.brokers:
            raise ValidationError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where}: broker {broker_id} is not registered"
            )
    return target


def start(
    state: PartitionState,
    target: tuple[int, ...],
    policy: eligible_leaders.Policy,
    acceptable: Acceptable,
    crashed: Collection[int] = (),
) -> PartitionState:
    """The partition once a reassignment to ``target`` begins (completed at once when it
    adds nothing the ISR lacks)."""
    current = state.replicas
    removing = tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current or r in state.adding_replicas)
    begun = dataclasses.replace(
        state, replicas=target + removing, adding_replicas=adding, removing_replicas=removing
    )
    if not adding and not removing:  # the target is the replicas, maybe in another order
        begun = dataclasses.replace(begun, adding_replicas=(), removing_replicas=())
    return complete(begun, policy, acceptable, crashed) or begun


def complete(
    state: PartitionState,
    policy: eligible_leaders.Policy,
    acceptable: Acceptable,
    crashed: Collection[int] = (),
) -> PartitionState | None:
    """The partition with its reassignment completed, if it may complete now: every
    target replica in the ISR (not only the adding ones: a target replica that is
    catching up holds less than a removing one, so dropping that one would leave fewer
    full copies; Kafka's ``PartitionReassignmentReplicas.isReassignmentInProgress``
    target-ISR check), and one of them may lead."""
    if not state.reassigning:
        return None
    removing = set(state.removing_replicas)
    isr = tuple(r for r in state.isr if r not in removing)
    if not isr or not {r for r in state.replicas if r not in removing} <= set(isr):
        return None
    kept = lambda ids: tuple(r for r in ids if r not in removing)  # noqa: E731
    moved = dataclasses.replace(
        state,
        replicas=kept(state.replicas),
        isr=isr,
        elr=kept(state.elr),
        last_known_elr=kept(state.last_known_elr),
        adding_replicas=(),
        removing_replicas=(),
    )
    done = _elected(moved, policy, acceptable, crashed)
    return done if done.leader != NO_LEADER or state.leader == NO_LEADER else None


def cancel(
    state: PartitionState,
    policy: eligible_leaders.Policy,
    acceptable: Acceptable,
    crashed: Collection[int] = (),
) -> PartitionState | None:
    """The partition with its reassignment cancelled; None if no ISR member would be left."""
    reverted = _revert(state, set(state.adding_replicas), policy, acceptable, crashed)
    return None if reverted is None else dataclasses.replace(reverted, removing_replicas=())


def _revert(
    state: PartitionState,
    gone: Collection[int],
    policy: eligible_leaders.Policy,
    acceptable: Acceptable,
    crashed: Collection[int],
) -> PartitionState | None:
    """``state`` without ``gone`` (replicas a move was adding) in its replicas, ISR and
    ELR, and a leader elected if it led; None if no ISR member would be left."""
    kept = lambda ids: tuple(r for r in ids if r not in gone)  # noqa: E731
    isr = kept(state.isr)
    if state.isr and not isr:
        return None
    reverted = dataclasses.replace(
        state,
        replicas=kept(state.replicas),
        isr=isr,
        elr=kept(state.elr),
        last_known_elr=kept(state.last_known_elr),
        adding_replicas=kept(state.adding_replicas),
    )
    return _elected(reverted, policy, acceptable, crashed)


def _elected(
    state: PartitionState, policy: eligible_leaders.Policy, acceptable: Acceptable, crashed: Collection[int]
) -> PartitionState:
    """``state`` with its leader (and ELR) as the election rules make them: the leader
    stays if it is still in the ISR, else the first replica in the ISR leads."""
    still_replica = lambda b: b in state.replicas and acceptable(b)  # noqa: E731
    # The record is only merged into ``state`` here, never written: no topic id or partition needed.
    record = eligible_leaders.change(
        b"", 0, state, isr=state.isr, policy=policy, acceptable=still_replica, crashed=crashed
    )
    return state if record is None else merged(state, record.partition_change)


def merged(state: PartitionState, change: metadata_pb2.PartitionChangeRecord) -> PartitionState:
    """``state`` with a PartitionChangeRecord's fields applied (its epochs left to replay)."""
    values = {}
    for name in ("replicas", "isr", "elr", "last_known_elr", "adding_replicas", "removing_replicas"):
        if change.HasField(name):
            values[name] = tuple(getattr(change, name).ids)
    if change.leader != LEADER_UNCHANGED:
        values["leader"] = change.leader
    return dataclasses.replace(state, **values)


def change_record(
    topic_id: bytes, partition: int, before: PartitionState, after: PartitionState
) -> MetadataRecord | None:
    """The PartitionChangeRecord taking ``before`` to ``after`` (None if they are the same)."""
    fields = {}
    for name in ("replicas", "isr", "elr", "last_known_elr", "adding_replicas", "removing_replicas"):
        if getattr(after, name) != getattr(before, name):
            fields[name] = getattr(after, name)
    leader = after.leader if after.leader != before.leader else LEADER_UNCHANGED
    if not fields and leader == LEADER_UNCHANGED:
        return None
    return partition_change(topic_id, partition, leader=leader, **fields)


def list_reassignments(
    image: MetadataImage, request: controller_pb2.ListPartitionReassignmentsRequest
) -> controller_pb2.ListPartitionReassignmentsResponse:
    """The reassignments in progress, of the partitions asked for (every one if none)."""
    response = controller_pb2.ListPartitionReassignmentsResponse()
    if request.topics:
        asked = [(t.topic, set(t.partitions)) for t in request.topics]
    else:
        asked = [(name, set()) for name in sorted(image.topic_ids_by_name)]
    for name, wanted in asked:
        topic = image.topic(name)
        if topic is None:
            continue
        for partition, state in sorted(topic.partitions.items()):
            if state.reassigning and (not wanted or partition in wanted):
                response.reassignments.add(
                    topic=name,
                    partition=partition,
                    replicas=state.replicas,
                    adding_replicas=state.adding_replicas,
                    removing_replicas=state.removing_replicas,
                )
    return response
