"""RaftNode, the asyncio driver: what it tells the operator about the quorum."""

from __future__ import annotations

import random
from typing import Any

from raft.batch import Batch
from raft.config import RaftConfig
from raft.core import RaftCore
from raft.driver import OVERLAP_WARNING_INTERVAL_MS, RaftNode, monotonic_ms
from raft.effects import QuorumStateData, Snapshot, Write
from raft.messages import Envelope, FetchRequest
from raft.storage.memory import MemoryStorage
from raft.transport.memory import MemoryNetwork, MemoryTransport
from tests.metadata_sim.quorum import ManualClock, eventually
from tests.unit.transport_fakes import log_events, next_event, run

CLUSTER_ID = "driver-test"
CONFIG = RaftConfig(election_timeout_ms=10)


class NullStateMachine:
    def apply(self, batch: Batch) -> None:
        pass

    def restore(self, snapshot: Snapshot) -> None:
        pass


def new_node(
    voters: frozenset[int] = frozenset({1}),
    *,
    clock: Any = monotonic_ms,
) -> RaftNode:
    storage = MemoryStorage()
    storage.write(Write(write_id=0, quorum_state=QuorumStateData(0, -1, -1, recovering=False)))
    core = RaftCore(1, voters, CLUSTER_ID, CONFIG, storage.load(), random.Random(1), clock())
    return RaftNode(core, storage, MemoryTransport(MemoryNetwork(), 1), NullStateMachine(), clock=clock)


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
