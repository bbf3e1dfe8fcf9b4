"""Transactions in the metadata image: the transitions a transactional id may make, and
which broker coordinates it.

A transactional id's state is one ``TransactionRecord``, restated whole by each
transition (Kafka's ``TransactionMetadata``). The controller (``raftka.metadata.txn_ops``)
refuses a transition this table does not allow and ``MetadataDelta`` refuses to replay
one, so no writer, however stale, can take a transaction through a state Kafka's
coordinator could not: two transactions of one id are never open at once, a prepared
transaction only completes the way it was prepared, and a producer epoch never goes
back for the same producer id.

A transactional id is placed as a group is (``raftka.metadata.group_placement``):
rendezvous hashing over the unfenced brokers, so every node computes the same
coordinator from its image and a broker that comes or goes moves only its own share.
"""

from __future__ import annotations

from raftka.metadata.group_placement import coordinator_for
from raftka.metadata.image import MetadataImage
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2, metadata_pb2

State = metadata_pb2.TransactionState
TransactionRecord = metadata_pb2.TransactionRecord
E = controller_pb2.ErrorCode
TRANSACTIONAL_ID_MAX_CHARS = 249  # as a topic name: Kafka bounds neither, a record must be bounded
PRODUCER_EPOCH_MAX = 32_767 - 1  # Kafka's: an epoch this high is exhausted, the id is replaced
NO_PRODUCER = -1

# new state -> the states it may follow (None: no record yet)
_ALLOWED_FROM: dict[int, frozenset[int | None]] = {
    State.TXN_EMPTY: frozenset({None, State.TXN_EMPTY, State.TXN_COMPLETE_COMMIT, State.TXN_COMPLETE_ABORT}),
    State.TXN_ONGOING: frozenset(
        {State.TXN_EMPTY, State.TXN_ONGOING, State.TXN_COMPLETE_COMMIT, State.TXN_COMPLETE_ABORT}
    ),
    # a prepared state restated: a new coordinator takes it over under a higher coordinator epoch
    State.TXN_PREPARE_COMMIT: frozenset({State.TXN_ONGOING, State.TXN_PREPARE_COMMIT}),
    State.TXN_PREPARE_ABORT: frozenset({State.TXN_ONGOING, State.TXN_PREPARE_ABORT}),
    State.TXN_COMPLETE_COMMIT: frozenset({State.TXN_PREPARE_COMMIT}),
    State.TXN_COMPLETE_ABORT: frozenset({State.TXN_PREPARE_ABORT}),
}
OPEN = frozenset({State.TXN_ONGOING, State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT})
KAFKA_STATE_NAMES = {
    State.TXN_EMPTY: "Empty",
    State.TXN_ONGOING: "Ongoing",
    State.TXN_PREPARE_COMMIT: "PrepareCommit",
    State.TXN_PREPARE_ABORT: "PrepareAbort",
    State.TXN_COMPLETE_COMMIT: "CompleteCommit",
    State.TXN_COMPLETE_ABORT: "CompleteAbort",
    State.TXN_DEAD: "Dead",
}


def transition_problem(previous: TransactionRecord | None, new: TransactionRecord) -> str | None:
    """Why ``new`` may not follow ``previous``, or None if it may.

    Besides the state table: a new epoch (InitProducerId: to EMPTY) is above the last one
    of the same producer id, or comes with a new id; the fence of an ongoing transaction (to
    PREPARE_ABORT) may bump the epoch; every other transition keeps the id and the epoch.
    """
    before = None if previous is None else previous.state
    if before not in _ALLOWED_FROM.get(new.state, frozenset()):
        was = "nothing" if before is None else State.Name(before)
        return f"state: {State.Name(new.state)} cannot follow {was}"
    if previous is None:
        return None
    same_id = new.producer_id == previous.producer_id
    if new.state == State.TXN_EMPTY:
        if same_id and new.producer_epoch <= previous.producer_epoch:
            return f"producer_epoch: {new.producer_epoch} is not above the recorded {previous.producer_epoch}"
        return None
    if not same_id:
        return f"producer_id: {new.producer_id} is not the recorded {previous.producer_id}"
    if (
        new.state == State.TXN_PREPARE_ABORT
        and previous.state == State.TXN_ONGOING
        and new.producer_epoch > previous.producer_epoch
    ):
        return None  # fenced: an InitProducerId or the timeout aborts with a new epoch
    if new.producer_epoch != previous.producer_epoch:
        return f"producer_epoch: {new.producer_epoch} is not the recorded {previous.producer_epoch}"
    return None


