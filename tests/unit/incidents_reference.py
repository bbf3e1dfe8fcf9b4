"""The incidents as the job found them before Spark tasks did: every table the incidents
read, whole, in pandas on the driver. Kept only as the oracle the Spark job is checked
against (``tests/spark/test_incident_job.py``) and to test the incidents' words on tables
made by hand (``test_audit_incidents``); the words are the job's own
(``raftka.audit.incidents``)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from raftka.audit.incidents import (
    INCIDENT_SCHEMA,
    INPUTS,
    KIND_ORDER,
    PARTITION_CONDITIONS,
    controller_incident,
    group_incident,
    lost_epoch_incident,
    missing,
    partition_incident,
)


def find(tables: Mapping[str, pd.DataFrame]) -> pa.Table:
    """Every incident in ``tables`` (the columns of ``INPUTS``), in time order."""
    epochs = tables["controller_epochs"]
    committed = _records(epochs[epochs["committed"].eq(True)].sort_values("epoch"))
    rows = [
        *(controller_incident(this, after) for this, after in pairwise([*committed, None])),
        *map(lost_epoch_incident, _records(epochs[epochs["committed"].eq(False)].sort_values("epoch"))),
        *_partitions(
            tables["partition_intervals"], tables["partition_transitions"], tables["broker_timeline"]
        ),
        *filter(None, map(group_incident, _records(tables["group_offsets"]))),
    ]
    rows.sort(key=lambda r: (r["start_ms"] is None, r["start_ms"] or 0,
                             r["start_offset"] if r["start_offset"] is not None else -1, KIND_ORDER[r["kind"]]))  # fmt: skip
    return pa.Table.from_pylist(rows, schema=INCIDENT_SCHEMA)


def _partitions(
    intervals: pd.DataFrame, transitions: pd.DataFrame, brokers: pd.DataFrame
) -> list[dict[str, Any]]:
    at = {(t["topic_id"], _int(t["partition"]), _int(t["offset"])): t for t in _records(transitions)}
    broker_events: dict[Any, list[dict[str, Any]]] = {}
    for event in _records(brokers):
        broker_events.setdefault(event["start_ms"], []).append(event)
    chosen = intervals[intervals["condition"].isin(PARTITION_CONDITIONS)]
    found = []
    for span in _records(chosen.sort_values(["start_ms", "start_offset"])):
        key = (span["topic_id"], _int(span["partition"]))
        began, ended = at.get((*key, _int(span["start_offset"]))), at.get((*key, _int(span["end_offset"])))
        found.append(partition_incident(span, began, ended, _batch(began, broker_events),
                                        _batch(ended, broker_events)))  # fmt: skip
    return found


def _batch(
    transition: dict[str, Any] | None, by_ms: Mapping[Any, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    return [] if transition is None else by_ms.get(transition["timestamp_ms"], [])


def read_inputs(tables_dir: Path) -> dict[str, pd.DataFrame]:
    """The columns ``find`` reads of the tables the job wrote under ``tables_dir``, whole; the
    broker events in log order, as the job lists those of a batch."""
    tables = {name: pq.read_table(tables_dir / name, columns=list(columns)).to_pandas()
              for name, columns in INPUTS.items()}  # fmt: skip
    tables["broker_timeline"] = tables["broker_timeline"].sort_values("start_offset", kind="stable")
    return tables


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None where pandas holds NaN or NA."""
    return [{k: None if missing(v) else v for k, v in row.items()} for row in frame.to_dict("records")]


def _int(value: Any) -> int | None:
    return None if missing(value) else int(value)


def assert_found_as_before(tables_dir: Path) -> list[dict[str, Any]]:
    """The job's ``incidents`` table holds what ``find`` finds in the tables beside it, in
    time order (incidents at one time and offset: the job sorts them by subject, the old
    code left them as Spark had written the intervals). Returns the job's rows."""
    found = pq.read_table(tables_dir / "incidents").to_pylist()
    expected = find(read_inputs(tables_dir)).to_pylist()
    assert [_order(i) for i in found] == sorted(_order(i) for i in found)
    assert sorted(found, key=_by_subject) == sorted(expected, key=_by_subject)
    return found


def _order(incident: dict[str, Any]) -> tuple[Any, ...]:
    start_ms, start_offset = incident["start_ms"], incident["start_offset"]
    return (
        start_ms is None,
        start_ms or 0,
        -1 if start_offset is None else start_offset,
        KIND_ORDER[incident["kind"]],
    )


def _by_subject(incident: dict[str, Any]) -> tuple[Any, ...]:
    return (*_order(incident), incident["subject"], incident["what"])
