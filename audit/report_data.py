"""What ``summary.json`` and ``report.html`` read of the tables, made small by Spark.

The driver never holds a long table (a hundred-million-record history has millions of
transitions and intervals, hundreds of thousands of incidents, broker states and epochs):
Spark counts the headline figures, cuts the charts over time to the pixel (spans shorter
than one of ``PIXELS`` columns across the history merge, as the chart would draw them),
counts the churn of the fifteen busiest topics, and picks the incidents the first screen
shows; the tables stay whole on disk.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from raftka.audit.event_tables import CONDITIONS
from raftka.audit.incidents import (
    CONTROLLER,
    GROUP_REWOUND,
    GROUP_STALLED,
    KIND_ORDER,
    OFFLINE,
    UNDER_MIN_ISR,
)
from raftka.audit.report import CHURN_TOPICS, INCIDENTS_SHOWN, ROWS_SHOWN, SHOWN, TIME_CONDITIONS, ReportData

SPARK_JOBS = 4  # at once: each is small, and alone it leaves the cores idle while it plans and starts
PIXELS = 2_000  # columns across the history: twice a chart's width on the page
# The first screen's incidents when there are more than it shows: partitions without a
# leader first, then under min ISR, controllers, groups; the longest first.
IMPORTANCE = (OFFLINE, UNDER_MIN_ISR, CONTROLLER, GROUP_REWOUND, GROUP_STALLED)


def collect(
    spark: SparkSession, tables_dir: Path, start_ms: int | None, end_ms: int | None, **series: pd.DataFrame
) -> ReportData:
    """The report's data from the tables under ``tables_dir`` (``series``: the write rate and
    committed offsets, made small by the replay already)."""

    def read(name: str) -> DataFrame:
        return spark.read.parquet((tables_dir / name).as_uri())

    pixel = pixel_ms(start_ms, end_ms)
    epochs, transitions, intervals = (
        read("controller_epochs"),
        read("partition_transitions"),
        read("partition_intervals"),
    )
    brokers, incidents = read("broker_timeline"), read("incidents")
    frames = {
        "controller_epochs": epochs.orderBy("epoch", F.desc("committed")).limit(ROWS_SHOWN),  # as written
        "leadership": _to_pixels(
            epochs.filter(F.col("committed").eqNullSafe(True)), ["leader"], "start_ms", "tenure_ms", start_ms, pixel
        ),
        "leaderless": _to_pixels(
            epochs.filter(F.col("committed").eqNullSafe(True) & (F.col("gap_before_ms") > 0)).withColumn(
                "gap_start_ms", F.col("start_ms") - F.col("gap_before_ms")
            ),
            [], "gap_start_ms", "gap_before_ms", start_ms, pixel,
        ),
        "broker_spans": _to_pixels(
            brokers.withColumn("restart", F.col("restart").eqNullSafe(True)),
            ["broker", "state", "restart"], "start_ms", "duration_ms", start_ms, pixel,
        ),
        "partition_levels": _levels(intervals, start_ms, pixel),
        "churn_by_topic": _churn_by_topic(transitions),
        "leadership_by_broker": read("leadership_by_broker"),
        "violations": read("violations").limit(ROWS_SHOWN),
        "incidents": _most_important(incidents),
    }  # fmt: skip
    with ThreadPoolExecutor(SPARK_JOBS, thread_name_prefix="audit-report-data") as pool:
        figures = [pool.submit(count, table) for count, table in
                   zip(FIGURES, (epochs, transitions, intervals, brokers), strict=True)]  # fmt: skip
        total = pool.submit(incidents.count)
        shown = {name: pool.submit(_pandas, frame, SHOWN[name]) for name, frame in frames.items()}
        return ReportData(
            {name: future.result() for name, future in shown.items()},
            series["write_rate"],
            series["committed"],
            total.result(),
            {k: v for part in figures for k, v in part.result().items()},
        )


def pixel_ms(start_ms: int | None, end_ms: int | None) -> int:
    """One of ``PIXELS`` columns across the history, in milliseconds (at least one)."""
    return max(1, -(-max(0, (end_ms or 0) - (start_ms or 0)) // PIXELS))


def _pandas(frame: DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """A small frame, in the types the page is tested with (``report.SHOWN``)."""
    table = frame.select(*schema.names).toArrow()
    return table.cast(pa.schema([pa.field(f.name, f.type) for f in schema])).to_pandas()


def _to_pixels(
    frame: DataFrame, keys: list[str], start: str, duration: str, start_ms: int | None, pixel: int
) -> DataFrame:
    """Spans (``start``, ``duration``) merged per key and pixel column: from the first
    start in the column to the last end, as the chart would draw them."""
    known = frame.dropna(subset=[start, *keys])
    column = F.floor((F.col(start) - F.lit(start_ms or 0)) / pixel)
    end = F.col(start) + F.greatest(F.coalesce(F.col(duration), F.lit(0)), F.lit(0))
    return (
        known.groupBy(*keys, column.alias("pixel"))
        .agg(F.min(start).alias("start_ms"), F.max(end).alias("end_ms"))
        .select(*keys, "start_ms", (F.col("end_ms") - F.col("start_ms")).alias("duration_ms"))
        .orderBy(*keys, "start_ms")
    )


def _levels(intervals: DataFrame, start_ms: int | None, pixel: int) -> DataFrame:
    """Partitions in each condition over time, per pixel column: the most at once in it
    (``peak``) and how many at its end (``last``). Each interval is +1 at its start and -1
    at its end; a running sum in time order (ends before starts at one time) is the count."""
    steps = intervals.filter(
        F.col("condition").isin(*TIME_CONDITIONS) & F.col("start_ms").isNotNull() & F.col("end_ms").isNotNull()
    ).select(
        "condition",
        F.explode(F.array(F.struct(F.col("start_ms").alias("t"), F.lit(1).alias("d")),
                          F.struct(F.col("end_ms").alias("t"), F.lit(-1).alias("d")))).alias("step"),
    ).select("condition", "step.t", "step.d", F.monotonically_increasing_id().alias("id"))  # fmt: skip
    running = (
        Window.partitionBy("condition").orderBy("t", "d", "id").rowsBetween(Window.unboundedPreceding, 0)
    )
    levels = steps.withColumn("level", F.sum("d").over(running))
    column = F.floor((F.col("t") - F.lit(start_ms or 0)) / pixel) * pixel + F.lit(start_ms or 0)
    return (
        levels.groupBy("condition", column.cast("long").alias("bucket_ms"))
        .agg(
            # the level before each step, the first's carried in from the column before
            F.greatest(F.max("level"), F.max(F.col("level") - F.col("d"))).alias("peak"),
            F.max_by("level", F.struct("t", "d", "id")).alias("last"),
        )
        .orderBy("condition", "bucket_ms")
    )


def _churn_by_topic(transitions: DataFrame) -> DataFrame:
    counts = (
        transitions.filter(F.col("topic").isNotNull())
        .groupBy("topic")
        .agg(
            F.count_if(F.col("cause") == "election").alias("elections"),
            F.count_if(F.col("isr_change") == "shrink").alias("isr_shrinks"),
            F.count_if(F.col("isr_change") == "expand").alias("isr_expands"),
        )
    )
    total = F.col("elections") + F.col("isr_shrinks") + F.col("isr_expands")
    return counts.filter(total > 0).orderBy(total.desc(), "topic").limit(CHURN_TOPICS)


def _most_important(incidents: DataFrame) -> DataFrame:
    """The ``INCIDENTS_SHOWN`` most important (``IMPORTANCE``), in the table's time order."""
    rank = F.create_map(*(F.lit(v) for i, kind in enumerate(IMPORTANCE) for v in (kind, i)))
    kind_order = F.create_map(*(F.lit(v) for kind, i in KIND_ORDER.items() for v in (kind, i)))
    chosen = incidents.orderBy(
        F.coalesce(rank[F.col("kind")], F.lit(len(IMPORTANCE))), F.desc_nulls_last("duration_ms"), "start_ms"
    ).limit(INCIDENTS_SHOWN)
    return chosen.orderBy(
        F.col("start_ms").isNull(), "start_ms", F.coalesce("start_offset", F.lit(-1)), kind_order[F.col("kind")],
        "subject",
    )  # fmt: skip


