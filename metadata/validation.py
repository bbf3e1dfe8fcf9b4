"""Request validation with Kafka's rules: checked before any record is built.

The controller runs every check here before it turns a request into records, so bad
input is answered with a typed error code and a message naming the field and the value,
and nothing is appended to the log. Checks that need the image (does the topic exist?)
stay with the controller; these need only the request and a few numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from raftka.metadata.acls import ACLS_PER_REQUEST_MAX
from raftka.metadata.quotas import ENTITY_TYPES, QUOTA_ENTRIES_PER_REQUEST_MAX
from raftka.security import scram
from raftka.v1 import controller_pb2

ErrorCode = controller_pb2.ErrorCode
Pb = controller_pb2

TOPIC_NAME_MAX_CHARS = 249  # Kafka's limit: a partition directory name must fit in 255 bytes
GROUP_ID_MAX_CHARS = 249
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default

# Request bounds. Kafka bounds a request only by its size (socket.request.max.bytes, 100 MiB).
# raftka's controller plans every request on the Raft leader's one event loop, which must
# also answer the followers' fetches within raft.fetch_timeout_ms (600 ms), so every list a
# client sends is bounded too. Measured on a 100,000-partition image: planning costs 8 us
# (DeleteTopics) to 85 us (CreateTopics) per topic named and 3 to 8 us per partition named,
# so a list of a million entries (a 64 MiB message allows more) held the loop for seconds.
# A request over a bound is refused as a whole, before any other work, with
# INVALID_REQUEST naming the list and the bound.
#
# Topics named in one request: more than an operator names in one command, and at most
# ~85 ms of planning (1,000 new topics). The admin client splits longer reads.
TOPICS_PER_REQUEST_MAX = 1_000
# Partitions named in one OffsetFetch (a read, so no batch to fit in): a consumer names the
# partitions it is assigned; ~30 ms at the bound. The admin client splits longer reads.
OFFSET_FETCH_PARTITIONS_MAX = 10_000
# Listeners of one broker: Kafka brokers have a handful (PLAINTEXT, SSL, SASL_SSL, ...).
LISTENERS_MAX = 16
# Groups named in one request (DeleteGroups, a coordinator's batch of commits).
GROUPS_PER_REQUEST_MAX = 1_000
# Members of one group (Kafka's group.max.size is unbounded by default; a rebalance record
# holds every member and its assignment in one record, so it is bounded here) and the
# partitions their assignments name in total.
GROUP_MEMBERS_MAX = 1_000
GROUP_ASSIGNED_PARTITIONS_MAX = 100_000
PARTITIONS_PER_TRANSACTION_MAX = 10_000  # one TransactionRecord restates them all on each transition
# Partitions one broker heartbeat reports offline (its log failed there): the controller
# reads the whole list at every heartbeat (~2 s per broker), ~1 ms at the bound; a broker
# with more lists the first this many (``raftka.metadata.offline_replicas``).
OFFLINE_REPLICAS_MAX = 1_000
# Lists whose entries each become a record (partitions in AlterPartition, ElectLeaders,
# AlterPartitionReassignments and OffsetCommit; config entries in CreateTopics and AlterConfigs) are bounded, in total over
# the request, by raft.append_max_records (``records_max``, 4096 by default), so such a
# request is always one atomic batch (~35 ms to plan 4096 partitions).
# AlterPartitionData.new_isr is bounded by the image instead: it must be distinct replicas
# of the partition, so ``broker_ops`` refuses one longer than the partition's replicas
# before reading it, and the controller API's receive limit bounds the message; its
# new_isr_broker_epochs must be as long (``isr_members``), checked before it is read.

# Kafka's internal topics: Kafka refuses to create __cluster_metadata (its KRaft log) and
# keeps the other two for its coordinators. raftka has none of them as topics (offsets and
# its metadata log live in the quorum), so a topic under one of these names would only
# mislead Kafka's tools (and its first partition's folder would be named as the metadata log's).
INTERNAL_TOPIC_NAMES = frozenset({"__cluster_metadata", "__consumer_offsets", "__transaction_state"})

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_TOPIC_NAME_CHAR = re.compile(r"[a-zA-Z0-9._-]")


class ValidationError(Exception):
    """A request the controller refuses: ``code`` goes on the wire, ``message`` to the user."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def validate_topic_name(name: str) -> None:
    """1 to 249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..`` (Kafka's ``Topic.validate``)."""
    if not name:
        raise _invalid_topic("topic name must not be empty")
    if name in (".", ".."):
        raise _invalid_topic(f"topic name cannot be {name!r}")
    if len(name) > TOPIC_NAME_MAX_CHARS:
        raise _invalid_topic(
            f"topic name is {len(name)} characters long, the maximum is {TOPIC_NAME_MAX_CHARS}"
        )
    if not _TOPIC_NAME.fullmatch(name):
        bad = "".join(sorted({c for c in name if not _TOPIC_NAME_CHAR.fullmatch(c)}))
        raise _invalid_topic(
            f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-': {bad!r}"
        )


