"""The audit job: metadata log files in, Parquet tables, ``summary.json`` and ``report.html`` out.

    raftka audit DIR... --out OUT                                    # embedded Spark, local[2]
    spark-submit --master spark://host:7077 audit/job.py DIR... --out OUT     # on a cluster

Steps, each on Spark: read every file of every node (``raftka-metadata``, one partition
per file); walk each node's log (one task per node: ``raftka.audit.walk``); merge the nodes'
copies into the canonical history on the driver (``raftka.audit.merge``, batch heads only);
replay it in order (``raftka.audit.replay``), in pieces cut at snapshots that run in parallel;
build the tables with window functions (``raftka.audit.tables``). Exit status 1 when an error-level check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import structlog
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from raftka.audit import report, tables
from raftka.audit.checks import VIOLATION_COLUMNS, VIOLATION_SCHEMA, check_results
from raftka.audit.decode import DAMAGED, SNAPSHOT_KIND
from raftka.audit.files import SEGMENT, AuditInputError, discover
from raftka.audit.merge import merge
from raftka.audit.plain import head_order
from raftka.audit.replay import BASE, EVENT_SCHEMA, REPLAY_COLUMNS, SKIPPED, replay
from raftka.audit.replay import Row as ReplayRow
from raftka.audit.schema import ROW_SCHEMA, Row, record_batches, rows_of, to_batch
from raftka.audit.source import NAME
from raftka.audit.walk import walk_node

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
)
_WALK_SCHEMA = pa.schema(
    [*VIOLATION_SCHEMA, pa.field("rewind_file_seq", pa.int32()), pa.field("rewind_offset", pa.int64())]
)
_EVENT_BATCH_ROWS = 8_192


@dataclass
class Timings:
    """Wall seconds per step: where the time goes."""

    steps: dict[str, float] = field(default_factory=dict)
    _start: float = field(default_factory=time.monotonic)

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.steps[step] = round(now - self._start, 3)
        self._start = now


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
    files = discover(paths, include_archive=include_archive, include_snapshots=include_snapshots)
    out.mkdir(parents=True, exist_ok=True)
    reader = (
        spark.read.format(NAME)
        .option("paths", json.dumps([str(p) for p in paths]))
        .option("recordJson", "false")
    )
    rows = (
        reader.option("includeArchive", str(include_archive).lower())
        .option("includeSnapshots", str(include_snapshots).lower())
        .load()
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    is_head = (F.col("batch_index") == 0) | ((F.col("type") == DAMAGED) & F.col("batch_offset").isNull())
    heads = rows.filter(is_head).withColumn("raw", F.lit(None).cast("binary")).persist()
    heads.count()
    timings.mark("decode")

    walked = heads.groupBy("node").applyInArrow(_walk, from_arrow_schema(_WALK_SCHEMA)).toArrow()
    rewinds: dict[str, list[tuple[int, int]]] = {}
    for w in walked.filter(pa.compute.is_valid(walked["rewind_offset"])).to_pylist():
        rewinds.setdefault(w["node"], []).append((w["rewind_file_seq"], w["rewind_offset"]))
    violations = [
        {k: v[k] for k, _ in VIOLATION_COLUMNS} for v in walked.to_pylist() if v["check"] is not None
    ]
    merge_heads = heads.filter((F.col("source") == SEGMENT) & F.col("batch_offset").isNotNull()).toArrow()
    merged = merge((Row._make(r) for r in rows_of(merge_heads)), rewinds)
    violations += merged.violations
    timings.mark("walk_and_merge")

    canonical = _canonical(spark, rows, merge_heads, merged.chosen)  # a filter of the cached rows
    snapshots = heads.filter((F.col("kind") == SNAPSHOT_KIND) & F.col("batch_offset").isNotNull())
    snapshot_files = [(r.file, r.batch_offset) for r in snapshots.select("file", "batch_offset").collect()]
    pieces = spark.sparkContext.defaultParallelism * 2
    ordered = _replay_input(rows, canonical, snapshot_files, merged.start_offset or 0, pieces)
    events = ordered.mapInArrow(_replay, from_arrow_schema(EVENT_SCHEMA)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    events.count()
    timings.mark("replay")

    bounds = canonical.agg(
        F.min("offset"), F.max("offset"), F.min("timestamp_ms"), F.max("timestamp_ms"), F.count("*")
    ).first()
    end_ms = bounds[3] or 0
    uncommitted = spark.createDataFrame(merged.uncommitted_leader_changes or [], schema=_UNCOMMITTED)
    replay_violations = (
        events.filter(F.col("event") == "VIOLATION").select(*[n for n, _ in VIOLATION_COLUMNS]).toArrow()
    )
    violations += replay_violations.to_pylist()
    frames = {
        "controller_epochs": tables.controller_epochs(canonical, uncommitted, end_ms),
        "partition_transitions": tables.partition_transitions(events),
        "partition_intervals": tables.partition_intervals(events, end_ms),
        "broker_timeline": tables.broker_timeline(events, end_ms),
        "topic_lifecycle": tables.topic_lifecycle(events, end_ms),
        "config_history": tables.config_history(events),
        "leadership_by_broker": tables.leadership_by_broker(events, end_ms),
        "violations": spark.createDataFrame(to_batch([tuple(v.values()) for v in violations], VIOLATION_SCHEMA).to_pandas()
                                            if violations else [], schema=from_arrow_schema(VIOLATION_SCHEMA)),
    }  # fmt: skip
    frames["group_offsets"] = tables.group_offsets(canonical, events, frames["topic_lifecycle"])
    frames["group_rebalances"] = tables.group_rebalances(events)
    tables_dir = out / "tables"
    for name in TABLES:
        frames[name].write.mode("overwrite").parquet(str(tables_dir / name))
    timings.mark("tables")

    collected = {name: spark.read.parquet(str(tables_dir / name)).toPandas() for name in report.TABLES_SHOWN}
    write_rate = _write_rate(canonical, bounds[2], end_ms)
    committed = _committed_over_time(canonical, events, bounds[2], end_ms)
    summary = _summary(files, merged, bounds, violations, collected, events, timings)
    timings.mark("report_data")
    report.write(out / "report.html", summary, collected, write_rate, committed)
    timings.mark("report")
    summary["timings_s"] = timings.steps
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    for frame in (rows, heads, events):
        frame.unpersist()
    return summary


def _canonical(
    spark: SparkSession, rows: DataFrame, heads: pa.Table, chosen: list[tuple[str, int, int]]
) -> DataFrame:
    """The rows of the chosen copies. The merge prefers one node's copy wherever several
    hold a batch, so most files are chosen whole or not at all: those are picked by file,
    and only the batches of partly chosen files by position."""
    per_file: dict[tuple[str, int], int] = {}
    for node, seq in zip(heads["node"].to_pylist(), heads["file_seq"].to_pylist(), strict=True):
        per_file[(node, seq)] = per_file.get((node, seq), 0) + 1
    chosen_per_file: dict[tuple[str, int], list[int]] = {}
    for node, seq, position in chosen:
        chosen_per_file.setdefault((node, seq), []).append(position)
    whole = [
        f"{node}/{seq}"
        for (node, seq), positions in chosen_per_file.items()
        if len(positions) == per_file[(node, seq)]
    ]
    partly = [(n, s, p) for (n, s), ps in chosen_per_file.items() if len(ps) != per_file[(n, s)] for p in ps]
    segments = rows.filter(F.col("source") == SEGMENT)
    by_file = segments.filter(F.concat_ws("/", "node", F.col("file_seq").cast("string")).isin(whole))
    if partly:
        keys = spark.createDataFrame(partly, "node string, file_seq int, position long")
        by_file = by_file.unionByName(
            segments.join(F.broadcast(keys), ["node", "file_seq", "position"], "left_semi")
        )
    return by_file.select(*ROW_SCHEMA.names)


def _replay_input(
    rows: DataFrame, canonical: DataFrame, snapshot_files: list[tuple[str, int]], start: int, pieces: int
) -> DataFrame:
    """The replay's rows in order, cut at snapshots into up to ``pieces`` pieces replayed in
    parallel. Piece i starts from a copy of the snapshot at its first offset (role BASE);
    every snapshot at a piece's end is compared with the replay of that piece, so each
    snapshot is checked against the log once, as in one replay from the start."""
    offsets = sorted({offset for _, offset in snapshot_files if offset > start})
    count = max(1, min(pieces, len(offsets) + 1))
    boundaries = sorted({offsets[len(offsets) * k // count] for k in range(1, count)}) if offsets else []

    def piece(column: Column) -> Column:
        return sum((F.when(column >= b, 1).otherwise(0) for b in boundaries), F.lit(0))

    is_snapshot = F.col("kind") == SNAPSHOT_KIND
    # a snapshot at S holds the log below S: it belongs to the piece that replays up to S
    upto = F.when(is_snapshot & (F.col("batch_offset") > start), F.col("batch_offset") - 1).otherwise(
        F.col("batch_offset")
    )
    logged = canonical.unionByName(rows.filter(is_snapshot & F.col("batch_offset").isNotNull()))
    logged = logged.withColumn("chunk", piece(upto)).withColumn("role", F.lit(None).cast("string"))
    bases = [next(file for file, offset in sorted(snapshot_files) if offset == b) for b in boundaries]
    base_rows = rows.filter(is_snapshot & F.col("file").isin(bases)).withColumn(
        "chunk", piece(F.col("batch_offset"))
    )
    base_rows = base_rows.withColumn("role", F.lit(BASE))
    return (
        logged.unionByName(base_rows)
        .repartitionByRange(count, "chunk")
        .sortWithinPartitions("chunk", "batch_offset", ~is_snapshot, "node", "file_seq", "batch_index")
        .select(*REPLAY_COLUMNS)
    )


_UNCOMMITTED = "epoch int, leader int, offset long, timestamp_ms long, nodes array<string>"


def _walk(table: pa.Table) -> pa.Table:
    """One node's heads: its violations and its rewinds, in ``_WALK_SCHEMA``."""
    heads = sorted((Row._make(r) for r in rows_of(table)), key=head_order)
    result = walk_node(heads)
    node = heads[0].node if heads else None
    out = [(*v.values(), None, None) for v in result.violations]
    out += [(None, None, node, None, None, None, None, None, seq, offset) for seq, offset in result.rewinds]
    return pa.Table.from_batches([to_batch(out, _WALK_SCHEMA)])


