"""Clients: propose unique records to whoever looks like the leader, at random times."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raftka.raft.batch import OffsetAndEpoch
from raftka.raft.core import NotLeaderError

if TYPE_CHECKING:
    from tests.simulation.cluster import Cluster


@dataclass(slots=True)
class ClientStats:
    proposed: int = 0
    accepted: int = 0
    not_leader: int = 0


@dataclass(slots=True)
class Client:
    cluster: Cluster
    rng: random.Random
    interval_ms: int
    active: bool = False
    stats: ClientStats = field(default_factory=ClientStats)
    proposed_at: dict[bytes, int] = field(default_factory=dict)  # record -> time it was accepted
    _next_id: int = 0

    def start(self) -> None:
        if not self.active:
            self.active = True
            self._schedule()

    def stop(self) -> None:
        self.active = False

    def _schedule(self) -> None:
        delay = int(self.rng.expovariate(1.0 / self.interval_ms)) + 1
        self.cluster.scheduler.after(delay, self._fire)

    def _fire(self) -> None:
        if not self.active:
            return
        self._schedule()
        up = [n for n in self.cluster.up_ids() if not self.cluster.nodes[n].paused]
        if not up:
            return
        leader = self.cluster.leader_id()
        leaders = [] if leader is None else [leader]
        if leaders and leaders[0] in up and self.rng.random() < 0.95:
            target = leaders[0]
        else:
            target = self.rng.choice(up)
        self.propose(target, self.rng.randint(1, 4))

    def propose(self, node_id: int, count: int) -> OffsetAndEpoch | None:
        """Propose ``count`` fresh records to ``node_id``; None when it is not the leader."""
        records = []
        for _ in range(count):
            self._next_id += 1
            records.append(b"r%d" % self._next_id)
        self.stats.proposed += 1
        try:
            position = self.cluster.nodes[node_id].propose(records)
        except NotLeaderError:
            self.stats.not_leader += 1
            return None
        self.stats.accepted += 1
        now = self.cluster.scheduler.now_ms
        for record in records:
            self.proposed_at[record] = now
        self.cluster.invariants.claims[(position.offset, position.epoch)] = tuple(records)
        return position
