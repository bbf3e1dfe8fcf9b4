"""Quorum timing and limits. Every field has a default; ``deploy/`` documents each key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftConfig:
    # A voter with no leader waits a random time in [T, 2T) before it campaigns; a
    # candidate gives up after the same. Small, because a dead leader is usually seen
    # at once (its connections reset: then a voter campaigns at once, T/2 later per
    # voter of lower id); pre-vote keeps a hasty node from disrupting.
    election_timeout_ms: int = 50
    # Longest a failed election backs off (exponentially, randomized) before the next try.
    election_backoff_max_ms: int = 1000
    # A follower that has had no fetch answer from its leader this long treats it as lost
    # (a hung or cut-off leader never resets the connection). A live leader answers at
    # least every fetch_max_wait_ms, so the difference (350 ms) is how long a leader's or
    # follower's loop may stall (GC, a busy CPU) before an election; a stalled follower
    # alone only asks for pre-votes, which the others refuse.
    fetch_timeout_ms: int = 600
    # A leader not fetched from by a majority this long resigns (check-quorum).
    check_quorum_timeout_ms: int = 1500
    # How long the leader parks a fetch that has nothing new to return.
    fetch_max_wait_ms: int = 250
    # An idle leader appends a NoOp batch this often so followers see the HW move.
    idle_noop_interval_ms: int = 500
    # One fetch answer holds at least one batch, then no more than these: encoded bytes
    # (as on disk; control batches count like any other) and batches. The leader encodes
    # each batch on its loop (~3 us apiece), so 1000 costs a few ms, well inside every
    # timeout, however small the batches are.
    fetch_max_bytes: int = 1 << 20
    fetch_max_batches: int = 1000
    # Limits: records in one appended batch, bytes of one snapshot chunk.
    append_max_records: int = 4096
    snapshot_chunk_bytes: int = 1 << 20

    def validate(self) -> None:
        """Reject settings under which the protocol cannot work, naming the key."""
        positive = (
            "election_timeout_ms",
            "election_backoff_max_ms",
            "fetch_timeout_ms",
            "check_quorum_timeout_ms",
            "fetch_max_wait_ms",
            "idle_noop_interval_ms",
            "fetch_max_bytes",
            "fetch_max_batches",
            "append_max_records",
            "snapshot_chunk_bytes",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"raft.{name} must be positive, got {getattr(self, name)}")
        if self.fetch_max_wait_ms >= self.fetch_timeout_ms:
            raise ValueError("raft.fetch_max_wait_ms must be below raft.fetch_timeout_ms")
        if self.check_quorum_timeout_ms < self.fetch_timeout_ms:
            raise ValueError("raft.check_quorum_timeout_ms must be at least raft.fetch_timeout_ms")
