"""Replay: what every record does to the image, what it refuses, and what it shares."""

from __future__ import annotations

import pytest

from raftka.metadata.delta import MetadataDelta, ReplayError
from raftka.metadata.image import (
    BROKER,
    EMPTY,
    TOPIC,
    BrokerRegistration,
    CommittedOffset,
    Endpoint,
    MetadataImage,
    PartitionState,
)
from raftka.metadata.records import topic_id_str
from raftka.v1 import metadata_pb2 as pb
from tests.unit import metadata_support as m
from tests.unit.metadata_support import replay

T1, T2 = m.topic_id(1), m.topic_id(2)


@pytest.fixture
def cluster() -> MetadataImage:
    """Brokers 1-3 (unfenced), topic a (T1) with partitions 0-1, topic b (T2) with partition 0."""
    return replay(
        EMPTY,
        *(m.register(b, b * 10, fenced=False) for b in (1, 2, 3)),
        m.topic("a", T1),
        m.partition(T1, 0, [1, 2, 3]),
        m.partition(T1, 1, [2, 3, 1]),
        m.topic("b", T2),
        m.partition(T2, 0, [3, 1, 2]),
    )


# brokers ---------------------------------------------------------------------------------


def test_register_broker() -> None:
    image = replay(EMPTY, m.register(101, 5, rack="r1", crashed=True))
    endpoints = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert image.brokers == {
        101: BrokerRegistration(101, "inc-101-5", 5, endpoints, "r1", True, m.log_dir_id(101), crashed=True)
    }
    assert image.offset == 1


def test_a_new_registration_replaces_the_old_one_and_needs_a_higher_epoch() -> None:
    image = replay(EMPTY, m.register(101, 5, fenced=False), m.register(101, 9, port=9999))
    assert image.brokers[101].epoch == 9 and image.brokers[101].fenced
    assert image.brokers[101].endpoints[0].port == 9999
    with pytest.raises(ReplayError, match="registration epoch 9 is not above the current 9"):
        replay(image, m.register(101, 9))


def test_fence_unfence_and_unregister_check_the_broker_epoch() -> None:
    image = replay(EMPTY, m.register(101, 5))
    assert not replay(image, m.unfence(101, 5)).brokers[101].fenced
    assert replay(image, m.unfence(101, 5), m.fence(101, 5)).brokers[101].fenced
    assert replay(image, m.unregister(101, 5)).brokers == {}
    for record in (m.fence(101, 4), m.unfence(101, 6), m.unregister(101, 4)):
        with pytest.raises(ReplayError, match="broker 101 has epoch 5"):
            replay(image, record)
    with pytest.raises(ReplayError, match="broker 7 is not registered"):
        replay(image, m.fence(7, 5))


# topics and partitions --------------------------------------------------------------------


def test_topic_and_partition_records_build_the_topic(cluster: MetadataImage) -> None:
    topic = cluster.topic("a")
    assert topic is not None and topic.topic_id == T1 and cluster.topic_ids_by_name == {"a": T1, "b": T2}
    assert topic.partitions == {
        0: PartitionState((1, 2, 3), (1, 2, 3), 1, 0, 0),
        1: PartitionState((2, 3, 1), (2, 3, 1), 2, 0, 0),
    }


def test_duplicate_topics_are_refused(cluster: MetadataImage) -> None:
    with pytest.raises(ReplayError, match="topic 'a' already exists"):
        replay(cluster, m.topic("a", m.topic_id(9)))
    with pytest.raises(ReplayError, match="already exists"):
        replay(cluster, m.topic("z", T1))


def test_records_about_unknown_topics_or_partitions_are_refused(cluster: MetadataImage) -> None:
    unknown = m.topic_id(99)
    for record in (
        m.partition(unknown, 0, [1]),
        m.change(unknown, 0),
        m.remove(unknown),
        m.commit("g", unknown, 0, 1),
    ):
        with pytest.raises(ReplayError, match="unknown topic id AAAAAAAAAAAAAAAAAAAAYw"):
            replay(cluster, record)
    for record in (m.change(T1, 5, leader=1), m.commit("g", T1, 5, 1)):
        with pytest.raises(ReplayError, match="has no partition 5"):
            replay(cluster, record)
    with pytest.raises(ReplayError, match="unknown topic 'zz'"):
        replay(cluster, m.config("zz", "retention.ms", "1"))


