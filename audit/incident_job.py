"""The ``incidents`` table, found by Spark tasks in the tables the job wrote.

Spark joins each incident's rows (a committed epoch with the next; a stretch offline or
under min ISR with the transitions at its start and end offsets and the broker events of
their batches), and Python tasks put them in words (``raftka.audit.incidents``), so the
driver holds none of them: a long history has incidents by the hundred thousand (one in
seventy records of ``raftka.audit.synthetic``'s). The table is written sorted by time, as
the report and people read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from raftka.audit.incidents import (
    INCIDENT_SCHEMA,
    INPUTS,
    KIND_ORDER,
    PARTITION_CONDITIONS,
    controller_incident,
    group_incident,
    lost_epoch_incident,
    partition_incident,
)

# Sorted by these after (start_ms, start_offset, kind), so that incidents at one time and
# offset come in one order every run: epochs by epoch (committed first), a partition's by
# topic and partition, a group's as ``group_offsets`` lists them.
_TIES = pa.schema([("tie_text", pa.string()), ("tie_text_2", pa.string()), ("tie_number", pa.int64()),
                   ("tie_number_2", pa.int64()), ("kind_order", pa.int32())])  # fmt: skip
_FOUND = pa.schema([*INCIDENT_SCHEMA, *_TIES])


def write(spark: SparkSession, tables_dir: Path) -> None:
    """Find every incident in the tables under ``tables_dir`` and write them, in time order,
    as ``tables_dir/incidents``."""
    found = find(spark, tables_dir)
    order = [F.col("start_ms").isNull(), "start_ms", F.coalesce("start_offset", F.lit(-1)), "kind_order",
             "tie_text", "tie_text_2", "tie_number", "tie_number_2"]  # fmt: skip
    # one sorted file: a global sort would sample its input first, finding every incident twice
    found.repartition(1).sortWithinPartitions(*order).select(*INCIDENT_SCHEMA.names).write.mode(
        "overwrite"
    ).parquet((tables_dir / "incidents").as_uri())


def find(spark: SparkSession, tables_dir: Path) -> DataFrame:
    """Every incident, unordered, with the columns it is sorted by (``_TIES``)."""

    def read(name: str) -> DataFrame:
        return spark.read.parquet((tables_dir / name).as_uri()).select(*INPUTS[name])

    epochs = read("controller_epochs")
    committed = epochs.filter(F.col("committed").eqNullSafe(True))
    epoch = _row(epochs)
    controllers = committed.select(
        epoch.alias("this"), F.lead(epoch).over(Window.orderBy("epoch")).alias("after")
    ).mapInArrow(_each(lambda r: controller_incident(r["this"], r["after"])), _spark_schema())
    lost = epochs.filter(F.col("committed").eqNullSafe(False)).select(epoch.alias("this"))
    lost = lost.mapInArrow(_each(lambda r: lost_epoch_incident(r["this"])), _spark_schema())
    groups = read("group_offsets")
    groups = groups.select(_row(groups).alias("g")).mapInArrow(_each(lambda r: group_incident(r["g"])),
                                                              _spark_schema())  # fmt: skip
    return controllers.unionByName(lost).unionByName(_partitions(read)).unionByName(groups)


def _partitions(read: Callable[[str], DataFrame]) -> DataFrame:
    spans = read("partition_intervals").filter(F.col("condition").isin(*PARTITION_CONDITIONS))
    transitions = read("partition_transitions")
    brokers = read("broker_timeline")
    # the broker events of each batch (one time), in log order
    batches = brokers.groupBy(F.col("start_ms").alias("batch_ms")).agg(
        F.sort_array(F.collect_list(F.struct("start_offset", *(c for c in brokers.columns if c != "start_offset"))))
        .alias("events")
    )  # fmt: skip
    joined = spans.select(_row(spans).alias("span"))
    for end, offset in (("began", "start_offset"), ("ended", "end_offset")):
        at = transitions.select(
            F.col("topic_id").alias("at_topic_id"), F.col("partition").alias("at_partition"),
            F.col("offset").alias("at_offset"), _row(transitions).alias(end),
        )  # fmt: skip
        joined = joined.join(
            at,
            F.col("span.topic_id").eqNullSafe(F.col("at_topic_id"))
            & F.col("span.partition").eqNullSafe(F.col("at_partition"))
            & F.col(f"span.{offset}").eqNullSafe(F.col("at_offset")),
            "left",
        ).drop("at_topic_id", "at_partition", "at_offset")
        joined = (
            joined.join(batches, F.col(f"{end}.timestamp_ms") == F.col("batch_ms"), "left")
            .withColumnRenamed("events", f"{end}_batch")
            .drop("batch_ms")
        )
    return joined.mapInArrow(
        _each(lambda r: partition_incident(r["span"], r["began"], r["ended"], r["began_batch"] or [],
                                           r["ended_batch"] or [])),
        _spark_schema(),
    )  # fmt: skip


def _row(frame: DataFrame) -> Column:
    """A table's row as one struct column, as ``raftka.audit.incidents`` reads it."""
    return F.struct(*frame.columns)


def _spark_schema() -> Any:
    return from_arrow_schema(_FOUND)


def _each(
    make: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: ``make`` on every row, in a Python task; None: no incident."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = [(row, found) for row in batch.to_pylist() if (found := make(row)) is not None]
            yield pa.RecordBatch.from_pylist(
                [found | _ties(row, found) for row, found in rows], schema=_FOUND
            )

    return run


def _ties(row: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    if "this" in row:  # an epoch: committed ones first
        this = row["this"]
        texts, numbers = (None, None), (0 if this["committed"] else 1, this["epoch"])
    elif "span" in row:
        texts, numbers = (row["span"]["topic_id"], None), (row["span"]["partition"], None)
    else:
        texts, numbers = (row["g"]["group"], row["g"]["topic"]), (row["g"]["partition"], None)
    return {"tie_text": texts[0], "tie_text_2": texts[1], "tie_number": numbers[0], "tie_number_2": numbers[1],
            "kind_order": KIND_ORDER[found["kind"]]}  # fmt: skip
