"""What must hold while the faults stay within what RF 3 / min ISR 2 promises
(the budget: ``tests.datasim`` module docstring).

- An acknowledged record is never lost: the partition's leader (the broker the latest
  image names, once it serves at that image's leader epoch) holds every acknowledged
  offset, with the value acknowledged there.
- A record a consumer read never vanishes: the same, for every record read (a consumer
  only reads below the high watermark, so what it read is committed).
- Replicas agree below the high watermark: any two serving replicas that the latest image
  has in the ISR hold the same records below the smaller of their high watermarks (any
  of them may be elected). With ``strict_agreement``, any two serving replicas, the
  ones a restart left out of the ISR too.
- No offset is acknowledged (or read) with two different values.
- The idempotent producer never duplicates: the leader's log holds each of its values
  (``IDEMPOTENT_PREFIX``) once at most, however often a batch was sent again.

The first two are checked for the leader's log end after every event (cheap), and with
the records themselves every ``full_every`` events and at the end of the run, as is the
agreement of the replicas; after healing, every replica must hold every such record.
"""

from __future__ import annotations

from raftka.broker.replica.partition import Partition
from raftka.metadata.image import MetadataImage
from raftka.records.codec import read_records
from tests.datasim.broker import TOPIC, SimBroker

IDEMPOTENT_PREFIX = b"i"  # the idempotent producer's values


class InvariantViolation(AssertionError):
    pass


def records(partition: Partition, below: int | None = None) -> dict[int, bytes]:
    """offset -> value, from the log start to ``below`` (the log end if None)."""
    log = partition.log
    end = log.log_end_offset if below is None else min(below, log.log_end_offset)
    found: dict[int, bytes] = {}
    start = log.log_start_offset
    while start < end:
        batch = list(read_records(log.read(start, 1 << 30).records))
        if not batch:
            break
        for record in batch:
            if record.offset < end:
                found[record.offset] = record.value
        start = batch[-1].offset + 1
    return found


class Invariants:
    def __init__(self, full_every: int, strict_agreement: bool = False) -> None:
        self.full_every = full_every
        self.strict_agreement = strict_agreement
        self.committed: dict[int, bytes] = {}  # acknowledged or read: offset -> value
        self.acked = 0
        self.read = 0
        self.checks = 0

    # what the clients saw ---------------------------------------------------------------

    def acknowledged(self, offset: int, value: bytes) -> None:
        self.acked += 1
        self._commit(offset, value, "acknowledged")

    def consumed(self, offset: int, value: bytes) -> None:
        self.read += 1
        self._commit(offset, value, "read by the consumer")

    def _commit(self, offset: int, value: bytes, how: str) -> None:
        before = self.committed.setdefault(offset, value)
        if before != value:
            raise InvariantViolation(
                f"offset {offset} {how} as {value!r}, but {before!r} was acknowledged or read there before: "
                f"the record {before!r} was lost"
            )

    # the cluster ------------------------------------------------------------------------

    def check(self, brokers: dict[int, SimBroker], image: MetadataImage, step: int) -> None:
        leader = serving_leader(brokers, image)
        if leader is not None and self.committed:
            end = max(self.committed) + 1
            if leader.log.log_end_offset < end:
                raise InvariantViolation(
                    f"leader b{leader.local_id} at epoch {leader.leader_epoch} ends at "
                    f"{leader.log.log_end_offset}, but offset {end - 1} was acknowledged or read"
                )
        if step % self.full_every == 0:
            self.full_check(brokers, image)

    def full_check(self, brokers: dict[int, SimBroker], image: MetadataImage) -> None:
        self.checks += 1
        topic = image.topic(TOPIC)
        isr = () if topic is None else topic.partitions[0].isr
        partitions = [
            p
            for b in brokers.values()
            if (p := b.partition()) is not None and (self.strict_agreement or b.id in isr)
        ]
        held = {p.local_id: records(p) for p in partitions}
        leader = serving_leader(brokers, image)
        if leader is not None:
            self.holds_committed(leader.local_id, held.get(leader.local_id) or records(leader))
        for i, a in enumerate(partitions):
            for b in partitions[i + 1 :]:
                below = min(a.high_watermark, b.high_watermark)
                for offset in range(max(a.log.log_start_offset, b.log.log_start_offset), below):
                    if held[a.local_id].get(offset) != held[b.local_id].get(offset):
                        raise InvariantViolation(
                            f"b{a.local_id} (hw {a.high_watermark}) and b{b.local_id} (hw {b.high_watermark}) "
                            f"differ at offset {offset}: {held[a.local_id].get(offset)!r} vs "
                            f"{held[b.local_id].get(offset)!r}"
                        )

    def holds_committed(self, broker_id: int, held: dict[int, bytes]) -> None:
        """``held`` (a replica's records) has every committed record, and no idempotent duplicate."""
        first: dict[bytes, int] = {}
        for offset, value in sorted(held.items()):
            if value.startswith(IDEMPOTENT_PREFIX) and first.setdefault(value, offset) != offset:
                raise InvariantViolation(
                    f"b{broker_id} holds the idempotent producer's {value!r} twice: at {first[value]} and {offset}"
                )
        for offset, value in sorted(self.committed.items()):
            if held.get(offset) != value:
                raise InvariantViolation(
                    f"b{broker_id} holds {held.get(offset)!r} at offset {offset}, where {value!r} "
                    "was acknowledged or read"
                )


def serving_leader(brokers: dict[int, SimBroker], image: MetadataImage) -> Partition | None:
    """The leader the image names, if it has taken that leadership (at that leader epoch)."""
    topic = image.topic(TOPIC)
    state = None if topic is None else topic.partitions.get(0)
    if state is None or state.leader < 0:
        return None
    partition = brokers[state.leader].partition()
    if partition is None or not partition.is_leader or partition.leader_epoch != state.leader_epoch:
        return None
    return partition