def headline(
    epochs: DataFrame, transitions: DataFrame, intervals: DataFrame, brokers: DataFrame
) -> dict[str, Any]:
    """The summary's figures, counted by Spark over the whole tables (``collect`` runs the
    four counts at once)."""
    tables = (epochs, transitions, intervals, brokers)
    return {k: v for count, table in zip(FIGURES, tables, strict=True) for k, v in count(table).items()}


def _epoch_figures(epochs: DataFrame) -> dict[str, Any]:
    committed = F.col("committed").eqNullSafe(True)
    e = epochs.agg(
        F.count_if(committed).alias("epochs"),
        F.max(F.when(committed, F.col("gap_before_ms"))).alias("gap_max"),
        F.median(F.when(committed, F.col("gap_before_ms"))).alias("gap_median"),
        F.sum(F.when(committed, F.coalesce("failed_elections_before", F.lit(0)))).alias("skipped"),
        F.min(F.when(committed, F.col("epoch"))).alias("first"),
        F.max(F.when(committed, F.col("epoch"))).alias("last"),
        F.count_distinct("epoch").alias("all_epochs"),
    ).first()
    assert e is not None  # an aggregate without groups has one row
    lost = epochs.filter(~committed & ((F.col("epoch") < e["first"]) | (F.col("epoch") > e["last"])))
    # epochs that never committed a leader: those skipped between committed epochs (which
    # counts an uncommitted LeaderChange's too), and uncommitted ones outside them
    failed = (
        e["all_epochs"]
        if not e["epochs"]
        else int(e["skipped"] or 0) + lost.select("epoch").distinct().count()
    )
    return {
        "epochs": int(e["epochs"]),
        "leader_changes": max(0, int(e["epochs"]) - 1),
        "failed_elections": int(failed),
        "leaderless_ms_max": _num(e["gap_max"]),
        "leaderless_ms_median": _num(e["gap_median"]),
    }


