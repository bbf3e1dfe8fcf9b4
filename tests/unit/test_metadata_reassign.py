"""Partition reassignment on the controller (KIP-455, ``raftka.metadata.reassign_ops``):
brokers 1-6 registered and unfenced, topic "t" with one partition on [1, 2, 3].

The story: a reassignment adds its target replicas next to the current ones; the leader
adds each to the ISR once it caught up (AlterPartition), and the change that brings the
last one in also removes the old ones and, if the leader was one of them, hands
leadership to the first target replica in the ISR. Cancelling takes the added replicas
out again. Whatever the order of ISR changes, a replica leaves only once every new one
is in the ISR, the leader is always in the ISR, and the end has exactly the target.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.metadata import broker_ops, reassign_ops
from raftka.metadata.acls import Acl, Authorizer
from raftka.metadata.image import EMPTY, NO_LEADER, MetadataImage, PartitionState
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.security.principal import CLIENT, Principal
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.unit import metadata_support as m
from tests.unit.controller_rules_support import controller_policy
from tests.unit.metadata_controller_support import create, live_brokers, run, three

E = pb.ErrorCode
TID = m.topic_id(1)
BROKERS = (1, 2, 3, 4, 5, 6)


def epoch_of(broker_id: int) -> int:
    return 10 * broker_id


def cluster(replicas: tuple[int, ...] = (1, 2, 3), isr: tuple[int, ...] | None = None) -> MetadataImage:
    records = []
    for b in BROKERS:
        records += [m.register(b, epoch_of(b)), m.unfence(b, epoch_of(b))]
    records += [m.topic("t", TID), m.partition(TID, 0, replicas, isr=isr)]
    return m.replay(EMPTY, *records)


def state(image: MetadataImage) -> PartitionState:
    return image.topic("t").partitions[0]  # type: ignore[union-attr]


def reassign(
    image: MetadataImage, target: tuple[int, ...] | None, topic: str = "t", partition: int = 0
) -> tuple[MetadataImage, pb.ReassignmentResult]:
    asked = pb.ReassignablePartition(partition=partition)
    if target is not None:
        asked.replicas.SetInParent()
        asked.replicas.ids.extend(target)
    plan = reassign_ops.alter(
        image,
        pb.AlterPartitionReassignmentsRequest(topics=[pb.ReassignableTopic(name=topic, partitions=[asked])]),
    )
    [result] = plan.response.partitions
    return m.replay(image, *plan.records), result


def set_isr(image: MetadataImage, new_isr: tuple[int, ...]) -> tuple[MetadataImage, pb.AlterPartitionResult]:
    """The leader's AlterPartition asking for ``new_isr``."""
    s = state(image)
    data = pb.AlterPartitionData(
        partition=0,
        leader_epoch=s.leader_epoch,
        new_isr=new_isr,
        partition_epoch=s.partition_epoch,
        new_isr_broker_epochs=[epoch_of(b) for b in new_isr],
    )
    request = pb.AlterPartitionRequest(
        broker_id=s.leader,
        broker_epoch=epoch_of(s.leader),
        topics=[pb.AlterPartitionTopic(topic_id=TID, partitions=[data])],
    )
    plan = broker_ops.alter_partition(image, request)
    [result] = plan.response.partitions
    return m.replay(image, *plan.records), result


