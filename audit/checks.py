"""The invariants the audit checks, and the violation rows that say one is broken.

Every check is listed in the summary with pass or fail, whether or not it found
anything, so a report can never hide a check that did not run. An error-level
violation makes ``raftka audit`` exit 1; warnings and notes (a torn tail after a crash,
an uncommitted tail a new leader replaced) are normal in a healthy cluster's history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    what: str


CHECKS = (
    Check(
        "offsets_contiguous",
        "each node's offsets follow on, batch after batch, except where a snapshot starts it",
    ),
    Check("epochs_monotonic", "each node's epochs never decrease along its log"),
    Check(
        "epoch_starts_with_leader_change",
        "every epoch starts with a LeaderChange naming a voter as leader and the voter set in effect",
    ),
    Check(
        "voter_changes_one_at_a_time",
        "the voter set changes only through VotersRecords (KIP-853), each by at most one member",
    ),
    Check(
        "records_replay",
        "every record decodes and replays through MetadataDelta (no unknown topic or broker, "
        "partitions take in registered brokers only, leader in the ISR, ISR within the replicas, "
        "no duplicate topic)",
    ),
    Check("partition_epochs_increase", "leader and partition epochs strictly increase per partition"),
    Check("broker_epochs", "a broker epoch is the offset of its registration and increases"),
    Check(
        "fenced_brokers_hold_nothing",
        "after the batch that fenced it, a broker leads nothing and sits in no ISR "
        "(but as the last ISR member of an offline partition, as in Kafka)",
    ),
    Check("producer_ids_increase", "producer id blocks only move forward"),
    Check("snapshot_equals_replay", "every snapshot holds the image the log replays to at its offset"),
    Check("nodes_agree", "nodes hold the same batch at an offset wherever both copies are committed"),
    Check("no_damage", "no CRC damage anywhere but a torn last batch of a node's newest segment"),
)
CHECK_NAMES = frozenset(c.name for c in CHECKS)

# (name, type)
VIOLATION_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("check", pa.string()),
    ("severity", pa.string()),
    ("node", pa.string()),
    ("offset", pa.int64()),
    ("entity", pa.string()),
    ("message", pa.string()),
    ("file", pa.string()),
    ("position", pa.int64()),
)
VIOLATION_SCHEMA = pa.schema([pa.field(n, t) for n, t in VIOLATION_COLUMNS])


def violation(
    check: str,
    severity: str,
    message: str,
    *,
    node: str | None = None,
    offset: int | None = None,
    entity: str | None = None,
    file: str | None = None,
    position: int | None = None,
) -> dict[str, Any]:
    assert check in CHECK_NAMES and severity in SEVERITIES, (check, severity)
    return {
        "check": check,
        "severity": severity,
        "node": node,
        "offset": offset,
        "entity": entity,
        "message": message,
        "file": file,
        "position": position,
    }


def check_results(violations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every check with its counts per severity and ``passed`` (no error-level violation)."""
    results = []
    for check in CHECKS:
        mine = [v for v in violations if v["check"] == check.name]
        counts = {s: sum(1 for v in mine if v["severity"] == s) for s in SEVERITIES}
        results.append({"check": check.name, "what": check.what, "passed": counts[ERROR] == 0, **counts})
    return results
