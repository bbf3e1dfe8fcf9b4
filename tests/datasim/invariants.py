"""What must hold while the faults stay within what RF 3 / min ISR 2 promise
(the budget: ``tests.datasim`` module docstring), checked after every event.

Each holds for every partition of the topic on its own (``PartitionChecks``):

- An acknowledged record is never lost: the partition's leader (the broker the latest
  image names, once it serves at that image's leader epoch) holds every acknowledged
  offset, with the value acknowledged there.
- A record a consumer read never vanishes: the same, for every record read (a consumer
  only reads below the high watermark, so what it read is committed).
- Replicas agree below the high watermark: any two serving replicas, in the ISR or not
  (a restart leaves one out), hold the same records below the smaller of their high
  watermarks.
- No offset is acknowledged (or read) with two different values.
- The idempotent producer never duplicates: the leader's log holds each of its values
  (``IDEMPOTENT_PREFIX``) once at most, however often a batch was sent again.

On a compacted topic (the seed's ``cleanup.policy`` has ``compact``; every record has a
key, ``key_of``) the cleaner may remove a record, so "holds" is weakened to what
compaction promises: a replica holds a committed record, or a later record of its key (it
was superseded), or it is a transactional record whose commit nobody heard (its
transaction may have been aborted: the cleaner removes those). Two replicas agree at
every offset both hold below the high watermark, and a record one holds the other lacks
only if either holds a later record of that key (a replica whose power went keeps its
fsynced cleaned segments but may have lost, until it fetches it again, the later record
its cleaner kept instead) or, again, it is an unconfirmed transactional one.
Tombstones are never removed within a run (``delete.retention.ms`` is a day). A cleaner
pass changes a log beneath its mirror, so each pass starts the broker's mirrors over.

Each replica's log is mirrored incrementally (``LogMirror``: only records appended since
the last event are read; a truncation starts the mirror over), and each check resumes
where it last stopped while the mirrors it used are unchanged, so checking after every
event costs what changed. After healing every replica must hold every committed record,
and every transaction must end (``unfinished_transaction``).
"""

from __future__ import annotations

from raftka.broker.replica.partition import Partition
from raftka.metadata.image import MetadataImage
from raftka.metadata.transactions import KAFKA_STATE_NAMES, OPEN
from raftka.records.batch import iter_batches
from raftka.records.codec import Record, read_records
from tests.datasim.broker import TOPIC, SimBroker

IDEMPOTENT_PREFIX = b"i"  # the idempotent producer's values
TRANSACTIONAL_PREFIX = b"x"  # the transactional producer's values
KEYS = 5  # the records' keys, so that a compacted topic's keys are overwritten often
Entry = tuple[bytes | None, bytes | None]  # a record's key and value


def key_of(n: int) -> bytes:
    """The key of a producer's ``n``th record."""
    return b"k%d" % (n % KEYS)


class InvariantViolation(AssertionError):
    pass


class LogMirror:
    """One replica's records (offset -> value), kept up to date by reading only what was
    appended; ``version`` changes whenever it starts over (a truncation, a new process)."""

    _versions = 0

    def __init__(self, partition: Partition, cleanings: int) -> None:
        LogMirror._versions += 1
        self.version = LogMirror._versions
        self.partition = partition
        self.cleanings = cleanings  # the broker's cleaner passes when the mirror started
        self.generation = partition.log._generation  # private: moves on every truncation
        self.start = partition.log.log_start_offset
        self.values: dict[int, Entry] = {}
        self.latest: dict[bytes | None, int] = {}  # key -> its last offset held
        self.end = self.start
        self.idempotent: dict[bytes, int] = {}  # the idempotent producer's values -> offset

    def current(self, partition: Partition, cleanings: int) -> bool:
        log = partition.log
        return (
            partition is self.partition
            and cleanings == self.cleanings
            and log._generation == self.generation
            and log.log_start_offset == self.start
            and log.log_end_offset >= self.end
        )

    def catch_up(self, broker_id: int) -> None:
        log = self.partition.log
        while self.end < log.log_end_offset:
            records, end = records_and_end(log.read(self.end, 1 << 30).records, self.end)
            if end == self.end:
                break
            for record in records:
                if record.offset >= self.end:
                    self.values[record.offset] = (record.key, record.value)
                    self.latest[record.key] = record.offset
                    self._no_duplicate(broker_id, record.offset, record.value)
            self.end = end

    def superseded(self, offset: int, key: bytes | None) -> bool:
        """The replica holds a record of ``key`` after ``offset``."""
        return self.latest.get(key, -1) > offset

    def _no_duplicate(self, broker_id: int, offset: int, value: bytes | None) -> None:
        if value is not None and value.startswith(IDEMPOTENT_PREFIX) and self.idempotent.setdefault(value, offset) != offset:
            raise InvariantViolation(
                f"b{broker_id} holds the idempotent producer's {value!r} twice: "
                f"at {self.idempotent[value]} and {offset}"
            )


