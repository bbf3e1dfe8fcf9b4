"""Replica placement: distinct replicas, replicas and preferred leaders balanced within one,
racks spread, deterministic per seed, and CreatePartitions keeping the topic balanced."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from raftka.metadata.image import BrokerRegistration
from raftka.metadata.placement import PlacementError, place_new_partitions, place_replicas, topic_seed
from raftka.v1 import controller_pb2

Assignment = list[tuple[int, ...]]


def broker(broker_id: int, rack: str = "") -> BrokerRegistration:
    return BrokerRegistration(broker_id, f"incarnation-{broker_id}", 0, (), rack, False)


@st.composite
def balanced_clusters(draw: st.DrawFn) -> list[BrokerRegistration]:
    """No racks, or every rack with the same number of brokers: full guarantees apply."""
    racks = draw(st.integers(1, 4))
    per_rack = draw(st.integers(1, 4))
    ids = draw(
        st.lists(st.integers(0, 10_000), min_size=racks * per_rack, max_size=racks * per_rack, unique=True)
    )
    names = [""] if racks == 1 and draw(st.booleans()) else [f"rack-{r}" for r in range(racks)]
    return sorted(
        (broker(broker_id, names[i % len(names)]) for i, broker_id in enumerate(ids)),
        key=lambda b: b.broker_id,
    )


@st.composite
def any_clusters(draw: st.DrawFn) -> list[BrokerRegistration]:
    """Racks of any sizes, some brokers possibly without a rack."""
    ids = draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True))
    return [broker(b, draw(st.sampled_from(["", "a", "b", "c"]))) for b in sorted(ids)]


def spread(counts: Counter[int], brokers: Sequence[BrokerRegistration]) -> int:
    values = [counts[b.broker_id] for b in brokers]
    return max(values) - min(values)


def replica_counts(assignment: Assignment) -> Counter[int]:
    return Counter(b for replicas in assignment for b in replicas)


def leader_counts(assignment: Assignment) -> Counter[int]:
    return Counter(replicas[0] for replicas in assignment)


def assert_valid(assignment: Assignment, brokers: Sequence[BrokerRegistration], rf: int) -> None:
    ids = {b.broker_id for b in brokers}
    for replicas in assignment:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf, replicas
        assert set(replicas) <= ids


def assert_racks_spread(assignment: Assignment, brokers: Sequence[BrokerRegistration], rf: int) -> None:
    rack_of = {b.broker_id: b.rack for b in brokers}
    racks = len(set(rack_of.values()))
    for replicas in assignment:
        assert len({rack_of[b] for b in replicas}) == min(rf, racks), replicas


@settings(max_examples=300, deadline=None)
@given(brokers=balanced_clusters(), data=st.data(), seed=st.integers(0, 2**64))
def test_balanced_within_one_and_rack_spread(
    brokers: list[BrokerRegistration], data: st.DataObject, seed: int
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    partitions = data.draw(st.integers(0, 4 * len(brokers) + 3))
    assignment = place_replicas(brokers, partitions, rf, seed=seed)
    assert len(assignment) == partitions
    assert_valid(assignment, brokers, rf)
    assert spread(replica_counts(assignment), brokers) <= 1
    assert spread(leader_counts(assignment), brokers) <= 1
    assert_racks_spread(assignment, brokers, rf)


@settings(max_examples=300, deadline=None)
@given(brokers=any_clusters(), data=st.data(), seed=st.integers(0, 2**64))
def test_unequal_racks_still_spread(
    brokers: list[BrokerRegistration], data: st.DataObject, seed: int
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    assignment = place_replicas(brokers, data.draw(st.integers(0, 40)), rf, seed=seed)
    assert_valid(assignment, brokers, rf)
    assert_racks_spread(assignment, brokers, rf)


@settings(max_examples=100, deadline=None)
@given(brokers=any_clusters(), data=st.data(), seed=st.integers(0, 2**64))
def test_deterministic_and_continuable(
    brokers: list[BrokerRegistration], data: st.DataObject, seed: int
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    first = data.draw(st.integers(0, 30))
    more = data.draw(st.integers(0, 30))
    whole = place_replicas(brokers, first + more, rf, seed=seed)
    assert place_replicas(list(reversed(brokers)), first + more, rf, seed=seed) == whole
    assert place_replicas(brokers, more, rf, first_partition=first, seed=seed) == whole[first:]


def test_seed_picks_the_start() -> None:
    brokers = [broker(i) for i in range(1, 7)]
    leaders_of_partition_0 = {place_replicas(brokers, 1, 3, seed=seed)[0][0] for seed in range(50)}
    assert leaders_of_partition_0 == {b.broker_id for b in brokers}


def test_followers_shift_between_rounds() -> None:
    """Like Kafka's shift: a broker shares partitions with more than its two neighbours,
    so when it dies its followers' extra load spreads over the cluster."""
    brokers = [broker(i) for i in range(1, 8)]
    assignment = place_replicas(brokers, 70, 2, seed=0)
    partners = {replicas[1] for replicas in assignment if replicas[0] == 1}
    assert len(partners) >= 4


