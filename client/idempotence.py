"""The idempotent producer's bookkeeping (Kafka's TransactionManager, without
transactions): its producer id and epoch, and per partition the sequence numbers of
its batches.

A batch gets the partition's next sequence when it is first sent and keeps it through
every retry, so a broker that already wrote it answers with the original offsets (the
broker keeps each producer's last five batches; a partition has at most five batches
unacknowledged). Order holds because a retry goes out only as the partition's first
unacknowledged batch, alone, as Kafka's producer does.

When the producer cannot go on with its numbering it bumps its epoch, by itself (KIP-360)
and for all partitions, and starts the sequences of the partitions concerned at 0:

- a batch refused for good (a validation error, an older epoch) or refused as out of
  order while it is the next the broker should take (a real gap): the partition's
  batches after it cannot have been written, so once every unacknowledged batch before
  it has settled and none is in a request, those after it are numbered anew;
- a batch given up unacknowledged (its delivery timeout) after it was sent: nobody knows
  whether it landed. Once the partition has nothing unacknowledged, it landed if a later
  batch was acknowledged after it; otherwise the epoch is bumped;
- other partitions finish the batches they have out under the old epoch, then start at
  0 under the new one (a new epoch must start at 0 at the broker).

An out-of-order answer for a batch that is not the next one only means an earlier batch
did not land (yet): it waits its turn and is retried. Epochs are 16-bit; past 32767 the
producer asks for a new id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from raftka.client.cluster_metadata import RETRIABLE
from raftka.client.types import TopicPartition
from raftka.records.batch import SEQUENCE_MODULUS, next_sequence
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.client.producer")
NO_PRODUCER = (-1, -1)
EPOCH_MAX = 32_767  # the batch header's int16


class Sequenced(Protocol):
    """What this module reads and sets on a producer's batch."""

    tp: TopicPartition
    records: int
    producer: tuple[int, int]  # (id, epoch) the batch is numbered under
    sequence: int  # its first record's; -1 until first sent
    sequence_reset: bool  # numbered anew after an epoch bump


def _last_sequence(batch: Sequenced) -> int:
    return next_sequence(batch.sequence, batch.records - 1)


def _later(a: int, b: int) -> bool:
    """Sequence ``a`` comes after ``b`` (they wrap, and are never half the space apart)."""
    return 0 < (a - b) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


@dataclass(slots=True)
class PartitionSequences:
    producer: tuple[int, int] = NO_PRODUCER  # the id and epoch its sequences count under
    next_sequence: int = 0
    last_acked: int = -1
    unacked: list[Sequenced] = field(default_factory=list)  # numbered, not settled, in sequence order
    unresolved: int | None = None  # the sequence after a batch given up unacknowledged
    renumber_after: list[Sequenced] | None = None  # waiting for an epoch bump: these settle first


