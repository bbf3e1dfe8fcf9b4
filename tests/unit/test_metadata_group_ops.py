"""What a group's coordinator writes to the quorum: completed rebalances (generations only
increase, the controller stamps the time), many groups' commits in one batch, taken only
from the group's current coordinator and generation, deleted groups, and the expiry of
groups idle for the offsets retention."""

from __future__ import annotations

from raftka.metadata import group_ops, offset_ops
from raftka.metadata.group_placement import coordinator_for
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.v1 import controller_pb2 as pb
from tests.unit import metadata_support as m
from tests.unit.metadata_support import replay

E = pb.ErrorCode
T1 = m.topic_id(1)
NOW_MS = 1_700_000_000_000


COORDINATOR = 1  # the only unfenced broker: every group's coordinator
COORDINATOR_EPOCH = 0


def image_with_topic() -> MetadataImage:
    return replay(
        EMPTY,
        m.register(COORDINATOR, COORDINATOR_EPOCH, fenced=False),
        m.topic("t", T1),
        m.partition(T1, 0, [1]),
        m.partition(T1, 1, [1]),
    )


def rebalance_request(group: str, generation: int) -> pb.RecordGroupRebalanceRequest:
    return pb.RecordGroupRebalanceRequest(
        rebalance=m.group_rebalance(group, generation).group_rebalance,
        broker_id=COORDINATOR,
        broker_epoch=COORDINATOR_EPOCH,
    )


def commit_request(
    group: str, offset: int, generation: int | None = None, *, partition: int = 0
) -> pb.OffsetCommitRequest:
    """A commit of one partition of t; ``generation`` None: from outside the group (a simple commit)."""
    request = pb.OffsetCommitRequest(
        group=group,
        topics=[
            pb.OffsetCommitTopic(
                topic="t", partitions=[pb.OffsetCommitPartition(partition=partition, offset=offset)]
            )
        ],
    )
    if generation is not None:
        request.generation_id, request.member_id = generation, "m1"
    return request


def batch(
    *commits: pb.OffsetCommitRequest, sender: int = COORDINATOR, epoch: int = COORDINATOR_EPOCH
) -> pb.CommitGroupOffsetsRequest:
    return pb.CommitGroupOffsetsRequest(groups=commits, broker_id=sender, broker_epoch=epoch)


def test_a_rebalance_is_recorded_with_the_controllers_time_and_only_above_the_last_generation() -> None:
    plan = group_ops.record_rebalance(image_with_topic(), rebalance_request("g", 1), NOW_MS)
    assert not plan.failed and [r.group_rebalance.timestamp_ms for r in plan.records] == [NOW_MS]
    image = replay(image_with_topic(), *plan.records)
    assert image.groups["g"].generation_id == 1 and image.groups["g"].timestamp_ms == NOW_MS
    stale = group_ops.record_rebalance(image, rebalance_request("g", 1), NOW_MS)
    assert stale.response.status.error == E.ILLEGAL_GENERATION and not stale.records
    assert "generation 1 is not above the recorded 1" in stale.response.status.message
    bad = group_ops.record_rebalance(image, rebalance_request("", 2), NOW_MS)
    assert bad.response.status.error == E.INVALID_GROUP_ID and not bad.records


def test_a_rebalance_is_recorded_only_from_the_groups_current_coordinator_at_its_current_epoch() -> None:
    image = replay(image_with_topic(), m.register(2, 10, fenced=False))
    group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [1, 2]) == 2)
    from_one = group_ops.record_rebalance(image, rebalance_request(group, 1), NOW_MS)
    assert from_one.response.status.error == E.NOT_COORDINATOR and not from_one.records
    assert f"broker 1 does not coordinate group {group!r}: broker 2 does" in from_one.response.status.message
    old_epoch = pb.RecordGroupRebalanceRequest(
        rebalance=m.group_rebalance(group, 1).group_rebalance, broker_id=2, broker_epoch=9
    )
    stale = group_ops.record_rebalance(image, old_epoch, NOW_MS)
    assert stale.response.status.error == E.STALE_BROKER_EPOCH and not stale.records
    old_epoch.broker_epoch = 10
    plan = group_ops.record_rebalance(image, old_epoch, NOW_MS)
    assert not plan.failed and [r.group_rebalance.coordinator for r in plan.records] == [2]


def test_many_groups_commit_in_one_batch_each_answered_on_its_own() -> None:
    request = batch(
        commit_request("a", 5), commit_request("b", 1, partition=9), commit_request("c", 7, partition=1)
    )
    plan = group_ops.commit_batch(image_with_topic(), request, NOW_MS)
    assert [[p.error for p in g.partitions] for g in plan.response.groups] == [
        [E.NONE],
        [E.UNKNOWN_TOPIC_OR_PARTITION],
        [E.NONE],
    ]
    image = replay(image_with_topic(), *plan.records)
    assert {g: {k[1]: v.offset for k, v in o.items()} for g, o in image.offsets.items()} == {
        "a": {0: 5},
        "c": {1: 7},
    }


