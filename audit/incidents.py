"""The ``incidents`` table: what went wrong and when, in the words asked after an incident.

One row per controller epoch (who led, from when to when, and why it ended as far as the
log tells), per stretch of time a partition was offline or under its min ISR (and the
change that began and ended it: a broker fenced, unregistered or restarting, or the
leader shrinking the ISR), and per partition of a group whose committed offset went back
or stalled. Each row carries the rows of the other tables behind it (``rows``), so the
report can show them next to it. It is built on the driver from the tables the job wrote,
in pandas: a history has few incidents, however long it is.

What the log cannot tell: a fence is a fence (a lapsed session and a controlled shutdown
both write one); a controller's end is read from the time between its last batch and the
next LeaderChange, measured against raft's default timings, not the ones the cluster ran.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from raftka.raft.config import RaftConfig

CONTROLLER, OFFLINE, UNDER_MIN_ISR, GROUP_REWOUND, GROUP_STALLED = (
    "controller", "offline", "under_min_isr", "group_rewound", "group_stalled",
)  # fmt: skip
PARTITION_CONDITIONS = (OFFLINE, UNDER_MIN_ISR)
# An idle leader writes a NoOp this often: a next LeaderChange sooner than this after its
# last batch means it stopped on purpose or lost a quick election, later means it went quiet.
QUIET_LEADER_MS = RaftConfig().idle_noop_interval_ms
INCIDENT_SCHEMA = pa.schema([
    pa.field("kind", pa.string(), nullable=False), ("subject", pa.string()), ("start_offset", pa.int64()),
    ("start_ms", pa.int64()), ("end_ms", pa.int64()), ("duration_ms", pa.int64()), ("open", pa.bool_()),
    ("what", pa.string()), ("why", pa.string()), ("ended", pa.string()),
    ("rows", pa.list_(pa.field("element", pa.string()))),
])  # fmt: skip
# The columns read of each table (the job reads only the intervals and transitions named here)
INPUTS: dict[str, tuple[str, ...]] = {
    "controller_epochs": ("epoch", "leader", "committed", "start_offset", "end_offset", "start_ms", "end_ms",
                          "tenure_ms", "gap_before_ms", "failed_elections_before"),
    "partition_intervals": ("condition", "topic", "topic_id", "partition", "start_offset", "end_offset",
                            "start_ms", "end_ms", "duration_ms", "open", "min_isr"),
    "partition_transitions": ("offset", "timestamp_ms", "topic", "topic_id", "partition", "cause", "clean",
                              "leader_before", "leader_after", "isr_before", "isr_after"),
    "broker_timeline": ("broker", "state", "started_by", "start_offset", "start_ms"),
    "group_offsets": ("group", "topic", "partition", "commits", "first_offset", "last_offset", "first_ms",
                      "last_ms", "rewinds", "rewound_by", "stalled_commits", "status"),
}  # fmt: skip
_KIND_ORDER = {
    kind: i for i, kind in enumerate((CONTROLLER, OFFLINE, UNDER_MIN_ISR, GROUP_REWOUND, GROUP_STALLED))
}
_LEFT = ("FENCE", "UNREGISTER", "REREGISTER")  # a broker event that takes a broker out
_CAME_BACK = ("UNFENCE", "REGISTER", "REREGISTER")


def find(tables: Mapping[str, pd.DataFrame]) -> pa.Table:
    """Every incident in ``tables`` (the columns of ``INPUTS``), in time order."""
    rows = [
        *_controller(tables["controller_epochs"]),
        *_partitions(
            tables["partition_intervals"], tables["partition_transitions"], tables["broker_timeline"]
        ),
        *_groups(tables["group_offsets"]),
    ]
    rows.sort(key=lambda r: (r["start_ms"] is None, r["start_ms"] or 0,
                             r["start_offset"] if r["start_offset"] is not None else -1, _KIND_ORDER[r["kind"]]))  # fmt: skip
    return pa.Table.from_pylist(rows, schema=INCIDENT_SCHEMA)


def read_inputs(tables_dir: Path) -> dict[str, pd.DataFrame]:
    """The columns ``find`` reads of the tables the job wrote under ``tables_dir``; of the two
    long ones (a million rows each in a long history) only the intervals it reports and the
    transitions that began or ended one."""

    def read(name: str, filters: Any = None) -> pd.DataFrame:
        return pq.read_table(tables_dir / name, columns=list(INPUTS[name]), filters=filters).to_pandas()

    intervals = read("partition_intervals", [("condition", "in", list(PARTITION_CONDITIONS))])
    offsets = sorted(
        {int(o) for o in (*intervals["start_offset"], *intervals["end_offset"]) if not missing(o)}
    )
    return {
        "controller_epochs": read("controller_epochs"),
        "partition_intervals": intervals,
        "partition_transitions": read("partition_transitions", [("offset", "in", offsets or [-1])]),
        "broker_timeline": read("broker_timeline"),
        "group_offsets": read("group_offsets"),
    }


def write(incidents: pa.Table, folder: Path) -> None:
    """As Parquet in ``folder``, as Spark writes the other tables (one file here: few rows)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pq.write_table(incidents, folder / "part-00000.parquet")