def test_partition_change_leader_minus_two_leaves_the_leader(cluster: MetadataImage) -> None:
    image = replay(cluster, m.change(T1, 0, isr=[1, 2]))
    assert image.topics_by_id[T1].partitions[0] == PartitionState((1, 2, 3), (1, 2), 1, 0, 1)


def test_partition_change_of_leader_bumps_both_epochs(cluster: MetadataImage) -> None:
    image = replay(cluster, m.change(T1, 0, leader=2))
    assert image.topics_by_id[T1].partitions[0] == PartitionState((1, 2, 3), (1, 2, 3), 2, 1, 1)
    image = replay(image, m.change(T1, 0, leader=-1), m.change(T1, 0, leader=3))
    assert image.topics_by_id[T1].partitions[0] == PartitionState((1, 2, 3), (1, 2, 3), 3, 3, 3)


def test_partition_change_naming_the_same_leader_is_no_leader_change(cluster: MetadataImage) -> None:
    image = replay(cluster, m.change(T1, 0, leader=1))
    assert image.topics_by_id[T1].partitions[0] == PartitionState((1, 2, 3), (1, 2, 3), 1, 0, 1)


def test_partition_change_of_replicas_and_isr(cluster: MetadataImage) -> None:
    image = replay(cluster, m.change(T1, 0, replicas=[1, 2], isr=[2], leader=2))
    assert image.topics_by_id[T1].partitions[0] == PartitionState((1, 2), (2,), 2, 1, 1)
    image = replay(image, m.change(T1, 0, isr=[], leader=-1))  # an empty list set is not "unset"
    assert image.topics_by_id[T1].partitions[0] == PartitionState((1, 2), (), -1, 2, 2)


def test_partition_change_must_leave_a_consistent_partition(cluster: MetadataImage) -> None:
    with pytest.raises(ReplayError, match=r"isr \[1, 2, 3\] is not within replicas \[1, 2\]"):
        replay(cluster, m.change(T1, 0, replicas=[1, 2]))
    with pytest.raises(ReplayError, match="leader 1 is not in isr"):
        replay(cluster, m.change(T1, 0, isr=[2, 3]))


def test_partition_record_replaces_a_partition(cluster: MetadataImage) -> None:
    image = replay(cluster, m.partition(T1, 0, [3], leader_epoch=4, partition_epoch=6))
    assert image.topics_by_id[T1].partitions[0] == PartitionState((3,), (3,), 3, 4, 6)


def test_a_partition_record_names_only_registered_brokers(cluster: MetadataImage) -> None:
    a2 = f"PartitionRecord for {topic_id_str(T1)}-2"
    with pytest.raises(ReplayError, match=f"{a2}: broker 4 is not registered"):
        replay(cluster, m.partition(T1, 2, [1, 4], isr=[1]))  # never registered, out of the ISR
    gone = replay(cluster, m.unregister(3, 30))
    with pytest.raises(ReplayError, match=f"{a2}: broker 3 is not registered"):
        replay(gone, m.partition(T1, 2, [3, 1]))  # unregistered, and the leader


def test_a_partition_change_keeps_but_never_brings_in_an_unregistered_broker(cluster: MetadataImage) -> None:
    a0 = f"PartitionChangeRecord for {topic_id_str(T1)}-0"
    with pytest.raises(ReplayError, match=f"{a0}: broker 4 is not registered"):
        replay(cluster, m.change(T1, 0, replicas=[1, 2, 3, 4]))
    gone = replay(cluster, m.unregister(3, 30))  # its partitions keep its id
    image = replay(
        gone,
        m.change(T1, 0, isr=[1, 3]),  # 3 stays a replica and in the ISR
        m.change(T1, 0, replicas=[3, 1, 2]),  # reordered
        m.change(T2, 0, isr=[3], leader=3),  # b-0: 3 led it and still does, alone in its ISR
    )
    assert image.topics_by_id[T1].partitions[0] == PartitionState((3, 1, 2), (1, 3), 1, 0, 2)
    assert image.topics_by_id[T2].partitions[0] == PartitionState((3, 1, 2), (3,), 3, 0, 1)
    with pytest.raises(ReplayError, match=f"{a0}: broker 3 is not registered"):
        replay(gone, m.change(T1, 0, leader=3))  # in a-0's ISR, but a new leader
    shrunk = replay(gone, m.change(T1, 0, isr=[1, 2]))
    with pytest.raises(ReplayError, match=f"{a0}: broker 3 is not registered"):
        replay(shrunk, m.change(T1, 0, isr=[1, 2, 3]))  # a replica, but new to the ISR


