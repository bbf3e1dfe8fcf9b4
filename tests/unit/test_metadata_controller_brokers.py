"""QuorumController broker lifecycle: registration, heartbeats, fencing, ISR changes,
elections and producer ids, against a one-voter quorum with a manual session clock."""

from __future__ import annotations

import asyncio

import pytest

from raftka.cli.topics import describe_view, format_describe
from raftka.client.types import PartitionInfo, TopicDescription
from raftka.metadata import broker_ops, elections, topic_ops
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.metadata.records import topic_id_str
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.unit.metadata_controller_support import (
    E,
    create,
    heartbeat,
    live_brokers,
    log_end,
    register,
    run,
    single,
)
from tests.unit.test_metadata_controller_topics import refused_without_append


def partitions_of(image: MetadataImage, name: str) -> dict:
    topic = image.topic(name)
    assert topic is not None
    return dict(topic.partitions)


def test_registration_epoch_is_the_record_offset_and_starts_fenced() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        before = log_end(member)
        epoch = await register(c, 101, rack="r1")
        assert epoch == before, "the registration is the batch's only record"
        broker = member.image.brokers[101]
        assert (broker.epoch, broker.fenced, broker.rack) == (epoch, True, "r1")
        behind = await heartbeat(c, 101, epoch, offset=epoch - 1)
        assert (behind.is_caught_up, behind.is_fenced) == (False, True)
        assert member.image.brokers[101].fenced
        caught_up = await heartbeat(c, 101, epoch)
        assert (caught_up.is_caught_up, caught_up.is_fenced) == (True, False)
        assert not member.image.brokers[101].fenced
        cluster = await c.describe_cluster(pb.DescribeClusterRequest())
        assert cluster.controller_id == 1 and cluster.cluster_id
        assert [(b.broker_id, b.fenced, b.epoch, b.endpoints[0].port) for b in cluster.brokers] == [
            (101, False, epoch, 9101)
        ]
        await quorum.close()

    run(body)


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.BrokerRegistrationRequest(broker_id=-1, incarnation_id="i"), "broker_id"),
        (pb.BrokerRegistrationRequest(broker_id=101), "incarnation_id"),
        (pb.BrokerRegistrationRequest(broker_id=101, incarnation_id="i", rack="r" * 256), "rack"),
        (
            pb.BrokerRegistrationRequest(
                broker_id=101, incarnation_id="i", listeners=[metadata_pb2.BrokerEndpoint(host="h", port=0)]
            ),
            "listeners",
        ),
        (
            pb.BrokerRegistrationRequest(
                broker_id=101, incarnation_id="i", listeners=[metadata_pb2.BrokerEndpoint(host="", port=1)]
            ),
            "listeners",
        ),
        (
            pb.BrokerRegistrationRequest(broker_id=101, incarnation_id="i", log_dir_id=b"\x01" * 17),
            "log_dir_id",
        ),
    ],
)
def test_bad_registration_is_refused(request_: pb.BrokerRegistrationRequest, field: str) -> None:
    async def body() -> None:
        quorum, member = await single()
        response = await refused_without_append(member, member.controller.register_broker(request_))
        assert response.status.error == E.INVALID_REQUEST
        assert response.status.message.startswith(f"{field}:")
        await quorum.close()

    run(body)


def test_heartbeat_from_unknown_or_stale_broker_is_refused() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        old = await register(c, 101, incarnation="first")
        new = await register(c, 101, incarnation="second")
        assert new > old
        response = await refused_without_append(member, heartbeat(c, 101, old))
        assert response.status.error == E.STALE_BROKER_EPOCH
        response = await refused_without_append(member, heartbeat(c, 102, 5))
        assert response.status.error == E.BROKER_ID_NOT_REGISTERED
        ids = await refused_without_append(
            member, c.allocate_producer_ids(pb.AllocateProducerIdsRequest(broker_id=101, broker_epoch=old))
        )
        assert ids.status.error == E.STALE_BROKER_EPOCH
        await quorum.close()

    run(body)