def _controller(epochs: pd.DataFrame) -> Iterator[dict[str, Any]]:
    committed = _records(epochs[epochs["committed"].eq(True)].sort_values("epoch"))
    for this, after in pairwise([*committed, None]):  # the last epoch has none after it
        yield _incident(
            CONTROLLER, f"controller {_int(this['leader'])}", this["start_offset"], this["start_ms"],
            _plus(this["start_ms"], this["tenure_ms"]), this["tenure_ms"], after is None,
            what=f"node {_int(this['leader'])} led epoch {_int(this['epoch'])}",
            why=_epoch_began(this), ended=_epoch_ended(after),
            rows=[_line("controller_epochs", r, INPUTS["controller_epochs"]) for r in (this, after) if r],
        )  # fmt: skip
    for lost in _records(epochs[epochs["committed"].eq(False)].sort_values("epoch")):
        yield _incident(
            CONTROLLER, f"controller {_int(lost['leader'])}", lost["start_offset"], lost["start_ms"],
            lost["start_ms"], 0, False, what=f"node {_int(lost['leader'])} won epoch {_int(lost['epoch'])}",
            why="its LeaderChange reached too few voters to commit",
            ended="replaced by a later leader: only an uncommitted tail holds this epoch",
            rows=[_line("controller_epochs", lost, INPUTS["controller_epochs"])],
        )  # fmt: skip


def _epoch_began(epoch: dict[str, Any]) -> str:
    gap, failed = _int(epoch["gap_before_ms"]), _int(epoch["failed_elections_before"])
    if gap is None:
        return "the history starts in this epoch"
    lost = f", after {failed} election{'s' if failed != 1 else ''} that won no leader" if failed else ""
    return f"elected {gap} ms after the previous leader's last batch{lost}"


def _epoch_ended(after: dict[str, Any] | None) -> str:
    """Why an epoch ended, read off the next: how long after its last batch it began, and
    how many elections failed in between."""
    if after is None:
        return "still leading at the history's end"
    gap, failed = _int(after["gap_before_ms"]), _int(after["failed_elections_before"]) or 0
    successor = f"node {_int(after['leader'])} won epoch {_int(after['epoch'])}"
    if gap is None:
        return successor
    if failed == 0 and gap <= QUIET_LEADER_MS:
        return (f"{successor} {gap} ms after its last batch, within an idle leader's NoOp interval "
                f"({QUIET_LEADER_MS} ms): a handover (resignation, graceful shutdown) or a quick re-election; "
                "the log does not say which")  # fmt: skip
    failures = f" after {failed} failed election{'s' if failed != 1 else ''}" if failed else ""
    if gap <= QUIET_LEADER_MS:
        return f"{successor}{failures}, {gap} ms after its last batch: the elections split or timed out"
    return (f"lost: {successor}{failures}; no batch for {gap} ms before, longer than an idle leader's NoOp "
            f"interval ({QUIET_LEADER_MS} ms): it crashed, was cut off (check-quorum resignation) or hung")  # fmt: skip


