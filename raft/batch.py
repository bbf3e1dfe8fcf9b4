"""Record batches: the unit the quorum replicates, stores and commits.

Offsets count records, as in Kafka: a batch holds records ``base_offset`` to
``last_offset``. Raft never looks inside a record; it only knows whether a batch is
the layer above's data or one of its own control batches.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class BatchKind(enum.IntEnum):
    """What a batch carries. Control batches are raft's own: the layer above sees them
    commit (its offset and snapshots move with them) but never replays their records."""

    DATA = 0
    LEADER_CHANGE = 1  # first batch of every epoch; record 0 is the encoded LeaderChange
    NOOP = 2  # appended by an idle leader so the high watermark keeps moving
    VOTERS = 3  # a voter set change (KIP-853): a KRaftVersionRecord, then the VotersRecord


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    epoch: int
    timestamp_ms: int
    kind: BatchKind
    records: tuple[bytes, ...]

    def __post_init__(self) -> None:
        assert self.base_offset >= 0, self.base_offset
        assert self.epoch >= 0, self.epoch
        assert self.records, "a batch holds at least one record"

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    @property
    def is_control(self) -> bool:
        return self.kind != BatchKind.DATA

    def size_bytes(self) -> int:
        """Record payload only: what the batch costs encoded is ``batch_codec.frame_bytes``."""
        return sum(len(r) for r in self.records)


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A log position: ``offset`` is exclusive (the next offset), ``epoch`` the last batch's."""

    offset: int
    epoch: int


# A snapshot id names the state after applying every record below ``offset``; ``epoch``
# is the epoch of the last record it covers (KRaft's OffsetAndEpoch snapshot id).
SnapshotId = OffsetAndEpoch
