"""The window-function tables on hand-made samples: where an interval ends, and what each
sample adds to its brokers' leadership row."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raftka.audit.commits import SERIES_SCHEMA
from raftka.audit.replay import EVENT_NAMES, EVENT_SCHEMA, STATE, TRANSITION
from raftka.audit.schema import to_batch

END_MS = 10_000


def _events(spark: Any, samples: list[dict[str, Any]]) -> Any:
    rows = [tuple(sample.get(name) for name in EVENT_NAMES) for sample in samples]
    return spark.createDataFrame(pa.Table.from_batches([to_batch(rows, EVENT_SCHEMA)]))


def _sample(offset: int, *, event: str = STATE, **values: Any) -> dict[str, Any]:
    return {"event": event, "seq": offset << 20, "offset": offset, "timestamp_ms": offset * 10, "topic": "t",
            "topic_id": "T", "partition": 0, "min_isr": 2} | values  # fmt: skip


def _intervals(spark: Any, samples: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    from raftka.audit.tables import partition_intervals

    table = partition_intervals(_events(spark, samples), END_MS).filter("condition = 'under_replicated'")
    return [tuple(r) for r in table.select("start_offset", "end_offset", "end_ms", "open").collect()]


def test_a_run_still_true_at_the_last_sample_is_open_to_the_end(spark: Any) -> None:
    samples = [_sample(1, under_replicated=True), _sample(5, under_replicated=True)]
    assert _intervals(spark, samples) == [(1, None, END_MS, True)]


def test_a_run_ends_at_the_first_sample_without_the_condition(spark: Any) -> None:
    samples = [_sample(1, under_replicated=True), _sample(5, under_replicated=True), _sample(7)]
    assert _intervals(spark, samples) == [(1, 7, 70, False)]


def test_runs_of_one_partition_are_separate_intervals(spark: Any) -> None:
    samples = [_sample(1, under_replicated=True), _sample(3), _sample(5, under_replicated=True, offline=True)]
    assert sorted(_intervals(spark, samples), key=str) == [(1, 3, 30, False), (5, None, END_MS, True)]


def test_leadership_shares_go_to_the_brokers_a_sample_names(spark: Any) -> None:
    from raftka.audit.tables import leadership_by_broker

    samples = [
        _sample(1, leader_after=1, isr_after=[1, 2], replicas_after=[1, 2]),
        _sample(4, event=TRANSITION, cause="election", clean=False, leader_before=1, leader_after=2,
                isr_change="shrink", isr_before=[1, 2], isr_after=[2]),
        _sample(6, event=TRANSITION, cause="offline", leader_before=2, leader_after=-1),
    ]  # fmt: skip
    rows = [tuple(r) for r in leadership_by_broker(_events(spark, samples), END_MS).collect()]
    # broker: partition-ms led, elections won, unclean ones, leaderships lost, ISR removals
    assert rows == [(1, 30, 0, 0, 1, 1), (2, 20, 1, 1, 1, 0)]


def test_series_of_a_reused_topic_name_are_in_the_order_they_began(spark: Any) -> None:
    """A topic deleted and created again under its name is a new topic id: one group,
    name and partition then has a series per id, listed oldest first whatever the order
    Spark's shuffle hands them over in (the ids sort the other way on purpose)."""
    from raftka.audit.tables import group_offsets

    began = {"id-c": 300, "id-b": 200, "id-a": 100}  # the newest id sorts first
    rows = [
        {"group": "g", "topic_id": topic_id, "partition": 0, "commits": 1, "first_offset": 5, "last_offset": 5,
         "first_ms": first_ms, "last_ms": first_ms, "rewinds": 0, "rewound_by": 0, "stalled_commits": 0,
         "max_gap_ms": 0, "mean_gap_ms": 0.0, "recent_moves": 1}
        for topic_id, first_ms in began.items()
    ]  # fmt: skip
    series = spark.createDataFrame(pa.Table.from_pylist(rows, SERIES_SCHEMA)).repartition(3)
    topics = spark.createDataFrame([(topic_id, "t") for topic_id in began], "topic_id string, topic string")
    table = group_offsets(series, _events(spark, []), topics)
    assert [(r["topic"], r["topic_id"], r["first_ms"]) for r in table.collect()] == [
        ("t", "id-a", 100),
        ("t", "id-b", 200),
        ("t", "id-c", 300),
    ]


def test_per_epoch_adds_up_the_chunks_an_epoch_spans(spark: Any) -> None:
    """An epoch cut across chunks (and pieces) is one row: its first offset and time from
    the earliest, its last from the latest, its records summed."""
    from raftka.audit.counts import EPOCH_SCHEMA
    from raftka.audit.tables import per_epoch

    chunks = [  # epoch, start offset, end offset, first ms, last ms, records
        (1, 0, 9, 100, 190, 10), (2, 10, 49, 200, 490, 40),
        (2, 50, 79, 500, 790, 30), (3, 80, 80, 800, 800, 1), (3, 81, 99, 810, 990, 19),
    ]  # fmt: skip
    frame = spark.createDataFrame(pa.Table.from_pylist([dict(zip(EPOCH_SCHEMA.names, c, strict=True)) for c in chunks],
                                                       EPOCH_SCHEMA)).repartition(3)  # fmt: skip
    rows = sorted(tuple(r) for r in per_epoch(frame).select(*EPOCH_SCHEMA.names).collect())
    assert rows == [(1, 0, 9, 100, 190, 10), (2, 10, 79, 200, 790, 70), (3, 80, 99, 800, 990, 20)]
