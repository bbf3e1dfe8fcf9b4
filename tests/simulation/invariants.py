"""Safety invariants, checked after every event (Kafka's RaftEventSimulationTest, sharpened).

- one leader per epoch, over the whole history;
- per process lifetime, a node's epoch and high watermark never go back; the durable
  epoch never goes back and a durable vote never changes (a wiped disk starts over);
- the newest leader's high watermark never goes back;
- a majority of voters durably hold every offset below the highest high watermark any
  node ever exposed (relaxed by one per wiped voter still catching up);
- committed data is identical everywhere: one global committed log, offset by offset;
  every node applies a prefix of it; a snapshot carries the state of that prefix; no
  client record commits twice; each epoch's first committed batch is its LeaderChange;
- a position propose() returned that commits holds the records proposed there;
- persist before acknowledge, seen from outside: a granted vote, a voter's fetch
  position and a BeginQuorumEpoch are backed by what the sender's disk holds;
- an observer, whose appends are not fsynced, fetches only from what it still holds
  (written, or durable once a power cut lost the rest), never from its pre-crash offset;
- observers never campaign, never vote and never lead;
- the voter set (KIP-853) changes only through VotersRecords, by one member at a time:
  each committed one differs from the committed set before it by at most one voter, and
  "a majority" above is one of the voter set the committed log had at that offset, each
  voter counted only with the storage (directory id) it was added with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raftka.raft.batch import Batch, BatchKind
from raftka.raft.effects import Snapshot
from raftka.raft.messages import BeginQuorumEpochRequest, Envelope, FetchRequest, VoteRequest, VoteResponse
from raftka.raft.voters import VoterSet
from tests.simulation.disk import HELD_IN_SNAPSHOT, CrashOutcome, DurableLog
from tests.simulation.node import exposed_hw, role_of
from tests.simulation.statemachine import GENESIS, SmState, chain

if TYPE_CHECKING:
    from tests.simulation.node import SimNode

ROLES = frozenset({"unattached", "prospective", "candidate", "leader", "follower", "resigned", "observer"})
VOTER_ONLY_ROLES = frozenset({"prospective", "candidate", "leader", "resigned"})


class InvariantViolation(AssertionError):
    """A safety property failed: the message says which, where and how."""


@dataclass(slots=True)
class _Lifetime:
    """What one process of one node has shown so far."""

    epoch: int = -1
    hw: int = -1


@dataclass(slots=True)
class _DiskHistory:
    """What one disk of one node has held durably so far."""

    epoch: int = 0
    votes: dict[int, int] = field(default_factory=dict)  # epoch -> voted_id


class Invariants:
    def __init__(self, voters: frozenset[int] | VoterSet, node_ids: list[int]) -> None:
        self.bootstrap = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        # the committed VotersRecords: (offset of the batch, the set it names), ascending
        self.voter_changes: list[tuple[int, VoterSet]] = []
        self.send_checks = True  # off: only the deep invariants judge (mutant self-tests)
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self._life = {n: _Lifetime() for n in node_ids}
        self._disk = {n: _DiskHistory() for n in node_ids}
        self.nodes: dict[int, SimNode] = {}
        # the global committed log, one entry per offset
        self.epochs: list[int] = []
        self.records: list[bytes | None] = []  # None for control records
        self.boundaries: dict[int, SmState] = {0: SmState(0, 0, GENESIS)}
        self.offset_of: dict[bytes, int] = {}
        # (base offset, epoch) a leader's propose() returned -> the records proposed
        self.claims: dict[tuple[int, int], tuple[bytes, ...]] = {}
        self.max_hw = 0
        self.max_hw_epoch: int | None = None
        # the voter set in effect at the leader that exposed max_hw (its latest, maybe uncommitted:
        # a removal commits on a majority of the new set, which need not be one of the old)
        self.max_hw_voters: VoterSet | None = None
        self.newest_leader_epoch = -1
        self.newest_leader_hw = -1
        # wiped voter -> its durable log end when the disk was lost. The leader may still count
        # that lost acknowledgement (until the voter fetches again), so a high watermark up to
        # it may rest on one holder fewer; a higher one, or the voter holding it again, ends this.
        self.recovering: dict[int, int] = {}
        self.max_epoch = 0  # the highest epoch any node has reached
        # wiped voter -> (high watermark, highest epoch) when its disk was lost: until it
        # holds that data again and has durably finished recovering (it may have voted in
        # any epoch up to that one), a second lost disk could lose data or deadlock
        self.wiped: dict[int, tuple[int, int]] = {}
        self.violations_checked = 0

    def fail(self, node: SimNode | None, text: str) -> None:
        where = f"n{node.node_id}: " if node is not None else ""
        raise InvariantViolation(where + text)

    # node state ---------------------------------------------------------------------------
    def after_event(self, node: SimNode) -> None:
        core = node.core
        if core is None:
            return
        nid = node.node_id
        role, epoch, hw = role_of(core), core.epoch, core.high_watermark
        fatal = getattr(core, "fatal_error", None)
        if fatal:
            self.fail(node, f"the core stopped itself: {fatal}")
        life = self._life[nid]
        if role not in ROLES:
            self.fail(node, f"unknown role {role!r}")
        removing_itself = (
            role == "leader" and node.dynamic and life.epoch == epoch
        )  # leads on until committed
        if not node.is_voter and role in VOTER_ONLY_ROLES and not removing_itself:
            self.fail(node, f"observer in role {role}")
        if epoch < life.epoch:
            self.fail(node, f"epoch went back from {life.epoch} to {epoch}")
        life.epoch = epoch
        self.max_epoch = max(self.max_epoch, epoch)
        if epoch < node.disk.oracle.quorum_state.epoch:
            self.fail(node, f"epoch {epoch} is below its durable epoch {node.disk.oracle.quorum_state.epoch}")
        if role == "leader":
            if core.leader_id != nid:
                self.fail(node, f"leader of epoch {epoch} reports leader_id {core.leader_id}")
            other = self.leaders.setdefault(epoch, nid)
            if other != nid:
                self.fail(node, f"two leaders in epoch {epoch}: n{other} and n{nid}")
        if hw > core.log_end_offset:
            self.fail(node, f"high watermark {hw} beyond its own log end {core.log_end_offset}")
        if hw >= 0:
            if hw < life.hw:
                self.fail(node, f"high watermark went back from {life.hw} to {hw}")
            life.hw = hw
            if role == "leader":
                exposed = exposed_hw(core)
                if exposed >= 0:
                    self._newest_leader_hw(node, epoch, exposed)
            if hw > self.max_hw:
                self.max_hw = hw
                self.max_hw_epoch = None
                self.max_hw_voters = getattr(core, "voter_set", None) if role == "leader" else None
                if role == "leader":
                    e = node.disk.oracle.epoch_at(hw - 1)
                    self.max_hw_epoch = e if e is not None and e >= 0 else None
        self._check_majority()

    def _newest_leader_hw(self, node: SimNode, epoch: int, hw: int) -> None:
        if epoch < self.newest_leader_epoch:
            return
        if hw < self.newest_leader_hw:
            self.fail(
                node,
                f"leader high watermark went back: {hw} in epoch {epoch}, "
                f"{self.newest_leader_hw} seen in epoch {self.newest_leader_epoch}",
            )
        self.newest_leader_epoch, self.newest_leader_hw = epoch, hw

    def _check_majority(self) -> None:
        if self.max_hw <= 0:
            return
        offset = self.max_hw - 1
        epoch = self.epochs[offset] if offset < len(self.epochs) else self.max_hw_epoch
        voters = self.voters_at(self.max_hw)

        def holds(nid: int) -> bool:  # a voter holds data only on the storage it was added with
            return voters.includes(nid, self.nodes[nid].directory_id) and self._holds(nid, offset, epoch)

        for nid in sorted(self.recovering):
            if self.max_hw > self.recovering[nid] or holds(nid):
                del self.recovering[nid]
        holders = [v for v in sorted(voters.ids) if holds(v)]
        required = voters.majority() - len(self.recovering)
        leader_set = self.max_hw_voters
        if leader_set is not None and leader_set != voters:
            by_leader = [v for v in sorted(leader_set.ids) if leader_set.includes(v, self.nodes[v].directory_id)
                         and self._holds(v, offset, epoch)]  # fmt: skip
            if len(by_leader) >= leader_set.majority() - len(self.recovering):
                return
        if len(holders) < required:
            self.fail(
                None,
                f"offset {offset} (epoch {epoch}) is below the high watermark {self.max_hw} but only "
                f"voters {holders} hold it durably (need {required})",
            )

    def voters_at(self, offset: int) -> VoterSet:
        """The voter set of the committed log up to ``offset`` (exclusive)."""
        current = self.bootstrap
        for at, voters in self.voter_changes:
            if at >= offset:
                break
            current = voters
        return current

    def committed_voters(self) -> VoterSet:
        return self.voter_changes[-1][1] if self.voter_changes else self.bootstrap

    def _committed_voter_change(self, node: SimNode, batch: Batch) -> None:
        voters = VoterSet.decode(batch.records[-1])
        before = self.committed_voters()
        changed = voters.difference_size(before)
        if changed > 1:
            self.fail(
                node,
                f"the voter set changed by {changed} members at offset {batch.base_offset}: {before} -> {voters}",
            )
        self.voter_changes.append((batch.base_offset, voters))

    def _holds(self, nid: int, offset: int, epoch: int | None) -> bool:
        if epoch is None and offset < len(self.epochs):
            epoch = self.epochs[offset]
        held = self.nodes[nid].disk.oracle.epoch_at(offset)
        if held is None:
            return False
        return epoch is None or held in (HELD_IN_SNAPSHOT, epoch)

    # messages -----------------------------------------------------------------------------
    def on_send(self, node: SimNode, env: Envelope) -> None:
        if not self.send_checks:
            return
        msg = env.msg
        durable = node.disk.oracle
        if isinstance(msg, VoteResponse) and msg.vote_granted:
            # (in a dynamic quorum, a candidate may name as its voter a node whose log does
            # not say so yet; the durable-vote check below still holds it to one vote an epoch)
            if not node.was_voter and not node.dynamic:
                self.fail(node, f"observer granted a vote to n{env.dst}")
            qs = durable.quorum_state
            if not msg.pre_vote and not (
                qs.epoch > msg.epoch or (qs.epoch == msg.epoch and qs.voted_id == env.dst)
            ):
                self.fail(node, f"granted its epoch-{msg.epoch} vote to n{env.dst} but its disk holds {qs}")
        elif isinstance(msg, VoteRequest):
            if not node.is_voter:
                self.fail(node, "observer asked for votes")
        elif isinstance(msg, FetchRequest) and not node.is_voter:
            self._check_fetch_position(node, msg, node.disk.held, "holds")
        elif isinstance(msg, FetchRequest):
            self._check_fetch_position(node, msg, durable, "is durable")
        elif isinstance(msg, BeginQuorumEpochRequest):
            qs = durable.quorum_state
            if qs.epoch < msg.epoch:
                self.fail(node, f"announced leadership of epoch {msg.epoch} but its disk holds {qs}")

    def _check_fetch_position(self, node: SimNode, msg: FetchRequest, disk: DurableLog, what: str) -> None:
        """A fetch offset is a position the sender holds (a voter: durably), at the epoch it names."""
        end = disk.end_offset
        if msg.fetch_offset > end:
            self.fail(node, f"fetches from offset {msg.fetch_offset} but only {end} {what}")
        if msg.fetch_offset > 0:
            held = disk.epoch_at(msg.fetch_offset - 1)
            if held not in (msg.last_fetched_epoch, HELD_IN_SNAPSHOT):
                self.fail(
                    node,
                    f"fetches at ({msg.fetch_offset}, epoch {msg.last_fetched_epoch}) but its disk "
                    f"holds epoch {held} at offset {msg.fetch_offset - 1}",
                )

    # durability ---------------------------------------------------------------------------
    def on_durable(self, node: SimNode) -> None:
        history = self._disk[node.node_id]
        qs = node.disk.oracle.quorum_state
        if qs.epoch < history.epoch:
            self.fail(node, f"durable epoch went back from {history.epoch} to {qs.epoch}")
        history.epoch = qs.epoch
        if qs.voted_id >= 0:
            if not node.was_voter and not node.dynamic:
                self.fail(node, f"observer recorded a vote for n{qs.voted_id}")
            before = history.votes.setdefault(qs.epoch, qs.voted_id)
            if before != qs.voted_id:
                self.fail(node, f"voted twice in epoch {qs.epoch}: n{before}, then n{qs.voted_id}")

    def on_start(self, node: SimNode) -> None:
        self._life[node.node_id] = _Lifetime()

    def on_crash(self, node: SimNode, outcome: CrashOutcome) -> None:
        if outcome.kept is not None:
            self.on_durable(node)

    def on_wipe(self, node: SimNode) -> None:
        """``node``'s disk is about to be lost (it is down; the oracle still holds its contents)."""
        self._disk[node.node_id] = _DiskHistory()
        if node.is_voter:
            if not node.dynamic:  # a dynamic quorum's wiped voter is a new replica, never this voter
                self.wiped[node.node_id] = (self.max_hw, self.max_epoch)
            self.recovering[node.node_id] = node.disk.oracle.end_offset

    def unrecovered_wipes(self) -> list[int]:
        """Wiped voters that may still be missing committed data or forgotten votes."""
        for nid in sorted(self.wiped):
            hw, epoch = self.wiped[nid]
            qs = self.nodes[nid].disk.oracle.quorum_state
            # the core's own durable word that it is a full voter again (it then sits in an
            # epoch at least as new as any it heard, abstaining in that one) ...
            voting = not qs.recovering if hasattr(qs, "recovering") else qs.epoch > epoch
            # ... and the committed data it lost is back on its disk
            if voting and qs.epoch >= epoch and (hw <= 0 or self._holds(nid, hw - 1, None)):
                del self.wiped[nid]
        return sorted(self.wiped)

    # the committed log --------------------------------------------------------------------
    def on_committed(self, node: SimNode, batch: Batch) -> None:
        core = node.core
        assert core is not None
        if batch.base_offset != node.sm.state.next_offset:
            self.fail(
                node,
                f"committed batch at {batch.base_offset}, state machine expects {node.sm.state.next_offset}",
            )
        if batch.last_offset >= core.high_watermark:
            self.fail(
                node,
                f"committed batch [{batch.base_offset}, {batch.next_offset}) at high watermark {core.high_watermark}",
            )
        if batch.base_offset > len(self.epochs):
            self.fail(
                node, f"committed batch at {batch.base_offset}, the committed log has only {len(self.epochs)}"
            )
        if batch.next_offset > len(self.epochs):
            self._extend(node, batch)
        for i, record in enumerate(batch.records):
            offset = batch.base_offset + i
            want = None if batch.is_control else record
            if self.epochs[offset] != batch.epoch or self.records[offset] != want:
                self.fail(
                    node,
                    f"offset {offset} committed as epoch {batch.epoch} {want!r}, "
                    f"but earlier as epoch {self.epochs[offset]} {self.records[offset]!r}",
                )
        claim = self.claims.get((batch.base_offset, batch.epoch))
        if claim is not None and not batch.is_control and claim != batch.records:
            self.fail(
                node,
                f"propose() promised ({batch.base_offset}, epoch {batch.epoch}) to {claim!r}, "
                f"but {batch.records!r} committed there",
            )
        expected = self.boundaries.get(batch.next_offset)
        if expected is None:
            self.fail(
                node,
                f"committed batch ends at {batch.next_offset}, not a batch boundary of the committed log",
            )
        state = node.sm.state
        count = state.count + (0 if batch.is_control else len(batch.records))
        digest = state.digest
        if not batch.is_control:
            for record in batch.records:
                digest = chain(digest, record)
        if expected != SmState(batch.next_offset, count, digest):
            self.fail(node, f"state after offset {batch.next_offset} differs from the committed history")

    def _extend(self, node: SimNode, batch: Batch) -> None:
        """Append the part of ``batch`` beyond the known committed log."""
        start = len(self.epochs)
        last_epoch = self.epochs[-1] if self.epochs else 0
        if batch.epoch < last_epoch:
            self.fail(
                node,
                f"committed batch at {batch.base_offset} has epoch {batch.epoch} after epoch {last_epoch}",
            )
        if batch.base_offset == start and batch.epoch > last_epoch and batch.kind != BatchKind.LEADER_CHANGE:
            self.fail(node, f"epoch {batch.epoch} starts its committed log with a {batch.kind.name} batch")
        if batch.kind == BatchKind.VOTERS and batch.base_offset >= start:
            self._committed_voter_change(node, batch)
        prev = self.boundaries[start]
        digest, count = prev.digest, prev.count
        for record in batch.records[start - batch.base_offset :]:
            offset = len(self.epochs)
            self.epochs.append(batch.epoch)
            if batch.is_control:
                self.records.append(None)
                continue
            self.records.append(record)
            before = self.offset_of.setdefault(record, offset)
            if before != offset:
                self.fail(node, f"record {record!r} committed twice: at {before} and {offset}")
            digest = chain(digest, record)
            count += 1
        self.boundaries[batch.next_offset] = SmState(batch.next_offset, count, digest)

    def on_restore(self, node: SimNode, snapshot: Snapshot) -> None:
        state = SmState.decode(snapshot.data)
        offset = snapshot.id.offset
        if offset > self.max_hw:
            self.fail(node, f"restores snapshot {snapshot.id} above the highest high watermark {self.max_hw}")
        expected = self.boundaries.get(offset)
        if expected != state:
            self.fail(node, f"snapshot {snapshot.id} holds {state}, the committed history says {expected}")
        if offset > 0 and self.epochs[offset - 1] != snapshot.id.epoch:
            self.fail(
                node,
                f"snapshot {snapshot.id}: offset {offset - 1} committed in epoch {self.epochs[offset - 1]}",
            )

    # summaries ------------------------------------------------------------------------------
    @property
    def committed_offsets(self) -> int:
        return len(self.epochs)

    @property
    def committed_records(self) -> int:
        return len(self.offset_of)
