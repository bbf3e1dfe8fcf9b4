"""The transition table: legal moves pass, everything else raises IllegalTransition;
and within one epoch, never a second leader."""

from __future__ import annotations

import itertools
import random

import pytest

from raftka.raft.config import RaftConfig
from raftka.raft.core import RaftCore
from raftka.raft.effects import QuorumStateData
from raftka.raft.messages import NO_LEADER, BeginQuorumEpochRequest, Envelope
from raftka.raft.roles import IllegalTransition, Role, check_transition
from raftka.raft.storage.base import LoadedState

U, P, C, L, R, F = (
    Role.UNATTACHED,
    Role.PROSPECTIVE,
    Role.CANDIDATE,
    Role.LEADER,
    Role.RESIGNED,
    Role.FOLLOWER,
)
# The table of raft/roles.py's docstring, restated: (from, to) -> the epoch change allowed.
SAME, NEXT, ANY_LATER = "same", "next", "same or later"
ALLOWED = {
    (U, P): SAME,
    (U, F): ANY_LATER,
    (U, U): ANY_LATER,
    (P, C): NEXT,
    (P, F): ANY_LATER,
    (P, U): ANY_LATER,
    (C, L): SAME,
    (C, F): ANY_LATER,
    (C, U): ANY_LATER,
    (L, R): SAME,
    (L, F): ANY_LATER,
    (L, U): ANY_LATER,
    (R, P): SAME,
    (R, F): ANY_LATER,
    (R, U): ANY_LATER,
    (F, P): SAME,
    (F, F): ANY_LATER,
    (F, U): ANY_LATER,
}
EPOCH_OK = {SAME: {5}, NEXT: {6}, ANY_LATER: {5, 6, 9}}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(Role, Role)))
def test_transitions_of_a_voter(current: Role, target: Role) -> None:
    rule = ALLOWED.get((current, target))
    for new_epoch in (4, 5, 6, 9):
        legal = rule is not None and new_epoch in EPOCH_OK[rule]
        if legal:
            check_transition(current, 5, target, new_epoch, is_voter=True)
        else:
            with pytest.raises(IllegalTransition):
                check_transition(current, 5, target, new_epoch, is_voter=True)


@pytest.mark.parametrize(
    ("current", "target", "new_epoch"), [(U, P, 5), (F, P, 5), (P, C, 6), (C, L, 5), (L, R, 5)]
)
def test_an_observer_never_campaigns_or_leads(current: Role, target: Role, new_epoch: int) -> None:
    with pytest.raises(IllegalTransition, match="observer"):
        check_transition(current, 5, target, new_epoch, is_voter=False)


@pytest.mark.parametrize(("current", "target"), [(U, F), (U, U), (F, F), (F, U)])
def test_an_observer_may_follow_and_wait(current: Role, target: Role) -> None:
    check_transition(current, 5, target, 6, is_voter=False)


def test_an_illegal_transition_is_an_assertion_error() -> None:
    assert issubclass(IllegalTransition, AssertionError)
    with pytest.raises(AssertionError, match="unattached -> leader"):
        check_transition(U, 5, L, 5, is_voter=True)


# One leader per epoch: once a node knows its epoch's leader, no transition in that epoch
# may name another. Leader and Resigned name the node itself.
LEADER_NAMING = [(F, F), (U, F), (P, F), (C, F), (R, F), (L, R), (C, L)]


@pytest.mark.parametrize(("current", "target"), LEADER_NAMING)
def test_within_an_epoch_another_leader_is_refused(current: Role, target: Role) -> None:
    with pytest.raises(IllegalTransition, match="epoch 5 is led by 2, not 3"):
        check_transition(current, 5, target, 5, is_voter=True, epoch_leader=2, new_leader=3)


@pytest.mark.parametrize(("current", "target"), LEADER_NAMING)
def test_within_an_epoch_its_own_leader_may_be_named_again(current: Role, target: Role) -> None:
    check_transition(current, 5, target, 5, is_voter=True, epoch_leader=2, new_leader=2)


@pytest.mark.parametrize(("current", "target"), [(U, F), (P, F), (C, F), (L, F), (R, F), (F, F)])
def test_a_newer_epoch_may_have_any_leader(current: Role, target: Role) -> None:
    check_transition(current, 5, target, 6, is_voter=True, epoch_leader=2, new_leader=3)


def test_the_first_leader_of_an_epoch_may_be_anyone() -> None:
    check_transition(U, 5, F, 5, is_voter=True, epoch_leader=NO_LEADER, new_leader=3)
    check_transition(U, 5, F, 5, is_voter=False, epoch_leader=NO_LEADER, new_leader=3)


def test_roles_without_a_leader_keep_the_epochs_leader_known() -> None:
    """Follower(2) -> Prospective -> Follower(3), all in epoch 5: the middle step names no
    leader, but the epoch still has one, so the last step is refused."""
    check_transition(F, 5, P, 5, is_voter=True, epoch_leader=2, new_leader=NO_LEADER)
    check_transition(P, 5, U, 5, is_voter=True, epoch_leader=2, new_leader=NO_LEADER)
    with pytest.raises(IllegalTransition):
        check_transition(P, 5, F, 5, is_voter=True, epoch_leader=2, new_leader=3)
    with pytest.raises(IllegalTransition):
        check_transition(U, 5, F, 5, is_voter=False, epoch_leader=2, new_leader=3)


def _follower_of_2_in_epoch_5_now_prospective() -> tuple[RaftCore, int]:
    config = RaftConfig()
    loaded = LoadedState(QuorumStateData(epoch=5, voted_id=NO_LEADER, leader_id=2), snapshot=None)
    core = RaftCore(1, frozenset({1, 2, 3}), "c", config, loaded, random.Random(1), now_ms=0)
    assert (core.role, core.epoch, core.leader_id) == (F, 5, 2)
    now = config.fetch_timeout_ms  # no answer from 2 for this long: the leader is lost
    core.poll(now)
    now = core.election_deadline_ms
    core.poll(now)
    assert (core.role, core.epoch, core.leader_id) == (P, 5, NO_LEADER)
    return core, now


def test_a_core_never_follows_a_second_leader_in_one_epoch() -> None:
    core, now = _follower_of_2_in_epoch_5_now_prospective()
    claim = Envelope(src=3, dst=1, msg=BeginQuorumEpochRequest(cluster_id="c", epoch=5, leader_id=3))
    with pytest.raises(IllegalTransition, match="epoch 5 is led by 2, not 3"):
        core.step(claim, now)


def test_a_core_follows_its_epochs_leader_again_after_campaigning() -> None:
    core, now = _follower_of_2_in_epoch_5_now_prospective()
    again = Envelope(src=2, dst=1, msg=BeginQuorumEpochRequest(cluster_id="c", epoch=5, leader_id=2))
    core.step(again, now)
    assert (core.role, core.epoch, core.leader_id) == (F, 5, 2)
