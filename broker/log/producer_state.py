"""Idempotent and transactional producers' recent batches in one partition, their open
transactions, and the rules a leader checks a producer's batch by (Kafka's
ProducerStateManager and ProducerAppendInfo).

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

Transactions (``ongoing_transactions``): a transactional batch starts the producer's
transaction in this partition, if none is open, at its first offset; a marker (a control
batch, ``raftka.records.control``) ends it, and an ABORT marker's transaction goes to the
aborted-transaction index (``transaction_index``). While a transaction is open, the
producer's non-transactional batch is ``INVALID_TXN_STATE`` (Kafka's rule). A marker is
checked as Kafka's ``appendEndTxnMarker``: an epoch older than the producer's is
``INVALID_PRODUCER_EPOCH``, a coordinator epoch older than the last marker's
``TRANSACTION_COORDINATOR_FENCED``; a marker for a producer with no open transaction
here is written all the same (the coordinator sends a marker again after a failover, or
to a partition the producer never wrote) and ends nothing: no index entry, the last
stable offset unmoved (Kafka's ``appendEndTxnMarker``). Markers carry no sequence and
never count as the producer's batches; a producer known here only from markers starts
its sequence at 0, as Kafka's ``checkSequence`` asks.

Every replica applies the batches it appends (a follower without checks), so a follower
that becomes leader knows every producer its leader knew. The state is a function of
the log: ``producer_snapshots`` keeps it across restarts and truncations.

Bounds: a producer is forgotten ``producer_id_expiration_ms`` after its last batch's
timestamp (Kafka's ``producer.id.expiration.ms``, checked by the broker every
``producer_id_expiration_check_interval_ms``), and a partition keeps at most
``PRODUCERS_MAX`` producers: one more forgets the one that wrote least recently (the
same one on every replica, since they apply the same batches in the same order). A
producer with an open transaction is never forgotten (its transaction holds the last
stable offset until its marker comes). A
forgotten producer's next batch is taken at any sequence, so a retry of a batch it
wrote before it was forgotten could be written twice.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from raftka.broker.log.ongoing_transactions import CompletedTxn, OngoingTransactions
from raftka.records.batch import BatchHeader, next_sequence
from raftka.records.control import Marker
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


NO_TXN = -1  # ProducerEntry.txn_first_offset: no open transaction


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: collections.deque[BatchMetadata] = field(
        default_factory=lambda: collections.deque(maxlen=BATCHES_KEPT)
    )
    coordinator_epoch: int = -1  # the last marker's
    txn_first_offset: int = NO_TXN  # the open transaction's first offset here
    last_timestamp: int = -1  # the last batch's or marker's, for expiry

    @property
    def last(self) -> BatchMetadata:
        return self.batches[-1]

    def update_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:  # a new epoch numbers anew: the old batches cannot be retried
            self.epoch = epoch
            self.batches.clear()

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        self.update_epoch(epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

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
        self.transactions = OngoingTransactions()
        open_ones = [
            (e.txn_first_offset, pid) for pid, e in self.producers.items() if e.txn_first_offset != NO_TXN
        ]
        for first_offset, producer_id in sorted(open_ones):
            self.transactions.begin(producer_id, first_offset)
        # KIP-890: producer id -> the guard of its verification in flight (the leader's, in memory)
        self.verifying: dict[int, object] = {}

    def has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        """An open transaction here at ``epoch`` (Kafka's ``hasOngoingTransaction``)."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset != NO_TXN and entry.epoch == epoch

    def start_verification(self, producer_id: int) -> object:
        """A guard that a marker for the producer voids (``raftka.broker.transaction_verifier``)."""
        guard = self.verifying[producer_id] = object()
        return guard

    def end_verification(self, producer_id: int, guard: object) -> None:
        """Forget ``guard``, unless a newer verification of the producer replaced it."""
        if self.verifying.get(producer_id) is guard:
            del self.verifying[producer_id]

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
        self._check_epoch(header.producer_id, entry, epoch)
        if epoch > entry.epoch:
            if first != 0:
                raise ProducerStateError(
                    E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"{who}: new epoch {epoch} must start at sequence 0, not {first}",
                )
        else:
            last = entry.last.last_sequence if entry.batches else -1  # -1: known from markers alone
            expected = next_sequence(last, 1)
            if first != expected:
                raise ProducerStateError(
                    E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"{who}, epoch {epoch}: sequence {first} does not follow {last} (expected {expected})",
                )
        if entry.txn_first_offset != NO_TXN and not header.is_transactional:  # after the sequence, as Kafka
            raise ProducerStateError(
                E.INVALID_TXN_STATE,
                f"{who}: a non-transactional batch while its transaction from offset "
                f"{entry.txn_first_offset} is open",
            )
        return None

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """ProducerStateError unless the leader may write this marker (see the module docstring)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        self._check_epoch(producer_id, entry, epoch)
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                E.TRANSACTION_COORDINATOR_FENCED,
                f"producer {producer_id}: coordinator epoch {coordinator_epoch} is older than "
                f"{entry.coordinator_epoch}, this partition's last marker's",
            )

    @staticmethod
    def _check_epoch(producer_id: int, entry: ProducerEntry, epoch: int) -> None:
        if epoch < entry.epoch:
            raise ProducerStateError(
                E.INVALID_PRODUCER_EPOCH, f"producer {producer_id}: epoch {epoch} is older than {entry.epoch}"
            )

    def apply(self, header: BatchHeader, marker: Marker | None = None) -> CompletedTxn | None:
        """A batch written to the log (offsets assigned), ``marker`` with a control batch's;
        the transaction it ends, if it is a marker. Nothing for a batch without a producer id."""
        if not header.has_producer_id:
            return None
        entry = self.producers.pop(header.producer_id, None)
        if entry is None:
            entry = ProducerEntry(header.producer_epoch)
            self._make_room()
        self.producers[header.producer_id] = entry
        if header.is_control:
            entry.update_epoch(header.producer_epoch)
            entry.last_timestamp = header.max_timestamp
            if marker is None:  # a control record of another kind: no transaction ends
                return None
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.txn_first_offset = NO_TXN
            self.verifying.pop(header.producer_id, None)
            return self.transactions.end(header.producer_id, header.base_offset, not marker.committed)
        batch = BatchMetadata(
            header.base_sequence,
            header.last_sequence,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
        )
        entry.add(header.producer_epoch, batch)
        if header.is_transactional and entry.txn_first_offset == NO_TXN:
            entry.txn_first_offset = header.base_offset
            self.transactions.begin(header.producer_id, header.base_offset)
        return None

    def _make_room(self) -> None:
        if len(self.producers) < PRODUCERS_MAX:
            return
        for producer_id, entry in self.producers.items():
            if entry.txn_first_offset == NO_TXN:
                del self.producers[producer_id]
                return

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old and that have no open
        transaction; how many."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if now_ms - entry.last_timestamp >= expiration_ms and entry.txn_first_offset == NO_TXN
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)
