"""The summary's headline figures as the driver counted them before Spark did, from the
tables read whole in pandas. Kept only as the oracle the Spark figures
(``raftka.audit.report_data.headline``) are checked against (``tests/spark``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from raftka.audit import tables
from raftka.audit.incidents import missing


def read(tables_dir: Path) -> dict[str, pd.DataFrame]:
    names = ("controller_epochs", "partition_transitions", "partition_intervals", "broker_timeline")
    return {name: pq.read_table(tables_dir / name).to_pandas() for name in names}


def headline(collected: dict[str, pd.DataFrame]) -> dict[str, Any]:
    epochs = collected["controller_epochs"]
    committed_epochs = epochs[epochs["committed"]]
    gaps = committed_epochs["gap_before_ms"].dropna()
    transitions = collected["partition_transitions"]
    intervals = collected["partition_intervals"]
    brokers = collected["broker_timeline"]
    elections = transitions[transitions["cause"] == "election"]
    return {
        "epochs": int(len(committed_epochs)),
        "leader_changes": int(max(0, len(committed_epochs) - 1)),
        "failed_elections": failed_elections(epochs),
        "leaderless_ms_max": _num(gaps.max()),
        "leaderless_ms_median": _num(gaps.median()),
        "partition_elections": int(len(elections)),
        "unclean_elections": int((elections["clean"] == False).sum()),  # noqa: E712
        "isr_shrinks": int((transitions["isr_change"] == "shrink").sum()),
        "isr_expands": int((transitions["isr_change"] == "expand").sum()),
        **{
            f"{c}_partition_ms": _num(intervals.loc[intervals["condition"] == c, "duration_ms"].sum())
            for c in tables.CONDITIONS
        },
        "broker_restarts": int(brokers["restart"].sum()),
        "broker_fences": int((brokers["started_by"] == "FENCE").sum()),
        "broker_flaps": int(brokers["flap"].sum()),
        "register_to_unfence_ms_median": _num(brokers["register_to_unfence_ms"].dropna().median()),
    }


def failed_elections(epochs: pd.DataFrame) -> int:
    committed = epochs[epochs["committed"]]
    skipped = int(committed["failed_elections_before"].fillna(0).sum())
    if committed.empty:
        return int(epochs["epoch"].nunique())
    lost = epochs.loc[~epochs["committed"], "epoch"]
    outside = lost[(lost < committed["epoch"].min()) | (lost > committed["epoch"].max())]
    return skipped + int(outside.nunique())


def _num(value: Any) -> float | None:
    return None if missing(value) else float(value)