def _replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = (ReplayRow._make(r) for batch in batches for r in rows_of(batch))
    yield from record_batches(replay(rows), EVENT_SCHEMA, _EVENT_BATCH_ROWS)


def bucket_ms(start_ms: int | None, end_ms: int | None, buckets: int = 120) -> int:
    """A round bucket width that cuts the history into about ``buckets`` pieces."""
    span = max(1, (end_ms or 0) - (start_ms or 0))
    for width in (1_000, 5_000, 10_000, 60_000, 300_000, 900_000, 3_600_000, 21_600_000, 86_400_000):
        if span / width <= buckets:
            return width
    return 604_800_000


def _write_rate(canonical: DataFrame, start_ms: int | None, end_ms: int | None) -> Any:
    width = bucket_ms(start_ms, end_ms)
    bucket = (F.floor(F.col("timestamp_ms") / width) * width).alias("bucket_ms")
    frame = canonical.groupBy(bucket, "type").count().toPandas()
    frame.attrs["width_ms"] = width
    return frame


def _committed_over_time(
    canonical: DataFrame, events: DataFrame, start_ms: int | None, end_ms: int | None
) -> Any:
    """Per group and bucket, the newest committed offset of each partition (for the chart)."""
    width = bucket_ms(start_ms, end_ms, buckets=200)
    skipped = events.filter(F.col("event") == SKIPPED).select(F.col("offset").alias("batch_offset"))
    bucket = (F.floor(F.col("timestamp_ms") / width) * width).alias("bucket_ms")
    return (
        canonical.filter(F.col("type") == "OFFSET_COMMIT_RECORD")
        .join(F.broadcast(skipped), "batch_offset", "left_anti")
        .groupBy("group", "topic_id", "partition", bucket)
        .agg(F.max_by("committed_offset", "offset").alias("committed_offset"))
        .toPandas()
    )


