"""The driver holds no commit series: Spark tasks join the folds the replay pieces wrote into
the rows the driver joined before (``commits_reference``, the code they replaced), and Spark
adds up the chunks' progress and its take-backs into each group's committed offsets over
time as the driver did; on synthetic histories cut into many pieces and chunks, so that
series cross folds, Arrow batches and Spark partitions."""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import from_arrow_schema

from raftka.audit import commit_job
from raftka.audit import pieces as pieces_module
from raftka.audit.commits import PROGRESS_BUCKETS, PROGRESS_SCHEMA, committed_over_time
from raftka.audit.counts import Counts, bucket_ms
from raftka.audit.job import per_bucket
from raftka.audit.pieces import FOLDS, PROGRESS, run_piece
from raftka.audit.synthetic import Shape, write_history
from raftka.raft.snapshot_schedule import SnapshotPolicy
from tests.unit.commits_reference import combine, unfold
from tests.unit.test_audit_pieces import _plan

SHAPE = Shape(brokers=3, topics=4, partitions=3, groups=5, commit_partitions_max=6)


@settings(max_examples=1, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), interval=st.integers(150, 1_500), chunk=st.integers(50, 700))
def test_spark_joins_the_folds_into_the_series_and_progress_the_driver_joined(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, seed: int, interval: int,
    chunk: int,
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("history")
    write_history(root / "node-1" / "data", 6_000, seed=seed, shape=SHAPE,
                  snapshot_policy=SnapshotPolicy(snapshot_interval_records=interval))  # fmt: skip
    _, pieces = _plan(root, 4)
    assert len(pieces) > 1
    monkeypatch.setattr(pieces_module, "CHUNK_RECORDS", chunk)
    out = root / "out"
    done = [run_piece(piece, str(out)) for piece in pieces]
    counts = Counts().add(c for d in done for c in d["bounds"])
    _, _, start_ms, end_ms, _ = counts.bounds()
    width = bucket_ms(start_ms, end_ms, PROGRESS_BUCKETS)
    folded = [
        unfold(pq.read_table(path), pq.read_table(out / PROGRESS / path.name))
        for piece in pieces
        for path in sorted((out / FOLDS).glob(f"piece-{piece.index:05d}-*.parquet"))
    ]
    before = combine(folded, width)
    assert len(before.rows) > 20 and len(folded) > len(pieces)

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")  # series cross batches
    try:
        rows = commit_job.series(spark, out / FOLDS).toArrow().to_pylist()
        takebacks = commit_job.takebacks(spark, out / FOLDS)
        assert takebacks.count() > 0
        moved = spark.read.schema(from_arrow_schema(PROGRESS_SCHEMA)).parquet((out / PROGRESS).as_uri())
        progress = per_bucket(moved.unionByName(takebacks), width, "group", "moved")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert sorted(tuple(r.values()) for r in rows) == sorted(before.rows, key=lambda r: r[:3])
    assert committed_over_time(list(progress.itertuples(index=False, name=None))) == committed_over_time(
        before.progress
    )
