"""RaftNode hands the layer above every committed batch, raft's control batches too, so
that an idle cluster, whose only appends are NoOps, still snapshots and drops its log."""

from __future__ import annotations

import asyncio
import random

import pytest

from metadata.snapshot import read_snapshot
from metadata.state_machine import MetadataStateMachine
from raft import control
from raft.batch import Batch, BatchKind
from raft.config import RaftConfig
from raft.core import RaftCore
from raft.driver import RaftNode
from raft.snapshot_schedule import SnapshotPolicy
from raft.storage.batch_codec import frame_bytes
from raft.storage.memory import MemoryStorage
from raft.transport.memory import MemoryNetwork, MemoryTransport
from tests.metadata_sim.quorum import ManualClock, eventually

IDLE_NOOP_INTERVAL_MS = 10
NOOP_BYTES = frame_bytes(Batch(0, 1, 0, BatchKind.NOOP, (control.NOOP_RECORD,)))
NOOPS_MAX = 200  # bound: NoOps the test lets the leader append before it gives up


@pytest.mark.parametrize(
    "policy",
    [
        SnapshotPolicy(snapshot_interval_bytes=20 * NOOP_BYTES, snapshot_interval_ms=0),
        SnapshotPolicy(snapshot_interval_ms=20 * IDLE_NOOP_INTERVAL_MS),
    ],
    ids=["bytes", "time"],
)
def test_an_idle_leader_snapshots_at_a_noop_and_its_log_shrinks(policy: SnapshotPolicy) -> None:
    asyncio.run(_idle_leader(policy))


async def _idle_leader(policy: SnapshotPolicy) -> None:
    clock = ManualClock()
    storage = MemoryStorage()
    config = RaftConfig(election_timeout_ms=10, idle_noop_interval_ms=IDLE_NOOP_INTERVAL_MS)
    core = RaftCore(1, frozenset({1}), "idle", config, storage.load(), random.Random(1), clock())
    node: RaftNode
    state_machine = MetadataStateMachine(policy, lambda snapshot: node.save_snapshot(snapshot))
    node = RaftNode(core, storage, MemoryTransport(MemoryNetwork(), 1), state_machine, clock=clock)
    await node.start()
    try:
        clock.advance(2 * config.election_timeout_ms)  # past its election deadline: it leads alone
        await eventually(lambda: core.high_watermark > 0, "the LeaderChange batch to commit")
        # Time moves only when the test moves it: one NoOp interval per step, and the
        # driver's timer appends, commits and applies one NoOp before the next step.
        while core.log_start_offset == 0 and core.high_watermark < NOOPS_MAX:
            committed = core.high_watermark
            clock.advance(IDLE_NOOP_INTERVAL_MS)
            await eventually(lambda c=committed: core.high_watermark > c, "the next NoOp to commit")
    finally:
        await node.shutdown(graceful=False)

    snapshot = storage.load().snapshot
    assert snapshot is not None, f"no snapshot after {core.high_watermark} idle NoOps"
    assert core.log.snapshot is not None and core.log.snapshot.id == snapshot.id
    assert read_snapshot(snapshot.data).offset == snapshot.id.offset
    held = core.log.batches_between(core.log_start_offset, core.log_end_offset)
    assert len(held) < snapshot.id.offset  # the batches the snapshot covers left memory
    assert all(b.kind is BatchKind.NOOP for b in held)

    restarted = MetadataStateMachine(policy, lambda _: None)
    restarted.restore(snapshot)  # refuses an image whose offset is not the snapshot's
    assert restarted.image.offset == snapshot.id.offset
