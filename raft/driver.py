"""RaftNode: runs one RaftCore on an asyncio loop and gives the layer above its API.

Every event (a message, an unreachable peer, a timer, a proposal, a finished write) is
applied to the core on the loop thread, one at a time, with no ``await`` in between,
so the core's state changes run to completion. Output is collected once per loop
iteration (``_flush``): all proposals that arrived in one iteration leave in one
write and one fsync, which is what makes many appends in flight cheap.

Writes run on one dedicated thread, in order, one at a time; the core keeps
accumulating the next write meanwhile (group commit).

Committed batches reach the state machine in slices: at most ``append_max_records``
records per loop turn (one full batch: ~40 ms of metadata replay), the rest on the next
turns. A change of 100,000 records commits at once on every node (the fence of a broker
in that many ISRs) and took 1.6 s to replay in one turn, during which a leader answered
no fetch and its followers elected another; between slices the loop serves everything
else. The slices keep the log's order, snapshots included, and an ``append`` resolves
only once its batch has been applied.

The layer above gets:
- ``await append(records)``: the offset of the last record once committed, or
  ``NotLeaderError`` (with the leader's id) when this node does not lead or lost the
  lead before the batch committed (it may or may not have committed then);
  ``submit(records)`` proposes at once and returns that future, for a caller that
  needs several batches back to back;
- a ``StateMachine`` that receives every committed batch in order (raft's control
  batches too) and snapshots to restore; it hands snapshots of its own state back with
  ``save_snapshot``;
- leadership pushed, not polled (Kafka's ``RaftClient.Listener.handleLeaderChange``):
  listeners added with ``add_leadership_listener`` hear every change of leader or epoch.
  This node's own leadership is announced only once its epoch's LeaderChange batch has
  committed and every committed batch has been applied (slices included), so every
  earlier batch has reached the state machine: the layer above may act as leader on its
  state at once. A resigned, stopped or failed node announces no leader.
- whether it has caught up (``caught_up``, pushed to ``add_caught_up_listener``), what
  a health check reports: the announced leader, or a follower or observer of a live
  leader that has applied everything up to the high watermark that leader last sent it.
  It turns false as soon as ``shutdown`` starts.

Fail-stop: an exception in any event (a bug in the core, a transport or storage that
raises, a state machine that cannot apply) stops the node: it is logged with its
traceback, ``fatal_error`` says why, pending appends fail and ``wait_stopped`` returns,
so the process exits with the reason. A node that carried on after a half-handled event
would stay up and say nothing.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from raftka.raft.batch import Batch, OffsetAndEpoch
from raftka.raft.config import RaftConfig
from raftka.raft.core import NotLeaderError, QuorumDescription, RaftCore
from raftka.raft.effects import Ready, Snapshot, Write
from raftka.raft.endpoints import VoterEndpoints
from raftka.raft.messages import NO_LEADER, Envelope
from raftka.raft.metrics import RaftMetrics, now_s
from raftka.raft.roles import Role
from raftka.raft.storage.base import Storage
from raftka.raft.transport.base import Transport
from raftka.raft.voters import VoterSet

log = structlog.get_logger("raftka.raft.driver")

PENDING_APPENDS_MAX = 16384  # bound: appends awaiting commit on one leader
OVERLAP_WARNING_INTERVAL_MS = 60_000  # at most one warning a minute about observers sharing an id
# bound: committed records waiting for their slice. Beyond it they are applied in the
# current turn, stalling the loop rather than falling further behind. Each is also still
# in the log, so the backlog costs references, not copies.
APPLY_BACKLOG_RECORDS_MAX = 1_000_000
GIL_SWITCH_INTERVAL_S = 0.0002


class StateMachine(Protocol):
    """The layer above. Called on the loop thread; must not block or await."""

    def apply(self, batch: Batch) -> None:
        """A committed batch, in offset order, exactly once per incarnation.

        Control batches (``batch.is_control``) hold raft's records, not the layer
        above's: it replays none of them, but they move its offset on and count toward
        its next snapshot, which may end at one. An idle cluster appends nothing else,
        and its log must not grow without bound.
        """
        ...

    def restore(self, snapshot: Snapshot) -> None:
        """Replace all state with this snapshot; batches after it follow."""
        ...


class BackpressureError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """What the layer above is told about leadership (see the module doc)."""

    leader_id: int  # NO_LEADER (-1) when none is known, or this node has not yet caught up
    epoch: int


LeadershipListener = Callable[[LeaderAndEpoch], None]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class RaftNode:
    def __init__(
        self,
        core: RaftCore,
        storage: Storage,
        transport: Transport,
        state_machine: StateMachine,
        *,
        clock: Callable[[], int] = monotonic_ms,
        endpoints: VoterEndpoints | None = None,
    ) -> None:
        self.core = core
        # where each voter is (the log's voter set over the configured): one for all its users
        self.endpoints = endpoints or VoterEndpoints({}, lambda: core.voter_set)
        self._storage = storage
        self._transport = transport
        self._state_machine = state_machine
        self._clock = clock
        self._io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"raft-io-{core.node_id}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._writing = False
        # base offset -> (epoch, future, when proposed: for the commit latency metric)
        self._pending: dict[int, tuple[int, asyncio.Future[int], float]] = {}
        self._voters_seen: VoterSet | None = None  # the voter set whose addresses the transport knows
        # Committed, not yet applied, in log order; _committed_end: the offset after them.
        self._to_apply: collections.deque[Batch | Snapshot] = collections.deque()
        self._backlog_records = 0
        self._committed_end = 0
        self._last_seen = (core.role_name, core.epoch, core.leader_id)
        self._leadership = LeaderAndEpoch(NO_LEADER, core.epoch)
        self._leadership_listeners: list[LeadershipListener] = []
        self._caught_up = False
        self._caught_up_listeners: list[Callable[[bool], None]] = []
        self._peer_connection_listeners: list[Callable[[int, bool], None]] = []
        self._stopped = asyncio.Event()
        self._closed = False
        self._foreign_peers_seen = 0
        self._overlaps_seen = 0
        self._overlap_warning_due_ms = 0
        self.fatal_error: str | None = None
        self.metrics = RaftMetrics()
        self._log = log.bind(node_id=core.node_id)

    # lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        # A finished fsync must get the GIL back from the busy loop thread at once, not
        # after CPython's default 5 ms switch interval: that wait was most of a commit.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        self._loop = asyncio.get_running_loop()
        await self._transport.start(self)
        self._log.info("raft node started", role=self.core.role_name, epoch=self.core.epoch)
        self._schedule_flush()

    async def shutdown(self, *, graceful: bool = True, grace_s: float = 0.05) -> None:
        """Stop and release everything. A leader first resigns and gives its successors a
        moment to hear it. Also after a fatal error, which stopped the node but closed nothing."""
        if self._closed:
            return
        self._closed = True
        self._publish_caught_up()
        if graceful and self.core.is_leader and not self._stopped.is_set():
            self.resign()
            await asyncio.sleep(grace_s)
        self._stop(NotLeaderError(self.core.leader_id, self.core.epoch))
        await self._transport.close()
        self._io.shutdown(wait=True)
        self._storage.close()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # API for the layer above ----------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self.core.node_id

    @property
    def cluster_id(self) -> str:
        return self.core.cluster_id

    @property
    def config(self) -> RaftConfig:
        return self.core.cfg

    @property
    def log_end_offset(self) -> int:
        """Where the next appended batch will start."""
        return self.core.log_end_offset

    @property
    def is_leader(self) -> bool:
        """Raft leadership, which comes before the announcement to listeners."""
        return self.core.is_leader

    @property
    def leadership(self) -> LeaderAndEpoch:
        """The leadership listeners were last told about."""
        return self._leadership

    @property
    def append_capacity(self) -> int:
        """How many more batches ``submit`` accepts before it refuses with BackpressureError."""
        return PENDING_APPENDS_MAX - len(self._pending)

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Called on the loop thread, without awaiting, on every change (see the module doc)."""
        self._leadership_listeners.append(listener)

    @property
    def caught_up(self) -> bool:
        """What listeners were last told (see the module doc)."""
        return self._caught_up

    def add_caught_up_listener(self, listener: Callable[[bool], None]) -> None:
        """Called on the loop thread, without awaiting, whenever ``caught_up`` changes."""
        self._caught_up_listeners.append(listener)

    def add_peer_connection_listener(self, listener: Callable[[int, bool], None]) -> None:
        """Called on the loop thread, without awaiting, with ``(peer_id, connected)`` when a
        peer's first connection into this node opens or its last one closes (see
        ``raftka.raft.transport.base``)."""
        self._peer_connection_listeners.append(listener)

    async def append(self, records: Sequence[bytes]) -> int:
        return await self.submit(records)

    def submit(self, records: Sequence[bytes]) -> asyncio.Future[int]:
        """``append`` without the wait: the batch is in the log when this returns, so
        batches submitted one after another, with no ``await`` between, are contiguous."""
        if self._stopped.is_set():
            raise NotLeaderError(self.core.leader_id, self.core.epoch)
        if self.append_capacity <= 0:
            raise BackpressureError(f"{PENDING_APPENDS_MAX} appends already await commit")
        position = self.core.propose(records, self._clock())
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending[position.offset] = (position.epoch, future, now_s())
        self._schedule_flush()
        return future

    async def change_voters(self, change: Callable[[RaftCore, int], OffsetAndEpoch]) -> int:
        """Run a voter change on the leader's core (``RaftCore.add_voter``, ``remove_voter``,
        ``update_voter``) and wait until its VotersRecord commits; returns its last offset.
        Raises NotLeaderError or VoterChangeError at once, NotLeaderError if leadership is
        lost before the record commits."""
        if self._stopped.is_set():
            raise NotLeaderError(self.core.leader_id, self.core.epoch)
        position = change(self.core, self._clock())
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending[position.offset] = (position.epoch, future, now_s())
        self._schedule_flush()
        return await future

    def resign(self) -> None:
        """Give up leadership now (EndQuorumEpoch to the most caught-up voters), e.g. when
        the layer above can no longer vouch for what it has proposed."""
        if self.core.is_leader and not self._stopped.is_set():
            self.core.resign(self._clock())
            self._flush()

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Persist the layer above's state at a committed offset, then compact the log.
        Dropped once the node has stopped: a stopped node's log stays as it is."""
        assert self._loop is not None
        if self._stopped.is_set():
            return
        snapshot = self.core.snapshot_with_voters(snapshot)  # raft's voter set travels with it

        def saved(done: concurrent.futures.Future[None]) -> None:
            if done.exception() is not None:
                self._log.error("snapshot write failed", error=str(done.exception()))
                return
            if self._stopped.is_set():
                return
            with self._fail_stop():
                self.core.snapshot_saved(snapshot)
                self.metrics.snapshot_generated(len(snapshot.data))
                self._log.info("snapshot saved", offset=snapshot.id.offset, bytes=len(snapshot.data))

        job = self._io.submit(self._storage.save_snapshot, snapshot)
        job.add_done_callback(lambda done: self._loop.call_soon_threadsafe(saved, done))  # type: ignore[union-attr]

    def describe(self) -> QuorumDescription:
        return self.core.describe()

    # Inbox for the transport ---------------------------------------------------------
    def deliver(self, envelope: Envelope) -> None:
        if self._stopped.is_set():
            return
        with self._fail_stop():
            self.core.step(envelope, self._clock())
        self._schedule_flush()

    def unreachable(self, peer_id: int) -> None:
        if self._stopped.is_set():
            return
        with self._fail_stop():
            self.core.unreachable(peer_id, self._clock())
        self._schedule_flush()

    def peer_connected(self, peer_id: int) -> None:
        for listener in self._peer_connection_listeners:
            listener(peer_id, True)

    def peer_disconnected(self, peer_id: int) -> None:
        for listener in self._peer_connection_listeners:
            listener(peer_id, False)

    # the loop -------------------------------------------------------------------------
    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None and not self._stopped.is_set():
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _on_timer(self) -> None:
        self._timer = None
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._stopped.is_set():
            return
        with self._fail_stop():
            self._run_ready()

    def _run_ready(self) -> None:
        """Poll the core and carry out what it asks."""
        core = self.core
        wait_ms = core.poll(self._clock())
        ready = core.ready()
        self._enqueue(ready)
        try:
            self._apply_slice()
        except Exception as e:  # the layer above cannot follow the log: stopping is the only safe move
            self._log.exception("state machine failed")
            self._fail(f"the state machine failed to apply committed records: {e!r}")
            return
        if core.fatal_error is not None:
            self._fail(core.fatal_error)
            return
        self._notice_role_change()
        self._learn_voter_addresses()
        self._publish_leadership()
        self._publish_caught_up()
        if len(core.foreign_peers) != self._foreign_peers_seen:
            self._foreign_peers_seen = len(core.foreign_peers)
            self._log.error(
                "peers refuse our cluster id: they, or this node, were formatted for another cluster",
                peers=sorted(core.foreign_peers),
                cluster_id=core.cluster_id,
            )
        self._notice_overlapping_observers()
        if ready.write is not None:
            self._start_write(ready.write)
        for envelope in ready.send:
            self._transport.send(envelope)
        self._arm_timer(wait_ms)
        if self._to_apply:
            self._schedule_flush()  # the next slice, once the loop has served what waits

    def _enqueue(self, ready: Ready) -> None:
        if ready.restore is not None:
            self._to_apply.append(ready.restore)
            self._committed_end = ready.restore.id.offset
        for batch in ready.committed:
            self._to_apply.append(batch)
            self._backlog_records += _cost(batch)
            self._committed_end = batch.next_offset

    def _apply_slice(self) -> None:
        """Apply up to one slice of the backlog (see the module doc); a snapshot is a slice."""
        budget = max(self.core.cfg.append_max_records, self._backlog_records - APPLY_BACKLOG_RECORDS_MAX)
        applied = 0
        while self._to_apply and not self._stopped.is_set():
            item = self._to_apply[0]
            cost = budget if isinstance(item, Snapshot) else _cost(item)
            if applied and applied + cost > budget:
                return
            self._to_apply.popleft()
            applied += cost
            if isinstance(item, Snapshot):
                self._state_machine.restore(item)
            else:
                self._backlog_records -= cost
                self._apply(item)

    def _apply(self, batch: Batch) -> None:
        self._state_machine.apply(batch)
        waiter = self._pending.pop(batch.base_offset, None)
        if waiter is None:
            return
        epoch, future, proposed_s = waiter
        if future.done():
            return
        if epoch == batch.epoch:
            future.set_result(batch.last_offset)
            self.metrics.commit_latency.observe_since(proposed_s)
        else:
            future.set_exception(NotLeaderError(self.core.leader_id, self.core.epoch))

    def _notice_role_change(self) -> None:
        core = self.core
        seen = (core.role_name, core.epoch, core.leader_id)
        if seen == self._last_seen:
            return
        self._last_seen = seen
        self._log.info("quorum state changed", role=seen[0], epoch=seen[1], leader_id=seen[2])
        self.metrics.elections_seen(core.elections_ended, core.last_election_ms)
        if not core.is_leader and self._pending:
            # Batches already committed are answered when their slice is applied.
            self._fail_pending(NotLeaderError(core.leader_id, core.epoch), from_offset=self._committed_end)

    def _learn_voter_addresses(self) -> None:
        """Voters the log added or moved (KIP-853) are reached at the endpoints their record
        names (``raftka.raft.endpoints``: the configured addresses only bootstrap)."""
        voters = self.core.voter_set
        if voters is self._voters_seen:
            return
        self._voters_seen = voters
        for voter in voters.voters():
            if voter.endpoints:
                self._transport.add_peer(voter.node_id, voter.endpoints[0])

    def _publish_leadership(self) -> None:
        core = self.core
        if self._stopped.is_set() or core.role is Role.RESIGNED:
            leader_id = NO_LEADER
        elif core.is_leader:
            # Its epoch's first batch has committed and every committed batch is applied.
            caught_up = core.exposed_high_watermark() >= 0 and not self._to_apply
            leader_id = core.node_id if caught_up else NO_LEADER
        else:
            leader_id = core.leader_id
        leadership = LeaderAndEpoch(leader_id, core.epoch)
        if leadership == self._leadership:
            return
        self._leadership = leadership
        for listener in self._leadership_listeners:
            listener(leadership)

    def _publish_caught_up(self) -> None:
        """The leader once announced; anyone else once it has applied every batch up to the
        high watermark a live leader of this epoch last sent it (``_committed_end`` is the
        end of what the core has handed over, applied once ``_to_apply`` is empty)."""
        core = self.core
        if self._closed or self._stopped.is_set() or self._to_apply:
            caught_up = False
        elif core.is_leader:
            caught_up = self._leadership.leader_id == core.node_id
        else:
            heard = core.leader_high_watermark
            caught_up = heard >= 0 and self._committed_end >= heard
        if caught_up == self._caught_up:
            return
        self._caught_up = caught_up
        for listener in self._caught_up_listeners:
            listener(caught_up)

    def _notice_overlapping_observers(self) -> None:
        """Fetches from one observer id overlapped: two processes are probably configured
        with that node id (see ``RaftCore._on_fetch_request``). Said once a minute at most."""
        core = self.core
        if core.observer_fetch_overlaps == self._overlaps_seen:
            return
        self._overlaps_seen = core.observer_fetch_overlaps
        now = self._clock()
        if now < self._overlap_warning_due_ms:
            return
        self._overlap_warning_due_ms = now + OVERLAP_WARNING_INTERVAL_MS
        self._log.warning(
            "fetches from one observer id overlap",
            observer_id=core.overlapping_observer_id,
            overlaps=core.observer_fetch_overlaps,
            hint="two processes may be configured with this node_id",
        )

    def _arm_timer(self, wait_ms: int) -> None:
        assert self._loop is not None
        when = self._loop.time() + wait_ms / 1000
        if self._timer is not None:
            if abs(self._timer.when() - when) < 0.0005:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._on_timer)

    def _start_write(self, write: Write) -> None:
        assert self._loop is not None and not self._writing
        self._writing = True
        self.metrics.written(write.append, leader=self.core.is_leader)
        loop = self._loop

        def finished(done: concurrent.futures.Future[None]) -> None:
            self._writing = False
            if self._stopped.is_set():
                return
            error = done.exception()
            if error is not None:
                self._fail(f"log write failed: {error}")
                return
            with self._fail_stop():
                self.core.persisted(write.write_id, self._clock())
            self._flush()

        job = self._io.submit(self._storage.write, write)
        job.add_done_callback(lambda done: loop.call_soon_threadsafe(finished, done))

    # failure --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _fail_stop(self) -> Iterator[None]:
        """Run one event; if anything in it raises, stop the node (see the module doc)."""
        try:
            yield
        except Exception as e:
            self._log.exception("raft node failed")
            self._fail(f"unexpected error in the raft loop: {e!r} (traceback in the log)")

    def _fail(self, reason: str) -> None:
        """Something we cannot continue from safely: stop serving, say why."""
        self.fatal_error = reason
        self._log.error("raft node stopping", reason=reason)
        self._stop(NotLeaderError(-1, self.core.epoch))

    def _stop(self, error: Exception) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        self._fail_pending(error)
        self._publish_leadership()
        self._publish_caught_up()

    def _fail_pending(self, error: Exception, from_offset: int = 0) -> None:
        """Fail the appends of batches at ``from_offset`` or after."""
        failed = [offset for offset in self._pending if offset >= from_offset]
        for offset in failed:
            future = self._pending.pop(offset)[1]
            if not future.done():
                future.set_exception(error)


def _cost(batch: Batch) -> int:
    """What applying ``batch`` costs, in records (a control batch holds one)."""
    return len(batch.records)
