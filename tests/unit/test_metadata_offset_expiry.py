"""Committed offsets expire (Kafka's ``offsets.retention.minutes``), through records.

A group that has committed nothing for the retention loses every committed offset in one
RemoveGroupOffsetsRecord; a group with any commit inside the retention keeps them all
(raftka has no group membership in the quorum, so the newest commit decides).
"""

from __future__ import annotations

from raftka.metadata import offset_ops
from raftka.metadata.controller import OFFSET_EXPIRY_INTERVAL_MS
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.metadata.plan import Plan
from raftka.v1 import controller_pb2 as pb
from tests.metadata_sim.quorum import ManualClock
from tests.unit import metadata_support as m
from tests.unit.metadata_controller_support import E, create, live_brokers, log_end, run, single
from tests.unit.metadata_support import replay

T1 = m.topic_id(1)
RETENTION_MS = 7 * 24 * 3_600_000
NOW_MS = 1_700_000_000_000
OLD_MS = NOW_MS - RETENTION_MS  # exactly the retention ago: expired, as in Kafka
FRESH_MS = OLD_MS + 1


def with_commits(*commits: m.Record) -> MetadataImage:
    return replay(
        EMPTY, m.register(1, 0), m.topic("t", T1), m.partition(T1, 0, [1]), m.partition(T1, 1, [1]), *commits
    )


def removed(plan: Plan) -> list[str]:
    assert not plan.failed
    assert all(r.WhichOneof("record") == "remove_group_offsets" for r in plan.records)
    return [r.remove_group_offsets.group for r in plan.records]


def expire(image: MetadataImage, records_max: int = 100) -> Plan:
    return offset_ops.expire(image, NOW_MS, RETENTION_MS, records_max)


def test_old_groups_are_removed_and_fresh_ones_kept() -> None:
    image = with_commits(m.commit("fresh", T1, 0, 1, ts=FRESH_MS), m.commit("old", T1, 0, 2, ts=OLD_MS))
    plan = expire(image)
    assert removed(plan) == ["old"]
    assert set(replay(image, *plan.records).offsets) == {"fresh"}


def test_one_recent_commit_keeps_the_whole_group() -> None:
    image = with_commits(m.commit("g", T1, 0, 1, ts=OLD_MS - 1), m.commit("g", T1, 1, 2, ts=FRESH_MS))
    assert removed(expire(image)) == []


def test_at_most_records_max_groups_per_call_and_the_rest_next_time() -> None:
    image = with_commits(*(m.commit(f"g{i}", T1, 0, i, ts=OLD_MS) for i in range(5)))
    rounds = []
    while (plan := expire(image, records_max=2)).records:
        rounds.append(removed(plan))
        image = replay(image, *plan.records)
    assert rounds == [["g0", "g1"], ["g2", "g3"], ["g4"]]
    assert not image.offsets


def test_nothing_to_expire_writes_nothing() -> None:
    assert removed(expire(EMPTY)) == []
    assert removed(expire(with_commits(m.commit("g", T1, 0, 1, ts=NOW_MS)))) == []


def commit(group: str, offset: int) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group=group)
    request.topics.add(topic="t").partitions.add(partition=0, offset=offset)
    return request


def test_an_idle_group_expires_on_the_controller_tick_and_fetch_then_finds_nothing() -> None:
    async def body() -> None:
        wall = ManualClock()
        retention_ms = 60_000
        quorum, member = await single(
            wall_clock=wall,
            offsets_retention_ms=retention_ms,
            session_timeout_ms=10 * OFFSET_EXPIRY_INTERVAL_MS,
        )
        c = member.controller
        await c.tick()  # a new controller's first tick checks at once: nothing to expire yet
        await live_brokers(c)
        await create(c, "t", 1, 1)
        assert (await c.commit_offsets(commit("idle", 5))).partitions[0].error == E.NONE
        wall.advance(retention_ms // 2)
        assert (await c.commit_offsets(commit("busy", 7))).partitions[0].error == E.NONE
        wall.advance(retention_ms // 2)  # idle: exactly the retention ago; busy: half of it

        before = log_end(member)
        await c.tick()  # the last expiry check was at the first tick: not due yet
        assert set(member.image.offsets) == {"idle", "busy"} and log_end(member) == before

        quorum.clock.advance(OFFSET_EXPIRY_INTERVAL_MS)
        await c.tick()
        assert set(member.image.offsets) == {"busy"}
        assert log_end(member) == before + 1, "one RemoveGroupOffsetsRecord"
        wanted = [pb.TopicPartitions(topic="t")]
        idle = await c.fetch_offsets(pb.OffsetFetchRequest(group="idle", topics=wanted))
        busy = await c.fetch_offsets(pb.OffsetFetchRequest(group="busy", topics=wanted))
        assert [(o.offset, o.error) for o in idle.offsets] == [(offset_ops.NOTHING_COMMITTED, E.NONE)]
        assert [(o.offset, o.error) for o in busy.offsets] == [(7, E.NONE)]
        assert not (await c.fetch_offsets(pb.OffsetFetchRequest(group="idle"))).offsets
        await quorum.close()

    run(body)
