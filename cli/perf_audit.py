"""``raftka perf audit --records N``: how fast the Spark audit reads a long history.

It writes a synthetic history of N records with the project's own writer (the
controller's request handlers, ``FileStorage``, the state machine's snapshots and an
archive: ``raftka.audit.synthetic``), then times the audit over it with the chosen master.
Where the time goes: the job's steps (heads = the data source reading each batch's
first record on Spark; walk and merge on the driver; the replay in pieces as Spark tasks;
the tables; the report), in wall seconds and in CPU seconds of this machine's processes
(driver, JVM, Python workers), the replay tasks' own seconds, and, on a sample of files
in this process, the per-row cost of decoding a record and of building Arrow batches.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from raftka.cli import output
from raftka.cli.audit_cmd import check_driver_memory
from raftka.cli.errors import CliError

RECORDS_MAX = 100_000_000
SAMPLE_ROWS = 200_000


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    perf = kinds.add_parser("audit", help="time the Spark audit over a synthetic history of N records")
    perf.add_argument("--records", type=int, default=1_000_000, help="records of history (default 1,000,000)")
    perf.add_argument("--seed", type=int, default=0, help="the synthetic history's seed")
    perf.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    perf.add_argument("--driver-memory", default="6g", help="Spark driver memory (default 6g)")
    perf.add_argument(
        "--dir", type=Path, help="keep the history here and reuse it next time (default: a temp dir, removed)"
    )
    output.add_output_option(perf)
    perf.set_defaults(func=run_perf_audit)


def run_perf_audit(args: argparse.Namespace) -> int:
    if not 1 <= args.records <= RECORDS_MAX:
        raise CliError(f"--records: expected 1 to {RECORDS_MAX}, got {args.records}")
    check_driver_memory(args.driver_memory)
    try:
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
        sample = python_costs(data_dir)
        try:
            starting = time.monotonic()
            with owned_session(args.master, driver_memory=args.driver_memory) as spark:
                started = time.monotonic()
                summary = run(spark, [str(data_dir)], root / "audit")
                seconds = time.monotonic() - started
            session_seconds = started - starting  # the JVM and the session: `raftka audit` pays it too
        except JavaMissing as exc:
            raise CliError(str(exc)) from None
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    records = summary["history"]["records"]
    result = {
        "records": records,
        "audit_seconds": round(seconds, 1),
        "records_per_s": round(records / seconds),
        "session_start_seconds": round(session_seconds, 1),
        "steps_s": summary["timings_s"],
        "cpu_s": summary["cpu_s"],
        "replay_tasks": summary["replay_tasks"],
        "tables_s": summary["tables_s"],
        "python_us_per_row": sample,
        "checks_failed": summary["failed_checks"],
        "generated": generated,
        "master": args.master,
    }
    print(output.to_json(result) if args.output == "json" else _format(result))
    return 0


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
    tasks = result["replay_tasks"]
    sample = result["python_us_per_row"]
    return "\n".join(
        [
            f"Audited {result['records']:,} records in {result['audit_seconds']:g} s: "
            f"{result['records_per_s']:,} records/s ({result['master']}; starting Spark took "
            f"{result['session_start_seconds']:g} s more)",
            f"Steps: {steps}",
            f"CPU seconds (this machine's processes): {cpu}",
            f"Replay: {tasks['pieces']} tasks, the longest {tasks['seconds_max']:g} s, "
            f"{tasks['seconds_sum']:g} s in all",
            f"Python per row (sample of {sample['rows_sampled']:,}): decode {sample['decode']} us, "
            f"Arrow {sample['arrow']} us",
            f"Failed checks: {', '.join(result['checks_failed']) or 'none'}",
        ]
    )
