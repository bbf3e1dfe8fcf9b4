"""The audit job: metadata log files in, Parquet tables, ``summary.json`` and ``report.html`` out.

    raftka audit DIR... --out OUT                                    # embedded Spark, local[2]
    spark-submit --master spark://host:7077 audit/job.py DIR... --out OUT     # on a cluster

Steps: walk each node's log (``raftka.audit.walk``) in a Spark task per node
(``raftka.audit.node_walk``), reading the head of every batch of its files (the same decoding
as the ``raftka-metadata`` data source, without taking the rows through the JVM, which cost
twice the decoding) and writing the copies the merge needs to the scratch folder, in offset
order; on the driver, merge the nodes' copies into the canonical history
(``raftka.audit.merge``) as streams, so the driver holds no batch of the history (runs of
each file's frames: its memory grows with files and snapshots, not records); replay the
history in order (``raftka.audit.replay``) in
pieces cut at snapshots, which Spark tasks run in parallel straight from the files
(``raftka.audit.pieces``), each a chunk of records at a time writing its events and its
part of the tables that are events filtered (``raftka.audit.event_tables``), folding its
offset commits per series (``raftka.audit.commits``, joined per series by Spark tasks:
``raftka.audit.commit_job``) and counting its records per epoch and time bucket
(``raftka.audit.counts``), which Spark adds up; build the other
tables with window functions (``raftka.audit.tables``) over what the pieces wrote and
counted, and from them, in Spark tasks, the incidents (``raftka.audit.incident_job``) and
what the summary and the report read, made small (``raftka.audit.report_data``): the
driver holds no long table. Exit status 1 when an error-level check fails.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from raftka.audit import collector, commit_job, incident_job, report, report_data, tables
from raftka.audit.checks import VIOLATION_COLUMNS, VIOLATION_SCHEMA, check_results
from raftka.audit.commits import PROGRESS_BUCKETS, PROGRESS_SCHEMA, committed_over_time
from raftka.audit.counts import EPOCH_SCHEMA, OPENED_SCHEMA, RATE_SCHEMA, Counts, bucket_ms
from raftka.audit.event_tables import EVENT_TABLES
from raftka.audit.files import AuditInputError, LogFile, discover, file_size, local_path
from raftka.audit.node_walk import merge_walked, node_groups, walk_files
from raftka.audit.out import claim
from raftka.audit.pieces import EPOCH_COUNTS, EVENTS, FOLDS, OPENED, PROGRESS, RATE, plan, run_piece
from raftka.audit.replay import EVENT_SCHEMA
from raftka.audit.schema import to_batch
from raftka.audit.tree_cpu import TreeCpu

log = structlog.get_logger("raftka.audit.job")

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
TABLES = (
    "controller_epochs",
    "partition_transitions",
    "partition_intervals",
    "broker_timeline",
    "topic_lifecycle",
    "config_history",
    "group_offsets",
    "group_rebalances",
    "leadership_by_broker",
    "violations",
    "incidents",
)
SCRATCH = "scratch"  # under OUT: what the walks and the replay's tasks write; removed at the end
COPIES = "copies"  # under SCRATCH: each node's copies for the merge
TASKS_PER_CORE = 4  # replay pieces (and the baseline's partitions): enough to keep every core busy to the end
TABLE_WRITERS = 2  # Spark jobs writing tables at once
PARTITION_BYTES_MIN = 4 << 20  # a Spark task costs tens of milliseconds: a small history is one


@dataclass
class Timings:
    """Wall seconds per step, the CPU seconds this machine's processes spent in it (the
    driver, its JVM and Spark's Python workers: all of the work with a ``local`` master;
    ``raftka.audit.tree_cpu``), and the driver's peak resident memory by the end of it (its
    Python process, not its JVM): which step makes the driver grow with the history."""

    steps: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    peak_mib: dict[str, float] = field(default_factory=dict)
    _tree: TreeCpu = field(default_factory=lambda: TreeCpu().start())
    _start: float = field(default_factory=time.monotonic)
    _cpu_start: float = 0.0

    def __post_init__(self) -> None:
        self._cpu_start = self._tree.seconds()

    def mark(self, step: str) -> None:
        now, cpu = time.monotonic(), self._tree.seconds()
        self.steps[step] = round(now - self._start, 3)
        self.cpu[step] = round(cpu - self._cpu_start, 3)
        self.peak_mib[step] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        )  # KiB on Linux
        self._start, self._cpu_start = now, cpu

    def stop(self) -> None:
        self._tree.stop()


def run(
    spark: SparkSession,
    paths: Sequence[str],
    out: Path,
    *,
    include_archive: bool = True,
    include_snapshots: bool = True,
) -> dict[str, Any]:
    """Audit the nodes under ``paths`` into ``out``; returns the summary (also in summary.json)."""
    timings = Timings()
    try:
        with collector.paused():  # the merge makes and drops an object or more per batch
            return _run(spark, paths, out, timings, include_archive=include_archive,
                        include_snapshots=include_snapshots)  # fmt: skip
    finally:
        timings.stop()


def _run(
    spark: SparkSession,
    paths: Sequence[str],
    out: Path,
    timings: Timings,
    *,
    include_archive: bool,
    include_snapshots: bool,
) -> dict[str, Any]:
    files = discover(paths, include_archive=include_archive, include_snapshots=include_snapshots)
    if not files:
        raise AuditInputError(f"paths: no segment or snapshot files to audit in {', '.join(map(str, paths))}")
    out = local_path(out, "--out")  # absolute before a task is given it: executors run elsewhere
    claim(out)
    scratch = out / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    tasks = spark.sparkContext.defaultParallelism * TASKS_PER_CORE
    nodes = node_groups(files)
    walked = (
        spark.sparkContext.parallelize(nodes, len(nodes))
        .map(partial(walk_files, folder=str(scratch / COPIES)))
        .collect()
    )
    timings.mark("heads")

    violations, snapshots, merged = merge_walked(walked, len(files))
    timings.mark("walk_and_merge")

    pieces = plan(files, merged.chosen, snapshots, merged.start_offset or 0, tasks)
    done = (
        spark.sparkContext.parallelize(pieces, len(pieces))
        .map(partial(run_piece, folder=str(scratch)))
        .collect()
    )
    events = _read(spark, scratch / EVENTS, EVENT_SCHEMA)
    timings.mark("replay")

    bounds = Counts().add(chunk for d in done for chunk in d.pop("bounds")).bounds()
    end_ms = bounds[3] or 0
    uncommitted = spark.createDataFrame(merged.uncommitted_leader_changes or [], schema=_UNCOMMITTED)
    replay_violations = (
        events.filter(F.col("event") == "VIOLATION").select(*[n for n, _ in VIOLATION_COLUMNS]).toArrow()
    )
    violations += replay_violations.to_pylist()
    frames = {  # the longest first: the short ones fill the gaps it leaves
        "partition_intervals": tables.partition_intervals(events, end_ms),
        "leadership_by_broker": tables.leadership_by_broker(events, end_ms),
        "controller_epochs": tables.controller_epochs(
            tables.per_epoch(_read(spark, scratch / EPOCH_COUNTS, EPOCH_SCHEMA)),
            _read(spark, scratch / OPENED, OPENED_SCHEMA), uncommitted, end_ms,
        ),
        "broker_timeline": tables.broker_timeline(events, end_ms),
        "topic_lifecycle": tables.topic_lifecycle(events, end_ms),
        "violations": _frame(spark, [tuple(v.values()) for v in violations], VIOLATION_SCHEMA),
    }  # fmt: skip
    tables_dir = out / "tables"
    tables_dir.mkdir(exist_ok=True)
    for name in EVENT_TABLES:  # the pieces wrote them
        shutil.rmtree(tables_dir / name, ignore_errors=True)
        (scratch / name).rename(tables_dir / name)
    with ThreadPoolExecutor(TABLE_WRITERS, thread_name_prefix="audit-table") as pool:
        writing = {
            name: pool.submit(_write_table, frame, tables_dir / name) for name, frame in frames.items()
        }
        series = commit_job.series(spark, scratch / FOLDS)
        more = {"group_offsets": tables.group_offsets(series, events, frames["topic_lifecycle"]),
                "group_rebalances": tables.group_rebalances(events)}  # fmt: skip
        writing |= {name: pool.submit(_write_table, frame, tables_dir / name) for name, frame in more.items()}
        table_seconds = {name: future.result() for name, future in writing.items()}
    timings.mark("tables")

    incident_job.write(spark, tables_dir)
    timings.mark("incidents")

    write_rate = _write_rate(_read(spark, scratch / RATE, RATE_SCHEMA), bucket_ms(bounds[2], end_ms))
    moved = _read(spark, scratch / PROGRESS, PROGRESS_SCHEMA).unionByName(commit_job.takebacks(spark, scratch / FOLDS))
    progress = per_bucket(moved, bucket_ms(bounds[2], end_ms, PROGRESS_BUCKETS), "group", "moved")
    committed = pd.DataFrame(
        committed_over_time(list(progress.itertuples(index=False, name=None))),
        columns=["group", "bucket_ms", "committed"],
    )
    data = report_data.collect(
        spark, tables_dir, bounds[2], end_ms, write_rate=write_rate, committed=committed
    )
    skipped = sum(d["skipped"] for d in done)
    summary = make_summary(files, merged, bounds, violations, data.headline, skipped)
    shutil.rmtree(scratch)
    timings.mark("report_data")
    report.write(out / "report.html", summary, data)
    timings.mark("report")
    summary["timings_s"] = timings.steps
    summary["cpu_s"] = timings.cpu
    summary["driver_peak_mib"] = timings.peak_mib
    summary["tables_s"] = table_seconds
    summary["replay_tasks"] = {
        "pieces": len(done),
        "seconds_max": max(d["seconds"] for d in done),
        "seconds_sum": round(sum(d["seconds"] for d in done), 3),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


def _write_table(frame: DataFrame, folder: Path) -> float:
    """Write one table; the seconds it took. The job runs ``TABLE_WRITERS`` at once: one
    Spark job alone leaves cores idle while it plans, compiles and runs its last tasks.
    A ``file:`` URI, as the driver reads it back with Python: a bare path would go to the
    cluster's default filesystem (``fs.defaultFS``), HDFS on a Hadoop cluster."""
    started = time.monotonic()
    frame.write.mode("overwrite").parquet(folder.as_uri())
    return round(time.monotonic() - started, 3)


