"""Unit tests of the simulator's own parts, so that a bug in the harness cannot hide a core bug.

Whole-cluster checks here run the trivial ``FakeCore`` (a fixed leader, no elections):
they prove the disks, network, state machines and invariants work without the real core.
"""

from __future__ import annotations

import random

import pytest

from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.messages import Envelope, Error, FetchRequest, FetchResponse
from tests.simulation.cluster import calm_cluster
from tests.simulation.disk import HELD_IN_SNAPSHOT, DurableLog, SimDisk, WriteContractError, torn_prefix
from tests.simulation.fake_core import FakeCore
from tests.simulation.invariants import InvariantViolation
from tests.simulation.network import Network, NetworkParams
from tests.simulation.scheduler import Scheduler
from tests.simulation.statemachine import SmState, StateMachine


def batch(base: int, n: int = 1, epoch: int = 1, kind: BatchKind = BatchKind.DATA) -> Batch:
    return Batch(base, epoch, 0, kind, tuple(b"r%d" % (base + i) for i in range(n)))


# scheduler ------------------------------------------------------------------------------------
def test_scheduler_orders_by_time_then_sequence_and_skips_cancelled() -> None:
    sched = Scheduler(events_max=100)
    seen: list[str] = []
    sched.at(5, seen.append, "b")
    sched.at(1, seen.append, "a")
    sched.at(5, seen.append, "c")
    sched.at(3, seen.append, "x").cancel()
    sched.run_until(10)
    assert seen == ["a", "b", "c"]
    assert sched.now_ms == 10


# network --------------------------------------------------------------------------------------
class _Endpoint:
    def __init__(self) -> None:
        self.up = True
        self.incarnation = 1
        self.got: list[Envelope] = []
        self.unreachable: list[int] = []

    def deliver(self, env: Envelope, call_id: int) -> None:
        self.got.append(env)

    def on_unreachable(self, peer_id: int, incarnation: int) -> None:
        self.unreachable.append(peer_id)


def _net(**params: float) -> tuple[Scheduler, Network, dict[int, _Endpoint]]:
    sched = Scheduler(events_max=10_000)
    net = Network(sched, random.Random(1), NetworkParams(**params))  # type: ignore[arg-type]
    nodes = {1: _Endpoint(), 2: _Endpoint(), 3: _Endpoint()}
    net.nodes.update(nodes)
    return sched, net, nodes


FETCH = FetchRequest("c", 1, 1, 0, 0, 0)
ANSWER = FetchResponse(Error.NONE, 1, 2, 0, 0)


def test_partition_drops_and_heal_restores() -> None:
    sched, net, nodes = _net()
    net.partition([1], [2, 3])
    net.send(Envelope(1, 2, FETCH, 7), 1)
    sched.run_until(100)
    assert nodes[2].got == []
    net.heal()
    net.send(Envelope(1, 2, FETCH, 7), 1)
    sched.run_until(200)
    assert len(nodes[2].got) == 1


def test_clog_holds_messages_until_unclogged() -> None:
    sched, net, nodes = _net()
    net.clog((1, 2))
    net.send(Envelope(1, 2, FETCH, 7), 1)
    sched.run_until(500)
    assert nodes[2].got == []
    net.unclog((1, 2))
    sched.run_until(1_000)
    assert len(nodes[2].got) == 1


def test_a_duplicated_request_completes_its_call_once_with_the_callers_rpc_id() -> None:
    sched, net, nodes = _net(duplicate_probability=1.0)
    net.send(Envelope(1, 2, FETCH, 7), 1)
    sched.run_until(100)
    assert len(nodes[2].got) >= 2  # the receiver handles the retry too
    calls = list(net._open_calls)
    for call_id in calls:
        net.send(Envelope(2, 1, ANSWER, 99), 1, call_id)
    sched.run_until(200)
    assert [e.rpc_id for e in nodes[1].got] == [7]


def test_request_to_a_dead_node_reports_unreachable() -> None:
    sched, net, nodes = _net(unreachable_probability=1.0)
    nodes[2].up = False
    net.send(Envelope(1, 2, FETCH, 7), 1)
    sched.run_until(100)
    assert nodes[1].unreachable == [2]


