"""QuorumController leadership: standbys redirect, lost leadership is NOT_CONTROLLER,
a new controller starts from committed state with fresh broker sessions, reads confirm
leadership, large changes span batches, and a failing request never takes the node down."""

from __future__ import annotations

import asyncio
import dataclasses

from raftka.metadata.service import ControllerService
from raftka.v1 import controller_pb2 as pb
from tests.metadata_sim.quorum import Quorum, address, eventually
from tests.unit.metadata_controller_support import (
    QUIET_RAFT,
    E,
    create,
    heartbeat,
    isolate,
    live_brokers,
    log_end,
    run,
    single,
    three,
)


def test_standbys_answer_not_controller_with_the_leaders_address() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        await quorum.converged()  # standbys know the leader
        for node_id, member in quorum.members.items():
            if node_id == leader_id:
                continue
            before = log_end(member)
            for call in (
                member.controller.create_topics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="t")])),
                member.controller.list_topics(pb.ListTopicsRequest()),
                member.controller.broker_heartbeat(pb.BrokerHeartbeatRequest(broker_id=1)),
            ):
                status = (await call).status
                assert status.error == E.NOT_CONTROLLER
                assert (status.controller_id, status.controller_address) == (leader_id, address(leader_id))
            assert log_end(member) == before
        await quorum.close()

    run(body)


def test_not_controller_names_a_leader_the_configuration_does_not_name() -> None:
    """Only controller 1 is configured; 2 and 3 are known from the voter set in the log
    (KIP-853). With 1 gone, a standby's NOT_CONTROLLER names the leader's address, and the
    active controller's answers name its own."""

    async def body() -> None:
        quorum = Quorum(size=3, dynamic=True)
        assert quorum.configured_addresses() == {1: address(1)}
        await quorum.start()
        await quorum.active()
        await quorum.crash(1)
        leader = await quorum.active()
        leader_id = leader.node.node_id
        standby = quorum.members[5 - leader_id]
        await eventually(lambda: standby.node.leadership.leader_id == leader_id, "the standby follows")
        status = (await standby.controller.list_topics(pb.ListTopicsRequest())).status
        assert status.error == E.NOT_CONTROLLER
        assert (status.controller_id, status.controller_address) == (leader_id, address(leader_id))
        status = (await leader.controller.list_topics(pb.ListTopicsRequest())).status
        assert (status.error, status.controller_address) == (E.NONE, address(leader_id))
        await quorum.close()

    run(body)


def test_leadership_lost_before_commit_is_not_controller() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        controller = quorum.members[leader_id].controller
        await live_brokers(controller, [101])
        isolate(quorum, leader_id)
        write = controller.create_topics(
            pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
            )
        )
        read = controller.list_topics(pb.ListTopicsRequest())
        for response in await asyncio.gather(write, read):  # check-quorum deposes the cut-off leader
            assert response.status.error == E.NOT_CONTROLLER
        assert not controller.is_active
        quorum.network.heal_all()
        await quorum.close()

    run(body)


def test_new_controller_keeps_committed_state_and_rearms_sessions() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        old = quorum.members[leader_id].controller
        epochs = await live_brokers(old, [101, 102])
        await create(old, "t", 4, 2)
        await quorum.converged()
        quorum.clock.advance(8_000)  # most of the 9 s session has passed under the old controller
        await quorum.crash(leader_id)
        new = await quorum.active()
        assert new.node.core.node_id != leader_id
        assert new.image.topic("t") is not None and set(new.image.brokers) == {101, 102}
        quorum.clock.advance(8_000)
        await new.controller.tick()
        assert not any(b.fenced for b in new.image.brokers.values()), "a fresh full timeout after takeover"
        await heartbeat(new.controller, 101, epochs[101])
        quorum.clock.advance(1_500)
        await new.controller.tick()
        assert new.image.brokers[102].fenced and not new.image.brokers[101].fenced
        await quorum.start(leader_id)
        await quorum.converged()
        await quorum.close()

    run(body)


def test_a_large_change_spans_batches_back_to_back() -> None:
    async def body() -> None:
        quorum, member = await single(raft=dataclasses.replace(QUIET_RAFT, append_max_records=8))
        c = member.controller
        epochs = await live_brokers(c, [101, 102])
        for i in range(4):  # 4 topics x 3 partitions: each fits one batch of 8
            await create(c, f"t{i}", 3, 2)
        before = log_end(member)
        await heartbeat(c, 101, epochs[101], want_fence=True)
        # 12 partition changes + the fence record, in batches of at most 8
        assert log_end(member) == before + 13
        assert member.image.brokers[101].fenced
        for name in ("t0", "t1", "t2", "t3"):
            topic = member.image.topic(name)
            assert topic is not None and all(
                p.isr == (102,) and p.leader == 102 for p in topic.partitions.values()
            )
        await quorum.close()

    run(body)


def test_concurrent_writes_see_each_others_pending_state() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c, [101])
        request = pb.CreateTopicsRequest(
            topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
        )
        responses = await asyncio.gather(*(c.create_topics(request) for _ in range(10)))
        errors = sorted(r.topics[0].error for r in responses)
        assert errors == [E.NONE] + [E.TOPIC_ALREADY_EXISTS] * 9
        reads = await asyncio.gather(*(c.list_topics(pb.ListTopicsRequest()) for _ in range(20)))
        assert all([t.name for t in r.topics] == ["t"] for r in reads)
        assert c.latest_image == member.image, "nothing pending: the latest image is the committed one"
        await quorum.close()

    run(body)


class _Context:
    pass


def test_service_answers_a_controller_failure_with_unknown_server_error() -> None:
    async def body() -> None:
        quorum, member = await single()

        async def broken(request: object) -> object:
            raise RuntimeError("boom")

        service = ControllerService(member.controller)
        member.controller.create_topics = broken  # type: ignore[method-assign]
        response = await service.CreateTopics(pb.CreateTopicsRequest(), _Context())  # type: ignore[arg-type]
        assert response.status.error == E.UNKNOWN_SERVER_ERROR and "boom" in response.status.message
        listing = await service.ListTopics(pb.ListTopicsRequest(), _Context())  # type: ignore[arg-type]
        assert listing.status.error == E.NONE, "the node still serves"
        await quorum.close()

    run(body)


def test_a_controller_restarted_from_its_log_serves_the_same_image() -> None:
    async def body() -> None:
        quorum = Quorum(size=1, snapshot_interval_records=5)
        await quorum.start()
        member = await quorum.active()
        await live_brokers(member.controller)
        for i in range(5):
            await create(member.controller, f"t{i}", 2, 3)
        image = member.image
        await eventually(lambda: member.node.core.log_start_offset > 0, "a snapshot to compact the log")
        await quorum.crash(1)
        await quorum.start(1)
        restarted = await quorum.active()
        assert restarted.state_machine.loaded_snapshot
        assert dataclasses.replace(restarted.image, offset=0) == dataclasses.replace(image, offset=0)
        await quorum.close()

    run(body)