def validate_new_topic_name(name: str) -> None:
    """A name a client may create a topic under: valid, and not one of Kafka's internal topics."""
    validate_topic_name(name)
    if name in INTERNAL_TOPIC_NAMES:
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"topic name {name!r} is one of Kafka's internal topics; creating it is prohibited",
        )


def validate_topic_name_collision(name: str, existing: Iterable[str]) -> None:
    """Kafka refuses a topic whose name equals another's once '.' is read as '_'.

    Metric names replace '.' with '_', so ``a.b`` and ``a_b`` would share metrics. An
    identical name is not a collision here: that is ``TOPIC_ALREADY_EXISTS``, the caller's check.
    """
    key = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == key:
            raise _invalid_topic(f"topic {name!r} collides with existing topic {other!r} ('.' and '_' clash)")


def validate_partition_count(n: int, maximum: int) -> None:
    """A new topic's partition count: at least 1, at most the configured maximum."""
    if n < 1:
        raise ValidationError(
            ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {n}"
        )
    if n > maximum:
        raise ValidationError(
            ErrorCode.INVALID_PARTITIONS, f"number of partitions {n} is above the maximum of {maximum}"
        )


def validate_partition_increase(current: int, requested: int, maximum: int) -> None:
    """CreatePartitions: the new total must be larger than the current count (only increases)."""
    if requested == current:
        raise ValidationError(ErrorCode.INVALID_PARTITIONS, f"topic already has {current} partitions")
    if requested < current:
        raise ValidationError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic currently has {current} partitions, {requested} would not be an increase",
        )
    validate_partition_count(requested, maximum)


def validate_replication_factor(rf: int, live_brokers: int) -> None:
    """At least 1, and no more than the unfenced brokers (``live_brokers`` is their count)."""
    if rf < 1:
        raise ValidationError(
            ErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor must be at least 1, got {rf}"
        )
    if rf > live_brokers:
        raise ValidationError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {rf} is larger than the {live_brokers} available (unfenced) brokers",
        )


