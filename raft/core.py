"""RaftCore: the KRaft protocol as a plain, synchronous state machine.

Events go in (``step`` a message, ``poll`` the clock, ``propose`` records, ``persisted``
a write); what to do comes out of ``ready()`` (see ``raftka.raft.effects``). The core reads no
clock, does no I/O and draws randomness only from the ``random.Random`` it is given, so
the same state and inputs give the same outputs: the simulator relies on that.

One module per role, as etcd's raft has one step function per role: elections in
``raftka.raft.candidate``, fetching (a follower, or a replica looking for its leader) in
``raftka.raft.follower``, leading in ``raftka.raft.leader``; ``RaftCore`` is made of the
three. This module keeps what is common to them: the state that outlives a role, the
events, the transitions, the epoch handling every message goes through once at the top
of ``step``, durability and output, and time.

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

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch
from raftka.raft.candidate import CandidateRole
from raftka.raft.config import RaftConfig
from raftka.raft.effects import QuorumStateData, Ready, Snapshot, Write
from raftka.raft.follower import FollowerRole
from raftka.raft.leader import LeaderRole, NotLeaderError
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
    NEVER,
    CandidateState,
    EpochLeadership,
    FollowerState,
    LeaderState,
    ProspectiveState,
    Recovery,
    ResignedState,
    RoleState,
    UnattachedState,
    Votes,
)
from raftka.raft.roles import Role, check_transition
from raftka.raft.storage.base import LoadedState
from raftka.raft.tracker import Tracker
from raftka.raft.voters import NO_DIRECTORY, VoterHistory, VoterSet


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


SUPERSEDED_SNAPSHOTS_MAX = 3  # bound: older snapshots kept servable for downloads under way


class RaftCore(CandidateRole, FollowerRole, LeaderRole):
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

    # ==================================================================================
    # the voter set in the log (KIP-853)
    # ==================================================================================
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

    # ==================================================================================
    # committed offsets, from a leader's quorum or a follower's fetch answers
    # ==================================================================================
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
            sync=self._must_sync(),
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

    def _must_sync(self) -> bool:
        """Whether the pending write must be fsynced: unless it only appends to an observer's log.

        Decided on the voter set of the log as it will be once this write is done (its own
        appends included), when the write is issued: a write that makes this node a voter
        is fsynced, and the storage then makes its earlier unsynced appends durable with
        it, before the node's next fetch (its first acknowledgement as a voter: the core
        fetches only once every write is done). A leader counts a new voter's fetch offset
        only once that fetch shows it holds the record that added it (``LeaderRole``), so
        no offset of an unsynced log ever counts toward the high watermark. A vote is
        fsynced with the log it was judged on; a removed voter stops syncing only once it
        may no longer campaign. Truncations and installed snapshots stay durable as ever.
        """
        if self.may_campaign or self._pending_state is not None:
            return True
        return self._pending_truncate is not None or self._pending_install is not None

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

    # each message's handler, in the role that takes it (raftka.raft.candidate, .follower, .leader)
    _HANDLERS = {
        VoteRequest: CandidateRole._on_vote_request,
        VoteResponse: CandidateRole._on_vote_response,
        BeginQuorumEpochRequest: FollowerRole._on_begin_quorum_epoch,
        BeginQuorumEpochResponse: FollowerRole._on_epoch_response,
        EndQuorumEpochRequest: FollowerRole._on_end_quorum_epoch,
        EndQuorumEpochResponse: FollowerRole._on_epoch_response,
        FetchRequest: LeaderRole._on_fetch_request,
        FetchResponse: FollowerRole._on_fetch_response,
        FetchSnapshotRequest: LeaderRole._on_fetch_snapshot_request,
        FetchSnapshotResponse: FollowerRole._on_fetch_snapshot_response,
    }


def _sender_epoch(req: Request) -> int | None:
    """The epoch a request was sent in; None for a pre-vote, which carries only the epoch
    its sender would campaign in."""
    if isinstance(req, VoteRequest):
        return None if req.pre_vote else req.candidate_epoch
    return req.epoch
