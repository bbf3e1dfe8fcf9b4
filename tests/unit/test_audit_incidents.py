"""The incidents the tables tell where the incident story (``test_job``, on Spark) has none:
a controller handover, elections that split, an epoch that never committed, a partition
under min ISR because its minimum was raised, a broker that unregistered, a stalled group,
and a history with nothing to report. Tables as the job reads them (``incidents.INPUTS``)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.audit import incidents
from raftka.audit.incidents import INCIDENT_SCHEMA, INPUTS, PARTITION_CONDITIONS, QUIET_LEADER_MS
from raftka.audit.schema import INT_LIST
from tests.unit.incidents_reference import find

T0 = 1_700_000_000_000
TYPES = {"committed": pa.bool_(), "open": pa.bool_(), "clean": pa.bool_(), "isr_before": INT_LIST,
         "isr_after": INT_LIST, "rewound_by": pa.int64()}  # fmt: skip
STRINGS = {"condition", "topic", "topic_id", "cause", "state", "started_by", "group", "status"}


SCHEMAS = {
    name: pa.schema([(c, TYPES.get(c, pa.string() if c in STRINGS else pa.int64())) for c in columns])
    for name, columns in INPUTS.items()
}
# few values, so rows of different tables meet (a transition at an interval's start, a broker
# event in its batch), and what the job never writes
WORDS = {"condition": (*PARTITION_CONDITIONS, "under_replicated"), "status": ("OK", "REWOUND", "STALLED"),
         "started_by": ("FENCE", "UNFENCE", "UNREGISTER", "REREGISTER", "REGISTER"),
         "cause": ("offline", "election", "isr_shrink", "isr_expand", "create")}  # fmt: skip


def _tables(**rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    return {
        name: pa.Table.from_pylist(rows.get(name, []), schema).to_pandas() for name, schema in SCHEMAS.items()
    }


def _value(field: pa.Field) -> st.SearchStrategy[Any]:
    if field.name in WORDS:
        value: st.SearchStrategy[Any] = st.sampled_from(WORDS[field.name]) | st.text(max_size=4)
    elif pa.types.is_string(field.type):
        value = st.sampled_from(["t", "T", "g"]) | st.text(max_size=4)
    elif pa.types.is_boolean(field.type):
        value = st.booleans()
    elif pa.types.is_list(field.type):
        value = st.lists(st.integers(-1, 3), max_size=3)
    elif field.name.endswith("_ms"):
        value = st.integers(T0, T0 + 3) | st.integers(-(2**40), 2**40)
    else:
        value = st.integers(-1, 3) | st.integers(-(2**31), 2**31 - 1)
    return st.none() | value


ANY_TABLES = st.fixed_dictionaries({
    name: st.lists(st.fixed_dictionaries({f.name: _value(f) for f in schema}), max_size=5).map(
        lambda rows, schema=schema: pa.Table.from_pylist(rows, schema).to_pandas()
    )
    for name, schema in SCHEMAS.items()
})  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(tables=ANY_TABLES)
def test_any_tables_give_one_incident_per_epoch_span_and_troubled_group_in_time_order(
    tables: dict[str, pd.DataFrame],
) -> None:
    found = find(tables)
    assert found.schema == INCIDENT_SCHEMA
    starts = found.column("start_ms").to_pylist()
    known = [s for s in starts if s is not None]
    assert starts[: len(known)] == known == sorted(known)  # unknown times last
    epochs, intervals, groups = (
        tables["controller_epochs"],
        tables["partition_intervals"],
        tables["group_offsets"],
    )
    kinds = found.column("kind").to_pylist()
    assert kinds.count(incidents.CONTROLLER) == epochs["committed"].notna().sum()
    assert (
        sum(k in PARTITION_CONDITIONS for k in kinds)
        == intervals["condition"].isin(PARTITION_CONDITIONS).sum()
    )
    troubled = groups["rewinds"].fillna(0).gt(0) | groups["status"].eq("STALLED")
    assert sum(k.startswith("group_") for k in kinds) == troubled.sum()
    assert all(rows for rows in found.column("rows").to_pylist())  # each with the rows behind it


def _epoch(epoch: int, leader: int, start_ms: int, tenure_ms: int, gap: int | None, failed: int | None,
           committed: bool = True) -> dict[str, Any]:  # fmt: skip
    return {"epoch": epoch, "leader": leader, "committed": committed, "start_offset": epoch * 10,
            "start_ms": start_ms, "end_ms": start_ms + tenure_ms, "tenure_ms": tenure_ms,
            "gap_before_ms": gap, "failed_elections_before": failed}  # fmt: skip


def test_nothing_to_report() -> None:
    assert find(_tables()).num_rows == 0


def test_a_handover_quick_failed_elections_and_an_epoch_that_never_committed() -> None:
    epochs = [
        _epoch(1, 1, T0, 1_000, None, None),
        _epoch(2, 2, T0 + 1_000 + QUIET_LEADER_MS, 1_000, QUIET_LEADER_MS, 0),  # within a NoOp interval
        _epoch(5, 3, T0 + 2_500 + 200, 1_000, 200, 2),  # quick, but two elections failed first
        _epoch(6, 1, T0 + 5_000, 0, None, None, committed=False),
    ]
    found = find(_tables(controller_epochs=epochs)).to_pylist()
    assert [(i["subject"], i["open"]) for i in found] == [
        ("controller 1", False), ("controller 2", False), ("controller 3", True), ("controller 1", False)
    ]  # fmt: skip
    assert found[0]["ended"].startswith(f"node 2 won epoch 2 {QUIET_LEADER_MS} ms after its last batch")
    assert "a handover (resignation, graceful shutdown) or a quick re-election" in found[0]["ended"]
    assert found[1]["ended"] == (
        "node 3 won epoch 5 after 2 failed elections, 200 ms after its last batch: the elections split or timed out"
    )
    assert found[2]["ended"] == "still leading at the history's end"
    assert (found[3]["what"], found[3]["why"]) == (
        "node 1 won epoch 6", "its LeaderChange reached too few voters to commit"
    )  # fmt: skip


def test_a_raised_minimum_an_unregistered_broker_and_a_stalled_group() -> None:
    tables = _tables(
        partition_intervals=[
            {"condition": "under_min_isr", "topic": "t", "topic_id": "T", "partition": 0, "start_offset": 5,
             "end_offset": 9, "start_ms": T0, "end_ms": T0 + 300, "duration_ms": 300, "open": False, "min_isr": 3},
            {"condition": "offline", "topic": "t", "topic_id": "T", "partition": 1, "start_offset": 7,
             "end_offset": None, "start_ms": T0 + 100, "end_ms": T0 + 900, "duration_ms": 800, "open": True},
            {"condition": "under_replicated", "topic": "t", "topic_id": "T", "partition": 1, "start_offset": 7,
             "start_ms": T0 + 100, "end_ms": T0 + 900, "duration_ms": 800, "open": True},
        ],
        partition_transitions=[
            {"offset": 7, "timestamp_ms": T0 + 100, "topic": "t", "topic_id": "T", "partition": 1,
             "cause": "offline", "leader_before": 4, "leader_after": -1, "isr_before": [4], "isr_after": [4]},
            {"offset": 9, "timestamp_ms": T0 + 300, "topic": "t", "topic_id": "T", "partition": 0,
             "cause": "isr_expand", "leader_before": 1, "leader_after": 1, "isr_before": [1, 2],
             "isr_after": [1, 2, 3]},
        ],
        broker_timeline=[{"broker": 4, "state": "UNREGISTERED", "started_by": "UNREGISTER", "start_offset": 8,
                          "start_ms": T0 + 100}],
        group_offsets=[
            {"group": "g", "topic": "t", "partition": 0, "commits": 5, "first_ms": T0 + 50, "last_ms": T0 + 250,
             "rewinds": 0, "stalled_commits": 3, "status": "STALLED"},
            {"group": "ok", "topic": "t", "partition": 0, "commits": 5, "first_ms": T0, "last_ms": T0 + 250,
             "rewinds": 0, "stalled_commits": 1, "status": "OK"},
        ],
    )  # fmt: skip
    found = find(tables).to_pylist()
    assert [(i["kind"], i["subject"]) for i in found] == [
        (incidents.UNDER_MIN_ISR, "t-0"), (incidents.GROUP_STALLED, "group g on t-0"), (incidents.OFFLINE, "t-1"),
    ]  # fmt: skip
    raised, stalled, offline = found
    assert raised["what"] == "t-0 under min ISR (min.insync.replicas 3)"
    assert raised["why"].startswith("no partition change at its start: min.insync.replicas was raised")
    assert raised["ended"] == "isr_expand, leader 1 -> 1, ISR [1, 2] -> [1, 2, 3]"
    assert stalled["what"] == "group g on t-0: its last commits did not move its offset" and stalled["open"]
    assert offline["why"] == "broker 4 unregistered: offline, leader 4 -> none, ISR [4] -> [4]"
    assert offline["ended"] == "still so at the history's end"
    assert offline["rows"][-1] == (
        f"broker_timeline: broker=4, state=UNREGISTERED, started_by=UNREGISTER, start_offset=8, start_ms={T0 + 100}"
    )
