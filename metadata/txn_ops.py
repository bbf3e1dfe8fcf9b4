"""Transactions in the quorum: what a transactional id's coordinator (a broker) writes.

Why the quorum and not an internal topic (Kafka's ``__transaction_state``): raftka
already keeps committed offsets here, so a commit's offsets and its completion are one
atomic batch, and a transaction changes state three or four times (docs/transactions.md
has the costs). The coordinator holds nothing the quorum does not: a new coordinator
reads every id's state from its image and finishes what the old one left prepared.

As with groups (``raftka.metadata.group_ops``) the coordinator's view may be stale, so the
controller fences on its own image: a transition is taken only from the id's current
coordinator (``raftka.metadata.transactions``) at its current registration, and only if
the state machine allows it from the recorded state. The controller stamps who wrote
it, when, and the coordinator epoch the markers carry: one more whenever another
coordinator (or another incarnation of it) writes the id, so a partition can refuse a
zombie coordinator's late markers.
"""

from __future__ import annotations

from raftka.metadata import offset_ops, transactions
from raftka.metadata.broker_ops import registered
from raftka.metadata.group_ops import check_generation
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, refuse, refuse_with
from raftka.metadata.transactions import State
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2, metadata_pb2


def write(image: MetadataImage, request: controller_pb2.WriteTransactionRequest, now_wall_ms: int) -> Plan:
    """One transition of one id; completing a commit also writes its pending offsets."""
    response = controller_pb2.WriteTransactionResponse()
    new = request.transaction
    problem = transactions.transactional_id_problem(new.transactional_id)
    if problem is not None:
        return refuse(response, ErrorCode.INVALID_REQUEST, problem)
    previous = image.transactions.get(new.transactional_id)
    if previous is not None:
        response.transaction.CopyFrom(previous)
    try:
        registered(image, request.broker_id, request.broker_epoch)
        transactions.check_coordinator(image, new.transactional_id, request.broker_id)
    except ValidationError as e:
        return refuse_with(response, e)
    if new.timeout_ms <= 0:
        return refuse(
            response, ErrorCode.INVALID_TRANSACTION_TIMEOUT, f"timeout_ms: {new.timeout_ms} is not positive"
        )
    problem = transactions.transition_problem(previous, new) or transactions.membership_problem(previous, new)
    if problem is not None:
        return refuse(
            response, ErrorCode.INVALID_TXN_STATE, f"transactional id {new.transactional_id!r}: {problem}"
        )
    if new.state == State.TXN_ONGOING:
        unknown = sorted(
            f"{topic}-{partition}"
            for topic, partition in transactions.partitions(new)
            if not transactions.partition_exists(image, (topic, partition))
        )
        if unknown:
            return refuse(
                response, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partitions {', '.join(unknown[:10])}"
            )
    record = _stamped(previous, new, request, now_wall_ms)
    response.transaction.CopyFrom(record)
    records = _pending_offsets(image, record, now_wall_ms) if new.state == State.TXN_COMPLETE_COMMIT else []
    return Plan(response, [*records, MetadataRecord(transaction=record)])


def _stamped(
    previous: metadata_pb2.TransactionRecord | None,
    new: metadata_pb2.TransactionRecord,
    request: controller_pb2.WriteTransactionRequest,
    now_wall_ms: int,
) -> metadata_pb2.TransactionRecord:
    record = metadata_pb2.TransactionRecord()
    record.CopyFrom(new)
    record.coordinator = request.broker_id
    record.coordinator_broker_epoch = request.broker_epoch
    record.last_update_time_ms = now_wall_ms
    if previous is None:
        record.coordinator_epoch = 0
    else:
        same_writer = (previous.coordinator, previous.coordinator_broker_epoch) == (
            request.broker_id,
            request.broker_epoch,
        )
        record.coordinator_epoch = previous.coordinator_epoch + (0 if same_writer else 1)
    if new.state not in transactions.OPEN:
        record.start_time_ms = -1
    elif previous is not None and previous.state in transactions.OPEN:
        record.start_time_ms = previous.start_time_ms
    else:
        record.start_time_ms = now_wall_ms
    return record


