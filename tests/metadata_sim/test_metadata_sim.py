"""The controller under a random workload with leader crashes: see ``workload.py``."""

from __future__ import annotations

import asyncio

import pytest

from tests.metadata_sim.workload import Workload

SEEDS = range(4)
STEPS = 60


@pytest.mark.parametrize("seed", SEEDS)
def test_random_workload_with_crashes_keeps_every_node_equal(seed: int) -> None:
    workload = Workload(seed, STEPS)
    asyncio.run(asyncio.wait_for(workload.run(), 120))
    stats = workload.stats
    print(dict(stats))
    assert stats["crashes"] and stats["topics created"] and stats["fenced by expiry"], stats