def test_a_reassignment_adds_the_target_then_completes_when_the_last_new_replica_joins_the_isr() -> None:
    image, result = reassign(cluster(), (4, 5, 6))
    assert result.error == E.NONE
    s = state(image)
    assert (s.replicas, s.adding_replicas, s.removing_replicas) == ((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert (s.isr, s.leader) == ((1, 2, 3), 1)
    image, _ = set_isr(image, (1, 2, 3, 4))
    image, _ = set_isr(image, (1, 2, 3, 4, 5))
    assert state(image).replicas == (4, 5, 6, 1, 2, 3)  # 6 is not in yet: nothing leaves
    before = state(image)
    image, answer = set_isr(image, (1, 2, 3, 4, 5, 6))
    done = state(image)
    assert (done.replicas, done.isr, done.adding_replicas, done.removing_replicas) == (
        (4, 5, 6),
        (4, 5, 6),
        (),
        (),
    )
    assert (done.leader, done.leader_epoch) == (4, before.leader_epoch + 1)  # the first target replica
    assert (answer.error, answer.leader, list(answer.isr)) == (E.NEW_LEADER_ELECTED, 4, [4, 5, 6])


def test_a_leader_kept_by_the_target_stays_and_the_answer_is_the_final_isr() -> None:
    image, _ = reassign(cluster(), (1, 4))
    image, answer = set_isr(image, (1, 2, 3, 4))
    s = state(image)
    assert (s.replicas, s.isr, s.leader) == ((1, 4), (1, 4), 1)
    assert (answer.error, list(answer.isr), answer.partition_epoch) == (E.NONE, [1, 4], s.partition_epoch)


def test_a_target_within_the_replicas_completes_at_once() -> None:
    image, result = reassign(cluster(), (3,))
    s = state(image)
    assert result.error == E.NONE
    assert (s.replicas, s.isr, s.leader, s.adding_replicas, s.removing_replicas) == ((3,), (3,), 3, (), ())


def test_a_shrink_waits_for_every_target_replica_to_be_in_the_isr() -> None:
    """Issue 30: [1, 2, 3] to [1, 2] while 2 catches up (ISR [1, 3]) completed at once with
    ISR [1], deleting the in-sync copy on 3; a power cut of 1 then lost what only 1 and 3
    held. The move must keep 3 until 2 is back in the ISR."""
    image, result = reassign(cluster(isr=(1, 3)), (1, 2))
    s = state(image)
    assert result.error == E.NONE
    assert (s.replicas, s.isr, s.removing_replicas) == ((1, 2, 3), (1, 3), (3,))  # 3 stays in sync
    image, answer = set_isr(image, (1, 2, 3))
    done = state(image)
    assert (done.replicas, done.isr, done.leader, done.reassigning) == ((1, 2), (1, 2), 1, False)
    assert (answer.error, list(answer.isr)) == (E.NONE, [1, 2])


def test_cancelling_takes_the_added_replicas_out_and_keeps_the_original_ones() -> None:
    image, _ = reassign(cluster(), (4, 5, 6))
    image, _ = set_isr(image, (1, 2, 3, 4))
    image, result = reassign(image, None)
    s = state(image)
    assert result.error == E.NONE
    assert (set(s.replicas), s.isr, s.leader, s.adding_replicas, s.removing_replicas) == (
        {1, 2, 3}, (1, 2, 3), 1, (), ()
    )  # fmt: skip
    image, again = reassign(image, None)
    assert again.error == E.NO_REASSIGNMENT_IN_PROGRESS and "replicas" in again.message
    assert state(image) == s


def test_a_new_target_starts_from_the_original_replicas_so_a_cancel_returns_to_them() -> None:
    """Issue 30: [1, 2, 3] to [4, 5, 6], then to [1, 4], then cancelled, left five replicas."""
    image, _ = reassign(cluster(), (4, 5, 6))
    image, _ = set_isr(image, (1, 2, 3, 5))
    image, result = reassign(image, (1, 4))
    s = state(image)
    assert result.error == E.NONE
    assert (s.replicas, s.adding_replicas, s.removing_replicas, s.isr) == (
        (1, 4, 2, 3),
        (4,),
        (2, 3),
        (1, 2, 3),  # 5, which the new target drops, left at once
    )
    image, result = reassign(image, None)
    s = state(image)
    assert result.error == E.NONE
    assert (s.replicas, s.isr, s.leader, s.reassigning) == ((1, 2, 3), (1, 2, 3), 1, False)


def test_a_reassignment_survives_a_snapshot() -> None:
    image, _ = reassign(cluster(), (4, 5))
    assert state(decode_image(encode_image(image))) == state(image)


def test_bad_targets_are_refused_per_partition_naming_the_field_and_write_nothing() -> None:
    image = cluster()
    image = m.replay(image, m.fence(6, epoch_of(6)))
    for target, code, words in [
        ((), E.INVALID_REPLICA_ASSIGNMENT, "replicas of t-0: empty"),
        ((4, 4), E.INVALID_REPLICA_ASSIGNMENT, "broker 4 appears more than once"),
        ((4, 9), E.INVALID_REPLICA_ASSIGNMENT, "broker 9 is not registered"),
        (tuple(range(1, 20)), E.INVALID_REPLICA_ASSIGNMENT, "19 replicas"),
    ]:
        after, result = reassign(image, target)
        assert (result.error, words in result.message) == (code, True), result.message
        assert after.topic("t") is image.topic("t")
    for topic, partition in (("gone", 0), ("t", 7)):
        after, result = reassign(image, (4,), topic, partition)
        assert result.error == E.UNKNOWN_TOPIC_OR_PARTITION and after.topic("t") is image.topic("t")
    twice = pb.ReassignablePartition(partition=0, replicas=metadata_pb2.BrokerIdList(ids=[4]))
    plan = reassign_ops.alter(
        image,
        pb.AlterPartitionReassignmentsRequest(
            topics=[pb.ReassignableTopic(name="t", partitions=[twice, twice])]
        ),
    )
    assert [r.error for r in plan.response.partitions] == [E.INVALID_REQUEST] * 2 and plan.records == []


def test_a_sigkill_of_the_leader_during_such_a_shrink_leaves_the_kept_copy_to_lead() -> None:
    """The same move, then 1 is killed (fenced): 3, still a replica and in the ISR, leads.
    (Before, 3 was already deleted and the partition stayed offline until 1 returned.)"""
    image, _ = reassign(cluster(isr=(1, 3)), (1, 2))
    while not image.brokers[1].fenced:
        image = m.replay(image, *broker_ops.fence(image, image.brokers[1], 100))
    s = state(image)
    assert (s.leader, s.isr, s.replicas) == (3, (3,), (1, 2, 3))


def test_a_fenced_but_registered_target_is_accepted_as_kafka_does() -> None:
    """Kafka asks only that target brokers are registered: a drain or a move back must not
    fail because one replica is down (issue 30). The fenced one joins the ISR once back."""
    image = m.replay(cluster(), m.fence(6, epoch_of(6)))
    image, result = reassign(image, (1, 2, 6))
    s = state(image)
    assert result.error == E.NONE
    assert (s.replicas, s.adding_replicas, s.removing_replicas, s.isr) == (
        (1, 2, 6, 3),
        (6,),
        (3,),
        (1, 2, 3),
    )


def test_the_list_shows_reassignments_in_progress_only() -> None:
    image, _ = reassign(cluster(), (4, 5, 6))
    [ongoing] = reassign_ops.list_reassignments(image, pb.ListPartitionReassignmentsRequest()).reassignments
    assert (ongoing.topic, ongoing.partition, list(ongoing.adding_replicas)) == ("t", 0, [4, 5, 6])
    done, _ = reassign(cluster(), (3,))
    assert not reassign_ops.list_reassignments(done, pb.ListPartitionReassignmentsRequest()).reassignments


replica_sets = st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    current=replica_sets,
    target=replica_sets,
    isr_size=st.integers(1, 4),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=12),
    cancel_at=st.integers(0, 14),
    retarget=st.tuples(st.integers(0, 14), replica_sets),
)
def test_whatever_the_isr_does_nothing_leaves_before_its_replacements_joined(
    current: tuple[int, ...],
    target: tuple[int, ...],
    isr_size: int,
    steps: list[tuple[bool, int]],
    cancel_at: int,
    retarget: tuple[int, tuple[int, ...]],
) -> None:
    image = cluster(current, current[:isr_size])
    image, result = reassign(image, target)
    assert result.error == E.NONE
    original = set(current)
    for i, (grow, pick) in enumerate(steps):
        before = state(image)
        if not before.reassigning:
            break
        if i == retarget[0]:  # a new target midway: a cancel still returns to the original replicas
            image, result = reassign(image, retarget[1])
            if result.error == E.NONE:
                target = retarget[1]
            before = state(image)
            if not before.reassigning:
                break
        if i == cancel_at:
            image, result = reassign(image, None)
            assert result.error == E.NONE
            after = state(image)
            assert set(after.replicas) == original and not after.reassigning
            assert after.leader in after.isr and set(after.isr) <= original
            return
        outside = [b for b in before.replicas if b not in before.isr]
        if grow and outside:  # the leader adds a caught-up replica
            joined = outside[pick % len(outside)]
            image, _ = set_isr(image, tuple(b for b in before.replicas if b in before.isr or b == joined))
        elif not grow and len(before.isr) > 1:  # a follower falls behind
            followers = [b for b in before.isr if b != before.leader]
            image, _ = set_isr(image, tuple(b for b in before.isr if b != followers[pick % len(followers)]))
        after = state(image)
        assert after.leader != NO_LEADER and after.leader in after.isr
        assert set(after.isr) <= set(after.replicas)
        if set(after.replicas) != set(before.replicas):  # completed: the removing ones left
            assert set(after.isr) == set(target)  # every replica that stays holds everything committed
            assert after.replicas == target and not after.reassigning
    final = state(image)
    if not final.reassigning:
        assert final.replicas == target and len(final.replicas) == len(target)


