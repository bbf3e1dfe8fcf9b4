"""A group coordinator move costs no member its membership (issue 30, finding 5; Kafka's
new coordinator loads the group metadata it persisted): the broker that takes a group
over carries it on from the last rebalance recorded in the metadata log, so a member of
that generation goes on heartbeating, committing, and committing offsets in a
transaction, with no rebalance; and a member that stops heartbeating there is still
removed after its session timeout, and the group's emptiness is recorded under a new
generation, so that no later coordinator brings that member back.

Two brokers' group coordinators against one in-memory controller, on a clock the test
moves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from raftka.broker.groups.coordinator import GroupCoordinator
from raftka.broker.groups.group import State
from raftka.metadata.group_placement import coordinator_for
from raftka.metadata.image import MetadataImage
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.metadata.transactions import State as TxnState
from raftka.v1 import broker_pb2, controller_pb2
from tests.unit import metadata_support as m
from tests.unit.broker_in_process import GROUP_LIMITS
from tests.unit.controller_in_memory import ControllerInMemory

E = controller_pb2.ErrorCode
Pb = broker_pb2
C = controller_pb2
FIRST, SECOND = 101, 102
TOPIC = "events"
GROUP = next(g for g in (f"g{i}" for i in range(1000)) if coordinator_for(g, [FIRST, SECOND]) == FIRST)
SESSION_MS = 10_000
ASSIGNED = ConsumerProtocolAssignment(0, [(TOPIC, [0, 1])], b"").encode()


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


def cluster(controller: ControllerInMemory) -> None:
    tid = m.topic_id(1)
    controller.set_image(
        m.replay(
            controller.image,
            m.register(FIRST, 1, fenced=False),
            m.register(SECOND, 2, fenced=False),
            m.topic(TOPIC, tid),
            *(m.partition(tid, p, [FIRST, SECOND], leader=FIRST) for p in range(2)),
        )
    )


def coordinator(controller: ControllerInMemory, broker_id: int, clock: Clock) -> GroupCoordinator:
    epoch = controller.image.brokers[broker_id].epoch
    made = GroupCoordinator(broker_id, lambda: epoch, GROUP_LIMITS, controller, 100, clock_ms=clock)  # type: ignore[arg-type]
    made.update(controller.image)
    controller.listeners.append(made.update)
    return made


async def joined_and_synced(first: GroupCoordinator, clock: Clock) -> tuple[str, int]:
    """One member's join, the rebalance, its sync (recorded by the controller)."""
    request = Pb.JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=[Pb.JoinGroupProtocol(name="range", metadata=b"")],
        client_id="c",
        client_host="/10.0.0.1",
    )
    required = await first.join(request)
    assert required.status.error == E.MEMBER_ID_REQUIRED
    request.member_id = required.member_id
    joining = asyncio.create_task(first.join(request))
    for _ in range(100):
        await asyncio.sleep(0)
        first.poll(clock.now_ms)
        if joining.done():
            break
    joined = joining.result()
    assert joined.status.error == E.NONE, joined.status.message
    synced = await first.sync(
        Pb.SyncGroupRequest(
            group_id=GROUP,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[Pb.SyncGroupAssignment(member_id=joined.member_id, assignment=ASSIGNED)],
        )
    )
    assert synced.status.error == E.NONE, synced.status.message
    return joined.member_id, joined.generation_id


def commit(member_id: str, generation: int, offset: int) -> C.OffsetCommitRequest:
    return C.OffsetCommitRequest(
        group=GROUP,
        generation_id=generation,
        member_id=member_id,
        topics=[
            C.OffsetCommitTopic(topic=TOPIC, partitions=[C.OffsetCommitPartition(partition=0, offset=offset)])
        ],
    )


def errors(answer: Any) -> set[int]:
    return {answer.status.error} | {p.error for p in answer.partitions}


def test_the_new_coordinator_carries_the_group_on_with_its_members() -> None:
    async def scenario() -> None:
        controller, clock = ControllerInMemory(MetadataImage()), Clock()
        cluster(controller)
        first, second = coordinator(controller, FIRST, clock), coordinator(controller, SECOND, clock)
        try:
            member_id, generation = await joined_and_synced(first, clock)
            recorded = controller.image.groups[GROUP]
            assert [(mm.member_id, mm.session_timeout_ms) for mm in recorded.members] == [
                (member_id, SESSION_MS)
            ]
            assert (
                decode_image(encode_image(controller.image)).groups[GROUP] == recorded
            )  # snapshots keep them

            controller.set_image(m.replay(controller.image, m.fence(FIRST, 1)))  # the group moves
            beat = await second.heartbeat(
                Pb.HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member_id)
            )
            assert beat.status.error == E.NONE, beat.status.message
            assert errors(await second.commit(commit(member_id, generation, 7))) == {E.NONE}
            assert controller.image.offsets[GROUP][(m.topic_id(1), 0)].offset == 7
            again = await second.sync(  # a sync of the same generation is answered its assignment
                Pb.SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=member_id)
            )
            assert (again.status.error, again.assignment) == (E.NONE, ASSIGNED)

            # a transaction's offsets, from the same member, go through its group's new coordinator
            txn = m.transaction("tx", 5, 0, TxnState.TXN_ONGOING, [(TOPIC, 0)], [GROUP])
            controller.set_image(m.replay(controller.image, m.transaction("tx", 5, 0), txn))
            held = await second.txn_commit(
                C.TxnOffsetCommitRequest(
                    transactional_id="tx",
                    producer_id=5,
                    producer_epoch=0,
                    offsets=commit(member_id, generation, 9),
                )
            )
            assert errors(held) == {E.NONE}
            assert controller.image.groups[GROUP].generation_id == generation  # no rebalance

            clock.now_ms += SESSION_MS + 1  # the member goes silent: removed as ever
            second.poll(clock.now_ms)
            assert second._groups[GROUP].state is State.EMPTY
            for _ in range(100):
                await asyncio.sleep(0)
            emptied = controller.image.groups[GROUP]
            assert (emptied.generation_id, emptied.members) == (generation + 1, ())
            second.poll(clock.now_ms)
            assert GROUP not in second._groups
            gone = await second.heartbeat(
                Pb.HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member_id)
            )
            assert gone.status.error == E.UNKNOWN_MEMBER_ID
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())


def test_a_new_member_joins_a_group_carried_on() -> None:
    """The carried-on members' protocols are not recorded, but the group's chosen one is,
    and each of them supports it: a new member offering it is let in (a rebalance), not
    refused INCONSISTENT_GROUP_PROTOCOL until every carried-on member has joined again."""

    async def scenario() -> None:
        controller, clock = ControllerInMemory(MetadataImage()), Clock()
        cluster(controller)
        first, second = coordinator(controller, FIRST, clock), coordinator(controller, SECOND, clock)
        try:
            await joined_and_synced(first, clock)
            controller.set_image(m.replay(controller.image, m.fence(FIRST, 1)))  # the group moves
            newcomer = await second.join(
                Pb.JoinGroupRequest(
                    group_id=GROUP,
                    session_timeout_ms=SESSION_MS,
                    rebalance_timeout_ms=30_000,
                    protocol_type="consumer",
                    protocols=[Pb.JoinGroupProtocol(name="range", metadata=b"")],
                    client_id="d",
                    client_host="/10.0.0.2",
                )
            )
            assert newcomer.status.error == E.MEMBER_ID_REQUIRED, newcomer.status.message
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())
