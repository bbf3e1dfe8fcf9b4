"""What a node keeps only while it holds one role (Kafka's ``EpochState`` classes), one
epoch, or one recovery.

``RaftCore`` builds a fresh role state on every transition (``raftka.raft.roles`` lists the
legal ones) and drops it when the role ends, so nothing a role kept can leak into the
next: a leader's parked fetches and replica tracker, a follower's fetch timers and
snapshot download, a campaign's votes. Likewise what it knows of an epoch's leader is
replaced with the epoch, and a recovering voter's bookkeeping goes once it may vote.
What outlives all of these stays on the core: the epoch, the vote, the log, the high
watermark, durability bookkeeping and the election timer.

These are plain records with no clock and no I/O: the core passes time in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from raftka.raft.batch import OffsetAndEpoch
from raftka.raft.messages import NO_LEADER, Envelope
from raftka.raft.roles import Role
from raftka.raft.tracker import Tracker, majority

NEVER = 1 << 62  # a deadline that never comes (a timer that is not armed)


@dataclass(slots=True)
class ParkedFetch:
    """A fetch the leader holds until there is news for it or its wait ends (long poll)."""

    envelope: Envelope
    deadline_ms: int


@dataclass(slots=True)
class SnapshotDownload:
    snapshot_id: OffsetAndEpoch
    data: bytearray


@dataclass(slots=True)
class Votes:
    """One round's tally (pre-vote or vote), the candidate's own vote included."""

    voter_count: int
    granted: set[int]
    rejected: set[int] = field(default_factory=set)

    def record(self, voter_id: int, granted: bool) -> None:
        (self.granted if granted else self.rejected).add(voter_id)

    def won(self) -> bool:
        return len(self.granted) >= majority(self.voter_count)

    def lost(self) -> bool:
        return len(self.rejected) > self.voter_count - majority(self.voter_count)


@dataclass(slots=True)
class UnattachedState:
    """No leader known in this epoch. A voter waits for its election timer; an observer,
    and a voter whose election failed, fetch from a voter picked at random until an answer
    names the leader (KIP-853)."""

    role: ClassVar[Role] = Role.UNATTACHED
    seeking_leader: bool = False  # a voter whose election failed: it fetches as an observer does
    fetch_retry_ms: int = 0  # backoff before the next leaderless fetch
    fetch_sent_ms: int | None = None  # a leaderless fetch in flight since then
    bootstrap_target: int = NO_LEADER  # the voter a leaderless fetch went to


@dataclass(slots=True)
class ProspectiveState:
    """Asking for pre-votes (KIP-996): nothing changes anywhere until a majority agrees."""

    role: ClassVar[Role] = Role.PROSPECTIVE
    votes: Votes


@dataclass(slots=True)
class CandidateState:
    """Asking for votes in the epoch it has just bumped to."""

    role: ClassVar[Role] = Role.CANDIDATE
    votes: Votes


@dataclass(slots=True)
class LeaderState:
    """Leading this epoch: every replica's progress, and the fetches waiting for news."""

    role: ClassVar[Role] = Role.LEADER
    tracker: Tracker
    epoch_start: int  # the log end when elected: no high watermark is exposed until past it
    since_ms: int  # when elected: check-quorum counts from here until a majority fetches
    begin_epoch_resend_ms: int  # when BeginQuorumEpoch next goes to voters that went quiet
    last_append_ms: int  # an idle leader appends a NoOp interval after its last batch
    # Fetches waiting for news, by replica id: at most one per voter; an observer id holds
    # more only while two processes share it (see RaftCore._on_fetch_request).
    parked: dict[int, list[ParkedFetch]] = field(default_factory=dict)


@dataclass(slots=True)
class ResignedState:
    """A leader that stepped down (shutdown, check-quorum, restart): it never leads this
    epoch again and waits for its election timer or a newer epoch."""

    role: ClassVar[Role] = Role.RESIGNED


@dataclass(slots=True)
class FollowerState:
    """Fetching from this epoch's leader."""

    role: ClassVar[Role] = Role.FOLLOWER
    last_fetch_ok_ms: int  # the leader is lost once it has not answered for fetch_timeout_ms
    leader_lost: bool = False  # the election timer runs; pre-votes are granted again
    unreachable_strikes: int = 0  # an observer's immediate send failures in a row (two: the leader is gone)
    fetch_retry_ms: int = 0  # backoff before the next fetch
    fetch_sent_ms: int | None = None  # a fetch in flight since then
    download: SnapshotDownload | None = None  # a snapshot being fetched chunk by chunk
    leader_high_watermark: int = -1  # the highest the leader sent in a fetch answer (-1: none yet)


RoleState = UnattachedState | ProspectiveState | CandidateState | LeaderState | ResignedState | FollowerState
FetchingState = UnattachedState | FollowerState  # the roles that send fetches (Unattached: see its doc)


@dataclass(slots=True)
class EpochLeadership:
    """What a node knows of its epoch's leader, across the roles it holds in that epoch."""

    leader: int = NO_LEADER  # once known, no other may lead this epoch (raftka.raft.roles)
    lost: int = NO_LEADER  # a leader we stopped following: peers may still name it; our election decides
    ended: int = NO_LEADER  # announced its resignation (EndQuorumEpoch)


@dataclass(slots=True)
class Recovery:
    """A voter with new or wiped storage, until it may vote again (see ``raftka.raft.core``)."""

    heard_epochs: dict[int, int] = field(default_factory=dict)  # each peer's highest epoch
    caught_up: bool = False  # holds everything the leader had committed when it last said
