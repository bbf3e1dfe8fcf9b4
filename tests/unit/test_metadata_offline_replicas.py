"""A broker reports the partitions whose log failed on it (``BrokerHeartbeatRequest.offline_replicas``):
the controller moves each off it as fencing would, one PartitionChangeRecord per partition in a
new leader epoch, never elects it there while it reports it, and lets it come back as any
follower does once it stops. Against a one-voter quorum with a manual session clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from raftka.metadata.controller import QuorumController
from raftka.metadata.image import MetadataImage, PartitionState
from raftka.v1 import controller_pb2 as pb
from tests.unit.metadata_controller_support import (
    QUIET_RAFT,
    E,
    create,
    live_brokers,
    log_end,
    run,
    single,
    three,
)
from tests.unit.test_metadata_controller_brokers import alter
from tests.unit.test_metadata_controller_topics import refused_without_append


def state_of(image: MetadataImage, topic: str, partition: int) -> PartitionState:
    found = image.topic(topic)
    assert found is not None
    return found.partitions[partition]


def topic_id(image: MetadataImage, topic: str) -> bytes:
    return image.topic_ids_by_name[topic]


async def expand(
    c: QuorumController, image: MetadataImage, broker_id: int, epochs: dict[int, int], isr: list[int]
) -> int:
    """The leader of t-0 asks for ``isr``, with each member's broker epoch (KIP-903); the
    partition's error code."""
    state = state_of(image, "t", 0)
    request = alter(
        broker_id, epochs[broker_id], topic_id(image, "t"), 0, state.leader_epoch, isr, state.partition_epoch
    )
    request.topics[0].partitions[0].new_isr_broker_epochs.extend(epochs[b] for b in isr)
    return (await c.alter_partition(request)).partitions[0].error


async def report(
    c: QuorumController, broker_id: int, epoch: int, offline: dict[bytes, Iterable[int]], **fields: object
) -> pb.BrokerHeartbeatResponse:
    """A heartbeat listing ``offline`` (topic id -> partitions)."""
    return await c.broker_heartbeat(
        pb.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=epoch,
            offline_replicas=[
                pb.OfflineTopicReplicas(topic_id=t, partitions=list(ps)) for t, ps in offline.items()
            ],
            **fields,
        )
    )