class Idempotence:
    def __init__(self, bumps_epoch: bool = True) -> None:
        """``bumps_epoch`` False: a transactional producer's, whose epochs only its
        coordinator gives (after an abort); it never renumbers under an epoch of its own."""
        self.producer = NO_PRODUCER
        self._partitions: dict[TopicPartition, PartitionSequences] = {}
        self._bump_wanted = False
        self._bumps_epoch = bumps_epoch

    @property
    def has_producer_id(self) -> bool:
        return self.producer != NO_PRODUCER

    def set_producer(self, producer_id: int, epoch: int) -> None:
        self.producer = (producer_id, epoch)
        log.debug("producer id", producer_id=producer_id, epoch=epoch)

    def _partition(self, tp: TopicPartition) -> PartitionSequences:
        p = self._partitions.get(tp)
        if p is None:
            p = self._partitions[tp] = PartitionSequences()
        return p

    # sending ----------------------------------------------------------------------------

    def may_send(self, batch: Sequenced) -> bool:
        """Whether ``batch``, the first waiting for its partition, may go now (Kafka's
        ``shouldStopDrainBatchesForPartition``)."""
        if not self.has_producer_id:
            return False
        p = self._partition(batch.tp)
        if p.renumber_after is not None:
            return batch.sequence >= 0 and p.unacked[0] is batch and batch not in p.renumber_after
        if batch.sequence < 0:
            return p.unresolved is None and not (p.unacked and p.producer != self.producer)
        return p.unacked[0] is batch

    def number(self, batch: Sequenced) -> None:
        """Give a batch sent for the first time the partition's next sequence."""
        p = self._partition(batch.tp)
        if p.producer != self.producer:  # may_send made sure nothing of the old epoch is out
            p.producer, p.next_sequence, p.last_acked = self.producer, 0, -1
        batch.producer, batch.sequence = self.producer, p.next_sequence
        p.next_sequence = next_sequence(p.next_sequence, batch.records)
        p.unacked.append(batch)

    def comes_before(self, a: Sequenced, b: Sequenced) -> bool:
        """Both numbered for the same partition: ``a`` is to be sent before ``b``."""
        unacked = self._partition(a.tp).unacked
        return a in unacked and b in unacked and unacked.index(a) < unacked.index(b)

    # answers ----------------------------------------------------------------------------

    def acknowledged(self, batch: Sequenced) -> None:
        p = self._partition(batch.tp)
        if batch in p.unacked:
            p.unacked.remove(batch)
        last = _last_sequence(batch)
        if batch.producer == p.producer and (p.last_acked < 0 or _later(last, p.last_acked)):
            p.last_acked = last

    def retriable(self, batch: Sequenced, code: int | None) -> bool:
        """Whether a refused batch (``code``; None: no answer) is sent again (Kafka's ``canRetry``)."""
        if code is None or code in RETRIABLE:
            return True
        if code != E.OUT_OF_ORDER_SEQUENCE_NUMBER:
            return False
        p = self._partition(batch.tp)
        is_next = batch.sequence == next_sequence(p.last_acked, 1) and not batch.sequence_reset
        if p.unresolved is None and not is_next:
            return True  # an earlier batch has not landed yet: this one waits its turn
        if p.unresolved is None or batch.sequence == p.unresolved:
            log.warning(
                "out of order at the broker: bumping the epoch",
                partition=str(batch.tp),
                sequence=batch.sequence,
            )
            self._renumber(p, batch, including=True)
        return True

    def failed(self, batch: Sequenced) -> None:
        """A numbered batch refused for good: those after it cannot be written under this epoch."""
        p = self._partition(batch.tp)
        self._renumber(p, batch, including=False)
        if batch in p.unacked:
            p.unacked.remove(batch)

    def gave_up(self, batch: Sequenced) -> None:
        """A numbered batch failed unacknowledged (delivery timeout): it may have landed."""
        p = self._partition(batch.tp)
        if batch in p.unacked:
            p.unacked.remove(batch)
        after = next_sequence(_last_sequence(batch), 1)
        if p.unresolved is None or _later(after, p.unresolved):
            p.unresolved = after

    def _renumber(self, p: PartitionSequences, batch: Sequenced, *, including: bool) -> None:
        """Bump the epoch, and number this partition's batches from ``batch`` on (or after
        it) anew once those before it have settled."""
        at = p.unacked.index(batch) + (0 if including else 1) if batch in p.unacked else len(p.unacked)
        if (
            p.renumber_after is not None
        ):  # an earlier refusal is waiting: renumber from the earlier of the two
            at = min([at] + [p.unacked.index(b) for b in p.renumber_after if b in p.unacked])
        p.renumber_after = p.unacked[at:]
        self._bump_wanted = True

    # upkeep -----------------------------------------------------------------------------

    def maintain(self, in_requests: Callable[[TopicPartition], int]) -> None:
        """Before each round of sending: resolve given-up batches, bump the epoch if asked,
        and number anew the partitions whose turn it is (nothing of theirs in a request)."""
        for tp, p in self._partitions.items():
            if p.unresolved is None or p.unacked:
                continue
            if p.producer == self.producer and p.next_sequence != next_sequence(p.last_acked, 1):
                log.debug("a batch given up may not have landed: bumping the epoch", partition=str(tp))
                p.renumber_after = []
                self._bump_wanted = True
            p.unresolved = None  # a partition of an older epoch starts at 0 under the new one anyway
        if not self._bumps_epoch:
            self._bump_wanted = False
            for p in self._partitions.values():
                p.renumber_after = p.unresolved = None
            return
        if self._bump_wanted and self.has_producer_id:
            self._bump_wanted = False
            producer_id, epoch = self.producer
            if epoch >= EPOCH_MAX:
                self.producer = NO_PRODUCER  # the caller asks for a new id
            else:
                self.producer = (producer_id, epoch + 1)
                log.info("producer epoch bumped", producer_id=producer_id, epoch=epoch + 1)
        if not self.has_producer_id:
            return
        for tp, p in self._partitions.items():
            if p.renumber_after is None or in_requests(tp):
                continue
            if any(b not in p.renumber_after for b in p.unacked):
                continue  # batches before the refused one settle first, under the old epoch
            sequence = 0
            for batch in p.unacked:
                batch.producer, batch.sequence, batch.sequence_reset = self.producer, sequence, True
                sequence = next_sequence(sequence, batch.records)
            p.producer, p.next_sequence, p.last_acked = self.producer, sequence, -1
            p.renumber_after = p.unresolved = None