def _pending_offsets(
    image: MetadataImage, record: metadata_pb2.TransactionRecord, now_wall_ms: int
) -> list[MetadataRecord]:
    """The committed transaction's offsets as ordinary commits; those of topics deleted
    since were removed with them."""
    pending = image.txn_offsets.get(record.transactional_id, {})
    return [
        MetadataRecord(
            offset_commit=metadata_pb2.OffsetCommitRecord(
                group=group,
                topic_id=topic_id,
                partition=partition,
                offset=c.offset,
                metadata=c.metadata,
                commit_timestamp_ms=now_wall_ms,
            )
        )
        for (group, topic_id, partition), c in sorted(pending.items())
    ]


def expire(image: MetadataImage, now_wall_ms: int, expiration_ms: int, records_max: int) -> Plan:
    """Forget the ids with no open transaction whose last change is ``expiration_ms`` old
    (Kafka's transactional.id.expiration.ms), so ids used once do not grow the image for
    ever; at most ``records_max`` per call, by name. The answer is for no one."""
    cutoff_ms = now_wall_ms - expiration_ms
    idle = sorted(
        tid
        for tid, txn in image.transactions.items()
        if txn.state not in transactions.OPEN and txn.last_update_time_ms <= cutoff_ms
    )
    records = [
        MetadataRecord(remove_transaction=metadata_pb2.RemoveTransactionRecord(transactional_id=tid))
        for tid in idle[:records_max]
    ]
    return Plan(controller_pb2.WriteTransactionResponse(), records)


def commit_offsets(
    image: MetadataImage, request: controller_pb2.TxnOffsetCommitRequest, now_wall_ms: int
) -> Plan:
    """Kafka's TxnOffsetCommit, forwarded by the group's coordinator: checked as an
    OffsetCommit from that coordinator is (``offset_ops.commit``), then held pending in
    the producer's ongoing transaction, which must have added the group."""
    response = controller_pb2.OffsetCommitResponse()
    commit = request.offsets
    if not commit.HasField("coordinator_id"):
        return refuse(
            response,
            ErrorCode.INVALID_REQUEST,
            "offsets.coordinator_id: the group's coordinator must forward it",
        )
    txn = image.transactions.get(request.transactional_id)
    try:
        check_generation(image, commit)
        _check_producer(txn, request)
    except ValidationError as e:
        return refuse_with(response, e)
    assert txn is not None
    if commit.group not in txn.groups:
        return refuse(
            response,
            ErrorCode.INVALID_TXN_STATE,
            f"group {commit.group!r} is not in the transaction of {request.transactional_id!r}: AddOffsetsToTxn first",
        )
    plan = offset_ops.commit(image, commit, now_wall_ms)
    records = [
        MetadataRecord(
            txn_offset_commit=metadata_pb2.TxnOffsetCommitRecord(
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                group=r.offset_commit.group,
                topic_id=r.offset_commit.topic_id,
                partition=r.offset_commit.partition,
                offset=r.offset_commit.offset,
                metadata=r.offset_commit.metadata,
                commit_timestamp_ms=now_wall_ms,
            )
        )
        for r in plan.records
    ]
    return Plan(plan.response, records)


def _check_producer(
    txn: metadata_pb2.TransactionRecord | None, request: controller_pb2.TxnOffsetCommitRequest
) -> None:
    if txn is None or txn.producer_id != request.producer_id:
        raise ValidationError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"producer_id: {request.producer_id} is not transactional id {request.transactional_id!r}'s",
        )
    if txn.producer_epoch != request.producer_epoch:
        raise ValidationError(
            ErrorCode.PRODUCER_FENCED,
            f"producer_epoch: {request.producer_epoch} is not the current {txn.producer_epoch}",
        )
    if txn.state != State.TXN_ONGOING:
        raise ValidationError(
            ErrorCode.INVALID_TXN_STATE,
            f"transactional id {request.transactional_id!r} is {transactions.KAFKA_STATE_NAMES[txn.state]}, not Ongoing",
        )