def _partitions(
    intervals: pd.DataFrame, transitions: pd.DataFrame, brokers: pd.DataFrame
) -> Iterator[dict[str, Any]]:
    at = {(t["topic_id"], _int(t["partition"]), _int(t["offset"])): t for t in _records(transitions)}
    broker_events: dict[Any, list[dict[str, Any]]] = {}  # by time: a long history has many
    for event in _records(brokers):
        broker_events.setdefault(event["start_ms"], []).append(event)
    chosen = intervals[intervals["condition"].isin(PARTITION_CONDITIONS)]
    for span in _records(chosen.sort_values(["start_ms", "start_offset"])):
        name = f"{span['topic']}-{_int(span['partition'])}"
        key = (span["topic_id"], _int(span["partition"]))
        began, ended = at.get((*key, _int(span["start_offset"]))), at.get((*key, _int(span["end_offset"])))
        left = _broker_events(began, broker_events, _LEFT)
        back = _broker_events(ended, broker_events, _CAME_BACK)
        what = (f"{name} offline (no leader)" if span["condition"] == OFFLINE
                else f"{name} under min ISR (min.insync.replicas {_int(span['min_isr'])})")  # fmt: skip
        yield _incident(
            span["condition"], name, span["start_offset"], span["start_ms"], span["end_ms"], span["duration_ms"],
            bool(span["open"]), what=what, why=_why_began(began, left),
            ended="still so at the history's end" if span["open"] else _why_ended(ended, back),
            rows=[_line("partition_intervals", span, INPUTS["partition_intervals"]),
                  *(_line("partition_transitions", t, INPUTS["partition_transitions"]) for t in (began, ended) if t),
                  *(_line("broker_timeline", b, INPUTS["broker_timeline"]) for b in (*left, *back))],
        )  # fmt: skip