def test_session_expiry_fences_reelects_from_isr_and_return_leaves_isrs_to_the_leaders() -> None:
    async def body() -> None:
        quorum, member = await single(session_timeout_ms=1000)
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "three", 3, 3)
        await create(c, "single", 3, 1)
        before = partitions_of(member.image, "three")
        single_on_101 = [p for p, s in partitions_of(member.image, "single").items() if s.replicas == (101,)]
        assert single_on_101

        quorum.clock.advance(600)
        for broker_id in (102, 103):  # the others keep heartbeating
            await heartbeat(c, broker_id, epochs[broker_id])
        quorum.clock.advance(600)
        await c.tick()
        image = member.image
        assert image.brokers[101].fenced and not image.brokers[102].fenced
        for p, state in partitions_of(image, "three").items():
            assert 101 not in state.isr
            if before[p].leader == 101:
                assert state.leader in (102, 103) and state.leader == next(
                    b for b in before[p].replicas if b != 101
                )
                assert state.leader_epoch == before[p].leader_epoch + 1
            else:
                assert state.leader == before[p].leader
            assert state.partition_epoch == before[p].partition_epoch + 1
        for p in single_on_101:
            state = partitions_of(image, "single")[p]
            assert (state.leader, state.isr, state.elr) == (-1, (), (101,)), "offline, waiting for its ELR"
        described = await c.describe_topics(pb.DescribeTopicsRequest(names=["single"]))
        assert any(p.leader == -1 for p in described.topics[0].partitions)

        fenced = partitions_of(member.image, "three")
        back = await heartbeat(c, 101, epochs[101])
        assert not back.is_fenced
        image = member.image
        for p, state in partitions_of(image, "three").items():
            assert state == fenced[p], "back, but only a leader's AlterPartition takes it into an ISR"
        for p in single_on_101:
            state = partitions_of(image, "single")[p]
            assert (state.leader, state.isr) == (101, (101,)), "its last ISR member's return brings it online"
        await quorum.close()

    run(body)


def test_the_last_isr_member_fenced_leaves_the_isr_for_the_elr_and_its_return_is_a_clean_election() -> None:
    """KIP-966: the last ISR member, fenced, leaves the ISR for the eligible leader
    replicas (the ISR is below min.insync.replicas) and the leader is -1: only a replica
    known to hold every committed record may lead again, and when it returns (cleanly) it
    does, in a new leader epoch."""

    async def body() -> None:
        quorum, member = await single(session_timeout_ms=1000)
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "solo", 3, 1)
        [(p, before)] = [
            (p, s) for p, s in partitions_of(member.image, "solo").items() if s.replicas == (101,)
        ]

        quorum.clock.advance(600)
        for broker_id in (102, 103):
            await heartbeat(c, broker_id, epochs[broker_id])
        quorum.clock.advance(600)
        await c.tick()
        assert member.image.brokers[101].fenced
        offline = partitions_of(member.image, "solo")[p]
        assert (offline.leader, offline.isr, offline.elr) == (-1, (), (101,)), offline
        assert offline.leader_epoch == before.leader_epoch + 1, offline

        described = await c.describe_topics(pb.DescribeTopicsRequest(names=["solo"]))
        view = describe_view([described_topic(described.topics[0])])
        [row] = [line.split() for line in format_describe(view).splitlines() if line.split()[:1] == [str(p)]]
        assert row == [
            str(p),
            "none",
            str(offline.leader_epoch),
            "101",
            "-",
            "101",
            "-",
            "-",
            "-",
            "offline",
        ], row

        back = await heartbeat(c, 101, epochs[101])
        assert not back.is_fenced
        online = partitions_of(member.image, "solo")[p]
        assert (online.leader, online.isr, online.elr) == (101, (101,), ()), online
        assert online.leader_epoch == offline.leader_epoch + 1, online
        await quorum.close()

    run(body)