def test_remove_topic_drops_its_partitions_configs_and_offsets(cluster: MetadataImage) -> None:
    image = replay(
        cluster,
        m.config("a", "retention.ms", "1"),
        m.config("b", "retention.ms", "2"),
        m.commit("g1", T1, 0, 5),
        m.commit("g1", T2, 0, 6),
        m.commit("g2", T1, 1, 7),
        m.remove(T1),
    )
    assert image.topic("a") is None and T1 not in image.topics_by_id and set(image.topic_ids_by_name) == {"b"}
    assert image.configs == {(TOPIC, "b"): {"retention.ms": "2"}}
    assert image.offsets == {"g1": {(T2, 0): CommittedOffset(6, "", 1)}}
    # the name is free again, and a new topic of that name starts empty
    again = replay(image, m.topic("a", m.topic_id(3)))
    assert again.topic("a").partitions == {}  # type: ignore[union-attr]
    assert (TOPIC, "a") not in again.configs


def test_a_topic_created_and_removed_in_one_delta_leaves_nothing(cluster: MetadataImage) -> None:
    t3 = m.topic_id(3)
    image = replay(cluster, m.topic("c", t3), m.partition(t3, 0, [1]), m.commit("g", t3, 0, 1), m.remove(t3))
    assert image == MetadataImage(cluster.offset + 4, *_fields_after_offset(cluster))


def _fields_after_offset(image: MetadataImage) -> tuple:
    return (
        image.brokers,
        image.topics_by_id,
        image.topic_ids_by_name,
        image.configs,
        image.offsets,
        image.next_producer_id,
        image.features,
    )


# configs, features, producer ids, offsets, no-op ------------------------------------------


def test_config_set_and_delete(cluster: MetadataImage) -> None:
    image = replay(
        cluster,
        m.config("a", "retention.ms", "1"),
        m.config("a", "segment.bytes", "2"),
        m.config("a", "retention.ms", "3"),
        m.config("", "log.retention.ms", "9", resource_type=BROKER),
    )
    assert image.configs == {
        (TOPIC, "a"): {"retention.ms": "3", "segment.bytes": "2"},
        (BROKER, ""): {"log.retention.ms": "9"},
    }
    image = replay(image, m.config("a", "retention.ms", None), m.config("a", "unknown.key", None))
    assert image.configs[(TOPIC, "a")] == {"segment.bytes": "2"}
    image = replay(image, m.config("a", "segment.bytes", None))
    assert (TOPIC, "a") not in image.configs  # no empty entries: images compare equal however built


def test_feature_levels_and_level_zero_removes() -> None:
    image = replay(EMPTY, m.feature("metadata.version", 3), m.feature("kraft.version", 1))
    assert image.features == {"metadata.version": 3, "kraft.version": 1}
    assert replay(image, m.feature("kraft.version", 0)).features == {"metadata.version": 3}


def test_producer_ids_only_move_forward() -> None:
    image = replay(EMPTY, m.producer_ids(1000))
    assert image.next_producer_id == 1000
    with pytest.raises(ReplayError, match="next producer id 1000 is not above the current 1000"):
        replay(image, m.producer_ids(1000))


def test_offset_commit_overwrites_per_group_and_partition(cluster: MetadataImage) -> None:
    image = replay(
        cluster,
        m.commit("g", T1, 0, 5, "x", ts=10),
        m.commit("g", T1, 0, 3, "y", ts=11),
        m.commit("h", T1, 0, 9),
    )
    assert image.offsets == {
        "g": {(T1, 0): CommittedOffset(3, "y", 11)},
        "h": {(T1, 0): CommittedOffset(9, "", 1)},
    }


def test_remove_group_offsets_drops_that_group_and_no_other(cluster: MetadataImage) -> None:
    image = replay(cluster, m.commit("g", T1, 0, 5), m.commit("g", T2, 0, 6), m.commit("h", T1, 0, 9))
    after = replay(image, m.remove_group_offsets("g"))
    assert after.offsets == {"h": {(T1, 0): CommittedOffset(9, "", 1)}}
    assert after.offsets["h"] is image.offsets["h"]


def test_a_group_removed_and_committed_again_in_one_delta_starts_afresh(cluster: MetadataImage) -> None:
    image = replay(
        cluster, m.commit("g", T1, 0, 5), m.remove_group_offsets("g"), m.commit("g", T1, 1, 7, ts=2)
    )
    assert image.offsets == {"g": {(T1, 1): CommittedOffset(7, "", 2)}}


