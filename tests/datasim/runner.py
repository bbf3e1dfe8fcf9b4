"""Runs one seed (faults, then healing) or many, and reports.

A failing seed prints its reason, the cluster's state, the last trace lines and the one
command that replays it with its whole trace.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import structlog

from tests.datasim.broker import sim_time_writes
from tests.datasim.cluster import Cluster
from tests.datasim.disk import Disks
from tests.datasim.invariants import InvariantViolation, unfinished_transaction
from tests.datasim.mutants import MUTANTS
from tests.simulation.pool import run_seeds_with

FAULTS_MS = 4_000  # simulated time with faults, per seed
HEAL_MS = 6_000  # a healed cluster must acknowledge new records and agree within this
TRACE_LINES = 300
FULL_REPORTS_MAX = 3
# the brokers' files live in memory where the machine offers it: a disk's latency is not
# simulated anyway, and closing and deleting thousands of files on it costs the run seconds
_RAM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class LivenessFailure(AssertionError):
    """The healed cluster did not acknowledge new records, or its replicas did not agree."""


@dataclass(slots=True)
class Options:
    faults_ms: int = FAULTS_MS
    heal_ms: int = HEAL_MS
    trace_lines: int = TRACE_LINES
    mutant: str = ""  # a deliberately broken broker (``tests.datasim.mutants``)


@dataclass(slots=True)
class SeedResult:
    seed: int
    ok: bool
    events: int = 0
    wall_s: float = 0.0
    acked: int = 0
    generations: int = 0  # of the group, assigned to its members
    commits: int = 0  # the group members' commits written
    transactions: int = 0  # the transactional producer's transactions ended (EndTxn answered)
    faults: dict[str, int] = field(default_factory=dict)
    report: str = ""
    reason: str = ""


def replay_command(seed: int, options: Options) -> str:
    extra = f" --mutant {options.mutant}" if options.mutant else ""
    return f".venv/bin/python -m tests.datasim --seed {seed} --trace{extra}"


def run_seed(seed: int, options: Options | None = None, echo: TextIO | None = None) -> SeedResult:
    """Run one seed to completion; never raises for a failure, returns it."""
    options = options or Options()
    wall_start = time.perf_counter()  # reporting only: never read by the simulation
    result = SeedResult(seed, ok=True)
    with (
        tempfile.TemporaryDirectory(prefix=f"datasim-{seed}-", dir=_RAM) as root,
        Disks().installed() as disks,
        _quiet(),
        sim_time_writes(),
        MUTANTS[options.mutant](),
    ):
        cluster = Cluster(seed, Path(root), disks, options.trace_lines, echo)
        try:
            _run_phases(cluster, options)
        except Exception as e:  # a failure of the broker, the storage or an invariant
            result.ok = False
            result.reason = f"{type(e).__name__}: {e}"
            result.report = _report(cluster, options, result.reason, traceback.format_exc())
        finally:
            tasks = [t for b in cluster.brokers.values() if b.process for t in b.process.tasks]
            for broker in cluster.brokers.values():
                broker.crash("stops: the run is over")
            cluster.loop.close(tasks)
    result.events = cluster.scheduler.events_run
    result.acked = cluster.invariants.acked
    result.generations = len(cluster.group_invariants.owners)
    result.commits = cluster.group_invariants.commits
    result.transactions = cluster.transactional.ended
    result.faults = dict(cluster.faults)
    result.wall_s = time.perf_counter() - wall_start
    return result


def _run_phases(cluster: Cluster, options: Options) -> None:
    cluster.start()
    cluster.run_until(options.faults_ms)
    # healing: no new fault; the one in progress ends as planned; then every link is whole
    cluster.nemesis_on = False
    cluster.run_until(cluster.scheduler.now_ms + options.heal_ms, lambda: not cluster.faulting)
    cluster.network.heal()
    cluster.params.loss, cluster.params.lossy, cluster.params.slow = 0.0, {}, {}
    healed_at = cluster.scheduler.now_ms
    acked = cluster.invariants.acked
    if not cluster.run_until(
        healed_at + options.heal_ms, lambda: cluster.healthy() and cluster.invariants.acked > acked
    ):
        raise LivenessFailure(
            f"no new acknowledged record within {options.heal_ms} ms of healing at {healed_at}"
        )
    for member in cluster.members:
        if not member.up:
            member.start()
    cluster.producer.running = cluster.idempotent.running = cluster.transactional.running = False
    if not cluster.run_until(healed_at + 2 * options.heal_ms, lambda: _in_agreement(cluster)):
        raise LivenessFailure(f"the replicas did not agree within {2 * options.heal_ms} ms of healing")
    if not cluster.run_until(healed_at + 3 * options.heal_ms, cluster.group_settled):
        raise LivenessFailure(
            f"the group's members did not settle in one generation within {3 * options.heal_ms} ms of healing"
        )
    unfinished = lambda: unfinished_transaction(cluster.brokers, cluster.controller.image, cluster.partitions)  # noqa: E731
    if not cluster.run_until(healed_at + 4 * options.heal_ms, lambda: unfinished() is None):
        raise InvariantViolation(f"{unfinished()}, {4 * options.heal_ms} ms after healing")
    cluster.invariants.check(cluster.brokers, cluster.controller.image)
    cluster.invariants.every_replica_holds_committed(cluster.brokers)


def _in_agreement(cluster: Cluster) -> bool:
    """Every replica serves, holds the leader's log end, and the high watermark is there."""
    if cluster.producer.in_flight or cluster.idempotent.in_flight or not cluster.healthy():
        return False
    for partition_id in range(cluster.partitions):
        partitions = [b.partition(partition_id) for b in cluster.brokers.values()]
        if any(p is None for p in partitions):
            return False
        ends = {(p.log.log_end_offset, p.high_watermark) for p in partitions}  # type: ignore[union-attr]
        if len(ends) != 1 or len(set(ends.pop())) != 1:
            return False
    return True