def test_an_offline_partition_waits_for_its_elr_member_not_the_first_replica_back() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c, [101, 102])
        await create(c, "pair", 1, 2)
        first, last = partitions_of(member.image, "pair")[0].replicas  # the leader is fenced first
        for broker_id in (first, last):
            await heartbeat(c, broker_id, epochs[broker_id], want_fence=True)
        offline = partitions_of(member.image, "pair")[0]
        assert (offline.leader, offline.isr, offline.elr) == (-1, (), (last,)), offline

        await heartbeat(c, first, epochs[first])
        assert not member.image.brokers[first].fenced
        assert partitions_of(member.image, "pair")[0] == offline, "it may lack later commits"

        await heartbeat(c, last, epochs[last])
        online = partitions_of(member.image, "pair")[0]
        assert (online.leader, online.isr) == (last, (last,)), "the other rejoins once it has caught up"
        assert online.leader_epoch == offline.leader_epoch + 1, online
        await quorum.close()

    run(body)


def described_topic(topic: pb.TopicDescription) -> TopicDescription:
    """What ``Admin.describe_topics`` makes of the controller's answer."""
    partitions = tuple(
        PartitionInfo(
            p.partition,
            p.leader,
            p.leader_epoch,
            p.partition_epoch,
            tuple(p.replicas),
            tuple(p.isr),
            tuple(p.elr),
        )
        for p in topic.partitions
    )
    return TopicDescription(topic.name, topic_id_str(topic.topic_id), partitions, None, "")


def test_controlled_shutdown_moves_leadership_then_fences() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 6, 2)
        led = [p for p, s in partitions_of(member.image, "t").items() if s.leader == 102]
        assert led
        response = await heartbeat(c, 102, epochs[102], want_shut_down=True)
        assert (response.should_shut_down, response.is_fenced) == (True, True)
        image = member.image
        assert image.brokers[102].fenced
        for state in partitions_of(image, "t").values():
            assert 102 not in state.isr and state.leader != 102 and state.leader in state.isr
        cluster = await c.describe_cluster(pb.DescribeClusterRequest())
        assert [b.broker_id for b in cluster.brokers if b.in_controlled_shutdown] == [102]
        again = await refused_without_append(member, heartbeat(c, 102, epochs[102]))
        assert again.should_shut_down and again.is_fenced, "a broker in shutdown is not unfenced again"
        await quorum.close()

    run(body)