def _read(spark: SparkSession, folder: Path, schema: pa.Schema) -> DataFrame:
    """What the replay's tasks wrote under ``folder`` (every piece writes a file per chunk)."""
    return spark.read.schema(from_arrow_schema(schema)).parquet(folder.as_uri())


def _frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: pa.Schema) -> DataFrame:
    """Rows made on the driver as a DataFrame, through Arrow: a list of tuples goes through
    Spark's row-by-row conversion, several times slower (a second at 200,000 rows)."""
    return spark.createDataFrame(pa.Table.from_batches([to_batch(rows, schema)]))


def _partition_bytes(files: Sequence[LogFile], tasks: int) -> int:
    """Bytes per task for about ``tasks`` tasks (a small history: one)."""
    total = sum(file_size(f) for f in files)
    return max(PARTITION_BYTES_MIN, -(-total // tasks))


_UNCOMMITTED = "epoch int, leader int, offset long, timestamp_ms long, nodes array<string>"


def per_bucket(rows: DataFrame, width: int, key: str, value: str) -> pd.DataFrame:
    """(bucket_ms, ``key``, ``value``) summed per bucket of ``width`` ms (a multiple of every
    width ``rows`` were bucketed at, ``counts.bucket_ms``) and ``key``: small, for the report."""
    bucket = (F.col("bucket_ms") - F.pmod("bucket_ms", F.lit(width))).alias("bucket_ms")
    summed = rows.groupBy(bucket, key).agg(F.sum(value).alias(value)).toArrow()
    return summed.to_pandas().astype({"bucket_ms": "int64", value: "int64"})


def _write_rate(rows: DataFrame, width: int) -> pd.DataFrame:
    frame = per_bucket(rows, width, "type", "count")
    frame.attrs["width_ms"] = width
    return frame


def make_summary(
    files: list[Any],
    merged: Any,
    bounds: Any,
    violations: list[dict[str, Any]],
    figures: dict[str, Any],
    skipped: int,
) -> dict[str, Any]:
    checks = check_results(violations)
    failed = [c["check"] for c in checks if not c["passed"]]
    return {
        "status": "failed" if failed else "passed",
        "exit_status": EXIT_FAILED_CHECK if failed else EXIT_OK,
        "failed_checks": failed,
        "inputs": {
            "nodes": sorted({f.node for f in files}),
            "files": [
                {
                    "node": f.node,
                    "path": f.path,
                    "source": f.source,
                    "archived": f.archived,
                    "bytes": Path(f.path).stat().st_size if Path(f.path).exists() else None,
                }
                for f in files
            ],
        },  # fmt: skip
        "history": {
            "start_offset": bounds[0],
            "end_offset": bounds[1],
            "start_ms": bounds[2],
            "end_ms": bounds[3],
            "records": bounds[4],
            "voters": merged.voters,
            "gaps": [list(g) for g in merged.gaps],
            "skipped_batches": skipped,
        },
        "headline": figures,
        "checks": checks,
        "violations": {
            s: sum(1 for v in violations if v["severity"] == s) for s in ("error", "warning", "info")
        },
        "tables": {name: f"tables/{name}" for name in TABLES},
    }


# spark-submit entry point ---------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="raftka.audit.job", description="audit raftka metadata logs on Spark"
    )
    parser.add_argument("paths", nargs="+", help="node data dirs, log dirs, or folders of them")
    parser.add_argument(
        "--out", required=True, type=Path, help="where tables, summary.json and report.html go"
    )
    parser.add_argument("--no-archive", action="store_true", help="leave archive/ out")
    parser.add_argument("--no-snapshots", action="store_true", help="leave snapshot files out")
    args = parser.parse_args(argv)
    from raftka.audit.spark import session

    try:
        summary = run(session(master=None), args.paths, args.out, include_archive=not args.no_archive,
                      include_snapshots=not args.no_snapshots)  # fmt: skip
    except AuditInputError as exc:
        print(f"audit: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("status", "failed_checks", "headline")}, indent=2))
    return int(summary["exit_status"])


if __name__ == "__main__":
    sys.exit(main())
