"""Running many seeds of a simulation, in worker processes when asked."""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Iterator
from typing import TypeVar

Options = TypeVar("Options")
Result = TypeVar("Result")


def run_seeds_with(
    run_seed: Callable[[int, Options], Result], seeds: list[int], options: Options, jobs: int = 1
) -> Iterator[Result]:
    """``run_seed(seed, options)`` for each seed, results in seed order; with ``jobs`` > 1 in
    worker processes. ``run_seed`` must be a module-level function (it is pickled by name)."""
    if jobs <= 1:
        for seed in seeds:
            yield run_seed(seed, options)
        return
    # spawn, not fork: a process that has used gRPC (the test run before this one) must not
    # be forked, its threads' state is copied half-way and the children spin.
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        yield from pool.imap(functools.partial(_run_one, run_seed), [(s, options) for s in seeds], chunksize=4)


def _run_one(run_seed: Callable[[int, Options], Result], args: tuple[int, Options]) -> Result:
    seed, options = args
    return run_seed(seed, options)
