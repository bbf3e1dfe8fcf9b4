"""Elections (etcd's ``stepCandidate`` and vote handling): a Prospective asks for pre-votes
(KIP-996), a Candidate for votes; a lost election backs off; and any voter answers vote
requests here, whatever its role.

``CandidateRole`` is one of the roles ``raftka.raft.core.RaftCore`` is made of: its methods
work on the core's state, and a campaign's tally is in ``ProspectiveState`` and
``CandidateState``. Epochs are handled before any of them runs, once, in ``RaftCore.step``.
"""

from __future__ import annotations

from raftka.raft.messages import NO_LEADER, Envelope, Error, VoteRequest, VoteResponse
from raftka.raft.role_state import (
    NEVER,
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    UnattachedState,
)
from raftka.raft.roles import Role
from raftka.raft.voters import NO_DIRECTORY


class CandidateRole:
    """Campaigning (pre-vote, vote) and answering vote requests."""

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
