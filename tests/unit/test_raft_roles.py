"""The transition table: legal moves pass, everything else raises IllegalTransition."""

from __future__ import annotations

import itertools

import pytest

from raft.roles import IllegalTransition, Role, check_transition

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