def groups_of(broker_id: int, count: int, brokers: tuple[int, ...] = (1, 2)) -> list[str]:
    """The first ``count`` group names that ``broker_id`` coordinates among ``brokers``."""
    names = (f"group-{i}" for i in range(1000))
    return [g for g in names if coordinator_for(g, brokers) == broker_id][:count]


def test_a_batch_writes_only_commits_from_the_groups_coordinator_at_a_generation_not_older_than_recorded() -> (
    None
):
    stale_member, current_member, simple = groups_of(1, 3)
    (elsewhere,) = groups_of(2, 1)
    image = replay(
        image_with_topic(),
        m.register(2, 10, fenced=False),
        *(m.group_rebalance(g, 3) for g in (stale_member, current_member, simple, elsewhere)),
    )
    request = batch(
        commit_request(stale_member, 10, generation=2),
        commit_request(current_member, 11, generation=3),
        commit_request(simple, 12),
        commit_request(elsewhere, 13, generation=3),
    )
    plan = group_ops.commit_batch(image, request, NOW_MS)
    assert not plan.failed
    assert [E.Name(g.status.error) for g in plan.response.groups] == [
        "ILLEGAL_GENERATION",
        "NONE",
        "NONE",
        "NOT_COORDINATOR",
    ]
    assert "generation 2 is older than the recorded 3" in plan.response.groups[0].status.message
    assert "broker 1 does not coordinate" in plan.response.groups[3].status.message
    after = replay(image, *plan.records)
    assert {g: o[(T1, 0)].offset for g, o in after.offsets.items()} == {current_member: 11, simple: 12}


def test_a_batch_from_a_broker_that_is_not_its_current_registration_or_no_longer_coordinates_writes_nothing() -> (
    None
):
    (group,) = groups_of(1, 1)
    image = replay(image_with_topic(), m.register(2, 10, fenced=False))
    stale = group_ops.commit_batch(
        image, batch(commit_request(group, 5), epoch=COORDINATOR_EPOCH + 1), NOW_MS
    )
    assert stale.response.status.error == E.STALE_BROKER_EPOCH and not stale.records
    unknown = group_ops.commit_batch(image, batch(commit_request(group, 5), sender=7), NOW_MS)
    assert unknown.response.status.error == E.BROKER_ID_NOT_REGISTERED and not unknown.records
    fenced = replay(image, m.fence(COORDINATOR, COORDINATOR_EPOCH))  # its groups move to broker 2
    moved = group_ops.commit_batch(fenced, batch(commit_request(group, 5)), NOW_MS)
    assert [E.Name(g.status.error) for g in moved.response.groups] == [
        "NOT_COORDINATOR"
    ] and not moved.records


def test_deleting_groups_removes_offsets_and_history_and_names_what_it_could_not() -> None:
    image = replay(image_with_topic(), m.commit("a", T1, 0, 1), m.group_rebalance("b", 2))
    plan = group_ops.delete(image, pb.DeleteGroupsRequest(groups=["a", "b", "nope", "a", ""]))
    assert [(g.group, E.Name(g.error)) for g in plan.response.groups] == [
        ("a", "INVALID_REQUEST"),
        ("b", "NONE"),
        ("nope", "GROUP_ID_NOT_FOUND"),
        ("a", "INVALID_REQUEST"),
        ("", "INVALID_GROUP_ID"),
    ]
    after = replay(image, *plan.records)
    assert "b" not in after.groups and "a" in after.offsets


def test_a_group_idle_for_the_retention_expires_with_its_history_and_a_recent_rebalance_keeps_it() -> None:
    retention = 1000
    image = replay(
        image_with_topic(),
        m.commit("old", T1, 0, 1, ts=NOW_MS - retention),
        m.commit("rebalanced", T1, 0, 1, ts=NOW_MS - retention),
    )
    image = replay(
        image, *group_ops.record_rebalance(image, rebalance_request("rebalanced", 1), NOW_MS).records
    )
    image = replay(
        image,
        *group_ops.record_rebalance(image, rebalance_request("history-only", 1), NOW_MS - retention).records,
    )
    plan = offset_ops.expire(image, NOW_MS, retention, records_max=10)
    assert sorted(r.remove_group_offsets.group for r in plan.records) == ["history-only", "old"]
    after = replay(image, *plan.records)
    assert set(after.groups) == {"rebalanced"} and set(after.offsets) == {"rebalanced"}
