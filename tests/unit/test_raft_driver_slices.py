"""RaftNode hands committed batches to the state machine in slices, in log order.

A one-voter node on MemoryStorage and MemoryTransport: three full batches submitted back
to back commit in one write, and the loop must get a turn between applying them (see
``raftka.raft.driver``), while every ``append`` still resolves only once its batch is applied.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

from raftka.raft.batch import Batch, BatchKind
from raftka.raft.config import RaftConfig
from raftka.raft.core import RaftCore
from raftka.raft.driver import RaftNode, monotonic_ms
from raftka.raft.effects import QuorumStateData, Snapshot, Write
from raftka.raft.storage.memory import MemoryStorage
from raftka.raft.transport.memory import MemoryNetwork, MemoryTransport

RECORDS_MAX = 4
RAFT = RaftConfig(election_timeout_ms=10, idle_noop_interval_ms=600_000, append_max_records=RECORDS_MAX)
WAIT_S = 10.0


class Recorder:
    """A state machine that writes down what happens, in order; the first batch it
    applies also schedules ``then`` on the loop: other work, as an arriving fetch is."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.first_applied = asyncio.Event()
        self.then: Callable[[], None] = lambda: self.events.append("other work")

    def apply(self, batch: Batch) -> None:
        if batch.kind is not BatchKind.DATA:
            return  # raft's own LeaderChange and NoOp batches: not the test's
        self.events.append(f"apply {batch.records[0].decode()}")
        if not self.first_applied.is_set():
            self.first_applied.set()
            asyncio.get_running_loop().call_soon(self.then)

    def restore(self, snapshot: Snapshot) -> None:
        self.events.append("restore")


async def leading_node(state_machine: Recorder) -> RaftNode:
    storage = MemoryStorage()
    storage.write(Write(write_id=0, quorum_state=QuorumStateData(0, -1, -1, recovering=False)))
    core = RaftCore(1, frozenset({1}), "c", RAFT, storage.load(), random.Random(1), monotonic_ms())
    node = RaftNode(core, storage, MemoryTransport(MemoryNetwork(), 1), state_machine)
    await node.start()
    async with asyncio.timeout(WAIT_S):
        while not core.is_leader:
            await asyncio.sleep(0.005)
    await node.append([b"warm-up"])  # the leader's epoch has committed: appends commit at once
    return node


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), WAIT_S))


def test_the_loop_gets_a_turn_between_slices_of_committed_batches() -> None:
    async def body() -> None:
        recorder = Recorder()
        node = await leading_node(recorder)
        recorder.events.clear()
        recorder.first_applied.clear()
        futures = [node.submit([name.encode()] * RECORDS_MAX) for name in ("a", "b", "c")]
        outcomes = []
        for future in futures:
            await future
            outcomes.append(list(recorder.events))  # what had been applied when it resolved
        assert recorder.events == ["apply a", "other work", "apply b", "apply c"]
        assert outcomes[0][:1] == ["apply a"] and "apply b" in outcomes[1] and "apply c" in outcomes[2]
        await node.shutdown()

    run(body)


def test_small_batches_share_a_slice() -> None:
    async def body() -> None:
        recorder = Recorder()
        node = await leading_node(recorder)
        recorder.events.clear()
        recorder.first_applied.clear()
        futures = [node.submit([name.encode()]) for name in ("a", "b", "c", "d", "e")]
        await asyncio.gather(*futures)
        assert recorder.events == ["apply a", "apply b", "apply c", "apply d", "other work", "apply e"]
        await node.shutdown()

    run(body)


def test_a_leader_stepping_down_between_slices_still_answers_what_committed() -> None:
    """Batches committed before the step-down are applied and their appends succeed;
    only appends that had not committed fail (here: none)."""

    async def body() -> None:
        recorder = Recorder()
        node = await leading_node(recorder)
        recorder.events.clear()
        recorder.first_applied.clear()
        recorder.then = lambda: node.core.resign(monotonic_ms())  # between the first slices
        futures = [node.submit([name.encode()] * RECORDS_MAX) for name in ("a", "b", "c")]
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        assert not node.core.is_leader
        assert [isinstance(o, int) for o in outcomes] == [True, True, True], outcomes
        assert recorder.events == ["apply a", "apply b", "apply c"]
        await node.shutdown()

    run(body)
