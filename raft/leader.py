"""What a node does while it leads (etcd's ``stepLeader`` and heartbeat tick): answer
fetches, at once or parked for a long poll; move the high watermark from the voters'
fetch offsets; serve snapshots; append its own batches, an idle NoOp and voter changes
(KIP-853); resign when check-quorum fails, when its own removal commits, or on a graceful
shutdown.

``LeaderRole`` is one of the roles ``raftka.raft.core.RaftCore`` is made of: its methods
work on the core's state, and what only a leader keeps is in ``LeaderState``. Epochs are
handled before any of them runs, once, in ``RaftCore.step``.
"""

from __future__ import annotations

import dataclasses

from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch
from raftka.raft.effects import Snapshot
from raftka.raft.messages import (
    EndQuorumEpochRequest,
    Envelope,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
)
from raftka.raft.role_state import LeaderState, ParkedFetch, ResignedState
from raftka.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    ChangeRefusal,
    Voter,
    VoterChangeError,
    VoterSet,
    encode_kraft_version,
)

VOTER_CATCH_UP_LAG_MAX = 1000  # records an observer may trail the high watermark and still be added
PARKED_PER_OBSERVER_MAX = 4  # bound: fetches parked at once under one observer id


class NotLeaderError(Exception):
    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader is {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class LeaderRole:
    """The leader's handlers (Fetch, FetchSnapshot), tick and operations."""

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

    def _abandon_leadership(self, leader: LeaderState) -> None:
        """Parked fetches are answered at once: their replicas must look for the new leader."""
        for waiting in leader.parked.values():
            for fetch in waiting:
                self._reply(fetch.envelope, self._fetch_error(Error.NOT_LEADER))

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
            req.fetch_offset if not as_voter or self._acknowledges(req) else -1,
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

    def _acknowledges(self, req: FetchRequest) -> bool:
        """Whether a voter's fetch offset may count toward the high watermark: only once it
        holds the VotersRecord that made it a voter. Until then its log says it is an
        observer, whose appends are not fsynced (``RaftCore._must_sync``); from that record
        on it fsyncs all it holds before it fetches. (A fetch offset matches our log: it was
        validated against its last fetched epoch.)"""
        since = self._voter_history.member_since(req.replica_id, req.replica_directory_id)
        return req.fetch_offset > since

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
