"""``python -m tests.simulation``: run seeds of the deterministic cluster simulation.

python -m tests.simulation --seeds 1000 --jobs 2      # seeds 0..999, summary
python -m tests.simulation --seed 1234 --trace        # replay one seed, every event
"""

from __future__ import annotations

import argparse
import sys

from tests.simulation.runner import LIVENESS_MS, SAFETY_MS, TRACE_LINES, Options, main_many, run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--trace", action="store_true", help="print every event of the (single) seed")
    parser.add_argument("--safety-ms", type=int, default=SAFETY_MS, help="simulated ms of faults per seed")
    parser.add_argument("--liveness-ms", type=int, default=LIVENESS_MS, help="bound for the healed cluster")
    parser.add_argument("--trace-lines", type=int, default=TRACE_LINES, help="trace lines kept for a failure")
    args = parser.parse_args(argv)
    options = Options(
        safety_ms=args.safety_ms,
        liveness_ms=args.liveness_ms,
        trace_lines=args.trace_lines,
    )
    if args.seed is not None:
        result = run_seed(args.seed, options, echo=sys.stdout if args.trace else None)
        if result.ok:
            print(
                f"seed {args.seed} ok: {result.events} events, {result.sim_ms} simulated ms, "
                f"{result.elections} elections, {result.commits} committed records, faults {result.faults}"
            )
            return 0
        print(result.report)
        return 1
    seeds = list(range(args.start, args.start + args.seeds))
    return main_many(seeds, options, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