@pytest.mark.parametrize("min_isr", ["1", "2"])
def test_brokers_shutting_down_together_never_take_leadership_from_each_other(min_isr: str) -> None:
    """``raftka cluster down`` stops every broker at once. A broker in controlled shutdown
    may not be elected (Kafka's ``isAcceptableLeader``: unfenced and not shutting down):
    when it could, each one's fencing step elected another that was leaving too, and the
    next step of that one's fencing elected the first again, thousands of leader changes
    until the processes gave up, and a former leader stopped before it truncated."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 6, 3, **{"min.insync.replicas": min_isr})
        before = log_end(member)
        answers = await asyncio.gather(
            *(heartbeat(c, b, epochs[b], want_shut_down=True) for b in sorted(epochs))
        )
        assert all(a.should_shut_down and a.is_fenced for a in answers), answers
        image = member.image
        assert all(image.brokers[b].fenced for b in epochs)
        # each broker leaves each of the 6 partitions once, then is fenced
        assert log_end(member) - before <= 6 * len(epochs) + len(epochs)
        for state in partitions_of(image, "t").values():
            assert state.leader == -1 and state.isr == () or set(state.isr) == {state.leader}, state
        await quorum.close()

    run(body)


def test_a_broker_in_controlled_shutdown_is_given_no_replica_of_a_new_topic_or_partition() -> None:
    """Kafka's usable brokers: one leaving would be handed replicas, and leaderships, that
    it gives up at once (a new partition's first replica leads)."""
    from tests.unit import metadata_support as m

    image = m.replay(EMPTY, *(m.register(b, b, fenced=False) for b in (101, 102, 103)))
    limits = topic_ops.Limits(max_partitions=1_000, records_max=4_096)
    create = pb.CreateTopicsRequest(
        topics=[pb.CreatableTopic(name="t", num_partitions=6, replication_factor=2)]
    )
    plan = topic_ops.create_topics(image, create, limits, lambda: b"\x01" * 16, shutting_down={102})
    assert plan.response.topics[0].error == E.NONE, plan.response
    placed = [r.partition.replicas for r in plan.records if r.HasField("partition")]
    assert len(placed) == 6 and all(102 not in replicas for replicas in placed), placed
    image = m.replay(image, *plan.records)

    grow = pb.CreatePartitionsRequest(topics=[pb.PartitionsIncrease(name="t", count=9)])
    grown = topic_ops.create_partitions(image, grow, limits, shutting_down={101})
    added = [set(r.partition.replicas) for r in grown.records]
    assert added == [{102, 103}] * 3, grown.records
    too_wide = pb.CreateTopicsRequest(
        topics=[pb.CreatableTopic(name="u", num_partitions=1, replication_factor=3)]
    )
    refused = topic_ops.create_topics(image, too_wide, limits, lambda: b"\x02" * 16, shutting_down={102})
    assert refused.response.topics[0].error == E.INVALID_REPLICATION_FACTOR and not refused.records


def test_new_incarnation_replaces_the_old_and_leaves_its_isrs() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 3)
        quorum.clock.advance(quorum.session_timeout_ms)  # the old process died; not fenced yet
        epoch = await register(c, 101, incarnation="restarted")
        assert epoch > epochs[101]
        image = member.image
        assert image.brokers[101].fenced and image.brokers[101].incarnation_id == "restarted"
        assert all(101 not in s.isr for s in partitions_of(image, "t").values())
        await heartbeat(c, 101, epoch)
        assert not member.image.brokers[101].fenced
        assert all(101 not in s.isr for s in partitions_of(member.image, "t").values()), (
            "until leaders take it back"
        )
        await quorum.close()

    run(body)


