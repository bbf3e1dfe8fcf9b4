"""``raftka perf audit --records N``: how fast the Spark audit reads a long history.

It writes a synthetic history of N records with the project's own writer (the
controller's request handlers, ``FileStorage``, the state machine's snapshots and an
archive: ``raftka.audit.synthetic``), then times the audit over it with the chosen master.
Where the time goes: the job's steps (heads = the data source reading each batch's
first record on Spark; walk and merge on the driver; the replay in pieces as Spark tasks;
the tables; the report), in wall seconds and in CPU seconds of this machine's processes
(driver, JVM, Python workers), the replay tasks' own seconds, and, on a sample of files
in this process, the per-row cost of decoding a record and of building Arrow batches.

Seconds depend on the day's machine, so the audit is also timed against a baseline in the
same Spark session, right before it: the same files, packed into tasks the same way, read
as raw bytes with every frame's CRC-32C checked (``raftka.audit.baseline``), the least an
audit must do. The goal is the ratio, audit over baseline, at most ``RATIO_GOAL``. One
session for both: each would pay the same start, reported apart (``session_start_seconds``),
and the Python workers are started, with both jobs' modules imported, before either is
timed (``workers_start_seconds``), so neither pays a one-time cost the other escapes.
``--repeat K`` runs K rounds of baseline then audit and reports medians. Peak memory of
the driver, its JVM and the Python workers is sampled during each job
(``raftka.tools.perf.proc_memory``).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from raftka.command import output
from raftka.command.errors import CliError
from raftka.command.spark_args import check_driver_memory
from raftka.tools.perf.proc_memory import PeakMemory

if TYPE_CHECKING:
    from raftka.audit.baseline import Checked

RECORDS_MAX = 100_000_000
REPEAT_MAX = 20
SAMPLE_ROWS = 200_000
RATIO_GOAL = 4.0  # the audit within four times the least an audit must do
# What the two jobs' tasks import: loaded in every Python worker before either is timed.
TASK_MODULES = ("raftka.audit.baseline", "raftka.audit.walk", "raftka.audit.pieces")


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    perf = kinds.add_parser("audit", help="time the Spark audit over a synthetic history of N records")
    perf.add_argument("--records", type=int, default=1_000_000, help="records of history (default 1,000,000)")
    perf.add_argument("--seed", type=int, default=0, help="the synthetic history's seed")
    perf.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    perf.add_argument("--driver-memory", default="6g", help="Spark driver memory (default 6g)")
    perf.add_argument(
        "--repeat", type=int, default=1, help="rounds of baseline then audit; medians reported (default 1)"
    )
    perf.add_argument(
        "--dir", type=Path, help="keep the history here and reuse it next time (default: a temp dir, removed)"
    )
    output.add_output_option(perf)
    perf.set_defaults(func=run_perf_audit)


@dataclass
class Round:
    """One baseline and the audit right after it, in the same session."""

    baseline_seconds: float
    checked: Checked
    baseline_memory: dict[str, float | None]
    audit_seconds: float
    summary: dict[str, Any]
    audit_memory: dict[str, float | None]
    audit_memory_by_step: dict[str, dict[str, float | None]]  # PeakMemory.mib_between the job's steps

    @property
    def ratio(self) -> float:
        return self.audit_seconds / self.baseline_seconds


def run_perf_audit(args: argparse.Namespace) -> int:
    if not 1 <= args.records <= RECORDS_MAX:
        raise CliError(f"--records: expected 1 to {RECORDS_MAX}, got {args.records}")
    if not 1 <= args.repeat <= REPEAT_MAX:
        raise CliError(f"--repeat: expected 1 to {REPEAT_MAX}, got {args.repeat}")
    check_driver_memory(args.driver_memory)
    try:
        from raftka.audit.baseline import run_baseline
        from raftka.audit.job import run
        from raftka.audit.spark import JavaMissing, owned_session
        from raftka.audit.synthetic import write_history
    except ImportError as exc:
        raise CliError(f"the audit extra is missing: pip install 'raftka[audit]' ({exc})") from None
    root = args.dir or Path(tempfile.mkdtemp(prefix="raftka-perf-audit-"))
    data_dir = root / "node-1" / "data"
    try:
        generated = None
        if not data_dir.exists():
            started = time.monotonic()
            stats = write_history(data_dir, args.records, seed=args.seed)
            generated = {"seconds": round(time.monotonic() - started, 1), "records": stats.records,
                         "batches": stats.batches, "snapshots": stats.snapshots, "epochs": stats.epochs}  # fmt: skip
        try:
            starting = time.monotonic()
            with owned_session(args.master, driver_memory=args.driver_memory) as spark:
                started = time.monotonic()
                session_seconds = started - starting  # the JVM and the session: `raftka audit` pays it too
                start_workers(spark)
                workers_seconds = time.monotonic() - started
                jobs = Jobs(
                    partial(run_baseline, spark, [str(data_dir)]),
                    partial(run, spark, [str(data_dir)], root / "audit"),
                )
                rounds = [measure_round(jobs) for _ in range(args.repeat)]
        except JavaMissing as exc:
            raise CliError(str(exc)) from None
        sample = python_costs(data_dir)  # after the rounds: its rows would count in the driver's memory
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    result = make_result(rounds, generated, sample, args.master)
    result["session_start_seconds"] = round(session_seconds, 1)
    result["workers_start_seconds"] = round(workers_seconds, 1)
    print(output.to_json(result) if args.output == "json" else _format(result))
    return 0


def start_workers(spark: Any) -> None:
    """Start the Python workers and import both jobs' task modules in them, untimed."""
    tasks = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(tasks), tasks).map(_import_task_modules).collect()


