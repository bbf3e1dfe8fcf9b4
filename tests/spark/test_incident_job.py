"""The driver holds no long table: the incidents Spark tasks find equal those the driver found
before from the tables read whole (``incidents_reference``, the code they replaced), on
histories the controller's own code writes with brokers restarting, ISRs shrinking,
failovers and commits (one incident in some seventy records); the driver reads no table
with pyarrow, and the report shows the most important incidents, saying how many there are."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from raftka.audit import report, report_data
from raftka.audit.incident_job import write
from raftka.audit.job import run
from raftka.audit.synthetic import Shape, write_history
from raftka.raft.snapshot_schedule import SnapshotPolicy
from tests.unit.incidents_reference import assert_found_as_before, find, read_inputs
from tests.unit.report_support import incident_rows

SMALL = Shape(brokers=3, topics=3, partitions=3, groups=3, commit_partitions_max=4)
SHOWN = 10  # incidents on the first screen here: fewer than the history has


@settings(max_examples=1, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), interval=st.integers(100, 2_000))
def test_the_driver_reads_no_table_and_the_incidents_spark_finds_are_those_the_driver_found(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, seed: int, interval: int
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("history")
    write_history(root / "node-1" / "data", 4_000, seed=seed, shape=SMALL,
                  snapshot_policy=SnapshotPolicy(snapshot_interval_records=interval))  # fmt: skip
    tables = root / "out" / "tables"
    read = _record_reads(monkeypatch)
    monkeypatch.setattr(report_data, "INCIDENTS_SHOWN", SHOWN)
    monkeypatch.setattr(report, "INCIDENTS_SHOWN", SHOWN)
    run(spark, [str(root)], root / "out")
    monkeypatch.undo()
    assert [path for path in read if tables in Path(path).parents] == []

    found = assert_found_as_before(tables)
    assert len(found) > 20 and {i["kind"] for i in found} >= {"controller", "under_min_isr"}
    write(spark, tables)  # once more: the same rows in the same order
    assert pq.read_table(tables / "incidents").to_pylist() == found

    page = (root / "out" / "report.html").read_text(encoding="utf-8")
    monkeypatch.setattr(report_data, "INCIDENTS_SHOWN", SHOWN)
    chosen = (
        report_data._most_important(spark.read.parquet((tables / "incidents").as_uri())).toArrow().to_pylist()
    )
    assert [cells[2] for cells, _ in incident_rows(page)] == [html.escape(i["what"]) for i in chosen]
    importance = {kind: i for i, kind in enumerate(report_data.IMPORTANCE)}
    most = sorted(_rank(i, importance) for i in found)[:SHOWN]
    assert len(chosen) == SHOWN and sorted(_rank(i, importance) for i in chosen) == most
    assert f"The {SHOWN} most important of {len(found):,} incidents" in page


def _rank(incident: dict[str, Any], importance: dict[str, int]) -> tuple[int, int]:
    return importance[incident["kind"]], -(incident["duration_ms"] or 0)


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the driver opens with pyarrow while the job runs (its tasks run elsewhere)."""
    read: list[str] = []
    for name in ("read_table", "ParquetFile", "ParquetDataset"):
        original = getattr(pq, name)

        def recording(source: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            read.append(str(source))
            return _original(source, *args, **kwargs)

        monkeypatch.setattr(pq, name, recording)
    return read


def test_no_tables_with_rows_no_incidents(spark: Any, tmp_path: Path) -> None:
    expected = find(read_inputs(_empty_tables(tmp_path)))
    write(spark, tmp_path)
    assert expected.num_rows == 0 and pq.read_table(tmp_path / "incidents").num_rows == 0


def _empty_tables(folder: Path) -> Path:
    from raftka.audit.incidents import INPUTS
    from tests.unit.test_audit_incidents import SCHEMAS

    for name in INPUTS:
        (folder / name).mkdir()
        pq.write_table(SCHEMAS[name].empty_table(), folder / name / "part-0.parquet")
    return folder
