"""Consumer groups end to end in one process: raftka's consumers against a real broker's
group coordinator (the controller's own handlers in memory). Members share partitions
with no overlap, rebalance on join, leave, crash and partition growth, commit as members
of their generation, and a member that lost its place cannot commit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from raftka.client.consumer import AsyncConsumer, RebalanceListener
from raftka.client.errors import CommitFailedError
from raftka.client.producer import AsyncProducer
from raftka.client.types import TopicPartition
from tests.unit.broker_in_process import InProcessBroker, broker_in_process

TOPIC = "events"
PARTITIONS = 6
FAST = {
    "session_timeout_ms": 1_000,
    "heartbeat_interval_ms": 100,
    "fetch_max_wait_ms": 50,
    "auto_offset_reset": "earliest",
    "retry_backoff_ms": 20,
}


def run(
    tmp_path: Path, scenario: Callable[[InProcessBroker], Awaitable[None]], partitions: int = PARTITIONS
) -> None:
    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: partitions}) as broker:
            await asyncio.wait_for(scenario(broker), 60)

    asyncio.run(main())


class Recorder(RebalanceListener):
    """What a member was told, in order; ``owned`` is what it holds now."""

    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.owned: set[TopicPartition] = set()

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("revoked", partitions))
        self.owned -= partitions

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("assigned", partitions))
        self.owned |= partitions

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("lost", partitions))
        self.owned -= partitions


async def member(broker: InProcessBroker, group: str = "g", **options: Any) -> tuple[AsyncConsumer, Recorder]:
    consumer = AsyncConsumer(broker.address, group_id=group, **{**FAST, **options})
    recorder = Recorder()
    consumer.subscribe([TOPIC], recorder)
    return consumer, recorder


async def poll_until(
    members: list[AsyncConsumer], done: Callable[[], bool], got: dict[Any, list] | None = None
) -> None:
    """Every member polls until ``done`` holds; records land in ``got`` by member."""
    while not done():
        for consumer in members:
            records = await consumer.poll(20, 1_000)
            if got is not None:
                got.setdefault(consumer, []).extend(records)


def all_partitions(partitions: int = PARTITIONS) -> set[TopicPartition]:
    return {TopicPartition(TOPIC, p) for p in range(partitions)}


async def produce(broker: InProcessBroker, count: int, prefix: bytes = b"v") -> None:
    producer = AsyncProducer(broker.address, linger_ms=0)
    try:
        for i in range(count):
            await producer.send(TOPIC, prefix + b"%d" % i, key=b"k%d" % i)
        await producer.flush()
    finally:
        await producer.close()


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_members_share_the_partitions_without_overlap_and_each_record_goes_to_one(
    tmp_path: Path, assignor: str
) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        await produce(broker, 60)
        (a, ra), (b, rb) = [await member(broker, partition_assignment_strategy=[assignor]) for _ in range(2)]
        got: dict[Any, list] = {}
        try:
            await poll_until(
                [a, b], lambda: ra.owned and rb.owned and sum(len(v) for v in got.values()) >= 60, got
            )
            assert not ra.owned & rb.owned and ra.owned | rb.owned == all_partitions()
            assert {len(ra.owned), len(rb.owned)} == {3}
            values = sorted(r.value for records in got.values() for r in records)
            assert values == sorted(b"v%d" % i for i in range(60)), (
                "each record once: a member that gave partitions up committed where it was"
            )
        finally:
            await a.close()
            await b.close()

    run(tmp_path, scenario)


def test_a_member_that_leaves_hands_its_partitions_over_from_its_committed_positions(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        await produce(broker, 60)
        (a, ra), (b, rb) = [await member(broker) for _ in range(2)]
        got: dict[Any, list] = {}
        try:
            await poll_until([a, b], lambda: sum(len(v) for v in got.values()) >= 60, got)
            await b.close()  # commits its positions, then leaves the group
            await produce(broker, 30, prefix=b"later")
            later: dict[Any, list] = {}
            await poll_until([a], lambda: ra.owned == all_partitions() and len(later.get(a, [])) >= 30, later)
            assert sorted(r.value for r in later[a]) == sorted(b"later%d" % i for i in range(30)), (
                "b's records before it left are not read again: it committed on leaving"
            )
        finally:
            await a.close()

    run(tmp_path, scenario)


def test_a_crashed_member_is_dropped_after_its_session_and_its_partitions_move(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        (a, ra), (b, rb) = [await member(broker) for _ in range(2)]
        await poll_until([a, b], lambda: bool(ra.owned and rb.owned))
        crashed = b._group
        assert crashed is not None
        await crashed.close()  # its heartbeats stop, no LeaveGroup: a crash as the group sees it
        try:
            await poll_until([a], lambda: ra.owned == all_partitions())
        finally:
            await a.close()

    run(tmp_path, scenario)


def test_with_cooperative_sticky_a_partition_is_never_owned_by_two_members(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        options = {"partition_assignment_strategy": ["cooperative-sticky"]}
        (a, ra), (b, rb) = [await member(broker, **options) for _ in range(2)]
        await poll_until([a, b], lambda: bool(ra.owned and rb.owned))
        kept_a, kept_b = set(ra.owned), set(rb.owned)
        c, rc = await member(broker, **options)
        recorders = (ra, rb, rc)
        overlaps = []

        async def watch() -> None:
            while True:
                owned = [r.owned for r in recorders]
                overlaps.extend(p for i, x in enumerate(owned) for y in owned[i + 1 :] for p in x & y)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            await poll_until([a, b, c], lambda: len(rc.owned) == 2 and len(ra.owned) == len(rb.owned) == 2)
        finally:
            watcher.cancel()
            for consumer in (a, b, c):
                await consumer.close()
        assert overlaps == []
        assert ra.owned <= kept_a and rb.owned <= kept_b, "sticky: the old members kept what they keep"
        assert not any(kind == "revoked" and p & ra.owned for kind, p in ra.events), (
            "only moving partitions were revoked"
        )

    run(tmp_path, scenario)


def test_a_member_of_a_past_generation_cannot_commit(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        (a, ra) = await member(broker)
        await poll_until([a], lambda: ra.owned == all_partitions())
        group = a._group
        assert group is not None
        stale_generation = group.generation
        (b, rb) = await member(broker)
        await poll_until([a, b], lambda: bool(ra.owned and rb.owned))
        assert group.generation > stale_generation
        group.generation = stale_generation  # as a zombie that missed the rebalance would be
        with pytest.raises(CommitFailedError) as refused:
            await a.commit()
        assert refused.value.code == "ILLEGAL_GENERATION"
        assert group.rejoin_needed, "refused: it joins again"
        for consumer in (a, b):
            await consumer.close()

    run(tmp_path, scenario)


def test_a_static_member_that_restarts_gets_its_partitions_back_without_a_rebalance(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        options = {"group_instance_id": "instance-a", "session_timeout_ms": 5_000}
        (a, ra), (b, rb) = await member(broker, **options), await member(broker)
        await poll_until([a, b], lambda: bool(ra.owned and rb.owned))
        generation = b._group.generation  # type: ignore[union-attr]
        before = set(ra.owned)
        await a.close()  # a static member does not leave on close: its place waits
        again, r_again = await member(broker, **options)
        await poll_until([again, b], lambda: bool(r_again.owned))
        assert r_again.owned == before
        assert b._group.generation == generation and not any(k == "revoked" for k, _ in rb.events[1:])  # type: ignore[union-attr]
        for consumer in (again, b):
            await consumer.close()

    run(tmp_path, scenario)


def test_a_topic_that_gains_partitions_is_shared_again(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        (a, ra), (b, rb) = [await member(broker, metadata_max_age_ms=100) for _ in range(2)]
        await poll_until([a, b], lambda: len(ra.owned | rb.owned) == 4)
        broker.set_topics({TOPIC: 8})
        try:
            await poll_until([a, b], lambda: ra.owned | rb.owned == all_partitions(8))
        finally:
            for consumer in (a, b):
                await consumer.close()

    run(tmp_path, scenario, partitions=4)


def test_a_member_that_stops_polling_leaves_and_the_others_take_over(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        (a, ra), (b, rb) = await member(broker), await member(broker, max_poll_interval_ms=400)
        await poll_until([a, b], lambda: bool(ra.owned and rb.owned))
        try:
            await poll_until([a], lambda: ra.owned == all_partitions())  # b never polls again
        finally:
            for consumer in (a, b):
                await consumer.close()

    run(tmp_path, scenario)


def test_rebalances_a_member_causes_at_will_are_logged_once_per_interval(tmp_path: Path) -> None:
    """Issue 29 finding 10: every line a client can trigger is rate-limited; a member that
    joins and leaves in a loop rebalances its group each time."""

    async def scenario(broker: InProcessBroker) -> None:
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                consumer, recorder = await member(broker)
                try:
                    await poll_until([consumer], lambda r=recorder: r.owned == all_partitions())
                finally:
                    await consumer.close()
        rebalances = [e for e in logs if e["event"] == "rebalance completed"]
        assert len(rebalances) == 1 and rebalances[0]["left_out"] == 0

    run(tmp_path, scenario)
