"""RaftNode, the asyncio driver: what it does when something under it breaks, what it
tells the operator about the quorum, and that it hands the layer above every committed
batch, raft's control batches too, so that an idle cluster, whose only appends are
NoOps, still snapshots and drops its log."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from raftka.metadata.snapshot import read_snapshot
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.node.assembly import ServerError, serve_until_signalled
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind
from raftka.raft.config import RaftConfig
from raftka.raft.core import RaftCore
from raftka.raft.driver import OVERLAP_WARNING_INTERVAL_MS, RaftNode, monotonic_ms
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.messages import Envelope, FetchRequest
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage.batch_codec import frame_bytes
from raftka.raft.storage.memory import MemoryStorage
from raftka.raft.transport.memory import MemoryNetwork, MemoryTransport
from tests.metadata_sim.quorum import ManualClock, eventually
from tests.unit.transport_fakes import WAIT_S, log_events, next_event, run, within

CLUSTER_ID = "driver-test"
CONFIG = RaftConfig(election_timeout_ms=10)


class NullStateMachine:
    def apply(self, batch: Batch) -> None:
        pass

    def restore(self, snapshot: Snapshot) -> None:
        pass


class BreakableCore(RaftCore):
    """A core whose next poll or step raises ``failure`` once a test sets it: a bug."""

    failure: Exception | None = None

    def poll(self, now_ms: int) -> int:
        if self.failure is not None:
            raise self.failure
        return super().poll(now_ms)

    def step(self, envelope: Envelope, now_ms: int) -> None:
        if self.failure is not None:
            raise self.failure
        super().step(envelope, now_ms)


class BrokenTransport(MemoryTransport):
    """Raises on every send, as a transport with a bug would."""

    def send(self, envelope: Envelope) -> None:
        raise OSError("transport broke")


def new_node(
    voters: frozenset[int] = frozenset({1}),
    *,
    transport: type[MemoryTransport] = MemoryTransport,
    clock: Any = monotonic_ms,
) -> RaftNode:
    storage = MemoryStorage()
    storage.write(Write(write_id=0, quorum_state=QuorumStateData(0, -1, -1, recovering=False)))
    core = BreakableCore(1, voters, CLUSTER_ID, CONFIG, storage.load(), random.Random(1), clock())
    return RaftNode(core, storage, transport(MemoryNetwork(), 1), NullStateMachine(), clock=clock)


async def leading(node: RaftNode) -> RaftNode:
    await node.start()
    await eventually(lambda: node.core.is_leader and node.core.exposed_high_watermark() > 0, "leadership")
    return node


async def stopped(node: RaftNode) -> None:
    await within(node.wait_stopped())


def test_an_exception_in_the_loop_stops_the_node_fails_its_appends_and_logs_why() -> None:
    async def body() -> None:
        with log_events() as events:
            node = await leading(new_node())
            node.core.failure = RuntimeError("boom")  # type: ignore[attr-defined]
            append = node.submit([b"x"])
            await stopped(node)
            assert node.fatal_error is not None and "boom" in node.fatal_error, node.fatal_error
            with pytest.raises(Exception, match="not the leader"):
                await within(append)
            failed = await next_event(events, "raft node failed")
            assert failed["level"] == "error" and failed["exc_info"] is True, failed
            stopping = await next_event(events, "raft node stopping")
            assert "boom" in stopping["reason"], stopping
            await node.shutdown(graceful=False)

    run(body)


def test_an_exception_handling_a_message_stops_the_node() -> None:
    async def body() -> None:
        node = await leading(new_node())
        node.core.failure = RuntimeError("bad step")  # type: ignore[attr-defined]
        node.deliver(Envelope(2, 1, FetchRequest(CLUSTER_ID, 2, 1, 0, 0, 0), rpc_id=1))
        await stopped(node)
        assert node.fatal_error is not None and "bad step" in node.fatal_error, node.fatal_error
        await node.shutdown(graceful=False)

    run(body)


def test_a_transport_that_raises_stops_the_node() -> None:
    async def body() -> None:
        node = new_node(frozenset({1, 2, 3}), transport=BrokenTransport)
        await node.start()  # it campaigns after its election timeout: the VoteRequests raise
        await stopped(node)
        assert node.fatal_error is not None and "transport broke" in node.fatal_error, node.fatal_error
        await node.shutdown(graceful=False)

    run(body)


def test_the_server_exits_with_the_reason_when_the_node_fails() -> None:
    async def body() -> None:
        node = await leading(new_node())
        serving = asyncio.create_task(serve_until_signalled(node))
        node.core.failure = RuntimeError("boom")  # type: ignore[attr-defined]
        node.submit([b"x"])
        with pytest.raises(ServerError, match="boom"):
            await asyncio.wait_for(serving, WAIT_S)

    run(body)


def test_observers_sharing_an_id_are_reported_at_most_once_a_minute() -> None:
    async def body() -> None:
        clock = ManualClock()
        with log_events() as events:
            node = new_node(clock=clock)
            await node.start()
            clock.advance(10 * CONFIG.election_timeout_ms)
            await eventually(lambda: node.core.is_leader and node.core.exposed_high_watermark() > 0, "lead")
            end = node.core.log_end_offset

            def fetch_from_observer_4() -> None:
                request = FetchRequest(CLUSTER_ID, 4, node.core.epoch, end, node.core.epoch, 10_000)
                node.deliver(Envelope(4, 1, request, rpc_id=next(rpc_ids)))

            rpc_ids = iter(range(1, 100))
            for _ in range(3):  # two processes as observer 4: their fetches overlap at the leader
                fetch_from_observer_4()
            warning = await next_event(events, "fetches from one observer id overlap")
            assert warning["level"] == "warning" and warning["observer_id"] == 4, warning
            await eventually(lambda: node.core.observer_fetch_overlaps == 2, "the second overlap")

            clock.advance(OVERLAP_WARNING_INTERVAL_MS)
            fetch_from_observer_4()
            again = await next_event(events, "fetches from one observer id overlap")
            assert again["overlaps"] == 3, again  # the second overlap was counted, not logged
            await node.shutdown(graceful=False)

    run(body)


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