@pytest.mark.parametrize(
    ("brokers", "rf"),
    [(0, 1), (3, 4), (3, 0), (3, -1), (1, 2)],
)
def test_replication_factor_out_of_range(brokers: int, rf: int) -> None:
    with pytest.raises(PlacementError) as error:
        place_replicas([broker(i) for i in range(1, brokers + 1)], 3, rf)
    assert error.value.code == controller_pb2.INVALID_REPLICATION_FACTOR
    assert str(rf) in error.value.message


@pytest.mark.parametrize(("partitions", "first"), [(-1, 0), (1, -1)])
def test_negative_partitions_refused(partitions: int, first: int) -> None:
    with pytest.raises(PlacementError) as error:
        place_replicas([broker(1)], partitions, 1, first_partition=first)
    assert error.value.code == controller_pb2.INVALID_PARTITIONS


def test_topic_seed_is_stable_and_differs_between_topics() -> None:
    assert topic_seed(bytes(range(16))) == topic_seed(bytes(range(16)))
    assert topic_seed(bytes(range(16))) != topic_seed(bytes(range(1, 17)))


# ---- CreatePartitions ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(brokers=balanced_clusters(), data=st.data(), seed=st.integers(0, 2**64))
def test_new_partitions_on_the_same_brokers_keep_the_topic_balanced(
    brokers: list[BrokerRegistration], data: st.DataObject, seed: int
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    before = data.draw(st.integers(1, 30))
    added = data.draw(st.integers(0, 30))
    current = place_replicas(brokers, before, rf, seed=seed)
    grown = current + place_new_partitions(brokers, current, added, seed=seed)
    assert grown == place_replicas(brokers, before + added, rf, seed=seed)
    assert spread(replica_counts(grown), brokers) <= 1
    assert spread(leader_counts(grown), brokers) <= 1


@settings(max_examples=200, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**64))
def test_new_partitions_after_brokers_changed_fill_the_least_loaded(data: st.DataObject, seed: int) -> None:
    """Without racks the replica-count spread over the live brokers never grows."""
    old = [broker(i) for i in range(1, data.draw(st.integers(1, 8)) + 1)]
    rf = data.draw(st.integers(1, len(old)))
    current = place_replicas(old, data.draw(st.integers(1, 20)), rf, seed=seed)
    joined = [broker(i) for i in range(100, 100 + data.draw(st.integers(0, 3)))]
    left = set(data.draw(st.lists(st.sampled_from(old), max_size=len(old) - 1, unique=True)))
    live = [b for b in old if b not in left] + joined
    assume(rf <= len(live) and (joined or left))
    added = place_new_partitions(live, current, data.draw(st.integers(0, 20)), seed=seed)
    assert_valid(added, live, rf)
    live_ids = {b.broker_id for b in live}
    before = Counter(b for replicas in current for b in replicas if b in live_ids)
    after = before + replica_counts(added)
    assert spread(after, live) <= max(spread(before, live), 1)


def test_a_new_broker_takes_the_new_partitions_first() -> None:
    brokers = [broker(1, "a"), broker(2, "b"), broker(3, "a"), broker(4, "b")]
    current = place_replicas(brokers, 4, 2, seed=7)
    bigger = [*brokers, broker(5, "a"), broker(6, "b")]
    added = place_new_partitions(bigger, current, 4, seed=7)
    assert_valid(added, bigger, 2)
    assert_racks_spread(added, bigger, 2)
    counts = replica_counts(current + added)
    assert counts[5] >= 2 and counts[6] >= 2  # the old brokers held 2 each before
    assert spread(counts, bigger) <= 1
    assert spread(leader_counts(current + added), bigger) <= 1


def test_new_partitions_keep_the_topic_replication_factor() -> None:
    brokers = [broker(i) for i in range(1, 4)]
    current = place_replicas(brokers, 2, 3, seed=1)
    with pytest.raises(PlacementError) as error:
        place_new_partitions(brokers[:2], current, 1, seed=1)
    assert error.value.code == controller_pb2.INVALID_REPLICATION_FACTOR
