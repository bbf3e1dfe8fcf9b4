"""The data plane's deterministic simulation: many seeds, replay, and self-tests.

``DATASIM_SEEDS`` (default 120) seeds run in ``DATASIM_JOBS`` worker processes (default: up
to two). A failure prints its seed, trace and the command that replays it. The self-tests
prove that a seed replays exactly and that deliberately broken brokers do not get past it.
"""

from __future__ import annotations

import io
import os

import pytest

from tests.datasim.cluster import BUGGIFY, CLEANER_FAULTS, FAULTS, MEMBER_FAULTS
from tests.datasim.mutants import MUTANTS
from tests.datasim.runner import Options, run_seed, run_seeds

DATASIM_SEEDS = int(os.environ.get("DATASIM_SEEDS", "120"))
DATASIM_START = int(os.environ.get("DATASIM_START", "0"))
DATASIM_JOBS = int(os.environ.get("DATASIM_JOBS", str(min(2, os.cpu_count() or 1))))
MUTANT_SEEDS_MAX = 40  # a broken broker must be caught within this many seeds


def test_seeds() -> None:
    """No acknowledged or read record lost, replicas agreeing below the high watermark,
    under faults within the budget, and the group's invariants (``group_invariants``)
    whatever its members do; then, healed, new records acknowledged, every replica
    holding every one, the group settled in one generation, and every transaction ended."""
    seeds = list(range(DATASIM_START, DATASIM_START + DATASIM_SEEDS))
    results = list(run_seeds(seeds, Options(), DATASIM_JOBS))
    failures = [r for r in results if not r.ok]
    if failures:
        others = ", ".join(f"{r.seed} ({r.reason[:60]})" for r in failures[1:10])
        pytest.fail(
            f"{len(failures)} of {len(seeds)} seeds failed; also: {others}\n{failures[0].report}",
            pytrace=False,
        )
    faults = {name for r in results for name in r.faults}
    assert faults == {*FAULTS, *MEMBER_FAULTS, *BUGGIFY, *CLEANER_FAULTS}, faults
    assert sum(r.acked for r in results) > 100 * len(seeds)
    assert sum(r.generations for r in results) > 3 * len(seeds)  # the group rebalanced again and again
    assert sum(r.commits for r in results) > 5 * len(seeds)
    assert sum(r.transactions for r in results) > 3 * len(seeds)  # ended, whatever answers were lost


def test_a_seed_replays_exactly() -> None:
    traces = []
    for _ in range(2):
        echo = io.StringIO()
        result = run_seed(11, Options(), echo=echo)
        assert result.ok, result.report
        traces.append((echo.getvalue(), result.events, result.acked))
    assert traces[0] == traces[1]
    assert "FAULT" in traces[0][0]


@pytest.mark.parametrize("mutant", sorted(m for m in MUTANTS if m))
def test_a_broken_broker_is_caught(mutant: str) -> None:
    """Each mutant breaks an invariant within a few seeds: loses an acknowledged or read
    record, (the group's) writes a fenced commit or gives a partition two owners, or
    leaves a transaction unfinished after healing. A seed where a mutant only stalls the
    healed cluster (LivenessFailure) does not count as caught."""
    for seed in range(MUTANT_SEEDS_MAX):
        result = run_seed(seed, Options(mutant=mutant))
        if result.reason.startswith("InvariantViolation"):
            assert f"--mutant {mutant}" in result.report
            return
        # a seed where the mutant only stalls the healed cluster is no catch: look further
        assert result.ok or result.reason.startswith("LivenessFailure"), result.report
    pytest.fail(f"mutant {mutant} survived {MUTANT_SEEDS_MAX} seeds")
