"""An active controller cut off from every broker (but not from its quorum) resigns
rather than fencing them all; its successor keeps the brokers that reach it, and fences
them, without resigning in turn, when they are really gone. Silence from some brokers
only, a broker whose connections closed, and a controller that has just claimed are
fenced as before."""

from __future__ import annotations

from raftka.metadata.image import MetadataImage
from tests.metadata_sim.quorum import Member, Quorum, eventually
from tests.unit.metadata_controller_support import BROKERS, heartbeat, live_brokers, run

SESSION_MS = 1000


async def three_with_brokers(disconnect_fence_ms: int = 0) -> tuple[Quorum, Member, dict[int, int]]:
    """Three controllers whose active one has held three brokers for two session timeouts."""
    quorum = Quorum(size=3, session_timeout_ms=SESSION_MS, disconnect_fence_ms=disconnect_fence_ms)
    await quorum.start()
    active = await quorum.active()
    epochs = await live_brokers(active.controller)
    for _ in range(4):
        quorum.clock.advance(SESSION_MS // 2)
        for broker_id in BROKERS:
            await heartbeat(active.controller, broker_id, epochs[broker_id])
    return quorum, active, epochs


def fenced(image: MetadataImage) -> set[int]:
    return {b for b, broker in image.brokers.items() if broker.fenced}


def test_a_controller_that_hears_no_broker_resigns_and_its_successor_keeps_them() -> None:
    async def body() -> None:
        quorum, old, epochs = await three_with_brokers()
        quorum.clock.advance(SESSION_MS // 2 + 100)  # every broker silent for half a session
        await old.controller.tick()
        assert old.controller.is_active and not fenced(old.image), "it waits for the last session"
        quorum.clock.advance(SESSION_MS // 2)  # every session ran out
        await old.controller.tick()
        assert not old.node.is_leader, "it resigned"

        new = await eventually(
            lambda: next((m for m in quorum.members.values() if m.controller.is_active and m is not old), None),
            "a successor",
        )
        for broker_id in BROKERS:  # the brokers reach the successor
            response = await heartbeat(new.controller, broker_id, epochs[broker_id])
            assert not response.is_fenced, response
        quorum.clock.advance(SESSION_MS // 2)
        await new.controller.tick()
        image = await quorum.converged()
        assert not fenced(image), "no broker was fenced"
        await quorum.close()

    run(body)


def test_its_successor_fences_brokers_that_are_really_gone_without_resigning() -> None:
    async def body() -> None:
        quorum, old, _ = await three_with_brokers()
        quorum.clock.advance(SESSION_MS + 100)
        await old.controller.tick()
        new = await eventually(
            lambda: next((m for m in quorum.members.values() if m.controller.is_active and m is not old), None),
            "a successor",
        )
        quorum.clock.advance(SESSION_MS + 100)  # a fresh session each, and no broker heard
        await new.controller.tick()
        assert new.node.is_leader, "a controller that claimed within two sessions does not resign"
        assert fenced(new.image) == set(BROKERS)
        await quorum.close()

    run(body)


def test_a_broker_silent_alone_is_fenced_as_before() -> None:
    async def body() -> None:
        quorum, active, epochs = await three_with_brokers()
        quorum.clock.advance(SESSION_MS // 2 + 100)
        await heartbeat(active.controller, 102, epochs[102])  # 102 is heard: the silence is not shared
        quorum.clock.advance(SESSION_MS // 2 - 100)
        await active.controller.tick()
        assert active.node.is_leader and fenced(active.image) == {101, 103}
        await quorum.close()

    run(body)


def test_brokers_whose_connections_all_closed_are_fenced_at_once() -> None:
    """Every broker killed together: closed connections are news of their deaths."""

    async def body() -> None:
        quorum, active, _ = await three_with_brokers(disconnect_fence_ms=200)
        quorum.clock.advance(SESSION_MS // 2 + 100)
        for broker_id in BROKERS:
            active.controller._on_peer_connection(broker_id, connected=False)  # noqa: SLF001
        quorum.clock.advance(200)
        await active.controller.tick()
        assert active.node.is_leader and fenced(active.image) == set(BROKERS)
        await quorum.close()

    run(body)
