"""The tables that are the replay's events filtered and projected, written by the replay pieces.

``partition_transitions`` and ``config_history`` take nothing from other events: each replay
piece writes its part with Arrow next to its events (``raftka.audit.pieces``), and the job
moves the parts into ``OUT/tables``. Spark reading a million events back for a filter and a
select cost a fifth of the tables' time at ten million records.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from raftka.audit.replay import CONFIG, TRANSITION

CONDITIONS = ("offline", "under_replicated", "under_min_isr", "non_preferred")
TRANSITION_COLUMNS = ("seq", "offset", "epoch", "timestamp_ms", "topic", "topic_id", "partition", "cause", "clean",
                      "isr_change", "leader_before", "leader_after", "isr_before", "isr_after", "replicas_before",
                      "replicas_after", "leader_epoch_before", "leader_epoch_after", "partition_epoch_before",
                      "partition_epoch_after", *CONDITIONS)  # fmt: skip
CONFIG_COLUMNS = ("seq", "offset", "epoch", "timestamp_ms", "resource_type", "resource", "topic_id", "key",
                  "value_before", "value_after")  # fmt: skip
EVENT_TABLES = ("partition_transitions", "config_history")


def event_tables(events: pa.RecordBatch) -> dict[str, pa.Table]:
    """One piece's part of each of ``EVENT_TABLES``, from its events (``EVENT_SCHEMA``)."""
    table = pa.Table.from_batches([events])
    kind = table["event"]
    transitions = table.filter(pc.equal(kind, TRANSITION)).select(list(TRANSITION_COLUMNS))
    configs = table.filter(pc.equal(kind, CONFIG)).select(list(CONFIG_COLUMNS))
    operation = pc.if_else(pc.is_null(configs["value_after"]), "DELETE", "SET")
    return {
        "partition_transitions": transitions,
        "config_history": configs.append_column("operation", operation),
    }
