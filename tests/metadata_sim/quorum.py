"""An in-process controller quorum: real RaftNodes, MetadataStateMachines and
QuorumControllers over MemoryTransport and MemoryStorage, all on one event loop.

A crashed node keeps its MemoryStorage (it is durable on return), so a restart
recovers from its log and snapshot like a real one. Broker sessions run on a manual
clock that tests move forward; the controllers' ``tick`` is called by the tests, never
by a background task, so fencing happens exactly when a test asks for it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from raftka.metadata.controller import QuorumController, wall_clock_ms
from raftka.metadata.image import MetadataImage
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.raft.config import RaftConfig
from raftka.raft.core import RaftCore
from raftka.raft.driver import RaftNode, monotonic_ms
from raftka.raft.effects import QuorumStateData, Write
from raftka.raft.endpoints import VoterEndpoints
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage.memory import MemoryStorage
from raftka.raft.transport.memory import MemoryNetwork, MemoryTransport
from raftka.raft.voters import NO_DIRECTORY, Voter, VoterSet

T = TypeVar("T")

CLUSTER_ID = "metadata-sim-cluster"
WAIT_S = 10.0
POLL_S = 0.002
# Quick failure detection, so tests of lost leadership take a fraction of a second.
FAST_RAFT = RaftConfig(
    election_timeout_ms=30,
    fetch_timeout_ms=200,
    check_quorum_timeout_ms=300,
    fetch_max_wait_ms=50,
    idle_noop_interval_ms=100,
)


def address(node_id: int) -> str:
    return f"controller-{node_id}:9093"


def directory_id(node_id: int) -> str:
    return f"directory-{node_id}"


class ManualClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


async def eventually(probe: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    """Poll ``probe`` until it returns something other than None/False; fail after the bound."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(POLL_S)


@dataclass
class Member:
    node: RaftNode
    state_machine: MetadataStateMachine
    controller: QuorumController

    @property
    def image(self) -> MetadataImage:
        return self.state_machine.image


@dataclass
class Quorum:
    size: int = 3
    session_timeout_ms: int = 9_000
    max_partitions_per_topic: int = 10_000
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    leader_rebalance_interval_ms: int = 0  # off unless a test turns it on
    disconnect_fence_ms: int = 0  # off unless a test turns it on
    snapshot_interval_records: int = 10_000
    raft: RaftConfig = FAST_RAFT
    seed: int = 0
    clock: ManualClock = field(default_factory=ManualClock)
    wall_clock: Callable[[], int] = wall_clock_ms  # commit timestamps; a ManualClock to expire offsets
    network: MemoryNetwork = field(default_factory=MemoryNetwork)
    members: dict[int, Member] = field(default_factory=dict)
    # KIP-853: formatted with the voters' endpoints in the log, and only the first voter
    # configured (as when the others were added later); False: a static quorum, all configured
    dynamic: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.storages = {node_id: MemoryStorage() for node_id in self.voter_ids}
        for storage in self.storages.values():  # formatted as a brand-new cluster: may vote at once
            storage.write(Write(write_id=0, quorum_state=QuorumStateData(0, -1, -1, recovering=False)))

    @property
    def voter_ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    async def start(self, *node_ids: int) -> None:
        for node_id in node_ids or self.voter_ids:
            assert node_id not in self.members, f"node {node_id} is running"
            self.members[node_id] = self._member(node_id)
            await self.members[node_id].node.start()

    def _member(self, node_id: int) -> Member:
        storage = self.storages[node_id]
        core = RaftCore(
            node_id,
            self._bootstrap_voters(),
            CLUSTER_ID,
            self.raft,
            storage.load(),
            random.Random(self.rng.random()),
            monotonic_ms(),
            directory_id=directory_id(node_id) if self.dynamic else NO_DIRECTORY,
        )
        node: RaftNode
        # Snapshots go to this incarnation's node only, as in a process: one still being
        # encoded when the node crashes must not reach the node that restarts after it.
        state_machine = MetadataStateMachine(
            SnapshotPolicy(snapshot_interval_records=self.snapshot_interval_records),
            lambda snapshot: node.save_snapshot(snapshot),
        )
        node = RaftNode(core, storage, MemoryTransport(self.network, node_id), state_machine)
        controller = QuorumController(
            node,
            state_machine,
            cluster_id=CLUSTER_ID,
            address_of=VoterEndpoints(self.configured_addresses(), lambda: node.core.voter_set).address,
            session_timeout_ms=self.session_timeout_ms,
            max_partitions_per_topic=self.max_partitions_per_topic,
            offsets_retention_ms=self.offsets_retention_ms,
            leader_rebalance_interval_ms=self.leader_rebalance_interval_ms,
            disconnect_fence_ms=self.disconnect_fence_ms,
            clock=self.clock,
            wall_clock=self.wall_clock,
        )
        return Member(node, state_machine, controller)

    def _bootstrap_voters(self) -> frozenset[int] | VoterSet:
        if not self.dynamic:
            return frozenset(self.voter_ids)
        return VoterSet(Voter(v, directory_id(v), (address(v),)) for v in self.voter_ids)

    def configured_addresses(self) -> dict[int, str]:
        """Each node's ``controller.quorum.voters``."""
        configured = self.voter_ids[:1] if self.dynamic else self.voter_ids
        return {v: address(v) for v in configured}

    async def crash(self, node_id: int) -> None:
        """Stop without a goodbye; the storage keeps what was written."""
        member = self.members.pop(node_id)
        await member.node.shutdown(graceful=False)

    async def close(self) -> None:
        for node_id in list(self.members):
            await self.crash(node_id)

    def leader_id(self) -> int | None:
        leaders = [i for i, m in self.members.items() if m.node.core.is_leader]
        return leaders[0] if len(leaders) == 1 else None

    async def active(self) -> Member:
        """The active controller, once some node leads and its controller has activated."""

        def activated() -> Member | None:
            active = [m for m in self.members.values() if m.controller.is_active]
            return active[0] if len(active) == 1 else None

        return await eventually(activated, "an active controller")

    async def converged(self) -> MetadataImage:
        """Wait until every running node holds the active controller's committed image."""
        leader = await self.active()

        def same() -> MetadataImage | None:
            image = leader.image
            return image if all(m.image == image for m in self.members.values()) else None

        return await eventually(same, "every node to hold the leader's image")