def test_a_response_to_a_restarted_caller_is_dropped() -> None:
    sched, net, nodes = _net()
    net.send(Envelope(1, 2, FETCH, 7), 1)
    sched.run_until(100)
    nodes[1].incarnation = 3
    (call_id,) = net._open_calls
    net.send(Envelope(2, 1, ANSWER, 99), 1, call_id)
    sched.run_until(200)
    assert nodes[1].got == []


# disk -------------------------------------------------------------------------------------------
def test_durable_log_truncates_at_batch_boundaries_only() -> None:
    log = DurableLog()
    log.write(Write(1, append=(batch(0, 3), batch(3, 2))))
    with pytest.raises(WriteContractError):
        log.write(Write(2, truncate_to=1))
    log.write(Write(3, truncate_to=3))
    assert log.end_offset == 3
    with pytest.raises(WriteContractError):
        log.write(Write(4, append=(batch(5),)))


def test_durable_log_snapshot_covers_offsets() -> None:
    log = DurableLog()
    log.write(Write(1, append=(batch(0, 3, epoch=1), batch(3, 2, epoch=2))))
    log.save_snapshot(Snapshot(SnapshotId(3, 1), b"s"))
    assert log.epoch_at(0) == HELD_IN_SNAPSHOT
    assert log.epoch_at(2) == 1
    assert log.epoch_at(4) == 2
    assert log.epoch_at(5) is None
    log.write(Write(2, append=(batch(0, 3), batch(5))))  # covered batches are skipped
    assert log.end_offset == 6


def test_torn_prefix_keeps_steps_in_order_and_never_the_quorum_state_early() -> None:
    write = Write(9, QuorumStateData(3, 1, -1), None, 4, (batch(4), batch(5)))
    assert torn_prefix(write, 0) == Write(9)
    assert torn_prefix(write, 2) == Write(9, None, None, 4, (batch(4),))
    assert torn_prefix(write, 4) == write


def test_crash_loses_or_tears_the_write_in_flight() -> None:
    outcomes = set()
    for seed in range(40):
        disk = SimDisk(1, "c")
        disk.submit(Write(1, QuorumStateData(1, 1, -1), append=(batch(0), batch(1))))
        outcome = disk.crash(random.Random(seed), torn_probability=0.5)
        kept = outcome.kept
        outcomes.add(-1 if kept is None else len(kept.append) + (kept.quorum_state is not None))
        loaded = disk.load()  # the storage under test agrees with the oracle
        assert len(loaded.batches) == (0 if kept is None else len(kept.append))
    assert outcomes >= {-1, 0, 3}


# state machine ---------------------------------------------------------------------------------
def test_state_machine_snapshot_restores_the_same_state() -> None:
    sm = StateMachine(1, snapshot_every=2)
    assert sm.apply(batch(0, 1, kind=BatchKind.LEADER_CHANGE)) is None
    snap = sm.apply(batch(1, 2))
    assert snap is not None and snap.id == SnapshotId(3, 1)
    other = StateMachine(2, snapshot_every=2)
    other.reset(snap)
    assert other.state == sm.state == SmState.decode(snap.data)


# whole cluster on the fake core ------------------------------------------------------------------
def test_fake_core_cluster_survives_follower_crashes() -> None:
    cluster = calm_cluster(1, factory=FakeCore)
    cluster.start_all()
    cluster.client.start()
    assert cluster.run_until(lambda: cluster.invariants.committed_records >= 30, 5_000)
    cluster.crash(2)
    cluster.run_for(500)
    cluster.restart(2)
    cluster.crash(4)
    since = cluster.scheduler.now_ms
    cluster.restart(4)
    assert cluster.run_until(lambda: cluster.converged(since), 5_000)


class _ObserverCountingFakeCore(FakeCore):
    """Counts observers' fetch positions toward the high watermark."""

    def __init__(self, node_id: int, voters: frozenset[int], *args: object) -> None:
        super().__init__(node_id, voters, *args)  # type: ignore[arg-type]
        self.voters = voters | {4, 5}


def test_invariants_catch_a_leader_that_counts_observers() -> None:
    cluster = calm_cluster(2, factory=_ObserverCountingFakeCore)
    cluster.start_all()
    cluster.client.start()
    assert cluster.run_until(lambda: cluster.invariants.committed_records >= 10, 5_000)
    cluster.isolate(2)
    cluster.isolate(3)
    with pytest.raises(InvariantViolation, match="hold it durably"):
        cluster.run_for(2_000)