def test_a_leader_reporting_a_partition_offline_hands_it_to_the_next_isr_member() -> None:
    """One PartitionChangeRecord: the next ISR member in replica order leads in a new leader
    epoch, the reporter leaves the ISR; its other partitions are untouched."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 3)
        before = {p: state_of(member.image, "t", p) for p in range(3)}
        p, led = next((p, s) for p, s in before.items() if s.leader == 101)
        tid = topic_id(member.image, "t")
        end = log_end(member)
        response = await report(c, 101, epochs[101], {tid: [p]})
        assert response.status.error == E.NONE and not response.is_fenced
        assert log_end(member) == end + 1, "one record for one partition"
        after = state_of(member.image, "t", p)
        successor = next(b for b in led.replicas if b != 101)
        assert after.leader == successor
        assert after.leader_epoch == led.leader_epoch + 1
        assert after.isr == tuple(b for b in led.isr if b != 101)
        assert after.replicas == led.replicas, "still a replica: it comes back as a follower"
        for other in set(before) - {p}:
            assert state_of(member.image, "t", other) == before[other]
        end = log_end(member)
        await report(c, 101, epochs[101], {tid: [p]})
        assert log_end(member) == end, "the same report again changes nothing"
        await quorum.close()

    run(body)


def test_a_follower_reporting_a_partition_offline_leaves_its_isr_and_may_rejoin_once_back() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 1, 3)
        tid = topic_id(member.image, "t")
        led = state_of(member.image, "t", 0)
        follower = next(b for b in led.replicas if b != led.leader)
        await report(c, follower, epochs[follower], {tid: [0]})
        after = state_of(member.image, "t", 0)
        assert (after.leader, after.leader_epoch) == (led.leader, led.leader_epoch)
        assert follower not in after.isr and after.partition_epoch == led.partition_epoch + 1
        await report(c, follower, epochs[follower], {})  # back: it catches up, then the leader asks
        assert state_of(member.image, "t", 0) == after, "back, but only the leader takes it into the ISR"
        assert await expand(c, member.image, led.leader, epochs, list(led.isr)) == E.NONE
        assert set(state_of(member.image, "t", 0).isr) == set(led.isr)
        await quorum.close()

    run(body)


def test_the_last_isr_member_reporting_offline_is_elected_by_nothing_until_it_reports_it_back() -> None:
    """A partition on one broker: its report leaves it without a leader (its last ISR member
    moves to the ELR, as fencing moves it, KIP-966); neither a preferred election, nor the
    automatic one, nor the broker's unfencing elects it there; its report without the
    partition does."""

    async def body() -> None:
        quorum, member = await single(session_timeout_ms=1000)
        c = member.controller
        epochs = await live_brokers(c, [101])
        await create(c, "t", 1, 1)
        tid = topic_id(member.image, "t")
        led = state_of(member.image, "t", 0)
        await report(c, 101, epochs[101], {tid: [0]})
        offline = state_of(member.image, "t", 0)
        assert (offline.leader, offline.isr, offline.elr, offline.leader_epoch) == (
            -1,
            (),
            (101,),
            led.leader_epoch + 1,
        )

        asked = await c.elect_leaders(pb.ElectLeadersRequest(topics=[pb.TopicPartitions(topic="t")]))
        assert [r.error for r in asked.partitions] == [E.PREFERRED_LEADER_NOT_AVAILABLE]
        await c.elect_leaders(pb.ElectLeadersRequest())
        assert state_of(member.image, "t", 0) == offline

        quorum.clock.advance(1500)  # its session expires: fenced, then back, still reporting
        await c.tick()
        assert member.image.brokers[101].fenced
        back = await report(c, 101, epochs[101], {tid: [0]})
        assert not back.is_fenced
        assert state_of(member.image, "t", 0).leader == -1, "unfencing elects it for nothing it reports"

        await report(c, 101, epochs[101], {})
        again = state_of(member.image, "t", 0)
        assert (again.leader, again.isr) == (101, (101,))
        assert again.leader_epoch > offline.leader_epoch
        await quorum.close()

    run(body)


def test_a_broker_reporting_a_partition_offline_does_not_succeed_a_fenced_leader_there() -> None:
    """Fencing the leader elects the first ISR member that may lead: not one whose report
    names the partition (here it is still in the ISR: the leader's AlterPartition put it
    back after the report, before the broker's next heartbeat would take it out again)."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 1, 3)
        tid = topic_id(member.image, "t")
        led = state_of(member.image, "t", 0)
        second, third = (b for b in led.replicas if b != led.leader)
        await report(c, second, epochs[second], {tid: [0]})
        now = state_of(member.image, "t", 0)
        assert second not in now.isr
        assert await expand(c, member.image, led.leader, epochs, list(led.isr)) == E.NONE
        await report(c, led.leader, epochs[led.leader], {}, want_fence=True)
        after = state_of(member.image, "t", 0)
        assert after.leader == third, f"{second} reports the partition offline"
        await quorum.close()

    run(body)


def test_a_report_names_only_partitions_the_broker_hosts_and_topics_that_exist() -> None:
    """Unknown topic ids (a topic deleted since) and partitions of other brokers are
    ignored; a heartbeat at a stale epoch is refused whole, nothing moved."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 1)
        tid = topic_id(member.image, "t")
        before = {p: state_of(member.image, "t", p) for p in range(3)}
        foreign = [p for p, s in before.items() if s.replicas != (101,)]
        assert foreign
        end = log_end(member)
        await report(c, 101, epochs[101], {tid: foreign, b"\x09" * 16: [0]})
        assert log_end(member) == end, "nothing 101 hosts, nothing moved"
        hosted = next(p for p, s in before.items() if s.replicas == (101,))
        stale = await refused_without_append(member, report(c, 101, epochs[101] - 1, {tid: [hosted]}))
        assert stale.status.error == E.STALE_BROKER_EPOCH
        assert state_of(member.image, "t", hosted) == before[hosted]
        await quorum.close()

    run(body)


def test_a_report_over_a_batch_moves_every_partition_in_steps_within_one_heartbeat() -> None:
    """Nine partitions at four records a batch: the one heartbeat moves them all, in steps."""

    async def body() -> None:
        quorum, member = await single(raft=dataclasses.replace(QUIET_RAFT, append_max_records=4))
        c = member.controller
        epochs = await live_brokers(c, [101, 102])
        names = ["a", "b", "c"]
        for name in names:
            await create(c, name, 3, 2)  # on both brokers
        offline = {topic_id(member.image, name): range(3) for name in names}
        await report(c, 101, epochs[101], offline)
        for name in names:
            for p in range(3):
                state = state_of(member.image, name, p)
                assert (state.leader, state.isr) == (102, (102,)), (name, p)
        await quorum.close()

    run(body)


def test_a_new_controller_learns_a_report_from_the_next_heartbeat_and_elects_what_came_back() -> None:
    """The reports live in the active controller's memory: its successor knows none until
    each broker's next heartbeat, which brings the partitions in line with it. Here the
    partition came back on its last ISR member while the controller changed."""

    async def body() -> None:
        quorum, leader_id = await three()
        old = quorum.members[leader_id].controller
        epochs = await live_brokers(old, [101])
        await create(old, "t", 1, 1)
        tid = topic_id(quorum.members[leader_id].image, "t")
        await report(old, 101, epochs[101], {tid: [0]})
        await quorum.converged()
        await quorum.crash(leader_id)
        new = await quorum.active()
        assert state_of(new.image, "t", 0).leader == -1
        await report(new.controller, 101, epochs[101], {})
        assert state_of(new.image, "t", 0).leader == 101
        await quorum.start(leader_id)
        await quorum.converged()
        await quorum.close()

    run(body)
