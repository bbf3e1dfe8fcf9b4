"""Each group's offset commits per partition, joined by Spark tasks from the replay's folds.

The replay pieces write each chunk's commit folds (``raftka.audit.commits.fold_table``);
here Spark groups them by series, sorts each series' folds in history order and joins them
in Python tasks (``join_folds``), so the driver holds no series: a long history has them by
the hundred thousand. The groups' progress the pieces wrote counts each fold's first move
from zero; ``takebacks`` gives what takes back, where a series' folds meet, the offset it
stood at.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from raftka.audit.commits import FOLD_ORDER, FOLD_SCHEMA, SERIES_KEY, SERIES_SCHEMA, join_folds


def series(spark: SparkSession, folder: Path) -> DataFrame:
    """One row per series (``SERIES_SCHEMA``) from the folds under ``folder``."""
    return (
        _folds(spark, folder)
        .repartition(*SERIES_KEY)
        .sortWithinPartitions(*SERIES_KEY, *FOLD_ORDER)
        .mapInArrow(join_folds, from_arrow_schema(SERIES_SCHEMA))
    )


def takebacks(spark: SparkSession, folder: Path) -> DataFrame:
    """(``PROGRESS_SCHEMA``: time, group, minus the offset its series stood at) where a fold of
    a series follows another that left it at a non-zero offset: each fold counted its first
    commit's move from zero (``raftka.audit.commits``)."""
    before = F.lag("last").over(Window.partitionBy(*SERIES_KEY).orderBy(*FOLD_ORDER))
    return (
        _folds(spark, folder)
        .select(F.col("first_ms").alias("bucket_ms"), "group", (-before).alias("moved"))
        .filter(F.col("moved").isNotNull() & (F.col("moved") != 0))
    )


def _folds(spark: SparkSession, folder: Path) -> DataFrame:
    return spark.read.schema(from_arrow_schema(FOLD_SCHEMA)).parquet(folder.as_uri())
