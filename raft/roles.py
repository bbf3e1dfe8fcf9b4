"""Roles and the legal transitions between them (Kafka's QuorumState, with KIP-996 pre-vote).

    Unattached  -> Prospective (election timeout), Follower (leader learned),
                   Unattached (higher epoch)
    Prospective -> Candidate (majority of pre-votes), Follower (leader learned or
                   pre-vote lost with a leader known), Unattached (higher epoch, or
                   pre-vote lost with no leader known)
    Candidate   -> Leader (majority of votes), Follower (leader learned),
                   Unattached (higher epoch, or election lost: back off, then retry)
    Leader      -> Resigned (graceful shutdown or check-quorum failure),
                   Follower / Unattached (higher epoch)
    Resigned    -> Prospective (election timeout), Follower / Unattached (higher epoch)
    Follower    -> Prospective (leader lost), Follower (higher epoch, new leader),
                   Unattached (higher epoch, or the leader ended its epoch)

A node outside the voter set (an observer) is only ever Unattached or Follower: it
fetches but never campaigns or votes. Epochs: Prospective and Leader keep the epoch,
Candidate takes epoch + 1, Follower and Unattached take any epoch not below the
current one. An epoch has one leader: once a node knows it (it follows or is it), no
transition within that epoch may name another, not even after Prospective or
Unattached in between (Follower(L) -> Prospective -> Follower(M)). Anything else is a
bug and raises ``IllegalTransition``.
"""

from __future__ import annotations

import enum

from raftka.raft.messages import NO_LEADER


class Role(enum.Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"
    FOLLOWER = "follower"


class IllegalTransition(AssertionError):
    pass


LEGAL: dict[Role, frozenset[Role]] = {
    Role.UNATTACHED: frozenset({Role.PROSPECTIVE, Role.FOLLOWER, Role.UNATTACHED}),
    Role.PROSPECTIVE: frozenset({Role.CANDIDATE, Role.FOLLOWER, Role.UNATTACHED}),
    Role.CANDIDATE: frozenset({Role.LEADER, Role.FOLLOWER, Role.UNATTACHED}),
    Role.LEADER: frozenset({Role.RESIGNED, Role.FOLLOWER, Role.UNATTACHED}),
    Role.RESIGNED: frozenset({Role.PROSPECTIVE, Role.FOLLOWER, Role.UNATTACHED}),
    Role.FOLLOWER: frozenset({Role.PROSPECTIVE, Role.FOLLOWER, Role.UNATTACHED}),
}

OBSERVER_ROLES = frozenset({Role.UNATTACHED, Role.FOLLOWER})


def check_transition(
    current: Role,
    epoch: int,
    target: Role,
    new_epoch: int,
    *,
    is_voter: bool,
    epoch_leader: int = NO_LEADER,
    new_leader: int = NO_LEADER,
) -> None:
    """``epoch_leader``: the leader known for ``epoch`` (whatever the current role);
    ``new_leader``: the leader the target role names (Follower, Leader, Resigned)."""
    if target not in LEGAL[current]:
        raise IllegalTransition(f"{current.value} -> {target.value}")
    if not is_voter and target not in OBSERVER_ROLES:
        raise IllegalTransition(f"an observer cannot become {target.value}")
    if target is Role.CANDIDATE:
        ok = new_epoch == epoch + 1
    elif target in (Role.PROSPECTIVE, Role.LEADER, Role.RESIGNED):
        ok = new_epoch == epoch
    else:
        ok = new_epoch >= epoch
    if not ok:
        raise IllegalTransition(f"{current.value}@{epoch} -> {target.value}@{new_epoch}")
    if new_epoch == epoch and NO_LEADER not in (epoch_leader, new_leader) and new_leader != epoch_leader:
        raise IllegalTransition(
            f"{current.value}@{epoch} -> {target.value}@{new_epoch}: "
            f"epoch {epoch} is led by {epoch_leader}, not {new_leader}"
        )
