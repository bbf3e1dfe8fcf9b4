"""One simulated process: the real RaftCore plus its disk and state machine.

``SimNode`` turns scheduler events into core calls and the core's ``Ready`` into
scheduled effects: a write completes after a simulated fsync, sends enter the network,
committed batches reach the state machine. After every event it re-polls the core,
re-arms its timer, records a trace line and lets the checker inspect the node.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from raftka.raft.batch import Batch, OffsetAndEpoch
from raftka.raft.config import RaftConfig
from raftka.raft.core import NotLeaderError
from raftka.raft.effects import Ready, Snapshot, Write
from raftka.raft.messages import (
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    Envelope,
    FetchResponse,
    FetchSnapshotResponse,
    VoteResponse,
)
from raftka.raft.storage.base import LoadedState
from raftka.raft.voters import Voter, VoterSet
from tests.simulation.disk import CrashOutcome, SimDisk
from tests.simulation.network import REQUEST_TYPES, Network
from tests.simulation.scheduler import Handle, Scheduler
from tests.simulation.statemachine import StateMachine
from tests.simulation.trace import Trace

RESPONSE_FOR = {
    "VoteRequest": VoteResponse,
    "BeginQuorumEpochRequest": BeginQuorumEpochResponse,
    "EndQuorumEpochRequest": EndQuorumEpochResponse,
    "FetchRequest": FetchResponse,
    "FetchSnapshotRequest": FetchSnapshotResponse,
}
READY_ROUNDS_MAX = 100  # a core whose ready() never drains is livelocked


def role_of(core: Core) -> str:
    """The role as a string (``role_name`` when the core has one: observers report 'observer')."""
    name = getattr(core, "role_name", None)
    if name is None:
        name = core.role
    return str(getattr(name, "value", name))


def exposed_hw(core: Core) -> int:
    """The high watermark the node tells others (a new leader: -1 until its epoch commits)."""
    exposed = getattr(core, "exposed_high_watermark", None)
    return exposed() if exposed is not None else core.high_watermark


class CoreContractError(AssertionError):
    """The core broke its driver contract (a core bug, reported with the node and event)."""


class Core(Protocol):
    """The surface of RaftCore the simulator drives and inspects."""

    node_id: int
    role: Any
    epoch: int
    leader_id: int
    high_watermark: int
    log_end_offset: int
    log_start_offset: int

    def step(self, envelope: Envelope, now_ms: int) -> None: ...
    def unreachable(self, peer_id: int, now_ms: int) -> None: ...
    def poll(self, now_ms: int) -> int: ...
    def propose(self, records: Sequence[bytes], now_ms: int) -> OffsetAndEpoch: ...
    def persisted(self, write_id: int, now_ms: int) -> None: ...
    def snapshot_saved(self, snapshot: Snapshot) -> None: ...
    def resign(self, now_ms: int) -> None: ...
    def ready(self) -> Ready: ...


CoreFactory = Callable[[int, frozenset[int], str, RaftConfig, LoadedState, random.Random, int], Core]


class Checker(Protocol):
    """The invariants, told about everything a node does."""

    def after_event(self, node: SimNode) -> None: ...
    def on_send(self, node: SimNode, env: Envelope) -> None: ...
    def on_committed(self, node: SimNode, batch: Batch) -> None: ...
    def on_restore(self, node: SimNode, snapshot: Snapshot) -> None: ...
    def on_durable(self, node: SimNode) -> None: ...
    def on_start(self, node: SimNode) -> None: ...
    def on_crash(self, node: SimNode, outcome: CrashOutcome) -> None: ...
    def on_wipe(self, node: SimNode) -> None: ...


@dataclass(slots=True)
class DiskParams:
    fsync_min_ms: int = 1
    fsync_max_ms: int = 5
    spike_probability: float = 0.0
    spike_max_ms: int = 100
    torn_probability: float = 0.3  # of a crash with a write in flight
    snapshot_save_max_ms: int = 20  # the state machine's snapshot takes this long to be durable


@dataclass(slots=True)
class _Rpc:
    src: int
    call_id: int
    request_type: str


class SimNode:
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int] | VoterSet,
        cluster_id: str,
        config: RaftConfig,
        factory: CoreFactory,
        scheduler: Scheduler,
        network: Network,
        rng: random.Random,
        disk_params: DiskParams,
        snapshot_every: int,
        checker: Checker,
        trace: Trace,
    ) -> None:
        self.node_id = node_id
        self.voters = voters  # the static set, or a dynamic quorum's bootstrap set (KIP-853)
        self.dynamic = isinstance(voters, VoterSet)
        self.disk_generation = 0  # bumped by every wipe: a new disk has a new directory id
        self.was_voter = node_id in voters  # since the disk was new: may hold a vote
        self._is_voter = self.was_voter  # as last seen (the core's word while it runs)
        self.cluster_id = cluster_id
        self.config = config
        self.factory = factory
        self.scheduler = scheduler
        self.network = network
        self.rng = rng
        self.disk_params = disk_params
        self.checker = checker
        self.trace = trace
        self.disk = SimDisk(node_id, cluster_id)
        self.sm = StateMachine(node_id, snapshot_every)
        self.core: Core | None = None
        self.up = False
        self.incarnation = 0  # bumped by every start and crash
        self.ack_before_fsync = False  # a deliberately broken driver (self-test only)
        # a paused process (SIGSTOP, a long GC) handles nothing; its disk and the network
        # carry on, and it handles what queued up, in order, when it resumes
        self.paused = False
        self._deferred: list[tuple[str, Any, Callable[[int], None] | None]] = []

        self._timer: Handle | None = None
        # the disk works through one FIFO queue, like the driver's single I/O thread
        self._disk_ops: list[tuple[Handle, Write | Snapshot]] = []
        self._next_rpc = 0
        self._rpcs: dict[int, _Rpc] = {}

    @property
    def directory_id(self) -> str:
        return f"dir-{self.node_id}-{self.disk_generation}" if self.dynamic else ""

    @property
    def is_voter(self) -> bool:
        core = self.core
        if core is not None:
            # a voter, or one an uncommitted change removes: it may still campaign (raft core)
            self._is_voter = bool(
                getattr(core, "may_campaign", getattr(core, "is_voter", self.node_id in self.voters))
            )
            self.was_voter = self.was_voter or self._is_voter
        return self._is_voter

    def recovering(self) -> bool:
        """The node withholds its vote: its storage started new or wiped and it has not yet
        heard every voter and caught up. Read from the durable quorum state (the core persists
        the flag) or, while it runs, from the core itself.
        """
        if getattr(self.disk.oracle.quorum_state, "recovering", False):
            return True
        core = self.core
        return core is not None and core.recovering

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        assert not self.up
        loaded = self.disk.load()
        core_rng = random.Random(self.rng.getrandbits(64))
        self.incarnation += 1
        self.up = True
        if loaded.snapshot is not None:
            self.checker.on_restore(self, loaded.snapshot)
        self.sm.reset(loaded.snapshot)
        extra = {"directory_id": self.directory_id} if self.dynamic else {}
        self.core = self.factory(
            self.node_id,
            self._formatted_voters(),  # type: ignore[arg-type]
            self.cluster_id,
            self.config,
            loaded,
            core_rng,
            self.scheduler.now_ms,
            **extra,
        )
        self.checker.on_start(self)
        self._event("start", f"inc={self.incarnation} snap={loaded.snapshot.id if loaded.snapshot else None}")

    def _formatted_voters(self) -> frozenset[int] | VoterSet:
        """What this disk was formatted with: a dynamic quorum's initial voters hold its
        bootstrap set; any other node (an observer, a replaced disk) only the configured
        ids, and learns the voter set from the log."""
        if isinstance(self.voters, VoterSet) and not (
            self.node_id in self.voters and self.disk_generation == 0
        ):
            return self.voters.ids
        return self.voters

    def crash(self) -> None:
        """Power off: in-flight fsyncs and volatile state are lost."""
        if not self.up:
            return
        if self._timer is not None:
            self._timer.cancel()
        write_started = bool(self._disk_ops) and isinstance(self._disk_ops[0][1], Write)
        for handle, _ in self._disk_ops:
            handle.cancel()
        self._disk_ops.clear()
        torn = self.disk_params.torn_probability
        outcome = self.disk.crash(self.rng, torn, write_started)
        self.core = None
        self.up = False
        self.paused = False
        self._deferred.clear()
        self.incarnation += 1
        self.sm.generation += 1
        self._rpcs.clear()
        kept = "-" if outcome.kept is None else f"kept {outcome.kept.write_id}"
        lost = "-" if outcome.lost is None else f"lost write {outcome.lost.write_id}"
        self.trace.add((self.scheduler.now_ms, self.node_id, "CRASH", f"{lost} {kept}", "", 0, 0, 0))
        self.checker.on_crash(self, outcome)

    def wipe(self) -> None:
        """Replace the disk (crashing first if needed); the caller restarts the node."""
        self.crash()
        self.checker.on_wipe(self)
        self.disk.wipe()
        self.disk_generation += 1
        self.was_voter = self._is_voter = False if self.dynamic else self.node_id in self.voters
        self.trace.add((self.scheduler.now_ms, self.node_id, "WIPE", "disk replaced", "", 0, 0, 0))

    def pause(self) -> None:
        if self.up and not self.paused:
            self.paused = True
            self.trace.add((self.scheduler.now_ms, self.node_id, "PAUSE", "process stopped", "", 0, 0, 0))

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        deferred, self._deferred = self._deferred, []
        self.trace.add(
            (self.scheduler.now_ms, self.node_id, "RESUME", f"{len(deferred)} queued", "", 0, 0, 0)
        )
        for what, detail, action in deferred:
            if not self.up or self.paused:
                break
            self._event(what, detail, action)

    # events ------------------------------------------------------------------------------
    def deliver(self, env: Envelope, call_id: int) -> None:
        if isinstance(env.msg, REQUEST_TYPES):
            self._next_rpc += 1
            env = Envelope(env.src, env.dst, env.msg, self._next_rpc)
            self._rpcs[self._next_rpc] = _Rpc(env.src, call_id, type(env.msg).__name__)
        core = self.core
        assert core is not None
        self._event("recv", env, lambda now: core.step(env, now))

    def on_unreachable(self, peer_id: int, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        core = self.core
        assert core is not None
        self._event("unreach", f"peer {peer_id}", lambda now: core.unreachable(peer_id, now))

    def propose(self, records: list[bytes]) -> OffsetAndEpoch:
        """Raises NotLeaderError like the core does."""
        core = self.core
        assert core is not None
        result: list[OffsetAndEpoch | NotLeaderError] = []

        def act(now: int) -> None:
            try:
                result.append(core.propose(records, now))
            except NotLeaderError as e:
                result.append(e)

        self._event("propose", f"{len(records)} records", act)
        if isinstance(result[0], NotLeaderError):
            raise result[0]
        return result[0]

    def change_voters(self, change: Callable[[Any, int], object]) -> object:
        """Run ``change(core, now)`` (add_voter, remove_voter) as an event; returns what it
        returned or the exception it raised (NotLeaderError, VoterChangeError)."""
        core = self.core
        assert core is not None
        result: list[object] = []

        def act(now: int) -> None:
            try:
                result.append(change(core, now))
            except Exception as e:  # noqa: BLE001  (refusals are the caller's to judge)
                result.append(e)

        self._event("voters", "change", act)
        return result[0] if result else None

    def voter(self) -> Voter:
        return Voter(self.node_id, self.directory_id)

    def resign(self) -> None:
        core = self.core
        assert core is not None
        self._event("resign", None, lambda now: core.resign(now))

    def _on_timer(self, incarnation: int) -> None:
        if incarnation != self.incarnation:
            return
        self._timer = None
        self._event("poll", None)

    def _on_disk_done(self, incarnation: int) -> None:
        """The operation at the head of the disk queue finished: a write or a snapshot save."""
        assert incarnation == self.incarnation and self.up
        _, op = self._disk_ops.pop(0)
        core = self.core
        assert core is not None
        if isinstance(op, Snapshot):
            self.disk.save_snapshot(op)
            self.checker.on_durable(self)
            self._event("snapshot", f"saved {op.id}", lambda now: core.snapshot_saved(op))
            return
        write = self.disk.complete()
        assert write is op
        self.checker.on_durable(self)
        if self.ack_before_fsync:
            self._event("fsync", f"write {write.write_id} (acked early)")
        else:
            self._event("fsync", f"write {write.write_id}", lambda now: core.persisted(write.write_id, now))

    def _enqueue_disk_op(self, op: Write | Snapshot, delay_ms: int) -> None:
        """Queue ``op`` behind the disk's earlier operations (they complete in order)."""
        now = self.scheduler.now_ms
        if self._disk_ops:
            delay_ms = max(delay_ms, self._disk_ops[-1][0].time_ms - now)
        self._disk_ops.append((self.scheduler.after(delay_ms, self._on_disk_done, self.incarnation), op))

    # driving the core ----------------------------------------------------------------------
    def _event(self, what: str, detail: Any, action: Callable[[int], None] | None = None) -> None:
        """Run one event against the core, then drain its output and re-arm the timer."""
        core = self.core
        assert core is not None and self.up
        if self.paused:
            self._deferred.append((what, detail, action))
            return
        now = self.scheduler.now_ms
        try:
            if action is not None:
                action(now)
        finally:
            self.trace.add(
                (
                    now,
                    self.node_id,
                    what,
                    detail,
                    role_of(core),
                    core.epoch,
                    core.high_watermark,
                    core.log_end_offset,
                )
            )
        self._drain(core, now)
        self.checker.after_event(self)

    def _drain(self, core: Core, now: int) -> None:
        for _ in range(READY_ROUNDS_MAX):
            wait_ms = core.poll(now)
            ready = core.ready()
            if not ready:
                break
            self._handle(core, ready, now)
        else:
            raise CoreContractError(f"n{self.node_id}: ready() did not drain in {READY_ROUNDS_MAX} rounds")
        if wait_ms < 0:
            raise CoreContractError(f"n{self.node_id}: poll() asked to be polled {wait_ms} ms ago")
        due = now + wait_ms
        if self._timer is not None:
            if self._timer.time_ms == due:
                return
            self._timer.cancel()
        self._timer = self.scheduler.at(due, self._on_timer, self.incarnation)

    def _handle(self, core: Core, ready: Ready, now: int) -> None:
        if ready.write is not None:
            self._submit(core, ready.write, now)
        for env in ready.send:
            self._send(env)
        if ready.restore is not None:
            self.checker.on_restore(self, ready.restore)
            self.sm.reset(ready.restore)
        due: Snapshot | None = None
        for batch in ready.committed:
            self.checker.on_committed(self, batch)
            due = self.sm.apply(batch) or due
        if due is not None:  # only the newest of the snapshots this burst made due
            stamp = getattr(core, "snapshot_with_voters", None)
            due = stamp(due) if stamp is not None else due
            self._enqueue_disk_op(due, self.rng.randint(1, self.disk_params.snapshot_save_max_ms))

    def _submit(self, core: Core, write: Write, now: int) -> None:
        self.disk.submit(write)
        p = self.disk_params
        delay = self.rng.randint(p.fsync_min_ms, p.fsync_max_ms)
        if p.spike_probability and self.rng.random() < p.spike_probability:
            delay += self.rng.randint(0, p.spike_max_ms)
        self._enqueue_disk_op(write, delay)
        if self.ack_before_fsync:
            core.persisted(write.write_id, now)

    def _send(self, env: Envelope) -> None:
        if env.src != self.node_id:
            raise CoreContractError(f"n{self.node_id}: sent an envelope from n{env.src}")
        if env.dst == self.node_id or env.dst not in self.network.nodes:
            raise CoreContractError(f"n{self.node_id}: sent to unknown or self n{env.dst}")
        self.checker.on_send(self, env)
        if isinstance(env.msg, REQUEST_TYPES):
            self.network.send(env, self.incarnation)
            return
        rpc = self._rpcs.pop(env.rpc_id, None)
        if rpc is None:
            raise CoreContractError(f"n{self.node_id}: response to unknown or answered rpc #{env.rpc_id}")
        if rpc.src != env.dst or not isinstance(env.msg, RESPONSE_FOR[rpc.request_type]):
            raise CoreContractError(
                f"n{self.node_id}: rpc #{env.rpc_id} was a {rpc.request_type} from n{rpc.src}, "
                f"answered with {type(env.msg).__name__} to n{env.dst}"
            )
        self.network.send(env, self.incarnation, rpc.call_id)
