"""Idempotent producers' recent batches in one partition, and the rules a leader checks a
producer's batch by (Kafka's ProducerStateManager and ProducerAppendInfo, without
transactions).

An idempotent producer (an id from InitProducerId, an epoch) numbers the records it
sends to each partition; every batch carries the sequence of its first record. The
partition keeps, per producer id, the epoch and the last ``BATCHES_KEPT`` batches (their
sequence ranges, offsets and timestamp): five, because a producer keeps at most five
batches in flight per partition, so a retried batch is always among them. The leader
checks a batch from a client after the batch itself was validated and before anything
is written, in Kafka 3.x's order:

- a batch with the producer's epoch and the first and last sequence of one of the five
  is a retry of a batch already written: the caller answers it with the original's
  offsets and writes nothing (duplicates are looked for first, only in the same epoch);
- an epoch older than the producer's: ``INVALID_PRODUCER_EPOCH``;
- a newer epoch must start at sequence 0 (the producer bumped its epoch to number its
  batches anew, KIP-360), the same epoch must continue at the last sequence + 1
  (wrapping after 2^31 - 1); anything else is a gap: ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
- a producer the partition does not know (new, or forgotten: expired, or its state
  lost) is taken at any sequence, as Kafka 3.x takes it.

Every replica applies the batches it appends (a follower without checks), so a follower
that becomes leader knows every producer its leader knew. The state is a function of
the log: ``producer_snapshots`` keeps it across restarts and truncations.

Bounds: a producer is forgotten ``producer_id_expiration_ms`` after its last batch's
timestamp (Kafka's ``producer.id.expiration.ms``, checked by the broker every
``producer_id_expiration_check_interval_ms``), and a partition keeps at most
``PRODUCERS_MAX`` producers: one more forgets the one that wrote least recently (the
same one on every replica, since they apply the same batches in the same order). A
forgotten producer's next batch is taken at any sequence, so a retry of a batch it
wrote before it was forgotten could be written twice.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from raftka.records.batch import BatchHeader, next_sequence
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN, the producer's in-flight bound
PRODUCERS_MAX = 10_000  # per partition


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: collections.deque[BatchMetadata] = field(
        default_factory=lambda: collections.deque(maxlen=BATCHES_KEPT)
    )

    @property
    def last(self) -> BatchMetadata:
        return self.batches[-1]

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:  # a new epoch numbers anew: the old batches cannot be retried
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(batch)

    def duplicate_of(self, epoch: int, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


class ProducerStateError(Exception):
    """A producer's batch the leader refuses; ``code`` is the answer's error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ProducerState:
    """Producer id -> its entry, in the order they last wrote (the least recent first)."""

    def __init__(self, producers: dict[int, ProducerEntry] | None = None) -> None:
        self.producers: dict[int, ProducerEntry] = producers if producers is not None else {}

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """The batch a client's ``header`` repeats, None if it is new and may be written;
        ProducerStateError if it may not."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        epoch, first = header.producer_epoch, header.base_sequence
        duplicate = entry.duplicate_of(epoch, first, header.last_sequence)
        if duplicate is not None:
            return duplicate
        who = f"producer {header.producer_id}"
        if epoch < entry.epoch:
            raise ProducerStateError(
                E.INVALID_PRODUCER_EPOCH, f"{who}: epoch {epoch} is older than {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first != 0:
                raise ProducerStateError(
                    E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"{who}: new epoch {epoch} must start at sequence 0, not {first}",
                )
            return None
        expected = next_sequence(entry.last.last_sequence, 1)
        if first != expected:
            raise ProducerStateError(
                E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"{who}, epoch {epoch}: sequence {first} does not follow {entry.last.last_sequence} (expected {expected})",
            )
        return None

    def apply(self, header: BatchHeader) -> None:
        """A batch written to the log (offsets assigned); nothing for one without a producer id."""
        if not header.has_producer_id:
            return
        batch = BatchMetadata(
            header.base_sequence,
            header.last_sequence,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
        )
        entry = self.producers.pop(header.producer_id, None)
        if entry is None:
            entry = ProducerEntry(header.producer_epoch)
            if len(self.producers) >= PRODUCERS_MAX:
                del self.producers[next(iter(self.producers))]
        entry.add(header.producer_epoch, batch)
        self.producers[header.producer_id] = entry

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old; how many."""
        expired = [
            pid for pid, entry in self.producers.items() if now_ms - entry.last.timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)