class _quiet:
    """The brokers log at INFO and WARNING on every fault; a run shows only its report."""

    def __enter__(self) -> None:
        self._config = structlog.get_config()
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))

    def __exit__(self, *exc: object) -> None:
        structlog.configure(**self._config)


def _report(cluster: Cluster, options: Options, reason: str, tb: str) -> str:
    out = io.StringIO()
    print(
        f"=== DATA-PLANE SIMULATION FAILURE seed={cluster.seed} at t={cluster.scheduler.now_ms} ms", file=out
    )
    if options.mutant:
        print(f"mutant: {options.mutant}", file=out)
    print(f"reason: {reason}", file=out)
    print(f"links: {cluster.params}", file=out)
    print(f"faults injected: {cluster.faults}", file=out)
    print(cluster.status(), file=out)
    print(f"--- last {len(cluster.trace_lines)} trace lines", file=out)
    for line in cluster.trace_lines:
        print(line, file=out)
    print("--- traceback", file=out)
    print(tb.rstrip(), file=out)
    print(f"replay: {replay_command(cluster.seed, options)}", file=out)
    return out.getvalue()


# many seeds ------------------------------------------------------------------------------------
def run_seeds(seeds: list[int], options: Options, jobs: int = 1) -> Iterator[SeedResult]:
    """Results in seed order; with ``jobs`` > 1 seeds run in worker processes."""
    return run_seeds_with(run_seed, seeds, options, jobs)


def main_many(seeds: list[int], options: Options, jobs: int, out: TextIO = sys.stdout) -> int:
    wall_start = time.perf_counter()
    failures: list[SeedResult] = []
    events = acked = generations = commits = transactions = 0
    faults: dict[str, int] = {}
    for result in run_seeds(seeds, options, jobs):
        events += result.events
        acked += result.acked
        generations += result.generations
        commits += result.commits
        transactions += result.transactions
        for name, count in result.faults.items():
            faults[name] = faults.get(name, 0) + count
        if not result.ok:
            failures.append(result)
            if len(failures) <= FULL_REPORTS_MAX:
                print(result.report, file=out)
            else:
                print(
                    f"seed {result.seed} FAILED: {result.reason}  replay: {replay_command(result.seed, options)}",
                    file=out,
                )
    wall = time.perf_counter() - wall_start
    failed = ", ".join(str(r.seed) for r in failures[:20]) or "none"
    print(
        f"seeds run: {len(seeds)}  failures: {len(failures)} ({failed})\n"
        f"events: {events}  acknowledged records: {acked}  group generations: {generations}  "
        f"group commits: {commits}  transactions: {transactions}  faults: {faults}  wall {wall:.1f}s",
        file=out,
    )
    return 1 if failures else 0