def records_and_end(buf: bytes, position: int) -> tuple[list[Record], int]:
    """The data records of the batches in ``buf``, and the offset after its last batch (a
    read may end with a control batch, a marker, which has no data record); ``position``
    if ``buf`` holds none."""
    end = position
    for _, header in iter_batches(memoryview(buf)):
        end = max(end, header.base_offset + header.last_offset_delta + 1)
    return list(read_records(buf)), end


class PartitionChecks:
    """The checks of one partition: what the clients saw there, and its replicas' mirrors."""

    def __init__(self, partition: int, compacted: bool, transactions_committed: set[bytes]) -> None:
        self.partition = partition
        self.compacted = compacted
        self._transactions_committed = transactions_committed  # shared: values whose commit was answered
        self.committed: dict[int, Entry] = {}  # acknowledged or read: offset -> value
        self._mirrors: dict[int, LogMirror] = {}
        self._leader_checked: tuple[int, int] = (0, 0)  # (mirror version, committed offsets checked)
        self._committed_order: list[int] = []  # committed offsets, in the order they came
        self._agreed: dict[tuple[int, int], int] = {}  # (mirror versions) -> agreed below
        self._checked: tuple = ()  # type: ignore[type-arg]  # what the last check saw (``_seen``)

    def commit(self, offset: int, value: Entry, how: str) -> None:
        before = self.committed.setdefault(offset, value)
        if before != value:
            raise InvariantViolation(
                f"partition {self.partition} offset {offset} {how} as {value!r}, but {before!r} was "
                f"acknowledged or read there before: the record {before!r} was lost"
            )
        if len(self._committed_order) < len(self.committed):
            self._committed_order.append(offset)

    def mirror(self, broker: SimBroker) -> LogMirror | None:
        partition = broker.partition(self.partition)
        if partition is None:
            self._mirrors.pop(broker.id, None)
            return None
        cleanings = broker.process.cleanings  # type: ignore[union-attr]  # a replica is served: it runs
        mirror = self._mirrors.get(broker.id)
        if mirror is None or not mirror.current(partition, cleanings):
            mirror = self._mirrors[broker.id] = LogMirror(partition, cleanings)
        mirror.catch_up(broker.id)
        return mirror

    def check(self, brokers: dict[int, SimBroker], image: MetadataImage) -> None:
        seen = self._seen(brokers, image)
        if seen == self._checked:
            return  # nothing the checks read has moved since they last passed
        mirrors = {b.id: m for b in brokers.values() if (m := self.mirror(b)) is not None}
        leader = serving_leader(brokers, image, self.partition)
        if leader is not None:
            self._leader_holds_committed(leader.local_id, mirrors[leader.local_id])
        agreeing = [m for _, m in sorted(mirrors.items())]
        for i, a in enumerate(agreeing):
            for b in agreeing[i + 1 :]:
                self._agree(a, b)
        self._checked = seen

    def _seen(self, brokers: dict[int, SimBroker], image: MetadataImage) -> tuple:  # type: ignore[type-arg]
        """Everything ``check`` reads: the replicas (which objects, their log's generation,
        start and end, high watermark, role and leader epoch), the image's leader, and how
        many offsets are committed."""
        topic = image.topic(TOPIC)
        state = None if topic is None else topic.partitions.get(self.partition)
        replicas = []
        for broker in brokers.values():
            p = broker.partition(self.partition)
            replicas.append(
                None
                if p is None
                else (
                    p,  # the object itself, so that no new replica can be taken for it
                    p.log,
                    p.log._generation,
                    p.log.log_start_offset,
                    p.log.log_end_offset,
                    p.high_watermark,
                    p.role,
                    p.leader_epoch,
                    broker.process.cleanings,  # type: ignore[union-attr]
                )
            )
        leader = None if state is None else (state.leader, state.leader_epoch)
        return (leader, len(self._committed_order), *replicas)

    def _leader_holds_committed(self, broker_id: int, mirror: LogMirror) -> None:
        version, checked = self._leader_checked
        if version != mirror.version:
            checked = 0
        for offset in self._committed_order[checked:]:
            self._holds(broker_id, mirror, offset)
        self._leader_checked = (mirror.version, len(self._committed_order))

    def _holds(self, broker_id: int, mirror: LogMirror, offset: int) -> None:
        value = self.committed[offset]
        held = mirror.values.get(offset)
        if held != value and not (held is None and self._compacted_away(mirror, offset, value)):
            raise InvariantViolation(
                f"b{broker_id} holds {held!r} (its key's last offset there "
                f"{mirror.latest.get(value[0])}) at partition {self.partition} offset {offset}, "
                f"where {value!r} was acknowledged or read"
            )

    def _compacted_away(
        self, mirror: LogMirror, offset: int, entry: Entry, holder: LogMirror | None = None
    ) -> bool:
        """A compacted replica may lack ``entry`` (at ``offset``): a later record of its key
        superseded it, or it is a transactional record whose commit was never confirmed.
        The later record may be only on the replica ``holder`` that holds ``entry``: a
        replica whose power went keeps its cleaned segments (fsynced) but loses its
        unsynced tail, which held the record that superseded it, until it fetches it again."""
        key, value = entry
        if self.compacted and holder is not None and holder.superseded(offset, key):
            return True
        unconfirmed = (
            value is not None
            and value.startswith(TRANSACTIONAL_PREFIX)
            and value not in self._transactions_committed
        )
        return self.compacted and (mirror.superseded(offset, key) or unconfirmed)

    def _agree(self, a: LogMirror, b: LogMirror) -> None:
        key = (a.version, b.version)
        below = min(a.partition.high_watermark, b.partition.high_watermark, a.end, b.end)
        for offset in range(max(self._agreed.get(key, 0), a.start, b.start), below):
            held_a, held_b = a.values.get(offset), b.values.get(offset)
            if held_a is None and held_b is not None and self._compacted_away(a, offset, held_b, b):
                continue
            if held_b is None and held_a is not None and self._compacted_away(b, offset, held_a, a):
                continue
            if held_a != held_b:
                raise InvariantViolation(
                    f"b{a.partition.local_id} (hw {a.partition.high_watermark}) and b{b.partition.local_id} "
                    f"(hw {b.partition.high_watermark}) differ at partition {self.partition} offset {offset}: "
                    f"{a.values.get(offset)!r} vs {b.values.get(offset)!r}"
                )
        self._agreed[key] = max(self._agreed.get(key, 0), below)

    def every_replica_holds_committed(self, brokers: dict[int, SimBroker]) -> None:
        for broker in brokers.values():
            mirror = self.mirror(broker)
            if mirror is None:
                raise InvariantViolation(
                    f"b{broker.id} serves no replica of partition {self.partition} after healing"
                )
            for offset in self.committed:
                self._holds(broker.id, mirror, offset)


