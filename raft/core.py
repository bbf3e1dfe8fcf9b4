"""RaftCore: the KRaft protocol as a plain, synchronous state machine.

Events go in (``step`` a message, ``poll`` the clock, ``propose`` records, ``persisted``
a write); what to do comes out of ``ready()`` (see ``raftka.raft.effects``). The core reads no
clock, does no I/O and draws randomness only from the ``random.Random`` it is given, so
the same state and inputs give the same outputs: the simulator relies on that.

The protocol is Kafka's KRaft, pull-based:

- Vote (with pre_vote, KIP-996): a voter without a live leader first asks for
  pre-votes, which change nothing on the receiver; only with a majority of them does it
  bump the epoch and ask for real votes. A voter that still hears its leader refuses
  pre-votes, so a node that was cut off cannot disrupt a healthy leader.
- BeginQuorumEpoch: a new leader announces itself; followers then fetch from it.
- Fetch: the follower pulls from its fetch offset; the offset is also its durable log
  end, which is how the leader learns acknowledgements. A fetch that would return
  nothing is parked up to ``fetch_max_wait_ms`` (long poll). A position the leader does
  not share is answered with the diverging epoch and its end offset (the follower
  truncates there) or, below the leader's log start, with the snapshot to download.
- EndQuorumEpoch: a resigning leader names its most caught-up voters as successors,
  so a planned move takes one round trip instead of an election timeout.

The high watermark is the largest offset a majority of voters hold durably. A new
leader first appends a LeaderChange batch and exposes no high watermark until that
batch commits. A voter whose storage is empty (new or wiped disk) grants no vote until
it has heard every other voter's epoch and caught up, and then only in later epochs:
it may have voted, and acknowledged data, before it lost its disk.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch
from raftka.raft.config import RaftConfig
from raftka.raft.effects import QuorumStateData, Ready, Snapshot, Write
from raftka.raft.log import RaftLog
from raftka.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from raftka.raft.role_state import (
    CandidateState,
    EpochLeadership,
    FetchingState,
    FollowerState,
    LeaderState,
    ParkedFetch,
    ProspectiveState,
    Recovery,
    ResignedState,
    RoleState,
    SnapshotDownload,
    UnattachedState,
    Votes,
)
from raftka.raft.roles import Role, check_transition
from raftka.raft.storage.base import LoadedState
from raftka.raft.tracker import Tracker
from raftka.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    NO_DIRECTORY,
    ChangeRefusal,
    Voter,
    VoterChangeError,
    VoterHistory,
    VoterSet,
    encode_kraft_version,
)


class NotLeaderError(Exception):
    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader is {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


@dataclass(frozen=True, slots=True)
class ReplicaState:
    node_id: int
    log_end_offset: int  # -1 when never fetched
    last_fetch_ms: int  # core clock (monotonic ms); -1 when never
    last_caught_up_ms: int  # core clock; -1 when never
    directory_id: str = ""  # the storage it fetched with (a voter's: its own, KIP-853)


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    leader_id: int
    leader_epoch: int
    high_watermark: int  # -1 until the leader's epoch has committed
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


NEVER = 1 << 62
VOTER_CATCH_UP_LAG_MAX = 1000  # records an observer may trail the high watermark and still be added
SUPERSEDED_SNAPSHOTS_MAX = 3  # bound: older snapshots kept servable for downloads under way
PARKED_PER_OBSERVER_MAX = 4  # bound: fetches parked at once under one observer id


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int] | VoterSet,
        cluster_id: str,
        config: RaftConfig,
        loaded: LoadedState,
        rng: random.Random,
        now_ms: int,
        wall_offset_ms: int = 0,
        *,
        directory_id: str = NO_DIRECTORY,
    ) -> None:
        """``voters``: the configured static set (node ids), or the bootstrap VoterSet a
        dynamic quorum was formatted with; the log's VotersRecords override either."""
        assert voters, "the voter set is never empty"
        self.node_id = node_id
        self.directory_id = directory_id
        bootstrap = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        self._bootstrap_voters = bootstrap
        self.cluster_id = cluster_id
        self.cfg = config
        self.rng = rng
        self.wall_offset_ms = wall_offset_ms  # wall clock minus core clock, for timestamps
        self._now = now_ms
        self.fatal_error: str | None = None
        self.foreign_peers: set[int] = set()  # peers that refused our cluster id
        # Fetches that found another from the same observer id still parked, and the last
        # such id: two processes configured with one node id (see _on_fetch_request).
        self.observer_fetch_overlaps = 0
        self.overlapping_observer_id = NO_LEADER
        # Elections, for the metrics: an election runs from the first campaign until a
        # leader is known; when the running one began (-1: none), how many ended, the last one's length.
        self.election_started_ms = -1
        self.elections_ended = 0
        self.last_election_ms = 0

        self.log = RaftLog(loaded.snapshot, loaded.batches)
        self._voter_history = VoterHistory(self._snapshot_voters(loaded.snapshot))
        for batch in self.log.batches_between(self.log.start_offset, self.log.end_offset):
            self._note_voters(batch)
        state = loaded.quorum_state
        self.epoch = state.epoch
        self.voted_id = state.voted_id
        self.leader_id = NO_LEADER
        self._hw = self.log.start_offset
        self._applied = self.log.start_offset

        # durability bookkeeping: one write in flight, later changes pending behind it
        self._next_write_id = 1
        self._inflight: Write | None = None
        self._inflight_handed_out = True
        self._inflight_end = 0
        self._durable_end = self.log.end_offset
        self._pending_state: QuorumStateData | None = None
        self._pending_install: Snapshot | None = None
        self._pending_truncate: int | None = None
        self._pending_appends: list[Batch] = []
        self._held: list[tuple[int, Envelope]] = []
        self._outbox: list[Envelope] = []
        self._committed_out: list[Batch] = []
        self._restore_out: Snapshot | None = loaded.snapshot
        self._persisted_state = state

        # elections, across roles: the timer (armed in every role but Leader) and the
        # failures that widen the next round's window until a leader is heard from
        self._election_deadline = NEVER
        self._failed_elections = 0
        # Snapshots replaced by a newer one stay servable a while, so a download that began
        # just before cannot be outrun by a leader that snapshots faster than it downloads.
        self._superseded: dict[OffsetAndEpoch, tuple[Snapshot, int]] = {}  # id -> (snapshot, expiry)

        # Our latest fetch's id: only its answer completes it, whatever role we are in by then.
        self._next_rpc_id = 0
        self._fetch_rpc_id = -1
        # a voter with new or wiped storage must not vote until it is safe (see module doc)
        # (not in a dynamic quorum: there a replaced disk has a new directory id, so it is no voter)
        recovering = self.is_voter and not self.voter_set.dynamic and len(voters) > 1 and state.recovering
        self._recovery: Recovery | None = Recovery() if recovering else None

        # the role, with state of its own (raftka.raft.role_state), and what we know of this
        # epoch's leader whatever our role
        self._state: RoleState
        if state.leader_id == node_id and self.may_campaign:
            self._state = ResignedState()  # leadership is never resumed after a restart
            self.leader_id = node_id
            self._election_deadline = now_ms + self._election_timeout()
        elif state.leader_id >= 0 and state.leader_id != node_id:  # (ours: we led, then were removed)
            self._state = FollowerState(last_fetch_ok_ms=now_ms)
            self.leader_id = state.leader_id
        else:
            self._state = UnattachedState()
            self._election_deadline = now_ms + self._election_timeout() if self.may_campaign else NEVER
        self._leadership = EpochLeadership(leader=self.leader_id)
        if self._recovery is not None:
            self._ask_peers_for_epochs()

    # ==================================================================================
    # introspection
    # ==================================================================================
    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in effect: the latest VotersRecord in the log, committed or not."""
        return self._voter_history.latest()

    @property
    def voters(self) -> frozenset[int]:
        return self._voter_history.latest().ids

    @property
    def is_voter(self) -> bool:
        return self._voter_history.latest().includes(self.node_id, self.directory_id)

    @property
    def may_campaign(self) -> bool:
        """A voter, or one that an uncommitted VotersRecord removes: it may still be needed to
        elect a leader until that record commits, so it may still campaign (Ongaro's
        dissertation, 4.2.2), though it counts no vote of its own."""
        if self.is_voter:
            return True
        history = self._voter_history
        latest = history.latest_offset()
        return latest >= self._hw and history.at(latest).includes(self.node_id, self.directory_id)

    def snapshot_with_voters(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` (of the layer above, at a committed offset) with raft's voter set at it."""
        voters = self._voter_history.at(snapshot.id.offset)
        encoded = voters.encode() if voters.dynamic else b""
        return Snapshot(snapshot.id, snapshot.data, encoded)

    @property
    def election_deadline_ms(self) -> int:
        """When this node campaigns (or gives up its campaign) unless it hears a leader."""
        return self._election_deadline

    @property
    def role_name(self) -> str:
        # a leader removing itself leads, without counting itself, until the change commits
        return self.role.value if self.may_campaign or self.role is Role.LEADER else "observer"

    @property
    def high_watermark(self) -> int:
        """This node's committed offset (exclusive). Never decreases while it runs."""
        return self._hw

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.start_offset

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def recovering(self) -> bool:
        """A voter with new or wiped storage that may not vote yet (see the module doc)."""
        return self._recovery is not None

    @property
    def leader_high_watermark(self) -> int:
        """The high watermark this epoch's leader last sent, while it is live; -1 otherwise."""
        state = self._state
        if isinstance(state, FollowerState) and not state.leader_lost:
            return state.leader_high_watermark
        return -1

    def exposed_high_watermark(self) -> int:
        """What a leader tells others: nothing until its own epoch has committed."""
        state = self._state
        if isinstance(state, LeaderState) and self._hw <= state.epoch_start:
            return -1
        return self._hw

    def describe(self) -> QuorumDescription:
        state = self._state
        if not isinstance(state, LeaderState):
            return QuorumDescription(
                leader_id=self.leader_id, leader_epoch=self.epoch, high_watermark=-1, voters=(), observers=()
            )

        def states(progress: dict) -> tuple[ReplicaState, ...]:
            return tuple(
                ReplicaState(
                    node_id=p.node_id,
                    log_end_offset=p.end_offset,
                    last_fetch_ms=p.last_fetch_ms,
                    last_caught_up_ms=p.last_caught_up_ms,
                    directory_id=p.directory_id,
                )
                for _, p in sorted(progress.items())
            )

        return QuorumDescription(
            leader_id=self.node_id,
            leader_epoch=self.epoch,
            high_watermark=self.exposed_high_watermark(),
            voters=states(state.tracker.voters),
            observers=states(state.tracker.observers),
        )

    # ==================================================================================
    # events
    # ==================================================================================
    def step(self, envelope: Envelope, now_ms: int) -> None:
        """Take one message: what every message teaches (a foreign cluster, a recovering
        voter's peers' epochs, a newer epoch or a leader) first, then its handler."""
        self._now = now_ms
        if self.fatal_error is not None:
            return
        msg = envelope.msg
        if getattr(msg, "error", None) is Error.INCONSISTENT_CLUSTER_ID:
            self._on_foreign_peer(envelope.src)
            return
        self._hear(envelope.src, msg)
        if isinstance(msg, Response):
            self._observe(msg.epoch, msg.leader_id)
        elif not self._admit(envelope):
            return
        self._HANDLERS[type(msg)](self, envelope)

    def unreachable(self, peer_id: int, now_ms: int) -> None:
        """A request to ``peer_id`` failed at once: its process is gone or restarting."""
        self._now = now_ms
        state = self._fetching_state()
        if state is None:
            return
        target = self.leader_id if isinstance(state, FollowerState) else state.bootstrap_target
        if peer_id != target:
            return
        state.fetch_sent_ms = None
        if isinstance(state, UnattachedState):
            state.bootstrap_target = NO_LEADER
            state.fetch_retry_ms = now_ms + self.cfg.election_timeout_ms
            return
        retry_ms = max(1, self.cfg.election_timeout_ms // 10)
        if self.is_voter:
            # The leader's process is most likely gone (its connections reset): campaign
            # now rather than after a timeout. Safe if it is not: the pre-vote is refused
            # by every voter that still hears it, and a fetch that gets through meanwhile
            # takes the loss back.
            self._on_leader_lost(self._succession_delay())
            self._retry_fetch_after(retry_ms)
            return
        # An observer: one failure can be a stale connection to a leader that is back; two
        # in a row, a moment apart, mean it is gone.
        state.unreachable_strikes += 1
        if state.unreachable_strikes >= 2:
            self._on_leader_lost()  # unattached from here on: back off there
            self._retry_fetch_after(self.cfg.election_timeout_ms)
        else:
            state.fetch_retry_ms = now_ms + retry_ms

    def poll(self, now_ms: int) -> int:
        """Run whatever is due; return how long until the core next needs a poll."""
        self._now = now_ms
        if self.fatal_error is not None:
            return NEVER
        if isinstance(self._state, LeaderState):
            self._poll_leader()
        elif (fetching := self._fetching_state()) is not None:
            self._poll_follower(fetching)
        role = self.role  # as the polls above may have left it
        if role in (Role.UNATTACHED, Role.RESIGNED, Role.FOLLOWER) and self.may_campaign:
            if now_ms >= self._election_deadline:
                self._become_prospective()
        elif role in (Role.PROSPECTIVE, Role.CANDIDATE) and now_ms >= self._election_deadline:
            self._election_lost()
        return max(0, self._next_deadline() - now_ms)

    def propose(self, records: Sequence[bytes], now_ms: int) -> OffsetAndEpoch:
        """Append one atomic batch; returns its base offset and epoch. Leader only."""
        self._now = now_ms
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id, self.epoch)
        if not records:
            raise ValueError("records: at least one record is required")
        if len(records) > self.cfg.append_max_records:
            raise ValueError(f"records: at most {self.cfg.append_max_records} records in one batch")
        batch = self._append(BatchKind.DATA, tuple(records))
        return OffsetAndEpoch(offset=batch.base_offset, epoch=batch.epoch)

    def persisted(self, write_id: int, now_ms: int) -> None:
        """The driver made write ``write_id`` durable: release what waited for it."""
        self._now = now_ms
        assert self._inflight is not None and self._inflight.write_id == write_id, write_id
        self._inflight = None
        self._durable_end = self._inflight_end
        still_held = []
        for tag, envelope in self._held:
            if tag <= write_id:
                self._outbox.append(envelope)
            else:
                still_held.append((tag, envelope))
        self._held = still_held
        if isinstance(self._state, LeaderState):
            self._leader_progress()

    def snapshot_saved(self, snapshot: Snapshot) -> None:
        """The layer above saved its state at a committed offset: drop the log below it."""
        sid = snapshot.id
        assert sid.offset <= self._applied, (sid, self._applied)
        if self.log.snapshot is not None and sid.offset <= self.log.snapshot.id.offset:
            return
        if sid.offset > self.log.start_offset:
            last = self.log.batch_at(sid.offset - 1)
            assert last is not None and last.next_offset == sid.offset and last.epoch == sid.epoch, sid
        if self.log.snapshot is not None:
            self._keep_servable(self.log.snapshot)
            if len(self._superseded) > SUPERSEDED_SNAPSHOTS_MAX:
                oldest = min(self._superseded, key=lambda s: self._superseded[s][1])
                del self._superseded[oldest]
        self.log.compact(snapshot)
        self._voter_history.compact(sid.offset)

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: hand over to the most caught-up voters."""
        self._now = now_ms
        if not isinstance(self._state, LeaderState):
            return
        successors = self._state.tracker.successors()
        self._step_down()
        req = EndQuorumEpochRequest(
            cluster_id=self.cluster_id,
            epoch=self.epoch,
            leader_id=self.node_id,
            preferred_successors=successors,
        )
        for voter in successors:
            self._send(voter, req)

    def _step_down(self) -> None:
        """Leave leadership of this epoch; a leader no longer in the voter set (it removed
        itself) waits as an observer instead of resigned."""
        if self.may_campaign:
            self._transition(ResignedState(), self.epoch, leader_id=self.node_id)
            self._election_deadline = self._now + self._election_timeout()
        else:
            self._become_unattached(self.epoch)

    # ==================================================================================
    # voter changes (KIP-853)
    # ==================================================================================
    def add_voter(self, voter: Voter, now_ms: int) -> OffsetAndEpoch:
        """Append a VotersRecord adding ``voter``, a caught-up observer fetching with its
        directory id. Raises NotLeaderError or VoterChangeError."""
        self._now = now_ms
        leader = self._voter_change_leader()
        current = self.voter_set
        if not voter.directory_id:
            raise VoterChangeError(ChangeRefusal.INVALID_REQUEST, f"node {voter.node_id}")
        if voter.node_id in current.ids:
            raise VoterChangeError(ChangeRefusal.DUPLICATE_VOTER, f"node {voter.node_id}")
        progress = leader.tracker.observers.get(voter.node_id)
        caught_up = (
            progress is not None
            and progress.directory_id == voter.directory_id
            and now_ms - progress.last_fetch_ms <= self.cfg.fetch_timeout_ms
            and progress.end_offset >= self._hw - VOTER_CATCH_UP_LAG_MAX
        )
        if not caught_up:
            raise VoterChangeError(ChangeRefusal.NOT_CAUGHT_UP, f"node {voter.node_id}")
        return self._change_voters(current.with_voter(voter))

    def remove_voter(self, node_id: int, directory_id: str, now_ms: int) -> OffsetAndEpoch:
        """Append a VotersRecord without the voter (``node_id``, ``directory_id``); the leader
        may remove itself: it then leads, not counting itself, until the record commits."""
        self._now = now_ms
        self._voter_change_leader()
        current = self.voter_set
        voter = current.get(node_id)
        if voter is None or voter.directory_id != directory_id:
            raise VoterChangeError(
                ChangeRefusal.VOTER_NOT_FOUND, f"node {node_id} directory {directory_id!r}"
            )
        if len(current) == 1:
            raise VoterChangeError(ChangeRefusal.LAST_VOTER, f"node {node_id}")
        return self._change_voters(current.without(node_id))

    def update_voter(self, voter: Voter, now_ms: int) -> OffsetAndEpoch:
        """Append a VotersRecord with a voter's new endpoints (same node and directory id)."""
        self._now = now_ms
        self._voter_change_leader()
        current = self.voter_set
        known = current.get(voter.node_id)
        if known is None or known.directory_id != voter.directory_id:
            raise VoterChangeError(
                ChangeRefusal.VOTER_NOT_FOUND, f"node {voter.node_id} directory {voter.directory_id!r}"
            )
        return self._change_voters(current.without(voter.node_id).with_voter(voter))

    def _voter_change_leader(self) -> LeaderState:
        """One change at a time (Raft's single-server rule), and only once this leader has
        committed in its own epoch (the fix in Ongaro's dissertation, as Kafka does): a
        change appended before then could overlap one a previous leader left uncommitted."""
        if not isinstance(self._state, LeaderState):
            raise NotLeaderError(self.leader_id, self.epoch)
        if not self.voter_set.dynamic:
            raise VoterChangeError(ChangeRefusal.STATIC_QUORUM)
        if self._voter_history.latest_offset() >= self._hw or self.exposed_high_watermark() < 0:
            raise VoterChangeError(ChangeRefusal.CHANGE_IN_PROGRESS)
        return self._state

    def _change_voters(self, voters: VoterSet) -> OffsetAndEpoch:
        batch = self._append(BatchKind.VOTERS, (encode_kraft_version(KRAFT_VERSION_DYNAMIC), voters.encode()))
        self._leader().tracker.set_voters(self.voters)
        return OffsetAndEpoch(offset=batch.base_offset, epoch=batch.epoch)

    def _note_voters(self, batch: Batch) -> None:
        """A batch entered the log: a VotersRecord takes effect at once, committed or not."""
        if batch.kind is not BatchKind.VOTERS:
            return
        try:
            voters = VoterSet.decode(batch.records[-1])
        except ValueError as exc:
            self.fatal_error = f"batch at {batch.base_offset}: {exc}"
            return
        self._voter_history.append(batch.base_offset, voters)

    def _snapshot_voters(self, snapshot: Snapshot | None) -> VoterSet:
        if snapshot is None or not snapshot.voters:
            return self._bootstrap_voters
        return VoterSet.decode(snapshot.voters)

    def _voters_changed(self, was_voter: bool) -> None:
        """A fetched, truncated or installed log changed the voter set: a node just made a
        voter starts its election timer (it may have to campaign); one just removed waits."""
        if self.may_campaign and not was_voter and self.role is Role.UNATTACHED:
            self._election_deadline = self._now + self._election_timeout()
        elif was_voter and not self.may_campaign:
            self._election_deadline = NEVER

    def ready(self) -> Ready:
        self._issue_write()
        self._maybe_fetch()
        ready = Ready(
            write=None,
            send=self._outbox,
            committed=self._committed_out,
            restore=self._restore_out,
        )
        if self._inflight is not None and not self._inflight_handed_out:
            ready.write = self._inflight
            self._inflight_handed_out = True
        self._outbox = []
        self._committed_out = []
        self._restore_out = None
        return ready

    # ==================================================================================
    # transitions
    # ==================================================================================
    def _transition(self, state: RoleState, epoch: int, *, leader_id: int = NO_LEADER) -> None:
        """Enter a role with fresh state of its own; what the previous role kept goes with it."""
        check_transition(
            self.role,
            self.epoch,
            state.role,
            epoch,
            is_voter=self.may_campaign,
            epoch_leader=self._leadership.leader,
            new_leader=leader_id,
        )
        previous = self._state
        if epoch > self.epoch:
            self.voted_id = NO_LEADER
            self._leadership = EpochLeadership()
        if leader_id != NO_LEADER:
            self._leadership.leader = leader_id
        self._state = state
        self.epoch = epoch
        self.leader_id = leader_id
        self._time_election(state.role, leader_id)
        self._persist_state()
        if isinstance(previous, LeaderState):
            self._abandon_leadership(previous)

    def _time_election(self, role: Role, leader_id: int) -> None:
        if role in (Role.PROSPECTIVE, Role.CANDIDATE) and self.election_started_ms < 0:
            self.election_started_ms = self._now
        elif leader_id != NO_LEADER and self.election_started_ms >= 0:
            self.last_election_ms = self._now - self.election_started_ms
            self.elections_ended += 1
            self.election_started_ms = -1

    def _unattached_state(self) -> UnattachedState:
        """An observer that loses its leader keeps backing off a fetch that failed: the
        voters it now asks at random are likely no easier to reach."""
        previous = self._fetching_state()
        return UnattachedState(fetch_retry_ms=previous.fetch_retry_ms if previous is not None else 0)

    def _become_unattached(self, epoch: int, election_delay_ms: int | None = None) -> None:
        self._transition(self._unattached_state(), epoch)
        delay = self._election_timeout() if election_delay_ms is None else election_delay_ms
        self._election_deadline = self._now + delay if self.may_campaign else NEVER

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        assert leader_id != self.node_id
        self._transition(FollowerState(last_fetch_ok_ms=self._now), epoch, leader_id=leader_id)
        self._election_deadline = NEVER

    def _become_prospective(self) -> None:
        if self._recovery is not None:
            self._election_deadline = self._now + self._election_timeout()
            self._ask_peers_for_epochs()
            return
        self._leadership.lost = self.leader_id if self.leader_id != self.node_id else NO_LEADER
        self._transition(ProspectiveState(votes=self._new_votes()), self.epoch)
        self._election_deadline = self._now + self._election_window()
        self._campaign(pre_vote=True)

    def _become_candidate(self) -> None:
        self._transition(CandidateState(votes=self._new_votes()), self.epoch + 1)
        self.voted_id = self.node_id
        self._persist_state()
        self._election_deadline = self._now + self._election_window()
        self._campaign(pre_vote=False)

    def _new_votes(self) -> Votes:
        return Votes(voter_count=len(self.voters), granted={self.node_id} if self.is_voter else set())

    def _become_leader(self) -> None:
        tracker = Tracker(leader_id=self.node_id, voters=self.voters, now_ms=self._now)
        tracker.leader.directory_id = self.directory_id
        tracker.record_leader_end(self._durable_end, self._now)
        state = LeaderState(
            tracker=tracker,
            epoch_start=self.log.end_offset,
            since_ms=self._now,
            begin_epoch_resend_ms=self._now + 2 * self.cfg.election_timeout_ms,
            last_append_ms=self._now,
        )
        self._transition(state, self.epoch, leader_id=self.node_id)
        self._failed_elections = 0
        self._election_deadline = NEVER
        self._append(
            BatchKind.LEADER_CHANGE, (control.encode_leader_change(self.node_id, self.voters, self.epoch),)
        )
        # Not held for the write: the epoch and our vote are on disk since we campaigned,
        # and the LeaderChange batch counts toward the high watermark only once durable.
        # The followers fetch it while we write it.
        history = self._voter_history
        if self.voter_set.dynamic and history.latest_offset() < 0 and history.base is self._bootstrap_voters:
            # the formatted bootstrap set goes into the log, so replicas formatted without
            # one (observers, controllers to be added) learn it (Kafka does the same)
            self._change_voters(self._bootstrap_voters)
        for voter in sorted(self.voters - {self.node_id}):
            self._send(voter, self._begin_quorum_epoch())

    def _abandon_leadership(self, leader: LeaderState) -> None:
        """Parked fetches are answered at once: their replicas must look for the new leader."""
        for waiting in leader.parked.values():
            for fetch in waiting:
                self._reply(fetch.envelope, self._fetch_error(Error.NOT_LEADER))

    # ==================================================================================
    # elections
    # ==================================================================================
    def _campaign(self, *, pre_vote: bool) -> None:
        assert isinstance(self._state, ProspectiveState | CandidateState)
        if self._state.votes.won():
            self._election_won()
            return
        epoch = self.epoch + 1 if pre_vote else self.epoch
        for voter in self.voter_set.voters():
            if voter.node_id == self.node_id:
                continue
            request = VoteRequest(
                cluster_id=self.cluster_id,
                candidate_epoch=epoch,
                candidate_id=self.node_id,
                last_epoch=self.log.last_epoch,
                log_end_offset=self.log.end_offset,
                pre_vote=pre_vote,
                candidate_directory_id=self.directory_id,
                voter_directory_id=voter.directory_id,
            )
            self._send(voter.node_id, request, durable=not pre_vote)

    def _election_won(self) -> None:
        if self.role is Role.PROSPECTIVE:
            self._become_candidate()
        else:
            self._become_leader()

    def _election_lost(self) -> None:
        """Back off (exponentially, randomized) and go back to waiting."""
        self._failed_elections += 1
        self._stand_aside(self._backoff())
        if isinstance(self._state, UnattachedState):
            # No leader found and none elected: look for one as an observer does (KIP-853).
            # A voter stranded in a newer epoch than the quorum's (its vote requests were
            # lost; or it was removed, so no leader announces itself to it) is refused by
            # voters that still follow their leader, in an epoch it cannot go back to; its
            # fetch tells a stale leader the newer epoch, and the leader steps down.
            self._state.seeking_leader = True

    def _stand_aside(self, delay_ms: int) -> None:
        if self.role is Role.PROSPECTIVE and self._leadership.lost != NO_LEADER:
            self._become_follower(self.epoch, self._leadership.lost)
            self._follower().leader_lost = True
            self._election_deadline = self._now + delay_ms
        else:
            self._become_unattached(self.epoch, delay_ms)

    def _on_vote_request(self, env: Envelope) -> None:
        req: VoteRequest = env.msg  # type: ignore[assignment]
        log_ok = (req.last_epoch, req.log_end_offset) >= (self.log.last_epoch, self.log.end_offset)
        may_vote = (
            self._votes_for(req)
            and self._may_elect(req)
            and req.voter_directory_id in (NO_DIRECTORY, self.directory_id)
            and self._recovery is None
            and log_ok
        )
        if req.pre_vote:
            granted = may_vote and req.candidate_epoch > self.epoch and not self._has_live_leader()
            self._reply(env, self._vote_response(Error.NONE, granted=granted, pre_vote=True))
            if granted and self.role is Role.PROSPECTIVE and req.candidate_id < self.node_id:
                # Two voters that noticed the loss together would split the vote; the lower id
                # goes first and this one stands aside (it campaigns later if that fails).
                self._stand_aside(self._election_timeout())
            elif granted and self.role in (Role.UNATTACHED, Role.FOLLOWER, Role.RESIGNED):
                # Nor does one whose timer is about to fire campaign against the voter it has
                # just encouraged: that one gets an election timeout to win first.
                self._election_deadline = max(self._election_deadline, self._now + self._election_timeout())
            return
        granted = (
            may_vote
            and self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self.voted_id in (NO_LEADER, req.candidate_id)
        )
        if granted:
            if self.role is Role.PROSPECTIVE:
                self._transition(self._unattached_state(), self.epoch)
            self.voted_id = req.candidate_id
            self._persist_state()
            # (a replica voting though its log says it is no voter never campaigns)
            self._election_deadline = self._now + self._election_timeout() if self.may_campaign else NEVER
        self._reply(env, self._vote_response(Error.NONE, granted=granted, pre_vote=False), durable=True)

    def _on_vote_response(self, env: Envelope) -> None:
        resp: VoteResponse = env.msg  # type: ignore[assignment]
        state = self._state
        expected = ProspectiveState if resp.pre_vote else CandidateState
        if not isinstance(state, expected) or env.src not in self.voters:
            return
        if not resp.pre_vote and resp.epoch != self.epoch:
            return  # a pre-vote counts from any epoch: it only asks whether a leader is alive
        state.votes.record(env.src, resp.vote_granted)
        if state.votes.won():
            self._election_won()
        elif state.votes.lost():
            self._election_lost()

    def _votes_for(self, req: VoteRequest) -> bool:
        """A voter votes; so does a replica the candidate names as its voter (this very
        storage) though our own log says otherwise: a leader that removed us may have lost
        its leadership before the change committed, and the candidate, whose log lacks the
        change, cannot be elected without us (Raft answers votes whatever its configuration);
        or it has just added us and our log (maybe still empty) does not say so yet."""
        if self.is_voter:
            return True
        return req.voter_directory_id == self.directory_id != NO_DIRECTORY

    def _may_elect(self, req: VoteRequest) -> bool:
        """A static quorum's candidate must be one of its voters. A dynamic quorum's (it
        names its storage) may be one our log does not name yet (just added): the candidate
        counts only votes of its own voter set, and our log check keeps a stale one out
        (KIP-853); but never another storage under a voter's id (a replaced disk)."""
        known = self.voter_set.get(req.candidate_id)
        if not req.candidate_directory_id:
            return known is not None
        return known is None or known.directory_id in (NO_DIRECTORY, req.candidate_directory_id)

    def _has_live_leader(self) -> bool:
        state = self._state
        if isinstance(state, LeaderState):
            return True
        return isinstance(state, FollowerState) and not state.leader_lost

    # ==================================================================================
    # epoch announcements
    # ==================================================================================
    def _on_begin_quorum_epoch(self, env: Envelope) -> None:
        req: BeginQuorumEpochRequest = env.msg  # type: ignore[assignment]
        if self._leadership.ended == req.leader_id:
            # It resigned before this announcement reached us: following it would wait out a timeout.
            self._reply(env, self._begin_quorum_epoch_response(Error.NONE))
            return
        if self.leader_id != req.leader_id:
            self._become_follower(self.epoch, req.leader_id)  # IllegalTransition if another leads it
        self._reply(env, self._begin_quorum_epoch_response(Error.NONE), durable=True)

    def _on_end_quorum_epoch(self, env: Envelope) -> None:
        req: EndQuorumEpochRequest = env.msg  # type: ignore[assignment]
        self._leadership.ended = req.leader_id
        # Our leader resigned, or one we never heard announce itself (its epoch may be the
        # newer one that step has just left us unattached in).
        resigned = (self.role is Role.FOLLOWER and self.leader_id == req.leader_id) or (
            self.role is Role.UNATTACHED and self.leader_id == NO_LEADER
        )
        if resigned:
            # The first named successor campaigns at once; the others give it a head start.
            successors = [s for s in req.preferred_successors if s in self.voters]
            position = successors.index(self.node_id) if self.node_id in successors else len(successors)
            delay = position * self.cfg.election_timeout_ms
            if position > 0 or not self.may_campaign:
                delay += self._election_timeout()
            self._become_unattached(self.epoch, delay)
        self._reply(env, self._end_quorum_epoch_response(Error.NONE))

    def _on_epoch_response(self, env: Envelope) -> None:
        """All an answer to BeginQuorumEpoch or EndQuorumEpoch teaches is an epoch and a
        leader, learned in ``step``."""

    # ==================================================================================
    # leader
    # ==================================================================================
    def _on_fetch_request(self, env: Envelope) -> None:
        """Answer a fetch at once, or park it until there is news (long poll).

        A replica fetches again only once its previous fetch was answered or timed out, so
        a voter's parked fetch is one it has given up on: it is answered at once and the
        new one parks in its place (one parked fetch per voter). Observers are not told
        apart by anything but their id (Kafka adds a directory id; raftka has none), and
        two processes configured with one id (two brokers given the same node_id) each
        keep a fetch here. Answering one because the other fetched would make each re-fetch
        at once and answer the other's in turn: a ping-pong as fast as the network goes.
        So an observer's fetches park side by side, as in Kafka's fetch purgatory: each
        process gets its own answers and the leader stays calm. The overlap is counted and
        the driver warns naming the id; refusing the second process is left to the layer
        that knows what the id means (a broker's registration), not to the log.
        """
        req: FetchRequest = env.msg  # type: ignore[assignment]
        leader = self._leader()
        validation = self.log.validate_fetch(req.fetch_offset, req.last_fetched_epoch)
        if not validation.valid:
            if self._fetches_as_voter(req):  # (another storage under a voter's id is not it)
                leader.tracker.record_contact(req.replica_id, self._now)
            self._reply(
                env,
                FetchResponse(
                    error=Error.NONE,
                    epoch=self.epoch,
                    leader_id=self.node_id,
                    high_watermark=self.exposed_high_watermark(),
                    log_start_offset=self.log.start_offset,
                    diverging=validation.diverging,
                    snapshot_id=validation.snapshot_id,
                ),
            )
            return
        if req.fetch_offset > self.log.end_offset:
            self._reply(env, self._fetch_error(Error.INVALID_REQUEST))
            return
        as_voter = self._fetches_as_voter(req)
        leader.tracker.record_fetch(
            req.replica_id,
            req.fetch_offset,
            self.log.end_offset,
            self._now,
            directory_id=req.replica_directory_id,
            as_voter=as_voter,
        )
        if as_voter:
            for previous in leader.parked.pop(req.replica_id, ()):
                self._answer_fetch(previous.envelope)
        elif leader.parked.get(req.replica_id):
            self.observer_fetch_overlaps += 1
            self.overlapping_observer_id = req.replica_id
        # Advance the high watermark before parking: the fetch that moved it stays parked,
        # ready for the next append, instead of coming back at once just to carry the news.
        self._leader_progress()
        if req.max_wait_ms == 0 or req.fetch_offset < self._readable_end(req):
            self._answer_fetch(env)
        else:
            self._park(leader, env, req.replica_id, min(req.max_wait_ms, self.cfg.fetch_max_wait_ms))

    def _fetches_as_voter(self, req: FetchRequest) -> bool:
        """A fetch is a voter's only from its own storage (a replaced disk is a new replica)."""
        return self.voter_set.includes(req.replica_id, req.replica_directory_id)

    def _readable_end(self, req: FetchRequest) -> int:
        """Where a replica's fetch may read up to. Voters take every record: their
        acknowledgements move the high watermark. Observers take committed records only:
        uncommitted ones are of no use to them, and each commit then costs one answer per
        observer rather than one for the records and another for the news that they
        committed."""
        if self._fetches_as_voter(req):
            return self.log.end_offset
        return max(self.exposed_high_watermark(), self.log.start_offset)

    def _park(self, leader: LeaderState, env: Envelope, replica_id: int, wait_ms: int) -> None:
        waiting = leader.parked.setdefault(replica_id, [])
        if len(waiting) >= PARKED_PER_OBSERVER_MAX:
            self._answer_fetch(waiting.pop(0).envelope)
        waiting.append(ParkedFetch(envelope=env, deadline_ms=self._now + wait_ms))

    def _answer_fetch(self, env: Envelope) -> None:
        req: FetchRequest = env.msg  # type: ignore[assignment]
        batches = self.log.read(
            req.fetch_offset,
            self.cfg.fetch_max_bytes,
            self.cfg.fetch_max_batches,
            end=self._readable_end(req),
        )
        response = FetchResponse(
            error=Error.NONE,
            epoch=self.epoch,
            leader_id=self.node_id,
            high_watermark=self.exposed_high_watermark(),
            log_start_offset=self.log.start_offset,
            batches=batches,
        )
        self._reply(env, response)

    def _answer_parked(self, leader: LeaderState, *, voters: bool) -> None:
        """Answer the parked fetches of voters (there are new records) or of observers (a
        new high watermark). A voter learns the high watermark with its next records or
        when its long poll ends: an answer carrying only that would cost every voter a
        round trip per commit."""
        for replica_id in [r for r in leader.parked if (r in self.voters) is voters]:
            for fetch in leader.parked.pop(replica_id):
                self._answer_fetch(fetch.envelope)

    def _answer_expired_fetches(self, leader: LeaderState) -> None:
        for replica_id, waiting in list(leader.parked.items()):
            due = [f for f in waiting if self._now >= f.deadline_ms]
            if not due:
                continue
            remaining = [f for f in waiting if self._now < f.deadline_ms]
            if remaining:
                leader.parked[replica_id] = remaining
            else:
                del leader.parked[replica_id]
            for fetch in due:
                self._answer_fetch(fetch.envelope)

    def _on_fetch_snapshot_request(self, env: Envelope) -> None:
        req: FetchSnapshotRequest = env.msg  # type: ignore[assignment]

        def answer(error: Error, size: int = 0, chunk: bytes = b"", voters: bytes = b"") -> None:
            response = self._fetch_snapshot_response(req, error, size=size, chunk=chunk)
            self._reply(env, dataclasses.replace(response, voters=voters))

        if (snapshot := self._servable_snapshot(req.snapshot_id)) is None:
            answer(Error.UNKNOWN_SNAPSHOT)
        elif not 0 <= req.position <= len(snapshot.data) or req.max_bytes <= 0:
            answer(Error.INVALID_REQUEST)
        else:
            self._leader().tracker.record_contact(req.replica_id, self._now)
            data = snapshot.data
            size = min(req.max_bytes, self.cfg.snapshot_chunk_bytes)
            answer(Error.NONE, len(data), data[req.position : req.position + size], snapshot.voters)

    def _servable_snapshot(self, snapshot_id: OffsetAndEpoch) -> Snapshot | None:
        if self.log.snapshot is not None and self.log.snapshot.id == snapshot_id:
            return self.log.snapshot
        kept = self._superseded.get(snapshot_id)
        if kept is None or kept[1] < self._now:
            return None
        self._keep_servable(kept[0])  # in use: keep it while the download goes on
        return kept[0]

    def _keep_servable(self, snapshot: Snapshot) -> None:
        self._superseded[snapshot.id] = (snapshot, self._now + self.cfg.fetch_timeout_ms)

    def _leader_progress(self) -> None:
        """Advance the high watermark from the voters' durable positions."""
        leader = self._leader()
        leader.tracker.record_leader_end(self._durable_end, self._now)
        candidate = leader.tracker.quorum_end()
        if candidate > self._hw and candidate > leader.epoch_start:
            self._hw = candidate
            self._deliver_committed()
            self._answer_parked(leader, voters=False)

    def _poll_leader(self) -> None:
        leader = self._leader()
        now = self._now
        leader.tracker.record_leader_end(self._durable_end, now)
        if now >= self._check_quorum_deadline(leader):
            self._step_down()
            return
        if not self.is_voter and self._voter_history.latest_offset() < self._hw:
            self.resign(now)  # our own removal committed: hand over to the remaining voters
            return
        if now - leader.last_append_ms >= self.cfg.idle_noop_interval_ms:
            self._append(BatchKind.NOOP, (control.NOOP_RECORD,))
        if now >= leader.begin_epoch_resend_ms:
            # Also to voters that went quiet: one stranded in a higher epoch answers with it,
            # and this leader steps down so that it can rejoin (Kafka does the same).
            for voter in leader.tracker.voters_silent_since(now - self.cfg.fetch_timeout_ms // 2):
                self._send(voter, self._begin_quorum_epoch())
            leader.begin_epoch_resend_ms = now + 2 * self.cfg.election_timeout_ms
        self._answer_expired_fetches(leader)

    def _append(self, kind: BatchKind, records: tuple[bytes, ...]) -> Batch:
        leader = self._leader()
        batch = Batch(
            base_offset=self.log.end_offset,
            epoch=self.epoch,
            timestamp_ms=self._now + self.wall_offset_ms,
            kind=kind,
            records=records,
        )
        self.log.append(batch)
        self._note_voters(batch)
        self._pending_appends.append(batch)
        leader.last_append_ms = self._now
        if leader.parked:
            self._answer_parked(leader, voters=True)
        return batch

    def _leader(self) -> LeaderState:
        assert isinstance(self._state, LeaderState), self.role
        return self._state

    # ==================================================================================
    # follower
    # ==================================================================================
    def _maybe_fetch(self) -> None:
        """Send the next fetch once everything we would acknowledge with it is durable."""
        state = self._fetching_state()
        if state is None:
            return
        if state.fetch_sent_ms is not None or self._now < state.fetch_retry_ms or self._has_unflushed():
            return
        if isinstance(state, UnattachedState):  # an observer asks a voter who leads
            others = sorted(self.voters - {self.node_id})  # ours may be a replaced disk's old self
            if not others:
                state.fetch_retry_ms = self._now + self.cfg.election_timeout_ms
                return
            state.bootstrap_target = self.rng.choice(others)
            target = state.bootstrap_target
        else:
            target = self.leader_id
        state.fetch_sent_ms = self._now
        self._next_rpc_id += 1
        self._fetch_rpc_id = self._next_rpc_id
        download = state.download if isinstance(state, FollowerState) else None
        if download is not None:
            request: Message = FetchSnapshotRequest(
                cluster_id=self.cluster_id,
                replica_id=self.node_id,
                epoch=self.epoch,
                snapshot_id=download.snapshot_id,
                position=len(download.data),
                max_bytes=self.cfg.snapshot_chunk_bytes,
            )
        else:
            request = FetchRequest(
                cluster_id=self.cluster_id,
                replica_id=self.node_id,
                epoch=self.epoch,
                fetch_offset=self.log.end_offset,
                last_fetched_epoch=self.log.last_epoch,
                max_wait_ms=self.cfg.fetch_max_wait_ms,
                replica_directory_id=self.directory_id,
            )
        self._outbox.append(Envelope(src=self.node_id, dst=target, msg=request, rpc_id=self._fetch_rpc_id))

    def _on_fetch_response(self, env: Envelope) -> None:
        resp: FetchResponse = env.msg  # type: ignore[assignment]
        # A late answer to a fetch we gave up on still carries valid data for the same
        # position, but only the answer to the current fetch completes it: otherwise two
        # outstanding fetches would keep each other alive forever.
        current = env.rpc_id == self._fetch_rpc_id
        state = self._fetching_state()
        if isinstance(state, UnattachedState) and env.src == state.bootstrap_target:
            if current:  # a bootstrap answer without a leader: try another voter
                state.fetch_sent_ms = None
                state.fetch_retry_ms = self._now + self.cfg.election_timeout_ms
            return
        if not isinstance(state, FollowerState) or env.src != self.leader_id or resp.epoch != self.epoch:
            return
        if current:
            state.fetch_sent_ms = None
        if resp.error is not Error.NONE:
            if resp.error is Error.NOT_LEADER:
                self._on_leader_lost()  # an observer is unattached from here on: back off there
            if current:
                self._retry_fetch_after(self.cfg.election_timeout_ms)
            return
        self._fetch_ok(state)
        state.leader_high_watermark = max(state.leader_high_watermark, resp.high_watermark)
        if resp.diverging is None and resp.snapshot_id is None:
            self._append_fetched(resp)
        elif not current:
            return  # a redirect computed for a position we have since left: it may not apply now
        elif resp.diverging is not None:
            self._truncate_diverging(resp.diverging)
        elif resp.snapshot_id.offset >= self._hw:  # type: ignore[union-attr]
            state.download = SnapshotDownload(snapshot_id=resp.snapshot_id, data=bytearray())  # type: ignore[arg-type]

    def _append_fetched(self, resp: FetchResponse) -> None:
        batches = resp.batches
        if batches and batches[0].base_offset != self.log.end_offset:
            return  # an answer to a fetch we have moved past
        was_voter = self.may_campaign
        for batch in batches:
            if (
                batch.base_offset != self.log.end_offset
                or not self.log.last_epoch <= batch.epoch <= self.epoch
            ):
                break  # not a continuation of our log: a confused or hostile peer
            self.log.append(batch)
            self._note_voters(batch)
            self._pending_appends.append(batch)
        self._voters_changed(was_voter)
        if batches and self.log.end_offset != batches[-1].next_offset:
            return
        if resp.high_watermark >= 0:
            self._advance_hw(min(resp.high_watermark, self.log.end_offset))
            if self._recovery is not None and self.log.end_offset >= resp.high_watermark:
                self._recovery.caught_up = True
                self._maybe_finish_recovery(self._recovery)

    def _truncate_diverging(self, diverging: OffsetAndEpoch) -> None:
        local = self.log.end_offset_for_epoch(diverging.epoch)
        target = min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset
        target = max(target, self.log.start_offset)
        if target >= self.log.end_offset:
            return
        if target < self._hw:
            self.fatal_error = f"leader asked to truncate to {target}, below the committed offset {self._hw}"
            return
        was_voter = self.may_campaign
        self.log.truncate_to(target)
        self._voter_history.truncate_to(target)
        self._voters_changed(was_voter)
        self._pending_appends = [b for b in self._pending_appends if b.base_offset < target]
        self._pending_truncate = (
            target if self._pending_truncate is None else min(self._pending_truncate, target)
        )
        self._durable_end = min(self._durable_end, target)
        self._inflight_end = min(self._inflight_end, target)

    def _on_fetch_snapshot_response(self, env: Envelope) -> None:
        resp: FetchSnapshotResponse = env.msg  # type: ignore[assignment]
        if env.rpc_id != self._fetch_rpc_id:
            return
        state = self._state
        if not isinstance(state, FollowerState) or env.src != self.leader_id or state.download is None:
            return
        download = state.download
        state.fetch_sent_ms = None
        if resp.error is not Error.NONE:
            state.download = None
            state.fetch_retry_ms = self._now + self.cfg.election_timeout_ms
            return
        if resp.snapshot_id != download.snapshot_id or resp.position != len(download.data):
            return
        self._fetch_ok(state)
        download.data += resp.chunk
        if len(download.data) >= resp.size:
            state.download = None  # complete, or longer than announced: start over
            if len(download.data) == resp.size:
                snapshot = Snapshot(id=download.snapshot_id, data=bytes(download.data), voters=resp.voters)
                self._install_snapshot(snapshot)

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        if snapshot.id.offset < self._hw:
            return
        last = self.log.batch_at(snapshot.id.offset - 1)
        if last is not None and last.next_offset == snapshot.id.offset and last.epoch == snapshot.id.epoch:
            return  # our log already holds all it covers (log matching): nothing to replace
        was_voter = self.may_campaign
        self.log.install(snapshot)
        self._voter_history.install(self._snapshot_voters(snapshot))
        self._voters_changed(was_voter)
        self._pending_install = snapshot
        self._pending_truncate = None
        self._pending_appends = []
        self._inflight_end = min(self._inflight_end, snapshot.id.offset)
        self._hw = self._applied = snapshot.id.offset
        self._restore_out = snapshot
        self._committed_out = []

    def _fetch_ok(self, state: FollowerState) -> None:
        state.unreachable_strikes = 0
        state.last_fetch_ok_ms = self._now
        state.leader_lost = False
        self._failed_elections = 0
        self._election_deadline = NEVER

    def _on_leader_lost(self, election_delay_ms: int | None = None) -> None:
        """A voter campaigns after ``election_delay_ms`` (default: a random election timeout)."""
        if not self.may_campaign:
            self._become_unattached(self.epoch)
            return
        state = self._follower()
        if not state.leader_lost:
            state.leader_lost = True
            delay = self._election_timeout() if election_delay_ms is None else election_delay_ms
            self._election_deadline = self._now + delay

    def _poll_follower(self, state: FetchingState) -> None:
        if (
            state.fetch_sent_ms is not None
            and self._now - state.fetch_sent_ms >= self._fetch_request_timeout()
        ):
            state.fetch_sent_ms = None  # lost on the way: ask again
        if not isinstance(state, FollowerState) or state.leader_lost:
            return
        if self._now - state.last_fetch_ok_ms >= self.cfg.fetch_timeout_ms:
            self._on_leader_lost()

    def _fetching_state(self) -> FetchingState | None:
        """The state of a role that fetches: a follower, or a replica looking for a leader (an
        observer, or a voter whose election failed)."""
        state = self._state
        if isinstance(state, FollowerState) or (
            isinstance(state, UnattachedState) and (state.seeking_leader or not self.may_campaign)
        ):
            return state
        return None

    def _follower(self) -> FollowerState:
        assert isinstance(self._state, FollowerState), self.role
        return self._state

    def _retry_fetch_after(self, delay_ms: int) -> None:
        state = self._fetching_state()
        assert state is not None, self.role
        state.fetch_retry_ms = self._now + delay_ms

    def _advance_hw(self, offset: int) -> None:
        if offset > self._hw:
            self._hw = offset
            self._deliver_committed()

    def _deliver_committed(self) -> None:
        if self._hw <= self._applied:
            return
        batches = self.log.batches_between(self._applied, self._hw)
        assert batches and batches[-1].next_offset == self._hw, (self._applied, self._hw)
        self._committed_out.extend(batches)
        self._applied = self._hw

    # ==================================================================================
    # epochs and recovery common to every role
    # ==================================================================================
    def _admit(self, env: Envelope) -> bool:
        """What every request goes through before its handler (etcd's ``Step``, Kafka's
        request validation): a request that is malformed, meant for a leader we are not,
        or from an older epoch is answered with the error here; one from a newer epoch
        moves us into that epoch first. A handler so sees only requests of our epoch, but
        pre-votes: they carry the epoch their sender would campaign in and never move ours.
        """
        req: Request = env.msg  # type: ignore[assignment]
        epoch = _sender_epoch(req)
        error = self._refusal(req, epoch)
        if error is not None:
            if error is Error.NOT_LEADER and epoch is not None and epoch > self.epoch:
                self._fetched_from_newer_epoch(epoch)
            # A vote's answer waits until the state it reports is durable, granted or not.
            self._reply(env, self._error_response(req, error), durable=isinstance(req, VoteRequest))
            return False
        if epoch is not None and epoch > self.epoch:
            self._enter_newer_epoch(req)
        return True

    def _fetched_from_newer_epoch(self, epoch: int) -> None:
        """A replica fetches in an epoch newer than ours, so this leader's epoch is over:
        it steps down into the newer one, and the next election moves the quorum past it.
        Voters learn this from the BeginQuorumEpoch a leader resends to the silent ones; a
        replica the leader does not resend to (one removed from the voter set) can only
        tell it so with a fetch (see ``_election_lost``). Any other role just answers: the
        fetch names no leader to follow, and the leader it fetched for is not us."""
        if self.role is Role.LEADER:
            self._become_unattached(epoch)

    def _refusal(self, req: Request, epoch: int | None) -> Error | None:
        """The error that answers ``req`` (sent in ``epoch``) before its handler runs, if
        any. The order of the checks decides which error a request with several faults
        gets: keep it."""
        stale = epoch is not None and epoch < self.epoch
        if isinstance(req, EndQuorumEpochRequest) and stale:
            return Error.FENCED_LEADER_EPOCH  # a stale resignation is fenced before what it names
        if self._malformed(req):
            return Error.INVALID_REQUEST
        if isinstance(req, FetchRequest | FetchSnapshotRequest) and (
            self.role is not Role.LEADER or req.epoch > self.epoch
        ):
            return Error.NOT_LEADER  # a fetch teaches no epoch: only a leader answers it
        if stale:
            return Error.FENCED_LEADER_EPOCH
        return None

    def _malformed(self, req: Request) -> bool:
        if isinstance(req, FetchRequest):
            fields = (req.fetch_offset, req.last_fetched_epoch, req.max_wait_ms, req.replica_id)
            return min(fields) < 0 or req.replica_id == self.node_id
        if isinstance(req, BeginQuorumEpochRequest | EndQuorumEpochRequest):
            # a leader our log does not name yet may have been added (KIP-853)
            static_stranger = not self.voter_set.dynamic and req.leader_id not in self.voters
            return req.leader_id == self.node_id or static_stranger
        return False

    def _enter_newer_epoch(self, req: Request) -> None:
        """A vote request leaves us unattached in its epoch, to be decided there; an
        announcement makes us follow its leader; a resignation leaves us unattached, and
        its handler arms the timer that lets the successors it names campaign first."""
        if isinstance(req, VoteRequest):
            self._become_unattached(req.candidate_epoch)
        elif isinstance(req, BeginQuorumEpochRequest):
            self._become_follower(req.epoch, req.leader_id)
        elif isinstance(req, EndQuorumEpochRequest):
            self._transition(self._unattached_state(), req.epoch)

    def _error_response(self, req: Request, error: Error) -> Response:
        if isinstance(req, VoteRequest):
            return self._vote_response(error, granted=False, pre_vote=req.pre_vote)
        if isinstance(req, BeginQuorumEpochRequest):
            return self._begin_quorum_epoch_response(error)
        if isinstance(req, EndQuorumEpochRequest):
            return self._end_quorum_epoch_response(error)
        if isinstance(req, FetchSnapshotRequest):
            return self._fetch_snapshot_response(req, error)
        return self._fetch_error(error)

    def _observe(self, epoch: int, leader_id: int) -> None:
        """Adopt a newer epoch, or a leader for our epoch, learned from any response (Kafka's
        ``maybeHandleCommonResponse``). A response from an older epoch is left to its
        handler: a pre-vote counts from any epoch."""
        ended = epoch == self.epoch and leader_id == self._leadership.ended
        knows_leader = leader_id >= 0 and leader_id != self.node_id and not ended
        if epoch > self.epoch:
            if knows_leader:
                self._become_follower(epoch, leader_id)
            else:
                self._become_unattached(epoch)
        elif (
            epoch == self.epoch
            and knows_leader
            # peers may not have noticed yet; our election decides (a replica removed since
            # holds none: it follows the leader it lost)
            and (leader_id != self._leadership.lost or not self.may_campaign)
            and self.leader_id == NO_LEADER
            and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
        ):
            self._become_follower(epoch, leader_id)

    def _on_foreign_peer(self, peer_id: int) -> None:
        """A peer refused our cluster id. Either it or we were formatted wrongly: the side
        that most of the other voters refuse is the wrong one, and only it stops."""
        self.foreign_peers.add(peer_id)
        others = len(self.voters - {self.node_id})
        if len(self.foreign_peers & self.voters) * 2 > others:
            self.fatal_error = (
                f"voters {sorted(self.foreign_peers)} belong to another cluster than {self.cluster_id!r}: "
                "this node's storage was formatted with a different cluster id than theirs; reformat it "
                "with `raftka storage format --cluster-id ID` using the cluster.id in their meta.properties"
            )

    def _hear(self, src: int, msg: Message) -> None:
        recovery = self._recovery
        if recovery is None or src not in self.voters or src == self.node_id:
            return
        if isinstance(msg, VoteRequest):
            epoch = msg.candidate_epoch - 1 if msg.pre_vote else msg.candidate_epoch
        else:
            epoch = msg.epoch  # type: ignore[union-attr]
        recovery.heard_epochs[src] = max(epoch, recovery.heard_epochs.get(src, 0))
        self._maybe_finish_recovery(recovery)

    def _maybe_finish_recovery(self, recovery: Recovery) -> None:
        """Vote again once every peer's epoch is known and we hold what was committed.

        A brand-new cluster (every peer at epoch 0) has committed and voted nothing.
        """
        if len(recovery.heard_epochs) < len(self.voters) - 1:
            return
        top = max(recovery.heard_epochs.values())
        if top > 0 and not recovery.caught_up:
            return
        self._recovery = None
        if top > self.epoch:
            self._transition(self._unattached_state(), top)
        if top == self.epoch and top > 0 and self.voted_id == NO_LEADER:
            self.voted_id = self.node_id  # abstain: we may have voted in this epoch before the wipe
        self._persist_state()

    def _ask_peers_for_epochs(self) -> None:
        """A recovering voter learns its peers' epochs from their answers to a pre-vote that
        asks for nothing (epoch 0 can never be granted)."""
        request = VoteRequest(
            cluster_id=self.cluster_id,
            candidate_epoch=0,
            candidate_id=self.node_id,
            last_epoch=0,
            log_end_offset=0,
            pre_vote=True,
        )
        for voter in sorted(self.voters - {self.node_id}):
            self._send(voter, request)

    # ==================================================================================
    # durability and output
    # ==================================================================================
    def _persist_state(self) -> None:
        state = QuorumStateData(
            epoch=self.epoch,
            voted_id=self.voted_id,
            leader_id=self.leader_id,
            recovering=self._recovery is not None,
        )
        durable = self._pending_state or self._persisted_state
        if state == durable:
            return
        if state.leader_id == NO_LEADER and state == replace(durable, leader_id=NO_LEADER):
            # Forgetting a leader (a Prospective's first step) is worth no fsync: the
            # leader named on disk did lead that epoch, and a Candidate's vote for itself
            # must not queue behind the write.
            return
        self._pending_state = state

    def _has_unflushed(self) -> bool:
        return self._inflight is not None or self._has_pending()

    def _has_pending(self) -> bool:
        return bool(
            self._pending_state
            or self._pending_appends
            or self._pending_truncate is not None
            or self._pending_install
        )

    def _issue_write(self) -> None:
        if self._inflight is not None or not self._has_pending():
            return
        self._inflight = Write(
            write_id=self._next_write_id,
            quorum_state=self._pending_state,
            install_snapshot=self._pending_install,
            truncate_to=self._pending_truncate,
            append=tuple(self._pending_appends),
        )
        self._inflight_handed_out = False
        self._inflight_end = self.log.end_offset
        self._next_write_id += 1
        if self._pending_state is not None:
            self._persisted_state = self._pending_state
        self._pending_state = None
        self._pending_install = None
        self._pending_truncate = None
        self._pending_appends = []

    def _durability_tag(self) -> int | None:
        if self._has_pending():
            return self._next_write_id
        if self._inflight is not None:
            return self._inflight.write_id
        return None

    def _send(self, dst: int, msg: Message, *, durable: bool = False) -> None:
        self._emit(Envelope(src=self.node_id, dst=dst, msg=msg), durable)

    def _reply(self, request: Envelope, msg: Message, *, durable: bool = False) -> None:
        self._emit(Envelope(src=self.node_id, dst=request.src, msg=msg, rpc_id=request.rpc_id), durable)

    def _emit(self, envelope: Envelope, durable: bool) -> None:
        tag = self._durability_tag() if durable else None
        if tag is None:
            self._outbox.append(envelope)
        else:
            self._held.append((tag, envelope))

    def _advertised_leader(self) -> int:
        """The leader we tell others about: never ourselves once we have resigned."""
        return NO_LEADER if self.role is Role.RESIGNED else self.leader_id

    # Every answer carries our epoch and the leader we know: any message can teach a newer one.
    def _vote_response(self, error: Error, *, granted: bool, pre_vote: bool) -> VoteResponse:
        return VoteResponse(
            error=error,
            epoch=self.epoch,
            leader_id=self._advertised_leader(),
            vote_granted=granted,
            pre_vote=pre_vote,
        )

    def _begin_quorum_epoch(self) -> BeginQuorumEpochRequest:
        return BeginQuorumEpochRequest(cluster_id=self.cluster_id, epoch=self.epoch, leader_id=self.node_id)

    def _begin_quorum_epoch_response(self, error: Error) -> BeginQuorumEpochResponse:
        return BeginQuorumEpochResponse(error=error, epoch=self.epoch, leader_id=self._advertised_leader())

    def _end_quorum_epoch_response(self, error: Error) -> EndQuorumEpochResponse:
        return EndQuorumEpochResponse(error=error, epoch=self.epoch, leader_id=self._advertised_leader())

    def _fetch_error(self, error: Error) -> FetchResponse:
        return FetchResponse(
            error=error,
            epoch=self.epoch,
            leader_id=self._advertised_leader(),
            high_watermark=-1,
            log_start_offset=self.log.start_offset,
        )

    def _fetch_snapshot_response(
        self, req: FetchSnapshotRequest, error: Error, *, size: int = 0, chunk: bytes = b""
    ) -> FetchSnapshotResponse:
        return FetchSnapshotResponse(
            error=error,
            epoch=self.epoch,
            leader_id=self._advertised_leader(),
            snapshot_id=req.snapshot_id,
            size=size,
            position=req.position,
            chunk=chunk,
        )

    # ==================================================================================
    # time
    # ==================================================================================
    def _election_timeout(self) -> int:
        t = self.cfg.election_timeout_ms
        return self.rng.randrange(t, 2 * t)

    def _election_window(self) -> int:
        """How long one (pre-)vote round may take: [T, 2T) at first, twice as wide after
        every failed election (up to the backoff maximum). A round trip slower than 2T
        (slow links, slow fsyncs) then ends up fitting instead of failing forever."""
        t = self.cfg.election_timeout_ms
        widest = max(2 * t, self.cfg.election_backoff_max_ms)
        return self.rng.randrange(t, min(widest, (2 * t) << min(self._failed_elections, 16)))

    def _succession_delay(self) -> int:
        """How long a voter that has lost its leader waits before its pre-vote: half the
        election timeout per voter of lower id among the others. Survivors that notice the
        loss together (a dead leader's connections reset at once everywhere, give or take
        what a loaded machine adds: 10-15 ms were seen) then campaign one after another,
        lowest id first, instead of splitting the vote; if the first one's log is behind,
        the next one's pre-vote follows soon after."""
        others = sorted(self.voters - {self.leader_id})
        return others.index(self.node_id) * max(1, self.cfg.election_timeout_ms // 2)

    def _backoff(self) -> int:
        t = self.cfg.election_timeout_ms
        ceiling = min(self.cfg.election_backoff_max_ms, t << min(self._failed_elections, 16))
        return self.rng.randrange(t, max(t + 1, ceiling))

    def _fetch_request_timeout(self) -> int:
        return self.cfg.fetch_max_wait_ms + 4 * self.cfg.election_timeout_ms

    def _check_quorum_deadline(self, leader: LeaderState) -> int:
        """When the leader must resign unless a majority fetches again (check-quorum)."""
        contact = max(leader.tracker.majority_contact_ms(), leader.since_ms)
        return contact + self.cfg.check_quorum_timeout_ms

    def _next_deadline(self) -> int:
        deadlines = [self._election_deadline]
        state = self._state
        if isinstance(state, LeaderState):
            deadlines.append(state.last_append_ms + self.cfg.idle_noop_interval_ms)
            deadlines.append(state.begin_epoch_resend_ms)
            deadlines.append(self._check_quorum_deadline(state))
            deadlines.extend(f.deadline_ms for waiting in state.parked.values() for f in waiting)
        elif (fetching := self._fetching_state()) is not None:
            if fetching.fetch_sent_ms is not None:
                deadlines.append(fetching.fetch_sent_ms + self._fetch_request_timeout())
            elif fetching.fetch_retry_ms > self._now:
                deadlines.append(fetching.fetch_retry_ms)
            if isinstance(fetching, FollowerState) and not fetching.leader_lost:
                deadlines.append(fetching.last_fetch_ok_ms + self.cfg.fetch_timeout_ms)
        return min(deadlines)

    _HANDLERS = {
        VoteRequest: _on_vote_request,
        VoteResponse: _on_vote_response,
        BeginQuorumEpochRequest: _on_begin_quorum_epoch,
        BeginQuorumEpochResponse: _on_epoch_response,
        EndQuorumEpochRequest: _on_end_quorum_epoch,
        EndQuorumEpochResponse: _on_epoch_response,
        FetchRequest: _on_fetch_request,
        FetchResponse: _on_fetch_response,
        FetchSnapshotRequest: _on_fetch_snapshot_request,
        FetchSnapshotResponse: _on_fetch_snapshot_response,
    }


def _sender_epoch(req: Request) -> int | None:
    """The epoch a request was sent in; None for a pre-vote, which carries only the epoch
    its sender would campaign in."""
    if isinstance(req, VoteRequest):
        return None if req.pre_vote else req.candidate_epoch
    return req.epoch