def _transition_figures(transitions: DataFrame) -> dict[str, Any]:
    election = F.col("cause") == "election"
    t = transitions.agg(
        F.count_if(election).alias("partition_elections"),
        F.count_if(election & (F.col("clean") == False)).alias("unclean_elections"),  # noqa: E712
        F.count_if(F.col("isr_change") == "shrink").alias("isr_shrinks"),
        F.count_if(F.col("isr_change") == "expand").alias("isr_expands"),
    ).first()
    assert t is not None
    return {name: int(t[name]) for name in t.asDict()}


def _interval_figures(intervals: DataFrame) -> dict[str, Any]:
    i = intervals.agg(
        *(F.sum(F.when(F.col("condition") == c, F.col("duration_ms"))).alias(c) for c in CONDITIONS)
    ).first()
    assert i is not None
    return {f"{c}_partition_ms": float(i[c] or 0) for c in CONDITIONS}


def _broker_figures(brokers: DataFrame) -> dict[str, Any]:
    b = brokers.agg(
        F.count_if(F.col("restart")).alias("restarts"),
        F.count_if(F.col("started_by") == "FENCE").alias("fences"),
        F.count_if(F.col("flap")).alias("flaps"),
        F.median("register_to_unfence_ms").alias("to_unfence"),
    ).first()
    assert b is not None
    return {
        "broker_restarts": int(b["restarts"]),
        "broker_fences": int(b["fences"]),
        "broker_flaps": int(b["flaps"]),
        "register_to_unfence_ms_median": _num(b["to_unfence"]),
    }


# each counts its table's part of the headline, in the order the summary lists them
FIGURES = (_epoch_figures, _transition_figures, _interval_figures, _broker_figures)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)