def _import_task_modules(task: int) -> int:
    for name in TASK_MODULES:
        importlib.import_module(name)
    return task


class Jobs(NamedTuple):
    """The two jobs a round times, bound to their session and files."""

    baseline: Callable[[], Checked]
    audit: Callable[[], dict[str, Any]]


def measure_round(jobs: Jobs) -> Round:
    with PeakMemory() as baseline_memory:
        started = time.monotonic()
        checked = jobs.baseline()
        baseline_seconds = time.monotonic() - started
    with PeakMemory() as audit_memory:
        started = time.monotonic()
        summary = jobs.audit()
        audit_seconds = time.monotonic() - started
    steps, at = {}, started
    for step, seconds in summary["timings_s"].items():  # the job's steps follow one another from its start
        steps[step], at = (at, at + seconds), at + seconds
    return Round(baseline_seconds, checked, baseline_memory.mib(), audit_seconds, summary, audit_memory.mib(),
                 audit_memory.mib_between(steps))  # fmt: skip


def make_result(
    rounds: list[Round], generated: dict[str, Any] | None, sample: dict[str, float], master: str
) -> dict[str, Any]:
    """Medians over the rounds; the ratio is the median of each round's own ratio (its two
    jobs ran back to back, under the same load); the steps are the last round's."""
    summary = rounds[-1].summary
    records = summary["history"]["records"]
    audit_seconds = statistics.median(r.audit_seconds for r in rounds)
    ratio = statistics.median(r.ratio for r in rounds)
    return {
        "records": records,
        "audit_seconds": round(audit_seconds, 1),
        "baseline_seconds": round(statistics.median(r.baseline_seconds for r in rounds), 2),
        "ratio": round(ratio, 2),
        "ratio_goal": RATIO_GOAL,
        "ratio_goal_met": ratio <= RATIO_GOAL,
        "records_per_s": round(records / audit_seconds),
        "baseline": rounds[-1].checked._asdict(),
        "memory_peak_mib": {
            "audit": _peaks(r.audit_memory for r in rounds),
            "baseline": _peaks(r.baseline_memory for r in rounds),
        },
        "rounds": [
            {
                "baseline_seconds": round(r.baseline_seconds, 2),
                "audit_seconds": round(r.audit_seconds, 1),
                "ratio": round(r.ratio, 2),
            }
            for r in rounds
        ],
        "steps_s": summary["timings_s"],
        "cpu_s": summary["cpu_s"],
        "driver_peak_mib_by_step": summary["driver_peak_mib"],
        "memory_peak_mib_by_step": rounds[-1].audit_memory_by_step,
        "replay_tasks": summary["replay_tasks"],
        "tables_s": summary["tables_s"],
        "python_us_per_row": sample,
        "checks_failed": summary["failed_checks"],
        "generated": generated,
        "master": master,
    }


