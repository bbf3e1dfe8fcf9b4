"""Deliberately broken cores and drivers: the simulation must catch each one quickly.

If a mutant survives hundreds of seeds, the invariants or the fault model have a blind
spot, and real bugs of that kind would hide there too.
"""

from __future__ import annotations

import dataclasses

from raftka.raft.batch import OffsetAndEpoch
from raftka.raft.core import RaftCore
from raftka.raft.effects import Ready
from raftka.raft.messages import (
    Envelope,
    Error,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from raftka.raft.role_state import UnattachedState


class GrantEveryVoteCore(RaftCore):
    """Answers every (pre-)vote request with a grant, whatever its epoch, vote or log says."""

    def ready(self) -> Ready:
        ready = super().ready()
        ready.send = [self._grant(env) for env in ready.send]
        return ready

    @staticmethod
    def _grant(env: Envelope) -> Envelope:
        msg = env.msg
        if isinstance(msg, VoteResponse) and not msg.vote_granted:
            granted = dataclasses.replace(msg, error=Error.NONE, vote_granted=True)
            return dataclasses.replace(env, msg=granted)
        return env


class LogBlindCore(RaftCore):
    """Votes as if every candidate's log were at least as up to date as its own."""

    def step(self, envelope: Envelope, now_ms: int) -> None:
        msg = envelope.msg
        if isinstance(msg, VoteRequest):
            msg = dataclasses.replace(msg, last_epoch=1 << 40, log_end_offset=1 << 40)
            envelope = dataclasses.replace(envelope, msg=msg)
        super().step(envelope, now_ms)


class OldVoterSetMajorityCore(RaftCore):
    """Counts the high watermark on the voter set from before its latest change (KIP-853):
    a leader that keeps its tracker's voters when it appends a VotersRecord."""

    def _change_voters(self, voters):  # type: ignore[no-untyped-def]
        tracker = self._leader().tracker
        kept = frozenset(tracker.voters)
        result: OffsetAndEpoch = super()._change_voters(voters)
        tracker.set_voters(kept)
        return result


class NeverSeeksLeaderCore(RaftCore):
    """A voter whose election failed waits for its next one instead of fetching to find the
    leader: a voter stranded in a newer epoch (removed, so no leader announces itself to
    it) never rejoins."""

    def _election_lost(self) -> None:
        super()._election_lost()
        if isinstance(self._state, UnattachedState):
            self._state.seeking_leader = False


class DeafToNewerFetchCore(RaftCore):
    """A leader that answers a fetch from a newer epoch without stepping down into it: the
    replica that sent it stays stranded above the quorum's epoch."""

    def _fetched_from_newer_epoch(self, epoch: int) -> None:
        pass


class PromotedWithoutSyncCore(RaftCore):
    """Decides each write's fsync on the voter set from before its appends: an observer made a
    voter by a fetched VotersRecord leaves that write and the tail it held unsynced, and its
    next fetch acknowledges them as a voter's."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._voter_before = self.may_campaign

    def _must_sync(self) -> bool:
        voter_before, self._voter_before = self._voter_before, self.may_campaign
        return super()._must_sync() and (voter_before or not self.may_campaign)


class CountsNewVoterEarlyCore(RaftCore):
    """A leader that counts a new voter's fetch offset at once, while the replica does not yet
    hold the VotersRecord that added it and so still appends without fsyncing."""

    def _acknowledges(self, req: FetchRequest) -> bool:
        return True


class PreCrashOffsetCore(RaftCore):
    """An observer that fetches from the furthest offset it ever reached (as if it kept its
    position somewhere durable), though a power cut took its unsynced tail."""

    reached: dict[int, tuple[int, int]] = {}  # node id -> (offset, epoch), across restarts

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        if self._now == 0:  # a new simulated cluster: nothing reached yet
            self.reached.pop(self.node_id, None)

    def ready(self) -> Ready:
        ready = super().ready()
        ready.send = [self._stale(env) for env in ready.send]
        return ready

    def _stale(self, env: Envelope) -> Envelope:
        msg = env.msg
        if not isinstance(msg, FetchRequest) or self.may_campaign:
            return env
        offset, epoch = self.reached.get(self.node_id, (0, 0))
        if msg.fetch_offset >= offset:
            self.reached[self.node_id] = (msg.fetch_offset, msg.last_fetched_epoch)
            return env
        stale = dataclasses.replace(msg, fetch_offset=offset, last_fetched_epoch=epoch)
        return dataclasses.replace(env, msg=stale)


MUTANT_CORES = {
    "grant-every-vote": GrantEveryVoteCore,
    "log-blind": LogBlindCore,
    "old-voter-set-majority": OldVoterSetMajorityCore,
    "never-seeks-leader": NeverSeeksLeaderCore,
    "deaf-to-newer-fetch": DeafToNewerFetchCore,
    "promoted-without-sync": PromotedWithoutSyncCore,
    "counts-new-voter-early": CountsNewVoterEarlyCore,
    "pre-crash-offset": PreCrashOffsetCore,
}
