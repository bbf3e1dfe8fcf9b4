"""Runs one seed (safety phase, then liveness phase) or many, and reports.

A failing seed prints its fault profile, the reason, the cluster's state, the last
trace lines and the one command that replays it.
"""

from __future__ import annotations

import io
import random
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

from raftka.raft.config import RaftConfig
from tests.simulation.cluster import Cluster
from tests.simulation.faults import FaultProfile
from tests.simulation.node import CoreFactory
from tests.simulation.pool import run_seeds_with

SAFETY_MS = 4000  # simulated time with faults, per seed
LIVENESS_MS = 10_000  # a healed cluster must elect and commit within this
TRACE_LINES = 400
FULL_REPORTS_MAX = 3  # further failures get one line each


class LivenessFailure(AssertionError):
    """The healed cluster did not elect a leader and commit in time."""


@dataclass(slots=True)
class Options:
    safety_ms: int = SAFETY_MS
    liveness_ms: int = LIVENESS_MS
    trace_lines: int = TRACE_LINES
    factory: CoreFactory | None = None  # None: the real RaftCore
    config: RaftConfig | None = None
    ack_before_fsync: bool = False  # a deliberately broken driver (self-test)
    send_checks: bool = True  # check persist-before-acknowledge on every message sent
    leave_voter_down: bool = True  # the liveness phase may leave one voter down


@dataclass(slots=True)
class SeedResult:
    seed: int
    ok: bool
    events: int = 0
    sim_ms: int = 0
    wall_s: float = 0.0
    elections: int = 0
    commits: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    report: str = ""  # the failure report, empty when ok
    reason: str = ""


def replay_command(seed: int) -> str:
    return f".venv/bin/python -m tests.simulation --seed {seed} --trace"


def run_seed(seed: int, options: Options | None = None, echo: TextIO | None = None) -> SeedResult:
    """Run one seed to completion; never raises for a failure, returns it."""
    options = options or Options()
    wall_start = time.perf_counter()  # reporting only: never read by the simulation
    rng = random.Random(seed)
    profile = FaultProfile.sample(rng, options.safety_ms)
    cluster = Cluster(seed, profile, rng, options.factory, options.config, options.trace_lines, echo)
    cluster.invariants.send_checks = options.send_checks
    for node in cluster.nodes.values():
        if options.ack_before_fsync:
            node.ack_before_fsync = True
            node.disk.in_flight_max = 1 << 30
    result = SeedResult(seed, ok=True)
    try:
        _run_phases(cluster, rng, options)
    except Exception as e:  # a failure of the core, the storage or an invariant
        result.ok = False
        result.reason = f"{type(e).__name__}: {e}"
        result.report = _report(cluster, result.reason, traceback.format_exc())
    result.events = cluster.scheduler.events_run
    result.sim_ms = cluster.scheduler.now_ms
    result.wall_s = time.perf_counter() - wall_start
    result.elections = len(cluster.invariants.leaders)
    result.commits = cluster.invariants.committed_records
    result.faults = dict(cluster.nemesis.counts)
    return result


def _run_phases(cluster: Cluster, rng: random.Random, options: Options) -> None:
    cluster.start_all()
    cluster.client.start()
    cluster.nemesis.start()
    cluster.scheduler.run_until(options.safety_ms)
    # liveness: stop faults, heal the network, restart (at least a majority of) the nodes
    cluster.nemesis.stop()
    cluster.heal()
    for nid in cluster.up_ids():
        cluster.resume(nid)
    cluster.network.params = cluster.network.params.quiet()
    down = cluster.down_ids()
    down_voters = [n for n in down if n in cluster.voters]
    # (not in a dynamic seed: its voter set may be down to one or two by now)
    if options.leave_voter_down and down_voters and rng.random() < 0.3 and not cluster.profile.dynamic:
        kept_down = rng.choice(down_voters)
        # a voter that lost (or never had) its disk waits to hear every other voter before
        # it votes again: only leave a voter down when no other voter is in that state
        others = [cluster.nodes[v] for v in sorted(cluster.voters) if v != kept_down]
        if not any(n.disk.oracle.is_empty() or n.recovering() for n in others):
            down.remove(kept_down)
            cluster.note("liveness", f"n{kept_down} stays down")
    for nid in down:
        cluster.restart(nid)
    since = cluster.scheduler.now_ms
    cluster.note("liveness", f"faults off at {since}")
    if not cluster.run_until(lambda: cluster.converged(since), options.liveness_ms, check_every_ms=25):
        raise LivenessFailure(
            f"no leader with new commits reaching every live node within {options.liveness_ms} ms "
            f"of healing at {since} ms: {cluster.lagging(since)}"
        )


def _report(cluster: Cluster, reason: str, tb: str) -> str:
    out = io.StringIO()
    print(f"=== SIMULATION FAILURE seed={cluster.seed} at t={cluster.scheduler.now_ms} ms", file=out)
    print(f"reason: {reason}", file=out)
    print(f"profile: {cluster.profile.describe()}", file=out)
    print(f"faults injected: {cluster.nemesis.counts}", file=out)
    print("cluster:", file=out)
    print(cluster.status(), file=out)
    print(
        f"--- last {cluster.trace.lines_max} trace lines (time node event detail -> role epoch hw leo)",
        file=out,
    )
    cluster.trace.dump(out)
    print("--- traceback", file=out)
    print(tb.rstrip(), file=out)
    print(f"replay: {replay_command(cluster.seed)}", file=out)
    return out.getvalue()


# many seeds ------------------------------------------------------------------------------------
def run_seeds(seeds: list[int], options: Options, jobs: int = 1) -> Iterator[SeedResult]:
    """Results in seed order; with ``jobs`` > 1 seeds run in worker processes."""
    return run_seeds_with(run_seed, seeds, options, jobs)


@dataclass(slots=True)
class Summary:
    seeds: int = 0
    failures: list[SeedResult] = field(default_factory=list)
    events: int = 0
    sim_ms: int = 0
    cpu_s: float = 0.0
    elections: int = 0
    commits: int = 0

    def add(self, r: SeedResult) -> None:
        self.seeds += 1
        self.events += r.events
        self.sim_ms += r.sim_ms
        self.cpu_s += r.wall_s
        self.elections += r.elections
        self.commits += r.commits
        if not r.ok:
            self.failures.append(r)

    def render(self, wall_s: float) -> str:
        failed = ", ".join(str(r.seed) for r in self.failures[:20]) or "none"
        return (
            f"seeds run: {self.seeds}  failures: {len(self.failures)} ({failed})\n"
            f"events: {self.events} ({self.events / max(self.cpu_s, 1e-9):,.0f} events/s per core)  "
            f"seeds/s: {self.seeds / max(wall_s, 1e-9):.1f} (wall {wall_s:.1f}s, "
            f"{1000 * self.cpu_s / max(self.seeds, 1):.0f} ms cpu per seed)\n"
            f"simulated time: {self.sim_ms / 1000:,.1f}s  elections: {self.elections}  "
            f"committed records: {self.commits}"
        )


def main_many(seeds: list[int], options: Options, jobs: int, out: TextIO = sys.stdout) -> int:
    wall_start = time.perf_counter()
    summary = Summary()
    for result in run_seeds(seeds, options, jobs):
        summary.add(result)
        if not result.ok:
            if len(summary.failures) <= FULL_REPORTS_MAX:
                print(result.report, file=out)
            else:
                print(
                    f"seed {result.seed} FAILED: {result.reason}  replay: {replay_command(result.seed)}",
                    file=out,
                )
    print(summary.render(time.perf_counter() - wall_start), file=out)
    return 1 if summary.failures else 0
