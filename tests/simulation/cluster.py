"""A whole simulated cluster: voters 1-3, observers 4-5, one scheduler, network and seed.

A dynamic seed (KIP-853) starts from the same three voters, formatted with directory ids,
and its nemesis adds and removes voters (observers 4-5 included) as it goes.

The scripting surface (crash, restart, wipe, partition, heal, resign, run_until) is what
the nemesis, the runner and the fixed-scenario tests use.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TextIO

from raftka.raft.config import RaftConfig
from raftka.raft.messages import Envelope
from raftka.raft.voters import Voter, VoterSet
from tests.simulation.client import Client
from tests.simulation.faults import FaultProfile, Nemesis
from tests.simulation.invariants import Invariants
from tests.simulation.network import Link, Network
from tests.simulation.node import CoreFactory, SimNode, role_of
from tests.simulation.scheduler import Scheduler
from tests.simulation.trace import Trace

VOTERS = frozenset({1, 2, 3})
OBSERVERS = (4, 5)
CLUSTER_ID = "sim-cluster"
EVENTS_MAX = 2_000_000


def default_factory() -> CoreFactory:
    from raftka.raft.core import RaftCore  # noqa: PLC0415  (imported late so a stub core can stand in)

    return RaftCore  # type: ignore[return-value]


def calm_cluster(
    seed: int,
    observers: int = 2,
    snapshot_every: int = 0,
    factory: CoreFactory | None = None,
    dynamic: bool = False,
    config: RaftConfig | None = None,
) -> Cluster:
    """A cluster with no faults of its own, for scripted scenarios (they inject their own)."""
    profile = FaultProfile.calm(
        safety_ms=0, observers=observers, snapshot_every=snapshot_every, dynamic=dynamic
    )
    return Cluster(seed, profile, random.Random(seed), factory, config)


class Cluster:
    def __init__(
        self,
        seed: int,
        profile: FaultProfile,
        rng: random.Random,
        factory: CoreFactory | None = None,
        config: RaftConfig | None = None,
        trace_lines: int = 400,
        echo: TextIO | None = None,
    ) -> None:
        self.seed = seed
        self.profile = profile
        self.rng = rng
        self.config = config or RaftConfig()
        self.scheduler = Scheduler(EVENTS_MAX)
        self.trace = Trace(trace_lines, echo)
        self.network = Network(self.scheduler, rng, profile.network)
        self.network.on_drop = self._on_drop
        self.voters = VOTERS  # the initial voters; a dynamic seed's change (voter_set())
        self.bootstrap: frozenset[int] | VoterSet = (
            VoterSet(Voter(n, f"dir-{n}-0") for n in sorted(VOTERS)) if profile.dynamic else VOTERS
        )
        node_ids = sorted(VOTERS) + list(OBSERVERS[: profile.observers])
        self.invariants = Invariants(self.bootstrap, node_ids)
        factory = factory or default_factory()
        self.nodes: dict[int, SimNode] = {}
        for nid in node_ids:
            node = SimNode(
                nid,
                self.bootstrap,
                CLUSTER_ID,
                self.config,
                factory,
                self.scheduler,
                self.network,
                rng,
                profile.disk,
                profile.snapshot_every,
                self.invariants,
                self.trace,
            )
            self.nodes[nid] = node
            self.network.nodes[nid] = node
        self.invariants.nodes = self.nodes
        if profile.link_skew_max_ms:
            self.network.skew(profile.link_skew_max_ms)
        self.client = Client(self, rng, profile.client_interval_ms)
        self.nemesis = Nemesis(self, profile, rng)

    # queries -------------------------------------------------------------------------------
    def up_ids(self) -> list[int]:
        return [n for n in sorted(self.nodes) if self.nodes[n].up]

    def down_ids(self) -> list[int]:
        return [n for n in sorted(self.nodes) if not self.nodes[n].up]

    def leader_id(self) -> int | None:
        """The live leader with the highest epoch, if any."""
        best: tuple[int, int] | None = None
        for nid in self.up_ids():
            core = self.nodes[nid].core
            assert core is not None
            if role_of(core) == "leader" and (best is None or core.epoch > best[0]):
                best = (core.epoch, nid)
        return None if best is None else best[1]

    def voter_set(self) -> VoterSet | None:
        """The voter set in effect at the live leader (None without one, or in a static seed)."""
        leader = self.leader_id()
        if leader is None or not self.profile.dynamic:
            return None
        return self.nodes[leader].core.voter_set  # type: ignore[union-attr]

    def dead_voters(self) -> list[int]:
        """Voters in the committed voter set whose node has since got a new disk (directory id)."""
        voters = self.invariants.committed_voters()
        return [
            v.node_id
            for v in voters.voters()
            if not voters.includes(v.node_id, self.nodes[v.node_id].directory_id)
        ]

    def status(self) -> str:
        parts = []
        for nid in sorted(self.nodes):
            node = self.nodes[nid]
            core = node.core
            if core is None:
                parts.append(f"n{nid}: down (durable end {node.disk.oracle.end_offset})")
                continue
            voters = getattr(core, "voter_set", None) if self.profile.dynamic else None
            parts.append(
                (f"voters={voters} " if voters is not None else "")
                + f"n{nid}: {role_of(core)} e={core.epoch} leader={core.leader_id} hw={core.high_watermark} "
                f"leo={core.log_end_offset} start={core.log_start_offset} applied={node.sm.state.next_offset} "
                f"durable={node.disk.oracle.end_offset}"
            )
        net = f"cut={self.network.cut_links()} clogged={self.network.clogged_links()}"
        return "\n".join(parts + [net])

    # faults ----------------------------------------------------------------------------------
    def note(self, what: str, detail: object) -> None:
        """A simulator line in the trace (faults, phases, dropped messages)."""
        self.trace.add((self.scheduler.now_ms, -1, what, detail, "", 0, 0, 0))

    def _on_drop(self, env: Envelope, why: str) -> None:
        self.note("drop-" + why, env)

    def start_all(self) -> None:
        for nid in sorted(self.nodes):
            self.nodes[nid].start()

    def crash(self, nid: int) -> None:
        self.nodes[nid].crash()

    def restart(self, nid: int) -> None:
        if not self.nodes[nid].up:
            self.nodes[nid].start()

    def wipe(self, nid: int) -> None:
        self.nodes[nid].wipe()

    def pause(self, nid: int) -> None:
        self.nodes[nid].pause()

    def resume(self, nid: int) -> None:
        self.nodes[nid].resume()

    def partition(self, side_a: list[int], side_b: list[int]) -> None:
        self.note("partition", f"{side_a} | {side_b}")
        self.network.partition(side_a, side_b)

    def isolate(self, nid: int) -> None:
        self.note("isolate", f"n{nid}")
        self.network.isolate(nid)

    def cut(self, links: list[Link]) -> None:
        self.note("cut", f"{links}")
        self.network.cut(links)

    def clog(self, link: Link) -> None:
        self.note("clog", f"{link}")
        self.network.clog(link)

    def unclog(self, link: Link) -> None:
        self.note("unclog", f"{link}")
        self.network.unclog(link)

    def heal(self) -> None:
        self.note("heal", "network healed")
        self.network.heal()

    def resign(self, nid: int) -> None:
        node = self.nodes[nid]
        if node.up and not node.paused and node.core is not None and role_of(node.core) == "leader":
            node.resign()

    # running -----------------------------------------------------------------------------------
    def run_for(self, duration_ms: int) -> None:
        self.scheduler.run_until(self.scheduler.now_ms + duration_ms)

    def run_until(self, done: Callable[[], bool], timeout_ms: int, check_every_ms: int = 10) -> bool:
        """Run until ``done()`` holds (checked every ``check_every_ms``) or the timeout passes."""
        deadline = self.scheduler.now_ms + timeout_ms
        while self.scheduler.now_ms < deadline:
            if done():
                return True
            self.scheduler.run_until(min(deadline, self.scheduler.now_ms + check_every_ms))
        return done()

    def committed_since(self, since_ms: int) -> int | None:
        """The lowest offset holding a record accepted at or after ``since_ms``, once committed."""
        best = None
        offset_of = self.invariants.offset_of
        for record, t in reversed(self.client.proposed_at.items()):
            if t < since_ms:
                break
            offset = offset_of.get(record)
            if offset is not None and (best is None or offset < best):
                best = offset
        return best

    def lagging(self, since_ms: int) -> str:
        """Why ``converged(since_ms)`` does not hold yet, for the liveness failure message."""
        if self.leader_id() is None:
            return "no live leader"
        offset = self.committed_since(since_ms)
        if offset is None:
            return "nothing proposed since then has committed"
        behind = [f"n{n}" for n in self.up_ids() if self.nodes[n].sm.state.next_offset <= offset]
        return f"offset {offset} committed but {', '.join(behind)} did not apply it"

    def converged(self, since_ms: int) -> bool:
        """A leader exists, a record accepted since ``since_ms`` committed and every live node applied it."""
        if self.leader_id() is None:
            return False
        offset = self.committed_since(since_ms)
        if offset is None:
            return False
        return all(self.nodes[n].sm.state.next_offset > offset for n in self.up_ids())
