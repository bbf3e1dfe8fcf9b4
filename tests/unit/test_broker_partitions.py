"""BrokerPartitions: how images become the role changes the data plane acts on."""

from __future__ import annotations

import dataclasses

from raftka.broker.partitions import BrokerPartitions, Role, RoleChanges, StoppedPartition
from raftka.metadata.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage, frozen

ME = 101
INCARNATION = "this-process"
ORDERS = b"o" * 16
CLICKS = b"c" * 16


def state(
    replicas: tuple[int, ...], leader: int, leader_epoch: int = 0, isr: tuple[int, ...] | None = None
) -> PartitionState:
    return PartitionState(replicas, replicas if isr is None else isr, leader, leader_epoch, leader_epoch)


def topic(name: str, topic_id: bytes, partitions: dict[int, PartitionState]) -> TopicImage:
    return TopicImage(name, topic_id, frozen(dict(partitions)))


def registration(incarnation: str = INCARNATION, fenced: bool = False) -> BrokerRegistration:
    return BrokerRegistration(ME, incarnation, 7, (), "", fenced)


def image(*topics: TopicImage, me: BrokerRegistration | None = None) -> MetadataImage:
    return MetadataImage(
        brokers=frozen({ME: me or registration()}),
        topics_by_id=frozen({t.topic_id: t for t in topics}),
        topic_ids_by_name=frozen({t.name: t.topic_id for t in topics}),
    )


def names(changes: RoleChanges) -> tuple[list[str], list[str], list[str]]:
    return (
        [r.name for r in changes.leading],
        [r.name for r in changes.following],
        [s.name for s in changes.stopped],
    )


def test_first_image_reports_what_this_broker_leads_and_follows() -> None:
    partitions = BrokerPartitions(ME, INCARNATION)
    orders = topic(
        "orders",
        ORDERS,
        {
            0: state((101, 102), 101),
            1: state((102, 101), 102),
            2: state((102, 103), 102),
            3: state((101, 103), -1),
        },
    )
    changes = partitions.update(image(orders))
    assert names(changes) == (["orders-0"], ["orders-1", "orders-3"], [])
    assert [r.name for r in partitions.leaders()] == ["orders-0"]
    offline = partitions.get(ORDERS, 3)
    assert offline is not None and offline.role is Role.FOLLOWER and offline.leader == -1
    assert partitions.get(ORDERS, 2) is None  # not a replica here


def test_leader_moves_are_reported_and_isr_changes_are_not() -> None:
    partitions = BrokerPartitions(ME, INCARNATION)
    partitions.update(
        image(topic("orders", ORDERS, {0: state((101, 102), 101, 0), 1: state((102, 101), 102, 0)}))
    )
    moved = topic(
        "orders",
        ORDERS,
        {
            0: state((101, 102), 102, 1),  # our leadership moved away: now a follower
            1: state((102, 101), 102, 0, isr=(102,)),  # ISR shrank, same leader epoch: nothing to do
        },
    )
    changes = partitions.update(image(moved))
    assert names(changes) == ([], ["orders-0"], [])
    role = partitions.get(ORDERS, 0)
    assert role is not None and (role.role, role.leader, role.leader_epoch) == (Role.FOLLOWER, 102, 1)
    back = topic("orders", ORDERS, {0: state((101, 102), 101, 2), 1: state((102, 101), 103, 1)})
    assert names(partitions.update(image(back))) == (
        ["orders-0"],
        ["orders-1"],
        [],
    )  # follower of a new leader


def test_an_image_that_shares_the_topics_reports_nothing() -> None:
    partitions = BrokerPartitions(ME, INCARNATION)
    first = image(topic("orders", ORDERS, {0: state((101,), 101)}))
    partitions.update(first)
    assert not partitions.update(dataclasses.replace(first, offset=99))  # same topic mapping
    assert not partitions.update(image(*first.topics_by_id.values()))  # same topic objects


def test_reassignment_away_and_topic_deletion_stop_serving() -> None:
    partitions = BrokerPartitions(ME, INCARNATION)
    orders = topic("orders", ORDERS, {0: state((101, 102), 101), 1: state((102, 101), 102)})
    clicks = topic("clicks", CLICKS, {0: state((101,), 101)})
    partitions.update(image(orders, clicks))
    reassigned = topic("orders", ORDERS, {0: state((101, 102), 101), 1: state((102, 103), 102, 1)})
    changes = partitions.update(image(reassigned))  # clicks deleted, orders-1 moved away
    assert set(changes.stopped) == {
        StoppedPartition("orders", ORDERS, 1, deleted=False),
        StoppedPartition("clicks", CLICKS, 0, deleted=True),
    }
    assert not changes.leading and not changes.following
    assert sorted(r.name for r in partitions.roles()) == ["orders-0"]
    assert partitions.get(CLICKS, 0) is None


def test_a_recreated_topic_is_a_new_topic() -> None:
    partitions = BrokerPartitions(ME, INCARNATION)
    partitions.update(image(topic("orders", ORDERS, {0: state((101,), 101, 5)})))
    again = topic("orders", b"n" * 16, {0: state((101,), 101, 0)})
    changes = partitions.update(image(again))
    assert [r.topic_id for r in changes.leading] == [b"n" * 16]
    assert [s.topic_id for s in changes.stopped] == [ORDERS]


def test_no_role_until_this_incarnation_is_registered_and_unfenced() -> None:
    """The image still names the previous incarnation leader at its old epoch: a restarted
    broker acting on it would lead with whatever its disk has left."""
    partitions = BrokerPartitions(ME, INCARNATION)
    orders = topic("orders", ORDERS, {0: state((101, 102), 101, 4), 1: state((102, 101), 102, 4)})
    for me in (registration("the-previous-process"), registration(fenced=True)):
        changes = partitions.update(image(orders, me=me))
        assert not changes and not changes.started, me
        assert list(partitions.roles()) == []
    moved = topic("orders", ORDERS, {0: state((101, 102), 102, 5), 1: state((102, 101), 102, 4)})
    changes = partitions.update(image(moved))
    assert changes.started, "the first image this incarnation serves"
    assert names(changes) == ([], ["orders-0", "orders-1"], [])
    assert [r.leader_epoch for r in changes.following] == [5, 4]
    later = partitions.update(image(moved, me=registration(fenced=True)))
    assert not later.started and list(partitions.roles()), "fenced later (a missed session): roles stay"
