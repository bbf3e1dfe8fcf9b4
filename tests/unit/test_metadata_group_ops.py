"""What a group's coordinator writes to the quorum: completed rebalances (generations only
increase, the controller stamps the time), many groups' commits in one batch, deleted
groups, and the expiry of groups idle for the offsets retention."""

from __future__ import annotations

from raftka.metadata import group_ops, offset_ops
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.v1 import controller_pb2 as pb
from tests.unit import metadata_support as m
from tests.unit.metadata_support import replay

E = pb.ErrorCode
T1 = m.topic_id(1)
NOW_MS = 1_700_000_000_000


def image_with_topic() -> MetadataImage:
    return replay(EMPTY, m.register(1, 0), m.topic("t", T1), m.partition(T1, 0, [1]), m.partition(T1, 1, [1]))


def rebalance_request(group: str, generation: int) -> pb.RecordGroupRebalanceRequest:
    return pb.RecordGroupRebalanceRequest(rebalance=m.group_rebalance(group, generation).group_rebalance)


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


def test_many_groups_commit_in_one_batch_each_answered_on_its_own() -> None:
    request = pb.CommitGroupOffsetsRequest(
        groups=[
            pb.OffsetCommitRequest(
                group="a",
                topics=[
                    pb.OffsetCommitTopic(
                        topic="t", partitions=[pb.OffsetCommitPartition(partition=0, offset=5)]
                    )
                ],
            ),
            pb.OffsetCommitRequest(
                group="b",
                topics=[
                    pb.OffsetCommitTopic(
                        topic="t", partitions=[pb.OffsetCommitPartition(partition=9, offset=1)]
                    )
                ],
            ),
            pb.OffsetCommitRequest(
                group="c",
                topics=[
                    pb.OffsetCommitTopic(
                        topic="t", partitions=[pb.OffsetCommitPartition(partition=1, offset=7)]
                    )
                ],
            ),
        ]
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