def _summary(
    files: list[Any],
    merged: Any,
    bounds: Any,
    violations: list[dict[str, Any]],
    collected: dict[str, Any],
    events: DataFrame,
    timings: Timings,
) -> dict[str, Any]:
    checks = check_results(violations)
    failed = [c["check"] for c in checks if not c["passed"]]
    epochs = collected["controller_epochs"]
    committed_epochs = epochs[epochs["committed"]]
    gaps = committed_epochs["gap_before_ms"].dropna()
    transitions = collected["partition_transitions"]
    intervals = collected["partition_intervals"]
    brokers = collected["broker_timeline"]
    elections = transitions[transitions["cause"] == "election"]
    skipped = events.filter(F.col("event") == SKIPPED).count()
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
        "headline": {
            "epochs": int(len(committed_epochs)),
            "leader_changes": int(max(0, len(committed_epochs) - 1)),
            "failed_elections": int(committed_epochs["failed_elections_before"].fillna(0).sum())
            + int((~epochs["committed"]).sum()),
            "leaderless_ms_max": _num(gaps.max()),
            "leaderless_ms_median": _num(gaps.median()),
            "partition_elections": int(len(elections)),
            "unclean_elections": int((elections["clean"] == False).sum()),  # noqa: E712
            "isr_shrinks": int((transitions["isr_change"] == "shrink").sum()),
            "isr_expands": int((transitions["isr_change"] == "expand").sum()),
            **{
                f"{c}_partition_ms": _num(intervals.loc[intervals["condition"] == c, "duration_ms"].sum())
                for c in tables.CONDITIONS
            },
            "broker_restarts": int(brokers["restart"].sum()),
            "broker_fences": int((brokers["started_by"] == "FENCE").sum()),
            "broker_flaps": int(brokers["flap"].sum()),
            "register_to_unfence_ms_median": _num(brokers["register_to_unfence_ms"].dropna().median()),
        },  # fmt: skip
        "checks": checks,
        "violations": {
            s: sum(1 for v in violations if v["severity"] == s) for s in ("error", "warning", "info")
        },
        "tables": {name: f"tables/{name}" for name in TABLES},
    }


def _num(value: Any) -> float | None:
    try:
        return None if value != value else float(value)  # NaN
    except TypeError:
        return None


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
