"""The QuorumController fences group writes on its own image (``raftka.metadata.group_ops``).

A coordinator checks commits against its in-memory group, but its view can be stale: the
group may have moved to another broker, or a newer generation may be recorded. The
controller takes a coordinator's commit batch and rebalances only from the group's
current coordinator (per its image) at that broker's current registration, and a member's
commit only at a generation not older than the recorded one; a refused one appends
nothing. Commits from outside the group (no generation) are still taken, and a commit a
coordinator forwards on its own (``coordinator_id``) is fenced the same way.
"""

from __future__ import annotations

from raftka.metadata.controller import QuorumController
from raftka.metadata.group_placement import coordinator_for
from raftka.v1 import controller_pb2 as pb
from tests.metadata_sim.quorum import Member
from tests.unit import metadata_support as m
from tests.unit.metadata_controller_support import (
    BROKERS,
    E,
    create,
    heartbeat,
    live_brokers,
    log_end,
    run,
    single,
)


def group_of(broker_id: int, brokers: tuple[int, ...] = BROKERS) -> str:
    return next(g for g in (f"group-{i}" for i in range(1000)) if coordinator_for(g, brokers) == broker_id)


def commit(group: str, offset: int, generation: int | None = None) -> pb.OffsetCommitRequest:
    """A commit of t-0; ``generation`` None: a simple commit from outside the group."""
    request = pb.OffsetCommitRequest(
        group=group,
        topics=[
            pb.OffsetCommitTopic(topic="t", partitions=[pb.OffsetCommitPartition(partition=0, offset=offset)])
        ],
    )
    if generation is not None:
        request.generation_id, request.member_id = generation, "m1"
    return request


async def record(c: QuorumController, group: str, generation: int, broker_id: int, epoch: int) -> None:
    response = await c.record_group_rebalance(
        pb.RecordGroupRebalanceRequest(
            rebalance=m.group_rebalance(group, generation).group_rebalance,
            broker_id=broker_id,
            broker_epoch=epoch,
        )
    )
    assert response.status.error == E.NONE, response.status


def committed(member: Member, group: str) -> int | None:
    offsets = member.image.offsets.get(group, {})
    topic_id = member.image.topic_ids_by_name["t"]
    entry = offsets.get((topic_id, 0))
    return None if entry is None else entry.offset


def test_a_commit_from_a_generation_older_than_the_recorded_one_is_refused_and_writes_nothing() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", partitions=1, rf=1)
        coordinator = BROKERS[0]
        group = group_of(coordinator)
        await record(c, group, 4, coordinator, epochs[coordinator])
        sender = {"broker_id": coordinator, "broker_epoch": epochs[coordinator]}

        before = log_end(member)
        stale = await c.commit_group_offsets(
            pb.CommitGroupOffsetsRequest(groups=[commit(group, 7, 3)], **sender)
        )
        assert stale.status.error == E.NONE, stale.status
        assert stale.groups[0].status.error == E.ILLEGAL_GENERATION, stale.groups[0]
        assert log_end(member) == before, "a refused commit appended to the log"
        assert committed(member, group) is None

        current = await c.commit_group_offsets(
            pb.CommitGroupOffsetsRequest(groups=[commit(group, 8, 4)], **sender)
        )
        assert current.groups[0].status.error == E.NONE and not current.groups[0].partitions[0].error
        simple = await c.commit_group_offsets(
            pb.CommitGroupOffsetsRequest(groups=[commit(group, 9)], **sender)
        )
        assert simple.groups[0].status.error == E.NONE and not simple.groups[0].partitions[0].error
        assert committed(member, group) == 9
        await quorum.close()

    run(body)


def test_a_commit_or_rebalance_from_a_broker_that_does_not_coordinate_the_group_writes_nothing() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", partitions=1, rf=1)
        coordinator, other = BROKERS[0], BROKERS[1]
        group = group_of(coordinator)

        def rebalance(sender: int, epoch: int) -> pb.RecordGroupRebalanceRequest:
            return pb.RecordGroupRebalanceRequest(
                rebalance=m.group_rebalance(group, 1).group_rebalance, broker_id=sender, broker_epoch=epoch
            )

        def batch(sender: int, epoch: int) -> pb.CommitGroupOffsetsRequest:
            return pb.CommitGroupOffsetsRequest(
                groups=[commit(group, 7)], broker_id=sender, broker_epoch=epoch
            )

        before = log_end(member)
        not_coordinator = await c.commit_group_offsets(batch(other, epochs[other]))
        assert not_coordinator.groups[0].status.error == E.NOT_COORDINATOR, not_coordinator
        assert f"broker {coordinator} does" in not_coordinator.groups[0].status.message
        old_registration = await c.commit_group_offsets(batch(coordinator, epochs[coordinator] - 1))
        assert old_registration.status.error == E.STALE_BROKER_EPOCH, old_registration.status
        assert (
            await c.record_group_rebalance(rebalance(other, epochs[other]))
        ).status.error == E.NOT_COORDINATOR
        stale_rebalance = await c.record_group_rebalance(rebalance(coordinator, epochs[coordinator] - 1))
        assert stale_rebalance.status.error == E.STALE_BROKER_EPOCH
        assert log_end(member) == before, "a refused write appended to the log"
        assert committed(member, group) is None and group not in member.image.groups

        # The coordinator is fenced: the group moves, and its old coordinator's commits stop.
        await heartbeat(c, coordinator, epochs[coordinator], want_fence=True)
        moved_to = coordinator_for(group, BROKERS[1:])
        old = pb.CommitGroupOffsetsRequest(
            groups=[commit(group, 7)], broker_id=coordinator, broker_epoch=epochs[coordinator]
        )
        assert (await c.commit_group_offsets(old)).groups[0].status.error == E.NOT_COORDINATOR
        new = pb.CommitGroupOffsetsRequest(
            groups=[commit(group, 8)], broker_id=moved_to, broker_epoch=epochs[moved_to]
        )
        assert (await c.commit_group_offsets(new)).groups[0].status.error == E.NONE
        assert committed(member, group) == 8
        await quorum.close()

    run(body)


def test_a_commit_forwarded_on_its_own_is_taken_only_from_the_coordinator_it_names() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", partitions=1, rf=1)
        coordinator, other = BROKERS[0], BROKERS[1]
        group = group_of(coordinator)

        def forwarded(offset: int, by: int, epoch: int) -> pb.OffsetCommitRequest:
            request = commit(group, offset)
            request.coordinator_id, request.coordinator_epoch = by, epoch
            return request

        before = log_end(member)
        not_coordinator = await c.commit_offsets(forwarded(1, other, epochs[other]))
        assert not_coordinator.status.error == E.NOT_COORDINATOR, not_coordinator.status
        stale = await c.commit_offsets(forwarded(2, coordinator, epochs[coordinator] - 1))
        assert stale.status.error == E.STALE_BROKER_EPOCH, stale.status
        assert log_end(member) == before and committed(member, group) is None

        assert (await c.commit_offsets(forwarded(3, coordinator, epochs[coordinator]))).status.error == E.NONE
        assert committed(member, group) == 3
        assert (
            await c.commit_offsets(commit(group, 4))
        ).status.error == E.NONE  # an operator's, straight here
        assert committed(member, group) == 4
        await quorum.close()

    run(body)