def membership_problem(previous: TransactionRecord | None, new: TransactionRecord) -> str | None:
    """Why ``new`` would drop a partition or group of the transaction ``previous`` holds
    open, or None if it drops none.

    Within one transaction the partitions and groups only grow (Kafka's
    ``prepareAddPartitions`` takes the union), and once it is prepared they stay as they
    were. A coordinator whose view is stale (a request it held through a pause, answered
    from an image that had not yet seen the transaction grow) would otherwise restate a
    smaller transaction, and a partition it drops never gets its marker: that partition's
    last stable offset stays below the transaction's first batch for ever.

    The controller's check only, not the replay's: a log written before it may hold such
    a transition, and must still replay."""
    if previous is None or previous.state not in OPEN or new.state not in _ALLOWED_FROM:
        return None
    before, after = partitions(previous), partitions(new)
    groups_before, groups_after = set(previous.groups), set(new.groups)
    if new.state == State.TXN_ONGOING:
        dropped = sorted(f"{t}-{p}" for t, p in before - after) + sorted(groups_before - groups_after)
        if dropped:
            return f"topics, groups: {', '.join(dropped[:10])} of the ongoing transaction would be dropped"
        return None
    if (before, groups_before) != (after, groups_after):
        return (
            f"topics, groups: a {State.Name(new.state)} must name the partitions and groups of the "
            f"{State.Name(previous.state)} transaction as they are"
        )
    return None


def partitions(record: TransactionRecord) -> set[tuple[str, int]]:
    return {(t.name, p) for t in record.topics for p in t.partitions}


def with_partitions(record: TransactionRecord, added: set[tuple[str, int]]) -> None:
    """Sets ``record.topics`` to its partitions and ``added``, by topic and partition."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in partitions(record) | added:
        by_topic.setdefault(topic, set()).add(partition)
    del record.topics[:]
    for topic in sorted(by_topic):
        record.topics.add(name=topic, partitions=sorted(by_topic[topic]))


def partition_exists(image: MetadataImage, partition: tuple[str, int]) -> bool:
    topic = image.topic(partition[0])
    return topic is not None and partition[1] in topic.partitions


def transaction_coordinator(image: MetadataImage, transactional_id: str) -> int | None:
    """The id's coordinator in ``image``; None while no broker is unfenced."""
    return coordinator_for(transactional_id, (b.broker_id for b in image.unfenced_brokers()))


def check_coordinator(image: MetadataImage, transactional_id: str, sender: int) -> None:
    """ValidationError (NOT_COORDINATOR) unless ``sender`` coordinates the id in ``image``."""
    coordinator = transaction_coordinator(image, transactional_id)
    if coordinator != sender:
        where = "no broker does" if coordinator is None else f"broker {coordinator} does"
        raise ValidationError(
            E.NOT_COORDINATOR,
            f"broker {sender} does not coordinate transactional id {transactional_id!r}: {where}",
        )


def transactional_id_problem(transactional_id: str) -> str | None:
    if not transactional_id:
        return "transactional_id: must not be empty"
    if len(transactional_id) > TRANSACTIONAL_ID_MAX_CHARS:
        return (
            f"transactional_id: {len(transactional_id)} characters long, "
            f"the maximum is {TRANSACTIONAL_ID_MAX_CHARS}"
        )
    return None
