"""What the report reads, made small by Spark (``raftka.audit.report_data``): the headline's
failed elections on hand-made epochs, and the partitions-over-time chart's counts per pixel
column against the exact count the report once drew from every interval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from raftka.audit import report_data
from raftka.audit.report import SHOWN, TIME_CONDITIONS

T0 = 1_767_225_600_000
_EPOCHS = "epoch int, committed boolean, failed_elections_before int, gap_before_ms long"
_TRANSITIONS = "cause string, clean boolean, isr_change string"
_INTERVALS = "condition string, duration_ms long, start_ms long, end_ms long"
_BROKERS = "restart boolean, started_by string, flap boolean, register_to_unfence_ms long"


def _failed(spark: Any, rows: list[tuple[int, bool, int | None]]) -> int:
    epochs = spark.createDataFrame([(*r, None) for r in rows], _EPOCHS)
    empty = [spark.createDataFrame([], schema) for schema in (_TRANSITIONS, _INTERVALS, _BROKERS)]
    return report_data.headline(epochs, *empty)["failed_elections"]


def test_an_election_is_counted_once_whether_or_not_a_node_kept_its_leader_change(spark: Any) -> None:
    """Epoch 2's LeaderChange survives only in an uncommitted tail; epoch 3's nowhere.
    Both are skipped between committed epochs 1 and 4: two failed elections, not three."""
    assert _failed(spark, [(1, True, None), (2, False, None), (4, True, 2)]) == 2


def test_an_election_lost_after_the_last_committed_epoch_is_counted(spark: Any) -> None:
    assert _failed(spark, [(1, True, None), (3, True, 1), (4, False, None)]) == 2


def test_a_clean_history_has_no_failed_elections(spark: Any) -> None:
    assert _failed(spark, [(1, True, None), (2, True, 0), (3, True, 0)]) == 0
    assert _failed(spark, [(7, False, None)]) == 1  # no committed epoch: each lost one


@settings(max_examples=3, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(
    spans=st.lists(
        st.tuples(
            st.sampled_from([*TIME_CONDITIONS, "non_preferred"]), st.integers(0, 5_000), st.integers(0, 900)
        ),
        max_size=40,
    ),
    end=st.integers(1, 6_000),
)
def test_partitions_over_time_per_pixel_are_the_exact_counts_peak_and_last(
    spark: Any, tmp_path_factory: Any, spans: list[tuple[str, int, int]], end: int
) -> None:
    """In each pixel column: the most partitions in a condition at once (``peak``) and how many
    at its end (``last``), as the exact running count over every interval gives them."""
    folder: Path = tmp_path_factory.mktemp("tables")
    rows = [{"condition": c, "start_ms": T0 + s, "end_ms": T0 + s + d, "duration_ms": d} for c, s, d in spans]
    for name in ("controller_epochs", "partition_transitions", "broker_timeline", "leadership_by_broker",
                 "violations", "incidents"):  # fmt: skip
        (folder / name).mkdir()
        pq.write_table(_empty(spark, name), folder / name / "part-0.parquet")
    (folder / "partition_intervals").mkdir()
    schema = pa.schema([("condition", pa.string()), ("start_ms", pa.int64()), ("end_ms", pa.int64()),
                        ("duration_ms", pa.int64()), ("topic", pa.string())])  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema), folder / "partition_intervals" / "part-0.parquet")
    none = pd.DataFrame()
    data = report_data.collect(spark, folder, T0, T0 + end, write_rate=none, committed=none)
    pixel = report_data.pixel_ms(T0, T0 + end)
    levels = data.shown["partition_levels"]
    for condition in TIME_CONDITIONS:
        steps = sorted(
            (t, d)
            for c, s, length in spans
            if c == condition
            for t, d in ((T0 + s, 1), (T0 + s + length, -1))
        )
        expected: dict[int, list[int]] = {}  # column -> [peak, last]
        level = 0
        for t, d in steps:
            column = T0 + (t - T0) // pixel * pixel
            before = level
            level += d
            got = expected.setdefault(column, [before, level])
            got[0], got[1] = max(got[0], before, level), level
        mine = levels[levels["condition"] == condition]
        assert {
            b: [p, last] for b, p, last in zip(mine["bucket_ms"], mine["peak"], mine["last"], strict=True)
        } == expected


def _empty(spark: Any, name: str) -> pa.Table:
    """An empty table with the columns ``report_data`` reads of it."""
    from raftka.audit.incidents import INCIDENT_SCHEMA

    columns = {
        "controller_epochs": SHOWN["controller_epochs"],
        "partition_transitions": pa.schema([("topic", pa.string()), ("cause", pa.string()), ("clean", pa.bool_()),
                                            ("isr_change", pa.string())]),
        "broker_timeline": pa.schema([("broker", pa.int32()), ("state", pa.string()), ("started_by", pa.string()),
                                      ("start_ms", pa.int64()), ("duration_ms", pa.int64()), ("restart", pa.bool_()),
                                      ("flap", pa.bool_()), ("register_to_unfence_ms", pa.int64())]),
        "leadership_by_broker": SHOWN["leadership_by_broker"],
        "violations": SHOWN["violations"],
        "incidents": INCIDENT_SCHEMA,
    }  # fmt: skip
    return columns[name].empty_table()
