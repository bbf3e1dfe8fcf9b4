"""Simulated disks: writes become durable only when their fsync completes.

``DurableLog`` is the simulator's own model of what a node holds durably. It serves as
the storage twin (when ``raftka.raft.storage.memory`` is not available) and always as the
oracle the invariants consult ("does voter 2 durably hold offset 41 at epoch 3?").
``SimDisk`` puts the real storage and the oracle behind one fsync queue and decides what
a crash keeps of the write in flight: nothing, a prefix (a torn write), or all of it.

A write with ``sync`` False (an observer's appends) completes without an fsync: the node
holds it (``held``, what the process would read back) but it becomes durable only with the
next synced write. A power cut keeps a prefix of those unsynced writes (the page cache
wrote some back, in order, as ``FileStorage`` arranges) and loses the rest.

Each step survives whole or not at all, as FileStorage recovers it: a torn last batch is
truncated, a snapshot is renamed into place whole, a torn quorum-state write leaves the
previous state (the initial one, recovering, if it was the first). Damage to completed
data is not injected: FileStorage refuses to start on it (a snapshot, a segment before its
tail, both quorum-state copies), and the operator's restore that follows is a ``wipe``.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from raftka.raft.batch import Batch, BatchKind
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.storage.base import LoadedState, Storage, covered_by_snapshot
from raftka.raft.voters import VoterSet

EMPTY_QUORUM_STATE = QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=True)
HELD_IN_SNAPSHOT = -2  # epoch_at(): the offset is covered by the snapshot, epoch unknown


class WriteContractError(AssertionError):
    """The core asked for a write that breaks the storage contract (a core bug)."""


class StorageMismatchError(AssertionError):
    """The storage under test recovered something other than what was made durable."""


class DurableLog:
    """An in-memory log that is durable on return (the simulator's twin of MemoryStorage)."""

    def __init__(self) -> None:
        self.quorum_state = EMPTY_QUORUM_STATE
        self.snapshot: Snapshot | None = None
        self._batches: list[Batch] = []
        self._bases: list[int] = []

    # Storage protocol ---------------------------------------------------------------
    def load(self) -> LoadedState:
        return LoadedState(self.quorum_state, self.snapshot, list(self._batches))

    def write(self, write: Write) -> None:
        if write.install_snapshot is not None:
            self.snapshot = write.install_snapshot
            self._batches, self._bases = [], []
        if write.truncate_to is not None:
            self._truncate(write.truncate_to)
        for batch in covered_by_snapshot(write.append, self.snapshot and self.snapshot.id):
            if batch.base_offset != self.end_offset:
                raise WriteContractError(
                    f"write {write.write_id}: append at {batch.base_offset}, log ends at {self.end_offset}"
                )
            self._batches.append(batch)
            self._bases.append(batch.base_offset)
        if write.quorum_state is not None:
            self.quorum_state = write.quorum_state

    def save_snapshot(self, snapshot: Snapshot) -> None:
        if self.snapshot is not None and snapshot.id.offset <= self.snapshot.id.offset:
            return
        self.snapshot = snapshot
        keep = [b for b in self._batches if b.next_offset > snapshot.id.offset]
        self._batches = keep
        self._bases = [b.base_offset for b in keep]

    def close(self) -> None:
        pass

    def wipe(self) -> None:
        self.__init__()  # type: ignore[misc]

    def copy(self) -> DurableLog:
        twin = DurableLog()
        twin.quorum_state, twin.snapshot = self.quorum_state, self.snapshot
        twin._batches, twin._bases = list(self._batches), list(self._bases)
        return twin

    # queries for the invariants -----------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self.snapshot.id.offset if self.snapshot is not None else 0

    @property
    def end_offset(self) -> int:
        if self._batches:
            return self._batches[-1].next_offset
        return self.start_offset

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the record at ``offset``; None when not held; HELD_IN_SNAPSHOT when compacted."""
        if offset < 0 or offset >= self.end_offset:
            return None
        if self.snapshot is not None and offset < self.snapshot.id.offset:
            return self.snapshot.id.epoch if offset == self.snapshot.id.offset - 1 else HELD_IN_SNAPSHOT
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._batches[i].epoch

    def is_empty(self) -> bool:
        """Nothing durable at all: a new or wiped disk."""
        return self.snapshot is None and not self._batches and self.quorum_state.epoch == 0

    def latest_voter_change(self) -> VoterSet | None:
        """The last voter set written to the log past the snapshot (committed or not): what
        the node takes up when it starts again. None when the log holds no change."""
        for batch in reversed(self._batches):
            if batch.kind == BatchKind.VOTERS:
                return VoterSet.decode(batch.records[-1])
        return None

    def last_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        return self.snapshot.id.epoch if self.snapshot is not None else 0

    def _truncate(self, offset: int) -> None:
        if offset < self.start_offset:
            raise WriteContractError(f"truncate to {offset}, below the snapshot at {self.start_offset}")
        if offset >= self.end_offset:
            return
        i = bisect.bisect_left(self._bases, offset)
        if i >= len(self._bases) or self._bases[i] != offset:
            raise WriteContractError(f"truncate to {offset}: not a batch boundary")
        del self._batches[i:]
        del self._bases[i:]


def torn_prefix(write: Write, steps_kept: int) -> Write:
    """The part of ``write`` that survives when only its first ``steps_kept`` steps hit disk.

    Steps in order: install snapshot, truncation, each appended batch, quorum state.
    """
    steps: list[tuple[str, object]] = []
    if write.install_snapshot is not None:
        steps.append(("snapshot", write.install_snapshot))
    if write.truncate_to is not None:
        steps.append(("truncate", write.truncate_to))
    steps.extend(("append", b) for b in write.append)
    if write.quorum_state is not None:
        steps.append(("quorum", write.quorum_state))
    kept = steps[:steps_kept]
    snapshot = next((v for k, v in kept if k == "snapshot"), None)
    truncate = next((v for k, v in kept if k == "truncate"), None)
    quorum = next((v for k, v in kept if k == "quorum"), None)
    return Write(
        write_id=write.write_id,
        quorum_state=quorum,  # type: ignore[arg-type]
        install_snapshot=snapshot,  # type: ignore[arg-type]
        truncate_to=truncate,  # type: ignore[arg-type]
        append=tuple(v for k, v in kept if k == "append"),  # type: ignore[misc]
    )


def write_steps(write: Write) -> int:
    return (
        (write.install_snapshot is not None)
        + (write.truncate_to is not None)
        + len(write.append)
        + (write.quorum_state is not None)
    )


def new_storage(node_id: int, cluster_id: str) -> Storage:
    """The storage under test: MemoryStorage when it exists, else the simulator's twin."""
    try:
        from raftka.raft.storage.memory import MemoryStorage  # noqa: PLC0415
    except ImportError:
        return DurableLog()
    return MemoryStorage()  # type: ignore[call-arg]


@dataclass(slots=True)
class CrashOutcome:
    lost: Write | None  # the write in flight, if any
    kept: Write | None  # what of it reached disk


class SimDisk:
    """One node's disk: the storage under test plus the oracle, behind a one-write fsync queue."""

    def __init__(self, node_id: int, cluster_id: str) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.storage: Storage = new_storage(node_id, cluster_id)
        self.oracle = DurableLog()
        self.held = DurableLog()  # the oracle plus completed unsynced writes: what the node holds
        self.unsynced: list[Write] = []  # completed, not yet durable (oldest first)
        self.pending: list[Write] = []  # in fsync order
        self.in_flight_max = 1  # the core's contract: one write at a time

    def submit(self, write: Write) -> None:
        if len(self.pending) >= self.in_flight_max:
            raise WriteContractError(
                f"n{self.node_id}: write {write.write_id} issued while {self.pending[0].write_id} is in flight"
            )
        self.pending.append(write)

    def complete(self) -> Write:
        """The oldest pending write finished: durable now, with every unsynced one before it,
        or (``sync`` False) only written."""
        write = self.pending.pop(0)
        self.held.write(write)
        if not write.sync:
            self.unsynced.append(write)
            return write
        for earlier in self.unsynced:
            self._apply(earlier)
        self.unsynced = []
        self._apply(write)
        return write

    def crash(self, rng: random.Random, torn_probability: float, started: bool = True) -> CrashOutcome:
        """Power loss: the write in flight is lost, torn (a prefix survives) or, rarely, complete.

        ``started``: the write had reached the disk (not queued behind a snapshot save).
        Writes queued behind it (only possible for a mutant that acks before fsync) are lost.
        """
        if not self._write_back_unsynced(rng, torn_probability):
            started = False  # an earlier write was cut short: nothing after it reached the disk
        self.held = self.oracle.copy()
        if not self.pending:
            return CrashOutcome(None, None)
        write, self.pending = self.pending[0], []
        if not started:
            return CrashOutcome(write, None)
        roll = rng.random()
        if roll < torn_probability:
            kept = torn_prefix(write, rng.randint(0, write_steps(write)))
        elif roll < torn_probability + 0.1:
            kept = write  # fsync finished, the ack never reached the core
        else:
            return CrashOutcome(write, None)
        self._apply(kept)
        self.held = self.oracle.copy()
        return CrashOutcome(write, kept)

    def _write_back_unsynced(self, rng: random.Random, torn_probability: float) -> bool:
        """Keep a prefix of the unsynced writes (the last one maybe torn); True if all survived."""
        unsynced, self.unsynced = self.unsynced, []
        if not unsynced:
            return True
        survivors = rng.randint(0, len(unsynced))
        for write in unsynced[:survivors]:
            self._apply(write)
        if survivors == len(unsynced):
            return True
        cut = unsynced[survivors]
        if rng.random() < torn_probability:
            self._apply(torn_prefix(cut, rng.randint(0, write_steps(cut))))
        return False

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.storage.save_snapshot(snapshot)
        self.oracle.save_snapshot(snapshot)
        self.held.save_snapshot(snapshot)

    def wipe(self) -> None:
        """The disk is replaced: everything is gone (the storage is re-formatted)."""
        self.pending = []
        self.unsynced = []
        self.held = DurableLog()
        wipe = getattr(self.storage, "wipe", None)
        if wipe is not None:
            wipe()
        else:
            self.storage = new_storage(self.node_id, self.cluster_id)
        self.oracle.wipe()

    def load(self) -> LoadedState:
        """Recover from the storage under test and check it against the oracle."""
        loaded = self.storage.load()
        expected = self.oracle.load()
        if loaded.quorum_state != expected.quorum_state:
            raise StorageMismatchError(
                f"n{self.node_id}: recovered quorum state {loaded.quorum_state}, durable {expected.quorum_state}"
            )
        got_snap = loaded.snapshot.id if loaded.snapshot is not None else None
        want_snap = expected.snapshot.id if expected.snapshot is not None else None
        if got_snap != want_snap:
            raise StorageMismatchError(f"n{self.node_id}: recovered snapshot {got_snap}, durable {want_snap}")
        start = self.oracle.start_offset
        got = [b for b in loaded.batches if b.next_offset > start]
        want = [b for b in expected.batches if b.next_offset > start]
        if got != want:
            raise StorageMismatchError(
                f"n{self.node_id}: recovered {len(got)} batches to {got[-1].next_offset if got else start}, "
                f"durable {len(want)} to {want[-1].next_offset if want else start}"
            )
        return loaded

    def _apply(self, write: Write) -> None:
        self.oracle.write(write)  # first: it validates the core's write
        self.storage.write(write)