def test_a_broker_restarted_within_its_session_replaces_its_old_incarnation_at_once() -> None:
    """Same listeners, new incarnation, old session still live: the old incarnation's
    leaderships move now, in new leader epochs, and it leaves every ISR; the new one is
    registered fenced. Waiting for the session instead left the image naming a dead
    process leader, which the restarted process could take for its own."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 3)
        before = partitions_of(member.image, "t")
        led = {p for p, s in before.items() if s.leader == 101}
        assert led, before
        invalid = pb.BrokerRegistrationRequest(
            broker_id=101,
            incarnation_id="restarted",
            listeners=[metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9101)],
            rack="r" * 256,
        )
        refused = await refused_without_append(member, c.register_broker(invalid))
        assert refused.status.error == E.INVALID_REQUEST and not member.image.brokers[101].fenced
        epoch = await register(c, 101, incarnation="restarted")  # no session time has passed
        image = member.image
        assert image.brokers[101].fenced and image.brokers[101].incarnation_id == "restarted"
        for p, state in partitions_of(image, "t").items():
            assert 101 not in state.isr and state.leader != 101, (p, state)
            if p in led:
                assert state.leader in state.isr and state.leader_epoch == before[p].leader_epoch + 1
        stale = await heartbeat(c, 101, epochs[101])
        assert stale.status.error == E.STALE_BROKER_EPOCH, "the old incarnation is gone"
        assert not (await heartbeat(c, 101, epoch)).is_fenced
        await quorum.close()

    run(body)


def test_a_second_process_cannot_take_a_live_brokers_id() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 3)
        before = log_end(member)
        response = await c.register_broker(
            pb.BrokerRegistrationRequest(
                broker_id=101,
                incarnation_id="impostor",
                listeners=[metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9999)],
            )
        )
        assert response.status.error == E.DUPLICATE_BROKER_REGISTRATION, response.status
        assert "broker_id" in response.status.message
        assert log_end(member) == before, "a refused registration writes nothing"
        image = member.image
        assert image.brokers[101].epoch == epochs[101] and not image.brokers[101].fenced
        # The live incarnation retrying its own registration is not a duplicate.
        assert await register(c, 101) > epochs[101]
        await quorum.close()

    run(body)


def alter(
    broker_id: int, epoch: int, topic_id: bytes, partition: int, leader_epoch: int, isr: list[int], pe: int
):
    return pb.AlterPartitionRequest(
        broker_id=broker_id,
        broker_epoch=epoch,
        topics=[
            pb.AlterPartitionTopic(
                topic_id=topic_id,
                partitions=[
                    pb.AlterPartitionData(
                        partition=partition, leader_epoch=leader_epoch, new_isr=isr, partition_epoch=pe
                    )
                ],
            )
        ],
    )


def test_alter_partition_is_a_compare_and_set() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        topic_id = (await create(c, "t", 1, 3)).topic_id
        state = partitions_of(member.image, "t")[0]
        leader = state.leader
        follower = next(b for b in state.replicas if b != leader)
        shrunk = [b for b in state.isr if b != follower]

        ok = await c.alter_partition(alter(leader, epochs[leader], topic_id, 0, 0, shrunk, 0))
        result = ok.partitions[0]
        assert result.error == E.NONE and (list(result.isr), result.partition_epoch) == (shrunk, 1)
        assert partitions_of(member.image, "t")[0].isr == tuple(shrunk)

        full = list(state.isr)
        cases = [
            (alter(leader, epochs[leader], topic_id, 0, 0, full, 0), E.INVALID_UPDATE_VERSION),  # stale CAS
            (alter(leader, epochs[leader], topic_id, 0, -1, full, 1), E.FENCED_LEADER_EPOCH),
            (alter(follower, epochs[follower], topic_id, 0, 0, full, 1), E.INVALID_REQUEST),  # not the leader
            (
                alter(leader, epochs[leader], topic_id, 0, 0, [follower], 1),
                E.INVALID_REQUEST,
            ),  # leader left out
            (
                alter(leader, epochs[leader], topic_id, 0, 0, [leader, 999], 1),
                E.INVALID_REQUEST,
            ),  # not a replica
            (alter(leader, epochs[leader], topic_id, 0, 0, [leader, leader], 1), E.INVALID_REQUEST),
            (alter(leader, epochs[leader], topic_id, 7, 0, full, 1), E.UNKNOWN_TOPIC_OR_PARTITION),
            (alter(leader, epochs[leader], b"\x01" * 16, 0, 0, full, 1), E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        for request, code in cases:
            response = await refused_without_append(member, c.alter_partition(request))
            assert response.partitions[0].error == code, (request, response)
        stale = await refused_without_append(
            member, c.alter_partition(alter(leader, epochs[leader] - 1, topic_id, 0, 0, full, 1))
        )
        assert stale.status.error == E.STALE_BROKER_EPOCH

        await heartbeat(c, follower, epochs[follower], want_fence=True)
        fenced = await refused_without_append(
            member, c.alter_partition(alter(leader, epochs[leader], topic_id, 0, 0, [leader, follower], 1))
        )
        assert fenced.partitions[0].error == E.INELIGIBLE_REPLICA
        await quorum.close()

    run(body)


def test_elect_leaders_through_the_controller() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 2)
        response = await c.elect_leaders(
            pb.ElectLeadersRequest(topics=[pb.TopicPartitions(topic="t", partitions=[0])])
        )
        assert [r.error for r in response.partitions] == [E.ELECTION_NOT_NEEDED]
        assert not (await c.elect_leaders(pb.ElectLeadersRequest())).partitions, (
            "all preferred: nothing to report"
        )
        missing = await c.elect_leaders(
            pb.ElectLeadersRequest(
                topics=[pb.TopicPartitions(topic="t", partitions=[9]), pb.TopicPartitions(topic="x")]
            )
        )
        assert [r.error for r in missing.partitions] == [E.UNKNOWN_TOPIC_OR_PARTITION] * 2
        preferred = partitions_of(member.image, "t")[0].replicas[0]
        await heartbeat(c, preferred, epochs[preferred], want_fence=True)
        response = await c.elect_leaders(
            pb.ElectLeadersRequest(topics=[pb.TopicPartitions(topic="t", partitions=[0])])
        )
        assert [r.error for r in response.partitions] == [E.PREFERRED_LEADER_NOT_AVAILABLE]
        await quorum.close()

    run(body)


def replay(*records: metadata_pb2.MetadataRecord) -> MetadataImage:
    delta = MetadataDelta(EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(len(records))


def test_preferred_election_moves_leadership_back() -> None:
    """Without a data plane the controller restores preferred leaders on its own, so a
    partition led by another replica is built here from records."""
    topic_id = b"\x07" * 16
    M = metadata_pb2.MetadataRecord
    image = replay(
        *[
            M(
                register_broker=metadata_pb2.RegisterBrokerRecord(
                    broker_id=b, incarnation_id="i", broker_epoch=b
                )
            )
            for b in (1, 2)
        ],
        M(topic=metadata_pb2.TopicRecord(name="t", topic_id=topic_id)),
        M(partition=metadata_pb2.PartitionRecord(topic_id=topic_id, replicas=[1, 2], isr=[1, 2], leader=2)),
    )
    plan = broker_ops.elect_leaders(image, pb.ElectLeadersRequest())
    assert [(r.topic, r.partition, r.error) for r in plan.response.partitions] == [("t", 0, E.NONE)]
    [record] = plan.records
    assert (record.partition_change.leader, record.partition_change.HasField("isr")) == (1, False)


def test_an_isr_emptied_by_an_older_version_takes_the_first_replica_back() -> None:
    topic_id = b"\x08" * 16
    M = metadata_pb2.MetadataRecord
    image = replay(
        *[
            M(
                register_broker=metadata_pb2.RegisterBrokerRecord(
                    broker_id=b, incarnation_id="i", broker_epoch=b, fenced=True
                )
            )
            for b in (1, 2)
        ],
        M(topic=metadata_pb2.TopicRecord(name="t", topic_id=topic_id)),
        M(partition=metadata_pb2.PartitionRecord(topic_id=topic_id, replicas=[1, 2], isr=[], leader=-1)),
    )
    [record] = elections.restore_broker(image, 2)
    assert (record.partition_change.leader, list(record.partition_change.isr.ids)) == (2, [2])


def test_producer_id_blocks_do_not_overlap() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c, [101])
        request = pb.AllocateProducerIdsRequest(broker_id=101, broker_epoch=epochs[101])
        first, second = await c.allocate_producer_ids(request), await c.allocate_producer_ids(request)
        assert (first.producer_id_start, first.producer_id_len) == (0, 1000)
        assert second.producer_id_start == 1000 and member.image.next_producer_id == 2000
        unknown = await c.allocate_producer_ids(pb.AllocateProducerIdsRequest(broker_id=5, broker_epoch=1))
        assert unknown.status.error == E.BROKER_ID_NOT_REGISTERED
        await quorum.close()

    run(body)


def test_preferred_leaders_take_their_partitions_back_once_in_the_isr_again() -> None:
    """Kafka's auto leader rebalance: a returning broker leads again only after the
    leader took it back into the ISR, and only at the periodic check."""

    async def body() -> None:
        quorum, member = await single(session_timeout_ms=1000, leader_rebalance_interval_ms=5000)
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", 3, 3)
        preferred_101 = [p for p, s in partitions_of(member.image, "t").items() if s.replicas[0] == 101]
        quorum.clock.advance(600)
        for broker_id in (102, 103):
            await heartbeat(c, broker_id, epochs[broker_id])
        quorum.clock.advance(600)
        await c.tick()
        assert all(partitions_of(member.image, "t")[p].leader != 101 for p in preferred_101)
        await heartbeat(c, 101, epochs[101])  # back, unfenced, but in no ISR
        quorum.clock.advance(5000)
        for broker_id in (101, 102, 103):
            await heartbeat(c, broker_id, epochs[broker_id])
        await c.tick()
        assert all(partitions_of(member.image, "t")[p].leader != 101 for p in preferred_101), "not in the ISR"

        topic_id = member.image.topic_ids_by_name["t"]
        for p in preferred_101:  # each leader takes 101 back once it has caught up
            state = partitions_of(member.image, "t")[p]
            request = pb.AlterPartitionRequest(broker_id=state.leader, broker_epoch=epochs[state.leader])
            request.topics.add(topic_id=topic_id).partitions.add(
                partition=p,
                leader_epoch=state.leader_epoch,
                new_isr=[b for b in state.replicas if b in state.isr or b == 101],
                partition_epoch=state.partition_epoch,
                new_isr_broker_epochs=[epochs[b] for b in state.replicas if b in state.isr or b == 101],
            )
            assert (await c.alter_partition(request)).partitions[0].error == E.NONE
        await c.tick()
        assert all(partitions_of(member.image, "t")[p].leader != 101 for p in preferred_101), "not yet time"
        quorum.clock.advance(5000)
        for broker_id in (101, 102, 103):
            await heartbeat(c, broker_id, epochs[broker_id])
        await c.tick()
        assert all(partitions_of(member.image, "t")[p].leader == 101 for p in preferred_101)
        await quorum.close()

    run(body)


def test_a_broker_whose_connections_all_close_is_fenced_without_waiting_for_its_session() -> None:
    """A dead broker's process closes its connections at once; the controller fences it
    ``disconnect_fence_ms`` later (not a session timeout later), unless it reconnects or
    heartbeats in between, and its leaderships move with a leader-epoch bump."""

    async def body() -> None:
        quorum, member = await single(session_timeout_ms=9000, disconnect_fence_ms=500)
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "three", 3, 3)
        before = partitions_of(member.image, "three")
        node = member.node

        node.peer_connected(101)
        node.peer_disconnected(101)
        quorum.clock.advance(499)
        await c.tick()
        assert not member.image.brokers[101].fenced, "within the grace"
        node.peer_connected(101)
        quorum.clock.advance(8000)
        await c.tick()
        assert not member.image.brokers[101].fenced, "reconnected: a full session again"

        await heartbeat(c, 101, epochs[101])
        node.peer_disconnected(102)
        quorum.clock.advance(100)
        await heartbeat(c, 102, epochs[102])
        quorum.clock.advance(1000)
        await c.tick()
        assert not member.image.brokers[102].fenced, "a heartbeat after the disconnect is a live broker"

        for broker_id in (102, 103):
            await heartbeat(c, broker_id, epochs[broker_id])
        node.peer_disconnected(101)
        quorum.clock.advance(500)
        await c.tick()
        image = member.image
        assert image.brokers[101].fenced and not image.brokers[102].fenced and not image.brokers[103].fenced
        for p, state in partitions_of(image, "three").items():
            assert 101 not in state.isr
            if before[p].leader == 101:
                assert state.leader in (102, 103) and state.leader_epoch == before[p].leader_epoch + 1
        await quorum.close()

    run(body)


def test_disconnects_fence_nothing_when_turned_off() -> None:
    async def body() -> None:
        quorum, member = await single(session_timeout_ms=9000)  # disconnect_fence_ms 0: off
        c = member.controller
        await live_brokers(c)
        member.node.peer_disconnected(101)
        quorum.clock.advance(8000)
        await c.tick()
        assert not member.image.brokers[101].fenced
        await quorum.close()

    run(body)
