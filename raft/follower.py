"""What a node does while it fetches (etcd's ``stepFollower``): follow this epoch's
leader, or look for one (an observer always, a voter once its election failed: see
``UnattachedState``); append what the leader sends, truncate where it diverges, download
snapshots; notice a lost leader; and the announcements by which a node learns and loses
its leader (BeginQuorumEpoch, EndQuorumEpoch).

``FollowerRole`` is one of the roles ``raftka.raft.core.RaftCore`` is made of: its methods
work on the core's state, and what only a fetching role keeps is in ``FollowerState`` and
``UnattachedState``. Epochs are handled before any of them runs, once, in ``RaftCore.step``.
"""

from __future__ import annotations

from raftka.raft.batch import OffsetAndEpoch
from raftka.raft.effects import Snapshot
from raftka.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
)
from raftka.raft.role_state import NEVER, FetchingState, FollowerState, SnapshotDownload, UnattachedState
from raftka.raft.roles import Role


class FollowerRole:
    """A fetching replica's handlers (fetch answers, epoch announcements), tick and timers."""

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
