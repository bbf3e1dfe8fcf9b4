"""The incidents Spark tasks find equal those the driver found before from the tables read
whole (``incidents_reference``, the code they replaced), on histories the controller's own
code writes with brokers restarting, ISRs shrinking, failovers and commits (one incident in
some twenty records); in the same order, where that order was set (incidents at one time and
offset: the job now sorts them by subject)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from raftka.audit.incident_job import write
from raftka.audit.job import run
from raftka.audit.synthetic import Shape, write_history
from raftka.raft.snapshot_schedule import SnapshotPolicy
from tests.unit.incidents_reference import find, read_inputs

SMALL = Shape(brokers=3, topics=3, partitions=3, groups=3, commit_partitions_max=4)


def _order(incident: dict[str, Any]) -> tuple[Any, ...]:
    start_ms, start_offset = incident["start_ms"], incident["start_offset"]
    return (start_ms is None, start_ms or 0, -1 if start_offset is None else start_offset, incident["kind"])


@settings(max_examples=2, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), interval=st.integers(100, 2_000))
def test_the_incidents_spark_finds_are_those_the_driver_found(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, seed: int, interval: int
) -> None:
    root = tmp_path_factory.mktemp("history")
    write_history(root / "node-1" / "data", 4_000, seed=seed, shape=SMALL,
                  snapshot_policy=SnapshotPolicy(snapshot_interval_records=interval))  # fmt: skip
    run(spark, [str(root)], root / "out")
    tables = root / "out" / "tables"
    found = pq.read_table(tables / "incidents").to_pylist()
    expected = find(read_inputs(tables)).to_pylist()
    assert len(expected) > 20  # the history has incidents of every kind to compare
    assert {i["kind"] for i in expected} >= {"controller", "under_min_isr"}
    assert [_order(i) for i in found] == sorted(_order(i) for i in found)
    assert sorted(found, key=lambda i: (_order(i), i["subject"])) == sorted(
        expected, key=lambda i: (_order(i), i["subject"])
    )
    write(spark, tables)  # once more: the same rows in the same order
    assert pq.read_table(tables / "incidents").to_pylist() == found


def test_no_tables_with_rows_no_incidents(spark: Any, tmp_path: Path) -> None:
    expected = find(read_inputs(_empty_tables(spark, tmp_path)))
    write(spark, tmp_path)
    assert expected.num_rows == 0 and pq.read_table(tmp_path / "incidents").num_rows == 0


def _empty_tables(spark: Any, folder: Path) -> Path:
    from raftka.audit.incidents import INPUTS
    from tests.unit.test_audit_incidents import SCHEMAS

    for name in INPUTS:
        pq.write_table(SCHEMAS[name].empty_table(), folder / f"{name}.parquet")
        (folder / name).mkdir()
        (folder / f"{name}.parquet").rename(folder / name / "part-0.parquet")
    return folder