def validate_group_id(group: str) -> None:
    if not group:
        raise ValidationError(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
    if len(group) > GROUP_ID_MAX_CHARS:
        raise ValidationError(
            ErrorCode.INVALID_GROUP_ID,
            f"group id is {len(group)} characters long, the maximum is {GROUP_ID_MAX_CHARS}",
        )


def validate_committed_offset(offset: int, metadata: str) -> None:
    """One partition of an OffsetCommit: offset >= 0, metadata at most 4096 bytes of UTF-8."""
    if offset < 0:
        raise ValidationError(ErrorCode.INVALID_REQUEST, f"offset must be at least 0, got {offset}")
    size = len(metadata.encode())
    if size > OFFSET_METADATA_MAX_BYTES:
        raise ValidationError(
            ErrorCode.OFFSET_METADATA_TOO_LARGE,
            f"offset metadata is {size} bytes, the maximum is {OFFSET_METADATA_MAX_BYTES}",
        )


def check_request_bounds(request: Any, records_max: int) -> None:
    """Refuse a client request that names more than a bound allows (see the bounds above),
    before any other work; ``records_max`` is raft.append_max_records."""
    for field, count, maximum, why in _bounded_lists(request, records_max):
        if count > maximum:
            raise ValidationError(
                ErrorCode.INVALID_REQUEST, f"{field}: {count} entries, at most {maximum} per request{why}"
            )


def _bounded_lists(request: Any, records_max: int) -> Iterator[tuple[str, int, int, str]]:
    """(field, entries, bound, why) for every list of ``request``; nested lists in total."""
    per_batch = " (raft.append_max_records: one request is one batch)"
    match request:
        case Pb.CreateTopicsRequest():
            yield "topics", len(request.topics), TOPICS_PER_REQUEST_MAX, ""
            yield "topics[].configs", sum(len(t.configs) for t in request.topics), records_max, per_batch
        case Pb.CreatePartitionsRequest():
            yield "topics", len(request.topics), TOPICS_PER_REQUEST_MAX, ""
        case Pb.DescribeConfigsRequest():
            yield "topics", len(request.topics), TOPICS_PER_REQUEST_MAX, ""
            yield "brokers", len(request.brokers), TOPICS_PER_REQUEST_MAX, ""
        case Pb.DeleteTopicsRequest() | Pb.DescribeTopicsRequest():
            yield "names", len(request.names), TOPICS_PER_REQUEST_MAX, ""
        case Pb.AlterConfigsRequest():
            yield "topics", len(request.topics), TOPICS_PER_REQUEST_MAX, ""
            yield "topics[].ops", sum(len(t.ops) for t in request.topics), records_max, per_batch
            yield "brokers", len(request.brokers), TOPICS_PER_REQUEST_MAX, ""
            yield "brokers[].ops", sum(len(b.ops) for b in request.brokers), records_max, per_batch
        case Pb.BrokerRegistrationRequest():
            yield "listeners", len(request.listeners), LISTENERS_MAX, ""
        case Pb.BrokerHeartbeatRequest():
            for field in ("offline_replicas", "wiped_replicas"):
                listed = getattr(request, field)
                yield field, len(listed), OFFLINE_REPLICAS_MAX, ""
                partitions = sum(len(t.partitions) for t in listed)
                yield f"{field}[].partitions", partitions, OFFLINE_REPLICAS_MAX, ""
        case (
            Pb.AlterPartitionRequest()
            | Pb.ElectLeadersRequest()
            | Pb.OffsetCommitRequest()
            | Pb.AlterPartitionReassignmentsRequest()
            | Pb.ListPartitionReassignmentsRequest()
        ):
            yield "topics", len(request.topics), TOPICS_PER_REQUEST_MAX, ""
            partitions = sum(len(t.partitions) for t in request.topics)
            yield "topics[].partitions", partitions, records_max, per_batch
        case Pb.OffsetFetchRequest():
            yield "topics", len(request.topics), TOPICS_PER_REQUEST_MAX, ""
            partitions = sum(len(t.partitions) for t in request.topics)
            yield "topics[].partitions", partitions, OFFSET_FETCH_PARTITIONS_MAX, ""
        case Pb.TxnOffsetCommitRequest():
            yield "offsets.topics", len(request.offsets.topics), TOPICS_PER_REQUEST_MAX, ""
            partitions = sum(len(t.partitions) for t in request.offsets.topics)
            yield "offsets.topics[].partitions", partitions, records_max, per_batch
        case Pb.WriteTransactionRequest():
            yield "transaction.topics", len(request.transaction.topics), TOPICS_PER_REQUEST_MAX, ""
            partitions = sum(len(t.partitions) for t in request.transaction.topics)
            yield "transaction.topics[].partitions", partitions, PARTITIONS_PER_TRANSACTION_MAX, ""
            yield "transaction.groups", len(request.transaction.groups), GROUPS_PER_REQUEST_MAX, ""
        case Pb.DeleteGroupsRequest():
            yield "groups", len(request.groups), GROUPS_PER_REQUEST_MAX, ""
        case Pb.CommitGroupOffsetsRequest():
            yield "groups", len(request.groups), GROUPS_PER_REQUEST_MAX, ""
            topics = [t for g in request.groups for t in g.topics]
            yield "groups[].topics", len(topics), records_max, per_batch
            yield (
                "groups[].topics[].partitions",
                sum(len(t.partitions) for t in topics),
                records_max,
                per_batch,
            )
        case Pb.CreateAclsRequest():
            yield "acls", len(request.acls), min(ACLS_PER_REQUEST_MAX, records_max), per_batch
        case Pb.DeleteAclsRequest():
            yield "filters", len(request.filters), ACLS_PER_REQUEST_MAX, ""
        case Pb.AlterClientQuotasRequest():
            yield "entries", len(request.entries), QUOTA_ENTRIES_PER_REQUEST_MAX, ""
            yield "entries[].entity", sum(len(e.entity) for e in request.entries), records_max, per_batch
            yield "entries[].ops", sum(len(e.ops) for e in request.entries), records_max, per_batch
        case Pb.DescribeClientQuotasRequest():
            yield "components", len(request.components), len(ENTITY_TYPES), ""
        case Pb.AlterUserScramCredentialsRequest():
            yield "deletions", len(request.deletions), scram.CHANGES_PER_REQUEST_MAX, ""
            yield "upsertions", len(request.upsertions), scram.CHANGES_PER_REQUEST_MAX, ""
        case Pb.DescribeUserScramCredentialsRequest():
            yield "users", len(request.users), scram.CHANGES_PER_REQUEST_MAX, ""
        case Pb.RecordGroupRebalanceRequest():
            members = request.rebalance.members
            yield "rebalance.members", len(members), GROUP_MEMBERS_MAX, ""
            assigned = [a for m in members for a in m.assignment]
            yield "rebalance.members[].assignment", len(assigned), GROUP_ASSIGNED_PARTITIONS_MAX, ""
            partitions = sum(len(a.partitions) for a in assigned)
            yield "rebalance.members[].assignment[].partitions", partitions, GROUP_ASSIGNED_PARTITIONS_MAX, ""


def _invalid_topic(message: str) -> ValidationError:
    return ValidationError(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
