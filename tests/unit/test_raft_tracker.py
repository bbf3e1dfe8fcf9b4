"""Tracker and quorum_offset: what a majority of voters holds; observers never count."""

from __future__ import annotations

import pytest

from raftka.raft.tracker import OBSERVERS_MAX, Tracker, majority, quorum_offset


@pytest.mark.parametrize(("voters", "needed"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_majority(voters: int, needed: int) -> None:
    assert majority(voters) == needed


@pytest.mark.parametrize(
    ("offsets", "voter_count", "expected"),
    [
        ([], 3, -1),
        ([7], 1, 7),
        ([7], 3, -1),  # two unknown voters count as -1
        ([7, 3], 3, 3),
        ([3, 7, 9], 3, 7),
        ([10, 8], 5, -1),  # three of five needed, only two known
        ([10, 8, 1], 5, 1),
        ([5, 5, 5, 5], 4, 5),
        ([9, 9, 0, 0], 4, 0),  # an even split is not a majority
    ],
)
def test_quorum_offset(offsets: list[int], voter_count: int, expected: int) -> None:
    assert quorum_offset(offsets, voter_count) == expected


@pytest.fixture
def tracker() -> Tracker:
    tracker = Tracker(1, frozenset({1, 2, 3}), now_ms=100)
    tracker.record_leader_end(10, now_ms=100)
    return tracker


def test_unknown_voters_hold_nothing(tracker: Tracker) -> None:
    assert tracker.quorum_end() == -1
    tracker.record_fetch(2, 7, leader_end=10, now_ms=110)
    assert tracker.quorum_end() == 7


def test_observers_are_never_counted(tracker: Tracker) -> None:
    for observer in (4, 5, 6):
        tracker.record_fetch(observer, 10, leader_end=10, now_ms=110)
    assert tracker.quorum_end() == -1
    assert tracker.majority_contact_ms() == -1
    assert sorted(tracker.observers) == [4, 5, 6]
    assert sorted(tracker.voters) == [1, 2, 3]


def test_majority_contact_is_the_latest_time_a_majority_had_fetched(tracker: Tracker) -> None:
    tracker.record_fetch(2, 5, leader_end=10, now_ms=120)
    tracker.record_fetch(3, 5, leader_end=10, now_ms=150)
    tracker.record_leader_end(10, now_ms=200)
    assert tracker.majority_contact_ms() == 150


def test_contact_without_a_position_counts_for_voters_only(tracker: Tracker) -> None:
    tracker.record_contact(2, now_ms=130)
    tracker.record_contact(4, now_ms=130)
    assert tracker.voters[2].last_fetch_ms == 130 and tracker.voters[2].end_offset == -1
    assert 4 not in tracker.observers
    assert tracker.voters_silent_since(100) == [3]


def test_voters_silent_for_a_while_are_announced_to_again(tracker: Tracker) -> None:
    tracker.record_fetch(2, 5, leader_end=10, now_ms=100)
    tracker.record_fetch(3, 5, leader_end=10, now_ms=400)
    assert tracker.voters_silent_since(300) == [2]


def test_caught_up_only_at_the_leader_end(tracker: Tracker) -> None:
    progress = tracker.record_fetch(2, 9, leader_end=10, now_ms=120)
    assert progress.last_caught_up_ms == -1
    progress = tracker.record_fetch(2, 10, leader_end=10, now_ms=130)
    assert progress.last_caught_up_ms == 130


def test_successors_are_the_other_voters_most_caught_up_first(tracker: Tracker) -> None:
    assert tracker.successors() == (2, 3)
    tracker.record_fetch(3, 8, leader_end=10, now_ms=120)
    tracker.record_fetch(4, 10, leader_end=10, now_ms=120)  # an observer is never a successor
    assert tracker.successors() == (3, 2)


def _observe_beyond_the_bound(tracker: Tracker) -> int:
    """Observers 100, 101, ... fetch in turn, one more than the bound; returns the last id."""
    last = 100 + OBSERVERS_MAX
    for node_id in range(100, last + 1):
        tracker.record_fetch(node_id, 0, leader_end=10, now_ms=node_id)
    return last


def test_observers_are_bounded(tracker: Tracker) -> None:
    _observe_beyond_the_bound(tracker)
    assert len(tracker.observers) == OBSERVERS_MAX


def test_beyond_the_bound_the_stalest_observer_makes_room_for_the_newest(tracker: Tracker) -> None:
    newest = _observe_beyond_the_bound(tracker)
    assert newest in tracker.observers
    assert 100 not in tracker.observers