def _broker_events(
    transition: dict[str, Any] | None, by_ms: Mapping[Any, list[dict[str, Any]]], causes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """The broker events of the transition's batch (records of a batch share its time) that
    concern a broker it moved: the controller writes a fence and the partition changes it
    forces in one batch."""
    if transition is None:
        return []
    moved = _moved(transition)
    batch = by_ms.get(transition["timestamp_ms"], []) if transition["timestamp_ms"] is not None else []
    return [b for b in batch if b["started_by"] in causes and _int(b["broker"]) in moved]


def _moved(transition: dict[str, Any]) -> set[int]:
    """The brokers a transition took out of or put into the leadership or the ISR."""
    before, after = set(_ints(transition["isr_before"])), set(_ints(transition["isr_after"]))
    leaders = {_int(transition["leader_before"]), _int(transition["leader_after"])} - {None, -1}
    return (before ^ after) | leaders


def _why_began(transition: dict[str, Any] | None, brokers: list[dict[str, Any]]) -> str:
    if transition is None:
        return "no partition change at its start: min.insync.replicas was raised, or the history starts here"
    change = _change(transition)
    if brokers:
        return f"{_brokers_did(brokers)}: {change}"
    if transition["cause"] in ("isr_shrink", "isr_change"):
        return f"ISR shrunk by leader {_int(transition['leader_after'])} (a replica fell behind): {change}"
    return change


def _why_ended(transition: dict[str, Any] | None, brokers: list[dict[str, Any]]) -> str:
    if transition is None:
        return "no partition change at its end: min.insync.replicas was lowered, or the topic was deleted"
    change = _change(transition)
    return f"{_brokers_did(brokers)}: {change}" if brokers else change


def _brokers_did(brokers: list[dict[str, Any]]) -> str:
    said = {
        "FENCE": "fenced (session lapsed or controlled shutdown: the log records both as a fence)",
        "UNREGISTER": "unregistered", "REREGISTER": "restarted (registered again)",
        "UNFENCE": "unfenced", "REGISTER": "registered",
    }  # fmt: skip
    return "; ".join(
        f"broker {_int(b['broker'])} {said.get(b['started_by'], b['started_by'])}" for b in brokers
    )


def _change(t: dict[str, Any]) -> str:
    leader = f"leader {_leader(t['leader_before'])} -> {_leader(t['leader_after'])}"
    clean = {True: " (clean election)", False: " (unclean election)"}.get(t["clean"], "")
    return f"{t['cause']}{clean}, {leader}, ISR {_ints(t['isr_before'])} -> {_ints(t['isr_after'])}"


def _leader(value: Any) -> str:
    leader = _int(value)
    return "none" if leader is None or leader < 0 else str(leader)


def _groups(groups: pd.DataFrame) -> Iterator[dict[str, Any]]:
    troubled = groups[groups["rewinds"].fillna(0).gt(0) | groups["status"].eq("STALLED")]
    for g in _records(troubled):
        name = f"group {g['group']} on {g['topic']}-{_int(g['partition'])}"
        rewinds, stalled = _int(g["rewinds"]) or 0, _int(g["stalled_commits"]) or 0
        kind = GROUP_STALLED if g["status"] == "STALLED" else GROUP_REWOUND
        what = (f"{name}: its last commits did not move its offset" if kind == GROUP_STALLED
                else f"{name}: committed offset rewound {rewinds} time{'s' if rewinds != 1 else ''} "
                     f"(by {_int(g['rewound_by'])} offsets in all)")  # fmt: skip
        duration = None if g["first_ms"] is None or g["last_ms"] is None else g["last_ms"] - g["first_ms"]
        yield _incident(
            kind, name, None, g["first_ms"], g["last_ms"], duration, g["status"] == "STALLED",
            what=what,
            why=(f"{_int(g['commits'])} commits between these times, {rewinds} lower than the one before, "
                 f"{stalled} equal to it; the log keeps no consumer lag, so this is all it tells"),
            ended="still stalled at its last commit" if kind == GROUP_STALLED else f"status {g['status']}",
            rows=[_line("group_offsets", g, INPUTS["group_offsets"])],
        )  # fmt: skip


def _incident(kind: str, subject: str, start_offset: Any, start_ms: Any, end_ms: Any, duration_ms: Any,
              still: bool, **text: Any) -> dict[str, Any]:  # fmt: skip
    return {"kind": kind, "subject": subject, "start_offset": _int(start_offset), "start_ms": _int(start_ms),
            "end_ms": _int(end_ms), "duration_ms": _int(duration_ms), "open": still, **text}  # fmt: skip


def _line(table: str, row: dict[str, Any], columns: Sequence[str]) -> str:
    """One row of another table, as text: the row behind an incident."""
    shown = ", ".join(f"{c}={_text(row.get(c))}" for c in columns if c in row)
    return f"{table}: {shown}"


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return str(_ints(value))
    if missing(value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a count in a column pandas made float
    return str(value)


def _plus(a: Any, b: Any) -> int | None:
    """A sum of two values a table may not hold: None if either is missing."""
    return None if missing(a) or missing(b) else int(a) + int(b)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None where pandas holds NaN or NA."""
    return [{k: None if missing(v) else v for k, v in row.items()} for row in frame.to_dict("records")]


def missing(value: Any) -> bool:
    """None, or pandas' NaN or NA for a value a table did not hold."""
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def _int(value: Any) -> int | None:
    return None if missing(value) else int(value)


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in values if not missing(v)]