def test_a_reassignment_survives_a_controller_failover_and_completes_on_the_next() -> None:
    async def body() -> None:
        quorum, leader_id = await three()
        old = quorum.members[leader_id].controller
        epochs = await live_brokers(old, [101, 102, 103])
        await create(old, "t", 1, 2)
        before = quorum.members[leader_id].image.topic("t").partitions[0]  # type: ignore[union-attr]
        newcomer = next(b for b in (101, 102, 103) if b not in before.replicas)
        target = (newcomer, *(b for b in before.replicas if b != before.leader))
        asked = pb.ReassignablePartition(partition=0, replicas=metadata_pb2.BrokerIdList(ids=target))
        started = await old.alter_partition_reassignments(
            pb.AlterPartitionReassignmentsRequest(topics=[pb.ReassignableTopic(name="t", partitions=[asked])])
        )
        assert started.status.error == E.NONE and started.partitions[0].error == E.NONE
        await quorum.converged()
        await quorum.crash(leader_id)
        new = await quorum.active()
        listed = await new.controller.list_partition_reassignments(pb.ListPartitionReassignmentsRequest())
        assert [tuple(r.adding_replicas) for r in listed.reassignments] == [(newcomer,)]

        s = new.image.topic("t").partitions[0]  # type: ignore[union-attr]
        new_isr = tuple(b for b in s.replicas if b in s.isr or b == newcomer)
        data = pb.AlterPartitionData(
            partition=0,
            leader_epoch=s.leader_epoch,
            new_isr=new_isr,
            partition_epoch=s.partition_epoch,
            new_isr_broker_epochs=[epochs[b] for b in new_isr],
        )
        topic_id = new.image.topic_ids_by_name["t"]
        answer = await new.controller.alter_partition(
            pb.AlterPartitionRequest(
                broker_id=s.leader,
                broker_epoch=epochs[s.leader],
                topics=[pb.AlterPartitionTopic(topic_id=topic_id, partitions=[data])],
            )
        )
        assert answer.partitions[0].error == E.NEW_LEADER_ELECTED
        done = new.image.topic("t").partitions[0]  # type: ignore[union-attr]
        assert (done.replicas, done.leader, done.reassigning) == (target, newcomer, False)
        await quorum.start(leader_id)
        await quorum.converged()
        await quorum.close()

    run(body)


def test_moving_needs_alter_and_listing_needs_describe_on_the_cluster() -> None:
    alice = Principal("User:alice", CLIENT)
    describe = Acl("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")
    policy = controller_policy(Authorizer([], lambda: {describe.id: describe}))
    refused = policy("AlterPartitionReassignments", alice, None, pb.AlterPartitionReassignmentsRequest())
    assert refused is not None and refused.code == E.CLUSTER_AUTHORIZATION_FAILED
    assert "User:alice may not ALTER the cluster" in refused.message
    assert policy("ListPartitionReassignments", alice, None, pb.ListPartitionReassignmentsRequest()) is None
    mallory = Principal("User:mallory", CLIENT)
    assert (
        policy("ListPartitionReassignments", mallory, None, pb.ListPartitionReassignmentsRequest())
        is not None
    )
