"""Kafka's UnregisterBroker on the QuorumController (``broker_ops.unregister``), against a
one-voter quorum: a live broker leaves every ISR and ELR, the partitions it led elect
new leaders, its registration goes; an unknown id is refused, naming the field, with
nothing written; the same id back is a new broker, elected for nothing until it is in
an ISR again."""

from __future__ import annotations

from raftka.v1 import controller_pb2 as pb
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
from tests.unit.test_metadata_controller_brokers import partitions_of
from tests.unit.test_metadata_controller_topics import refused_without_append


def test_a_live_broker_unregistered_leaves_every_isr_its_partitions_elect_and_it_is_gone() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "t", partitions=6, rf=3)
        await create(c, "lonely", partitions=1, rf=1)
        gone = partitions_of(member.image, "lonely")[0].leader  # its only replica
        before = partitions_of(member.image, "t")
        led = [p for p, s in before.items() if s.leader == gone]
        assert led, "placement spreads leaders: every broker leads some"

        response = await c.unregister_broker(pb.UnregisterBrokerRequest(broker_id=gone))
        assert response.status.error == E.NONE, response.status
        assert gone not in member.image.brokers
        for partition, state in partitions_of(member.image, "t").items():
            assert gone not in state.isr and gone not in state.elr, (partition, state)
            assert state.leader != gone and state.leader in state.isr
            if partition in led:
                assert state.leader_epoch > before[partition].leader_epoch, "a new leader, in a new epoch"
        offline = partitions_of(member.image, "lonely")[0]
        assert offline.leader == -1 and gone not in offline.elr, "no one left to lead it"
        cluster = await c.describe_cluster(pb.DescribeClusterRequest())
        assert gone not in [b.broker_id for b in cluster.brokers]
        await quorum.close()

    run(body)


def test_unregistering_an_unknown_broker_is_refused_naming_the_field_and_writes_nothing() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        response = await refused_without_append(
            member, c.unregister_broker(pb.UnregisterBrokerRequest(broker_id=7))
        )
        assert response.status.error == E.BROKER_ID_NOT_REGISTERED
        assert response.status.message == "broker_id: 7 is not a registered broker"
        await quorum.close()

    run(body)


def test_a_broker_back_with_its_unregistered_id_is_a_new_broker_that_leads_nothing_until_in_an_isr() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        await create(c, "t", partitions=3, rf=3)
        assert (await c.unregister_broker(pb.UnregisterBrokerRequest(broker_id=101))).status.error == E.NONE
        stale = await refused_without_append(member, heartbeat(c, 101, epochs[101]))
        assert stale.status.error == E.BROKER_ID_NOT_REGISTERED, "the old process is not taken back"

        before = log_end(member)
        epoch = await register(c, 101, incarnation="back")  # same id and log directory, restarted
        assert log_end(member) == before + 1, "only the registration: it had no place to leave"
        assert member.image.brokers[101].incarnation_id == "back" and not member.image.brokers[101].crashed
        assert not (await heartbeat(c, 101, epoch)).is_fenced
        for state in partitions_of(member.image, "t").values():
            assert 101 in state.replicas and 101 not in state.isr and 101 not in state.elr
            assert state.leader != 101
        elected = await c.elect_leaders(pb.ElectLeadersRequest())
        refused = [r for r in elected.partitions if r.error == E.PREFERRED_LEADER_NOT_AVAILABLE]
        assert refused and all("is not an unfenced ISR member" in r.message for r in refused)
        assert all(s.leader != 101 for s in partitions_of(member.image, "t").values())
        await quorum.close()

    run(body)