def _peaks(samples: Any) -> dict[str, float | None]:
    """Each role's largest peak over the rounds (None: no such process was seen)."""
    peaks: dict[str, float | None] = {}
    for sample in samples:
        for role, mib in sample.items():
            peaks[role] = max((v for v in (peaks.get(role), mib) if v is not None), default=None)
    return peaks


def python_costs(data_dir: Path) -> dict[str, float]:
    """Per-row microseconds of the data source's two Python steps, on the first files."""
    from raftka.audit.decode import decode_file
    from raftka.audit.files import discover
    from raftka.audit.schema import ROW_SCHEMA, to_batch

    rows: list[Any] = []
    started = time.perf_counter()
    for file in discover([data_dir]):
        rows += decode_file(file, with_json=False)
        if len(rows) >= SAMPLE_ROWS:
            break
    decoded = time.perf_counter()
    for start in range(0, len(rows), 65_536):
        to_batch(rows[start : start + 65_536], ROW_SCHEMA)
    arrow = time.perf_counter()
    count = max(1, len(rows))
    return {
        "rows_sampled": len(rows),
        "decode": round((decoded - started) * 1e6 / count, 2),
        "arrow": round((arrow - decoded) * 1e6 / count, 2),
    }


def _format(result: dict[str, Any]) -> str:
    steps = ", ".join(f"{k} {v:g} s" for k, v in result["steps_s"].items())
    cpu = ", ".join(f"{k} {v:g}" for k, v in result["cpu_s"].items())
    peaks = ", ".join(f"{k} {v:,.0f}" for k, v in result["driver_peak_mib_by_step"].items())
    tasks = result["replay_tasks"]
    sample = result["python_us_per_row"]
    checked = result["baseline"]
    goal = "met" if result["ratio_goal_met"] else "MISSED"
    rounds = len(result["rounds"])
    memory = [
        (job, *(_mib(peaks[role]) for role in ("driver", "jvm", "python_workers")))
        for job, peaks in result["memory_peak_mib"].items()
    ]
    return "\n".join(
        [
            f"Audited {result['records']:,} records in {result['audit_seconds']:g} s: "
            f"{result['records_per_s']:,} records/s ({result['master']}; starting Spark took "
            f"{result['session_start_seconds']:g} s more, its Python workers "
            f"{result['workers_start_seconds']:g} s)",
            f"Baseline (read every file, check every frame's CRC: {checked['frames']:,} frames, "
            f"{checked['bytes']:,} bytes, {checked['bad_crcs']} bad): {result['baseline_seconds']:g} s",
            f"Ratio audit / baseline: {result['ratio']:g} (goal at most {result['ratio_goal']:g}: {goal})"
            + (f", medians of {rounds} rounds" if rounds > 1 else ""),
            "Peak memory, MiB (sampled from /proc; the workers' proportional set):",
            output.table(("job", "driver", "JVM", "Python workers"), memory),
            f"Steps: {steps}",
            f"CPU seconds (this machine's processes): {cpu}",
            f"Driver's peak (Python) by the end of each step, MiB: {peaks}",
            "Peak memory in each step, MiB (sampled):",
            output.table(("step", "driver", "JVM", "Python workers", "worker processes"), [
                (step, *(_mib(p[role]) for role in ("driver", "jvm", "python_workers")),
                 "-" if p["python_worker_processes"] is None else p["python_worker_processes"])
                for step, p in result["memory_peak_mib_by_step"].items()
            ]),
            f"Replay: {tasks['pieces']} tasks, the longest {tasks['seconds_max']:g} s, "
            f"{tasks['seconds_sum']:g} s in all",
            f"Python per row (sample of {sample['rows_sampled']:,}): decode {sample['decode']} us, "
            f"Arrow {sample['arrow']} us",
            f"Failed checks: {', '.join(result['checks_failed']) or 'none'}",
        ]
    )


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
