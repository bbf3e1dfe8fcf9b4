"""When the layer above snapshots: KRaft's two bounds, plus a record count.

Raft holds every batch since the last snapshot in memory and on disk, its own control
batches included, and a restarting node replays them all: only a snapshot bounds that.
A state machine feeds every committed batch to ``SnapshotSchedule.due`` and snapshots at
the end of the first batch that passes any bound:

- ``snapshot_interval_bytes``: encoded bytes of every batch since the last snapshot,
  control batches included (KRaft: ``metadata.log.max.record.bytes.between.snapshots``).
  It bounds what the log holds.
- ``snapshot_interval_ms``: time since the last snapshot, read from the batches' own
  timestamps (KRaft: ``metadata.log.max.snapshot.interval.ms``; 0 turns it off). An idle
  leader appends a NoOp every ``raft.idle_noop_interval_ms``, so time moves in the log
  even when nothing else does, and the decision depends on the log alone, not on a clock.
- ``snapshot_interval_records``: the layer above's own (DATA) records since the last
  snapshot, because replaying costs per record; raft's control records cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.raft.batch import Batch
from raftka.raft.storage.batch_codec import frame_bytes


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    snapshot_interval_records: int = 10_000
    snapshot_interval_bytes: int = 20 << 20  # 20 MiB
    snapshot_interval_ms: int = 3_600_000  # 0: never on time


class SnapshotSchedule:
    """Counts what committed since the last snapshot and says when the next one is due."""

    def __init__(self, policy: SnapshotPolicy) -> None:
        assert policy.snapshot_interval_records > 0 and policy.snapshot_interval_bytes > 0, policy
        assert policy.snapshot_interval_ms >= 0, policy
        self._policy = policy
        self._records = 0
        self._bytes = 0
        self._since_ms: int | None = None  # the last snapshot's time; None: the next batch's

    def restart(self, timestamp_ms: int | None) -> None:
        """A snapshot was taken or loaded, as of ``timestamp_ms`` (None when unknown: the
        next batch's timestamp stands in)."""
        self._records = 0
        self._bytes = 0
        self._since_ms = timestamp_ms

    def due(self, batch: Batch) -> bool:
        """Count a committed batch; True when the state after it should be snapshotted."""
        if self._since_ms is None:
            self._since_ms = batch.timestamp_ms
        self._bytes += frame_bytes(batch)
        if not batch.is_control:
            self._records += len(batch.records)
        policy = self._policy
        return (
            self._records >= policy.snapshot_interval_records
            or self._bytes >= policy.snapshot_interval_bytes
            or 0 < policy.snapshot_interval_ms <= batch.timestamp_ms - self._since_ms
        )