def test_remove_group_offsets_of_a_group_with_none_is_refused(cluster: MetadataImage) -> None:
    with pytest.raises(
        ReplayError, match="RemoveGroupOffsetsRecord: group 'g' has no offsets and no rebalance"
    ):
        replay(cluster, m.remove_group_offsets("g"))
    with pytest.raises(ReplayError, match="group 'g' has no offsets and no rebalance"):
        replay(cluster, m.commit("g", T1, 0, 5), m.remove_group_offsets("g"), m.remove_group_offsets("g"))


def test_a_group_keeps_its_last_rebalance_and_generations_only_increase(cluster: MetadataImage) -> None:
    image = replay(cluster, m.group_rebalance("g", 1, ["a", "b"], assignment=[("orders", [0, 2])]))
    rebalance = image.groups["g"]
    assert (rebalance.generation_id, rebalance.leader, [x.member_id for x in rebalance.members]) == (
        1,
        "a",
        ["a", "b"],
    )
    assert rebalance.members[0].assignment == (("orders", (0, 2)),)
    image = replay(image, m.group_rebalance("g", 4, ["b"]))
    assert image.groups["g"].generation_id == 4 and image.groups["g"].leader == "b"
    for stale in (4, 3):
        with pytest.raises(ReplayError, match=f"generation {stale} is not above the recorded 4"):
            replay(image, m.group_rebalance("g", stale))
    removed = replay(image, m.remove_group_offsets("g"))  # a group with no offsets can be removed too
    assert "g" not in removed.groups


def test_no_op_changes_only_the_offset(cluster: MetadataImage) -> None:
    image = replay(cluster, m.no_op())
    assert image.offset == cluster.offset + 1
    assert _fields_after_offset(image) == _fields_after_offset(cluster)


def test_an_empty_record_is_refused() -> None:
    with pytest.raises(ReplayError, match="holds no record"):
        replay(EMPTY, pb.MetadataRecord())


# sharing and immutability ----------------------------------------------------------------


def test_a_refused_record_leaves_the_delta_as_it_was(cluster: MetadataImage) -> None:
    delta = MetadataDelta(cluster)
    delta.replay(m.change(T1, 0, isr=[1, 2]))
    bad_records = (
        m.change(T1, 1, isr=[9]),
        m.remove(m.topic_id(99)),
        m.fence(1, 0),
        m.commit("g", T1, 9, 1),
        m.remove_group_offsets("nobody"),
    )
    for bad in bad_records:
        with pytest.raises(ReplayError):
            delta.replay(bad)
    assert delta.apply(cluster.offset + 1) == replay(cluster, m.change(T1, 0, isr=[1, 2]))


def test_unchanged_parts_are_shared_with_the_base_image(cluster: MetadataImage) -> None:
    image = replay(cluster, m.change(T1, 0, leader=2))
    assert image.topics_by_id[T2] is cluster.topics_by_id[T2]  # other topics: the same objects
    assert image.topics_by_id[T1].partitions[1] is cluster.topics_by_id[T1].partitions[1]
    assert image.brokers is cluster.brokers and image.offsets is cluster.offsets
    assert image.configs is cluster.configs and image.topic_ids_by_name is cluster.topic_ids_by_name
    # and the base image did not change
    assert cluster.topics_by_id[T1].partitions[0].leader == 1


def test_offsets_of_other_groups_are_shared(cluster: MetadataImage) -> None:
    image = replay(cluster, m.commit("g1", T1, 0, 1), m.commit("g2", T1, 0, 1))
    after = replay(image, m.commit("g1", T1, 0, 2))
    assert after.offsets["g2"] is image.offsets["g2"]
    assert after.topics_by_id is image.topics_by_id


def test_images_are_read_only(cluster: MetadataImage) -> None:
    with pytest.raises(TypeError):
        cluster.brokers[9] = cluster.brokers[1]  # type: ignore[index]
    with pytest.raises(TypeError):
        cluster.topics_by_id[T1].partitions[0] = cluster.topics_by_id[T1].partitions[1]  # type: ignore[index]


def test_a_delta_is_applied_once(cluster: MetadataImage) -> None:
    delta = MetadataDelta(cluster)
    delta.apply(cluster.offset)
    with pytest.raises(AssertionError):
        delta.replay(m.no_op())