class Invariants:
    def __init__(self, partitions: int, compacted: bool = False) -> None:
        self.transactions_committed: set[bytes] = set()
        self.partitions = [PartitionChecks(p, compacted, self.transactions_committed) for p in range(partitions)]
        self.acked = 0
        self.read = 0

    # what the clients saw ---------------------------------------------------------------

    def acknowledged(self, partition: int, offset: int, value: Entry) -> None:
        self.acked += 1
        self.partitions[partition].commit(offset, value, "acknowledged")

    def consumed(self, partition: int, offset: int, value: Entry) -> None:
        self.read += 1
        self.partitions[partition].commit(offset, value, "read by a consumer")

    def transaction_committed(self, entries: list[Entry]) -> None:
        """The transactional producer heard its commit answered: its records must stay."""
        self.transactions_committed.update(v for _, v in entries if v is not None)

    # the cluster ------------------------------------------------------------------------

    def check(self, brokers: dict[int, SimBroker], image: MetadataImage) -> None:
        for checks in self.partitions:
            checks.check(brokers, image)

    def every_replica_holds_committed(self, brokers: dict[int, SimBroker]) -> None:
        for checks in self.partitions:
            checks.every_replica_holds_committed(brokers)


def serving_leader(
    brokers: dict[int, SimBroker], image: MetadataImage, partition_id: int
) -> Partition | None:
    """The partition's leader the image names, if it has taken that leadership (at that leader epoch)."""
    topic = image.topic(TOPIC)
    state = None if topic is None else topic.partitions.get(partition_id)
    if state is None or state.leader < 0:
        return None
    partition = brokers[state.leader].partition(partition_id)
    if partition is None or not partition.is_leader or partition.leader_epoch != state.leader_epoch:
        return None
    return partition


def unfinished_transaction(
    brokers: dict[int, SimBroker], image: MetadataImage, partitions: int
) -> str | None:
    """What is left of a transaction, once no client begins one: a transactional id still
    open in the image (a prepared one must be completed whoever heard the answer to its
    PREPARE write; an ongoing one, aborted by the timeout), or a partition whose leader
    still holds an open transaction (its last stable offset below its high watermark).
    None once there is nothing."""
    for tid, txn in sorted(image.transactions.items()):
        if txn.state in OPEN:
            return (
                f"transactional id {tid!r} is still {KAFKA_STATE_NAMES[txn.state]} (producer "
                f"{txn.producer_id} epoch {txn.producer_epoch}, coordinator b{txn.coordinator})"
            )
    for partition_id in range(partitions):
        leader = serving_leader(brokers, image, partition_id)
        if leader is None:
            return f"partition {partition_id} has no serving leader"
        if leader.last_stable_offset < leader.high_watermark:
            return (
                f"partition {partition_id}: b{leader.local_id}'s last stable offset "
                f"{leader.last_stable_offset} is below its high watermark {leader.high_watermark}"
            )
    return None
