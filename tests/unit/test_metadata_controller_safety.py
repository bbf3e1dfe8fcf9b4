"""QuorumController answers only what committed, never wedges, and fences only the silent.

Regression tests for issue 7's findings: an answer without records of its own waits for
what it read to commit; a change that does not fit raft's pending appends is refused
whole and the controller keeps serving; a broker that heartbeats while other fences
commit is not fenced; a second process cannot take a live broker's id; a resigned
leader does not name itself; leadership is pushed to the controller once the state it
claims from is complete.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import raftka.raft.driver
from raftka.metadata import records
from raftka.metadata.controller import QuorumController
from raftka.raft.batch import BatchKind
from raftka.raft.driver import LeaderAndEpoch
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.metadata_sim.quorum import Quorum, eventually
from tests.unit.metadata_controller_support import (
    QUIET_RAFT,
    E,
    create,
    heartbeat,
    isolate,
    live_brokers,
    log_end,
    register,
    run,
    single,
    three,
)

Topic = pb.CreatableTopic


def retention(value: str, *, validate_only: bool = False) -> pb.AlterConfigsRequest:
    op = pb.AlterConfigOp(name="retention.ms", value=value)
    return pb.AlterConfigsRequest(
        topics=[pb.AlterTopicConfigs(topic="t", ops=[op])], validate_only=validate_only
    )


# Each: (what the first client proposes, what the second asks, which then plans no records).
Scenario = tuple[Callable[[QuorumController], Awaitable[Any]], Callable[[QuorumController], Awaitable[Any]]]
SCENARIOS: dict[str, Scenario] = {
    "config already pending": (
        lambda c: c.alter_configs(retention("1234")),
        lambda c: c.alter_configs(retention("1234")),
    ),
    "validate_only": (
        lambda c: c.alter_configs(retention("1234")),
        lambda c: c.alter_configs(retention("1234", validate_only=True)),
    ),
    "topic already exists": (
        lambda c: c.create_topics(
            pb.CreateTopicsRequest(topics=[Topic(name="u", num_partitions=1, replication_factor=1)])
        ),
        lambda c: c.create_topics(
            pb.CreateTopicsRequest(topics=[Topic(name="u", num_partitions=1, replication_factor=1)])
        ),
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_an_answer_without_records_waits_for_what_it_read_to_commit(scenario: str) -> None:
    """Two clients ask for the same change on a leader that has just been cut off: the
    second plans no records, but what it saw never commits. Both must hear NOT_CONTROLLER,
    and the new controller must not hold the change."""
    first, second = SCENARIOS[scenario]

    async def body() -> None:
        quorum, leader_id = await three()
        c = quorum.members[leader_id].controller
        await live_brokers(c, [101])
        await create(c, "t", 1, 1)
        await quorum.converged()
        isolate(quorum, leader_id)
        one = asyncio.create_task(first(c))
        two = asyncio.create_task(second(c))
        for response in await asyncio.gather(one, two):
            assert response.status.error == E.NOT_CONTROLLER, (scenario, response)
        quorum.network.heal_all()
        new = await eventually(
            lambda: next(
                (m for i, m in quorum.members.items() if i != leader_id and m.controller.is_active), None
            ),
            "another controller to take over",
        )
        assert new.image.topic("t") is not None and new.image.topic("u") is None
        assert all("retention.ms" not in configs for configs in new.image.configs.values())
        await quorum.close()

    run(body)


def test_a_heartbeat_is_not_told_unfenced_before_the_unfence_commits() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        c = quorum.members[leader_id].controller
        epoch = await register(c, 101)
        await quorum.converged()
        isolate(quorum, leader_id)
        unfence = asyncio.create_task(heartbeat(c, 101, epoch))
        again = asyncio.create_task(heartbeat(c, 101, epoch))
        for response in await asyncio.gather(unfence, again):
            assert response.status.error == E.NOT_CONTROLLER, response
        quorum.network.heal_all()
        await quorum.close()

    run(body)


async def broker_in_nine_isrs() -> tuple[Quorum, Any]:
    """Broker 101 in 9 ISRs, its session lapsed: a new incarnation's registration takes it
    out of all of them and registers it, 10 records, 3 batches of 4."""
    quorum, member = await single(raft=dataclasses.replace(QUIET_RAFT, append_max_records=4))
    c = member.controller
    await live_brokers(c, [101, 102])
    for i in range(3):
        await create(c, f"t{i}", 3, 2)
    quorum.clock.advance(quorum.session_timeout_ms)  # the old process died; not fenced yet
    return quorum, member


def reregistration(c: Any) -> Any:
    return c.register_broker(
        pb.BrokerRegistrationRequest(
            broker_id=101,
            incarnation_id="restarted",
            listeners=[metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9101)],
        )
    )


def test_a_change_too_big_for_pending_appends_is_refused_whole_and_the_controller_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        quorum, member = await broker_in_nine_isrs()
        c = member.controller
        monkeypatch.setattr(raftka.raft.driver, "PENDING_APPENDS_MAX", 2)
        before = log_end(member)
        response = await reregistration(c)
        assert response.status.error == E.REQUEST_TIMED_OUT, response.status
        assert log_end(member) == before, "nothing of the refused change is in the log"
        assert c.is_active and member.image.brokers[101].incarnation_id != "restarted"
        monkeypatch.setattr(raftka.raft.driver, "PENDING_APPENDS_MAX", 16)
        quorum.clock.advance(quorum.session_timeout_ms + 1)
        again = await reregistration(c)
        assert again.status.error == E.NONE and member.image.brokers[101].incarnation_id == "restarted"
        await quorum.close()

    run(body)


def test_a_submission_failing_halfway_resigns_so_a_fresh_claim_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        quorum, member = await broker_in_nine_isrs()
        c = member.controller
        submit = member.node.submit
        calls = 0

        def fails_second_time(records: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise raftka.raft.driver.BackpressureError("injected")
            return submit(records)

        monkeypatch.setattr(member.node, "submit", fails_second_time)
        epoch = member.node.leadership.epoch
        response = await reregistration(c)
        assert response.status.error in (E.REQUEST_TIMED_OUT, E.NOT_CONTROLLER)
        assert calls == 2, "the change took more than one batch"
        monkeypatch.setattr(member.node, "submit", submit)
        await eventually(lambda: c.is_active and member.node.leadership.epoch > epoch, "a new claim")
        listing = await c.list_topics(pb.ListTopicsRequest())
        assert listing.status.error == E.NONE and len(listing.topics) == 3
        await quorum.close()

    run(body)


def test_a_broker_in_more_isrs_than_a_batch_holds_is_fenced_in_steps() -> None:
    """Each step is planned on the image the last produced, so other requests are served
    between them; the answer says fenced once the FenceBrokerRecord is written."""

    async def body() -> None:
        quorum, member = await single(raft=dataclasses.replace(QUIET_RAFT, append_max_records=4))
        c = member.controller
        epochs = await live_brokers(c, [101, 102])
        for i in range(3):
            await create(c, f"t{i}", 3, 2)
        before = log_end(member)
        step_ends: list[int] = []
        submit = member.node.submit

        def record_step(records: Any) -> Any:
            step_ends.append(len(records))
            return submit(records)

        member.node.submit = record_step  # type: ignore[method-assign]
        fenced = await heartbeat(c, 101, epochs[101], want_fence=True)
        assert fenced.status.error == E.NONE and fenced.is_fenced
        assert step_ends == [4, 4, 1, 1], "three steps of ISR changes, then the fence record"
        assert log_end(member) == before + 10
        image = member.image
        assert image.brokers[101].fenced
        assert all(101 not in p.isr for t in image.topics_by_id.values() for p in t.partitions.values())
        await quorum.close()

    run(body)


def test_a_broker_that_heartbeats_while_another_is_fenced_is_not_fenced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        member = quorum.members[leader_id]
        c = member.controller
        epochs = await live_brokers(c, [101, 102, 103])
        await create(c, "t", 3, 3)
        quorum.clock.advance(quorum.session_timeout_ms)  # every session has lapsed
        await heartbeat(c, 103, epochs[103])
        submit = member.node.submit
        renewal: list[asyncio.Task[pb.BrokerHeartbeatResponse]] = []

        def renew_once_fencing_starts(records: Any) -> Any:
            # 102 heartbeats while the fence of 101 is committing.
            if not renewal:
                renewal.append(asyncio.create_task(heartbeat(c, 102, epochs[102])))
            return submit(records)

        monkeypatch.setattr(member.node, "submit", renew_once_fencing_starts)
        await c.tick()
        renewed = await renewal[0]
        assert renewed.status.error == E.NONE and not renewed.is_fenced
        fenced = [
            record.fence_broker.id
            for batch in member.node.core.log.batches_between(0, log_end(member))
            if batch.kind is BatchKind.DATA
            for record in map(records.decode, batch.records)
            if record.HasField("fence_broker")
        ]
        assert fenced == [101], "only the broker that stayed silent is fenced"
        await quorum.close()

    run(body)


def test_a_resigned_leader_does_not_name_itself() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        member = quorum.members[leader_id]
        member.node.resign()
        response = await member.controller.list_topics(pb.ListTopicsRequest())
        assert response.status.error == E.NOT_CONTROLLER
        assert response.status.controller_id != leader_id
        await quorum.close()

    run(body)


def test_leadership_is_announced_once_everything_before_the_epoch_is_applied() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        c = quorum.members[leader_id].controller
        await live_brokers(c, [101])
        for i in range(5):
            await create(c, f"t{i}", 1, 1)
        heard: dict[int, list[tuple[LeaderAndEpoch, int]]] = {}
        for node_id, member in quorum.members.items():
            if node_id != leader_id:
                heard[node_id] = []
                member.node.add_leadership_listener(
                    lambda la, m=member, h=heard[node_id]: h.append((la, len(m.image.topics_by_id)))
                )
        await quorum.crash(leader_id)
        new = await quorum.active()
        mine = [topics for la, topics in heard[new.node.node_id] if la.leader_id == new.node.node_id]
        assert mine == [5], "announced once, with every committed topic already applied"
        others = [la for node_id, h in heard.items() if node_id != new.node.node_id for la, _ in h]
        assert LeaderAndEpoch(new.node.node_id, new.node.leadership.epoch) in others
        await quorum.close()

    run(body)
