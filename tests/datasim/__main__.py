"""``python -m tests.datasim``: run seeds of the data-plane simulation.

python -m tests.datasim --seeds 1000 --jobs 2      # seeds 0..999, summary
python -m tests.datasim --seed 1234 --trace        # replay one seed, every event
"""

from __future__ import annotations

import argparse
import sys

from tests.datasim.mutants import MUTANTS
from tests.datasim.runner import FAULTS_MS, HEAL_MS, TRACE_LINES, Options, main_many, run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.datasim", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--trace", action="store_true", help="print every event of the (single) seed")
    parser.add_argument("--faults-ms", type=int, default=FAULTS_MS, help="simulated ms of faults per seed")
    parser.add_argument("--heal-ms", type=int, default=HEAL_MS, help="bound for the healed cluster")
    parser.add_argument("--trace-lines", type=int, default=TRACE_LINES, help="trace lines kept for a failure")
    parser.add_argument(
        "--mutant", choices=sorted(m for m in MUTANTS if m), default="", help="a broken broker"
    )
    args = parser.parse_args(argv)
    options = Options(args.faults_ms, args.heal_ms, args.trace_lines, args.mutant)
    if args.seed is not None:
        result = run_seed(args.seed, options, echo=sys.stdout if args.trace else None)
        if result.ok:
            print(
                f"seed {args.seed} ok: {result.events} events, {result.acked} acknowledged records, "
                f"{result.generations} group generations, {result.commits} group commits, "
                f"{result.transactions} transactions, faults {result.faults}"
            )
            return 0
        print(result.report)
        return 1
    return main_many(list(range(args.start, args.start + args.seeds)), options, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
