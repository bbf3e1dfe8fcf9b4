"""The ``incidents`` table: what went wrong and when, in the words asked after an incident.

One row per controller epoch (who led, from when to when, and why it ended as far as the
log tells), per stretch of time a partition was offline or under its min ISR (and the
change that began and ended it: a broker fenced, unregistered or restarting, or the
leader shrinking the ISR), and per partition of a group whose committed offset went back
or stalled. Each row carries the rows of the other tables behind it (``rows``), so the
report can show them next to it. Here each incident is made from its rows; Spark tasks find
and join those rows in the tables the job wrote (``raftka.audit.incident_job``): a long
history has incidents by the hundred thousand, which the driver never holds.

What the log cannot tell: a fence is a fence (a lapsed session and a controlled shutdown
both write one); a controller's end is read from the time between its last batch and the
next LeaderChange, measured against raft's default timings, not the ones the cluster ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

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
# The columns an incident reads of each table (``raftka.audit.incident_job`` joins them)
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
KIND_ORDER = {
    kind: i for i, kind in enumerate((CONTROLLER, OFFLINE, UNDER_MIN_ISR, GROUP_REWOUND, GROUP_STALLED))
}
_LEFT = ("FENCE", "UNREGISTER", "REREGISTER")  # a broker event that takes a broker out
_CAME_BACK = ("UNFENCE", "REGISTER", "REREGISTER")


def controller_incident(this: dict[str, Any], after: dict[str, Any] | None) -> dict[str, Any]:
    """A committed epoch, read with the next committed one (``None``: the last)."""
    return _incident(
        CONTROLLER, f"controller {_int(this['leader'])}", this["start_offset"], this["start_ms"],
        _plus(this["start_ms"], this["tenure_ms"]), this["tenure_ms"], after is None,
        what=f"node {_int(this['leader'])} led epoch {_int(this['epoch'])}",
        why=_epoch_began(this), ended=_epoch_ended(after),
        rows=[_line("controller_epochs", r, INPUTS["controller_epochs"]) for r in (this, after) if r],
    )  # fmt: skip


def lost_epoch_incident(lost: dict[str, Any]) -> dict[str, Any]:
    """An epoch whose LeaderChange never committed."""
    return _incident(
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


def partition_incident(
    span: dict[str, Any],
    began: dict[str, Any] | None,
    ended: dict[str, Any] | None,
    began_batch: Sequence[dict[str, Any]],
    ended_batch: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """A stretch of time a partition was offline or under min ISR (``span``, a row of
    ``partition_intervals``), with the transitions at its start and end offsets, if any, and
    the broker events of their batches (``broker_timeline`` rows at their times)."""
    name = f"{span['topic']}-{_int(span['partition'])}"
    left = _broker_events(began, began_batch, _LEFT)
    back = _broker_events(ended, ended_batch, _CAME_BACK)
    what = (f"{name} offline (no leader)" if span["condition"] == OFFLINE
            else f"{name} under min ISR (min.insync.replicas {_int(span['min_isr'])})")  # fmt: skip
    return _incident(
        span["condition"], name, span["start_offset"], span["start_ms"], span["end_ms"], span["duration_ms"],
        bool(span["open"]), what=what, why=_why_began(began, left),
        ended="still so at the history's end" if span["open"] else _why_ended(ended, back),
        rows=[_line("partition_intervals", span, INPUTS["partition_intervals"]),
              *(_line("partition_transitions", t, INPUTS["partition_transitions"]) for t in (began, ended) if t),
              *(_line("broker_timeline", b, INPUTS["broker_timeline"]) for b in (*left, *back))],
    )  # fmt: skip


def _broker_events(
    transition: dict[str, Any] | None, batch: Sequence[dict[str, Any]], causes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """The broker events of the transition's batch (records of a batch share its time: the
    events at its ``timestamp_ms``) that concern a broker it moved: the controller writes a
    fence and the partition changes it forces in one batch."""
    if transition is None or transition["timestamp_ms"] is None:
        return []
    moved = _moved(transition)
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


def group_incident(g: dict[str, Any]) -> dict[str, Any] | None:
    """A row of ``group_offsets`` as an incident, if its offset rewound or stalled."""
    if not ((_int(g["rewinds"]) or 0) > 0 or g["status"] == "STALLED"):
        return None
    name = f"group {g['group']} on {g['topic']}-{_int(g['partition'])}"
    rewinds, stalled = _int(g["rewinds"]) or 0, _int(g["stalled_commits"]) or 0
    kind = GROUP_STALLED if g["status"] == "STALLED" else GROUP_REWOUND
    what = (f"{name}: its last commits did not move its offset" if kind == GROUP_STALLED
            else f"{name}: committed offset rewound {rewinds} time{'s' if rewinds != 1 else ''} "
                 f"(by {_int(g['rewound_by'])} offsets in all)")  # fmt: skip
    duration = None if g["first_ms"] is None or g["last_ms"] is None else g["last_ms"] - g["first_ms"]
    return _incident(
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


def missing(value: Any) -> bool:
    """None, or pandas' NaN or NA for a value a table did not hold."""
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def _int(value: Any) -> int | None:
    return None if missing(value) else int(value)


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in values if not missing(v)]
