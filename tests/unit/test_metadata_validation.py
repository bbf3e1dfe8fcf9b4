"""Request validation: every Kafka rule, its error code, and a message naming the problem."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from raftka.metadata.validation import (
    GROUP_ASSIGNED_PARTITIONS_MAX,
    GROUP_MEMBERS_MAX,
    GROUPS_PER_REQUEST_MAX,
    LISTENERS_MAX,
    OFFLINE_REPLICAS_MAX,
    OFFSET_FETCH_PARTITIONS_MAX,
    TOPICS_PER_REQUEST_MAX,
    ValidationError,
    check_request_bounds,
    validate_committed_offset,
    validate_group_id,
    validate_new_topic_name,
    validate_partition_count,
    validate_partition_increase,
    validate_replication_factor,
    validate_topic_name,
    validate_topic_name_collision,
)
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode


@pytest.mark.parametrize(
    "name",
    ["a", "orders", "Orders.v2", "a_b-c.d", "0", "...", ".a", "a..", "x" * 249, "__consumer_offsets"],
)
def test_good_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty"),
        (".", "'.'"),
        ("..", "'..'"),
        ("x" * 250, "250 characters"),
        ("a b", "' '"),
        ("a/b", "'/'"),
        ("topic\n", "'\\n'"),
        ("tópico", "'ó'"),
        ("a:b*c", "'*:'"),
        ("١٢", "'١٢'"),  # non-ASCII digits are not [0-9]
    ],
)
def test_bad_topic_names(name: str, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_topic_name(name)
    assert error.value.code == E.INVALID_TOPIC_EXCEPTION
    assert says in error.value.message and error.value.message.startswith("topic name")
    assert str(error.value) == error.value.message


@pytest.mark.parametrize("name", ["__cluster_metadata", "__consumer_offsets", "__transaction_state"])
def test_kafkas_internal_topic_names_are_valid_but_cannot_be_created(name: str) -> None:
    validate_topic_name(name)  # a folder of that name still parses, as Kafka's would
    with pytest.raises(ValidationError) as error:
        validate_new_topic_name(name)
    assert error.value.code == E.INVALID_REQUEST
    assert (
        error.value.message
        == f"topic name {name!r} is one of Kafka's internal topics; creating it is prohibited"
    )
    validate_new_topic_name(name + "2")


@pytest.mark.parametrize(
    ("name", "existing", "collides"),
    [
        ("a.b", ["a_b"], True),
        ("a_b", ["x", "a.b"], True),
        ("a.b", ["a.b"], False),  # the same name is TOPIC_ALREADY_EXISTS, not a collision
        ("a.b", ["a-b", "ab"], False),
        ("a.b", [], False),
    ],
)
def test_topic_name_collision(name: str, existing: list[str], collides: bool) -> None:
    if not collides:
        validate_topic_name_collision(name, existing)
        return
    with pytest.raises(ValidationError) as error:
        validate_topic_name_collision(name, existing)
    assert error.value.code == E.INVALID_TOPIC_EXCEPTION
    assert name in error.value.message


@pytest.mark.parametrize(("n", "maximum"), [(1, 1), (3, 10), (10_000, 10_000)])
def test_good_partition_counts(n: int, maximum: int) -> None:
    validate_partition_count(n, maximum)


@pytest.mark.parametrize(
    ("n", "maximum", "says"),
    [(0, 10, "at least 1, got 0"), (-1, 10, "got -1"), (11, 10, "11 is above the maximum of 10")],
)
def test_bad_partition_counts(n: int, maximum: int, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_partition_count(n, maximum)
    assert error.value.code == E.INVALID_PARTITIONS
    assert "partitions" in error.value.message and says in error.value.message


def test_partition_increase() -> None:
    validate_partition_increase(3, 4, 10)


@pytest.mark.parametrize(
    ("current", "requested", "says"),
    [
        (3, 3, "already has 3 partitions"),
        (3, 2, "currently has 3 partitions, 2 would not be an increase"),
        (3, 11, "11 is above the maximum of 10"),
    ],
)
def test_partition_increase_refused(current: int, requested: int, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_partition_increase(current, requested, 10)
    assert error.value.code == E.INVALID_PARTITIONS
    assert says in error.value.message


@pytest.mark.parametrize(("rf", "live"), [(1, 1), (3, 3), (2, 5)])
def test_good_replication_factors(rf: int, live: int) -> None:
    validate_replication_factor(rf, live)


@pytest.mark.parametrize(
    ("rf", "live", "says"),
    [(0, 3, "at least 1, got 0"), (-2, 3, "got -2"), (4, 3, "4 is larger than the 3 available"), (1, 0, "1")],
)
def test_bad_replication_factors(rf: int, live: int, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_replication_factor(rf, live)
    assert error.value.code == E.INVALID_REPLICATION_FACTOR
    assert "replication factor" in error.value.message and says in error.value.message


@pytest.mark.parametrize("group", ["g", "my-group", "x" * 249, "group with spaces ü"])
def test_good_group_ids(group: str) -> None:
    validate_group_id(group)


@pytest.mark.parametrize(("group", "says"), [("", "empty"), ("x" * 250, "250 characters")])
def test_bad_group_ids(group: str, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_group_id(group)
    assert error.value.code == E.INVALID_GROUP_ID
    assert "group id" in error.value.message and says in error.value.message


@pytest.mark.parametrize(("offset", "metadata"), [(0, ""), (2**63 - 1, "m" * 4096), (5, "é" * 2048)])
def test_good_committed_offsets(offset: int, metadata: str) -> None:
    validate_committed_offset(offset, metadata)


@pytest.mark.parametrize(
    ("offset", "metadata", "code", "says"),
    [
        (-1, "", E.INVALID_REQUEST, "offset must be at least 0, got -1"),
        (0, "m" * 4097, E.OFFSET_METADATA_TOO_LARGE, "4097 bytes"),
        (0, "é" * 2049, E.OFFSET_METADATA_TOO_LARGE, "4098 bytes"),  # bytes of UTF-8, not characters
    ],
)
def test_bad_committed_offsets(offset: int, metadata: str, code: int, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_committed_offset(offset, metadata)
    assert error.value.code == code
    assert says in error.value.message


# ---- request bounds -------------------------------------------------------------------

RECORDS_MAX = 8
OVER_EVERY_BOUND = (
    max(
        TOPICS_PER_REQUEST_MAX,
        OFFSET_FETCH_PARTITIONS_MAX,
        LISTENERS_MAX,
        RECORDS_MAX,
        GROUPS_PER_REQUEST_MAX,
        GROUP_MEMBERS_MAX,
        GROUP_ASSIGNED_PARTITIONS_MAX,
        OFFLINE_REPLICAS_MAX,
    )
    + 1
)
# The one list bounded by the image instead (see raftka.metadata.validation): a partition's ISR
# must be distinct replicas of it, and broker_ops refuses a longer one.
BOUNDED_BY_THE_IMAGE = {
    ("AlterPartitionRequest", "topics[].partitions[].new_isr"),
    ("AlterPartitionRequest", "topics[].partitions[].new_isr_broker_epochs"),  # as long as new_isr
    # no longer than the registered brokers (``reassign_ops``), checked before it is read
    ("AlterPartitionReassignmentsRequest", "topics[].partitions[].replicas.ids"),
}


def lists_of(message: Descriptor, prefix: str = "") -> Iterator[tuple[str, list[FieldDescriptor]]]:
    """Every repeated field under ``message``, named as the bounds name it, with its path."""
    for field in message.fields:
        name = prefix + field.name
        if field.is_repeated:
            yield name, [field]
        if field.message_type is not None and not _is_map(field):
            for inner, path in lists_of(field.message_type, name + ("[]." if field.is_repeated else ".")):
                yield inner, [field, *path]


def with_long_list(request_type: Any, path: list[FieldDescriptor], n: int) -> Any:
    """A request whose list at ``path`` has ``n`` entries (each list above it, one)."""
    request = message = request_type()
    for field in path[:-1]:
        message = getattr(message, field.name)
        if field.is_repeated:
            message = message.add()
    field = path[-1]
    entries = getattr(message, field.name)
    if _is_map(field):
        entries.update({str(i): "" for i in range(n)})
    elif field.message_type is not None:
        for _ in range(n):
            entries.add()
    else:
        entries.extend([_ZEROS.get(field.type, 0)] * n)
    return request


_ZEROS = {FieldDescriptor.TYPE_STRING: "", FieldDescriptor.TYPE_BYTES: b""}


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def client_request_lists() -> list[tuple[str, str, list[FieldDescriptor]]]:
    service = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
    return [
        (method.input_type.name, name, path)
        for method in service.methods
        for name, path in lists_of(method.input_type)
    ]


def test_the_walk_finds_every_list_of_the_client_requests() -> None:
    """The lists the next test bounds, written out: a new list shows up here first."""
    assert {(request, name) for request, name, _ in client_request_lists()} == {
        ("CreateTopicsRequest", "topics"),
        ("CreateTopicsRequest", "topics[].configs"),
        ("DeleteTopicsRequest", "names"),
        ("CreatePartitionsRequest", "topics"),
        ("DescribeTopicsRequest", "names"),
        ("DescribeConfigsRequest", "topics"),
        ("DescribeConfigsRequest", "brokers"),
        ("AlterConfigsRequest", "topics"),
        ("AlterConfigsRequest", "topics[].ops"),
        ("AlterConfigsRequest", "brokers"),
        ("AlterConfigsRequest", "brokers[].ops"),
        ("BrokerRegistrationRequest", "listeners"),
        ("BrokerHeartbeatRequest", "offline_replicas"),
        ("BrokerHeartbeatRequest", "offline_replicas[].partitions"),
        ("BrokerHeartbeatRequest", "wiped_replicas"),
        ("BrokerHeartbeatRequest", "wiped_replicas[].partitions"),
        ("AlterPartitionRequest", "topics"),
        ("AlterPartitionRequest", "topics[].partitions"),
        ("AlterPartitionRequest", "topics[].partitions[].new_isr"),
        ("AlterPartitionRequest", "topics[].partitions[].new_isr_broker_epochs"),
        ("ElectLeadersRequest", "topics"),
        ("ElectLeadersRequest", "topics[].partitions"),
        ("AlterPartitionReassignmentsRequest", "topics"),
        ("AlterPartitionReassignmentsRequest", "topics[].partitions"),
        ("AlterPartitionReassignmentsRequest", "topics[].partitions[].replicas.ids"),
        ("ListPartitionReassignmentsRequest", "topics"),
        ("ListPartitionReassignmentsRequest", "topics[].partitions"),
        ("OffsetCommitRequest", "topics"),
        ("OffsetCommitRequest", "topics[].partitions"),
        ("OffsetFetchRequest", "topics"),
        ("OffsetFetchRequest", "topics[].partitions"),
        ("CommitGroupOffsetsRequest", "groups"),
        ("CommitGroupOffsetsRequest", "groups[].topics"),
        ("CommitGroupOffsetsRequest", "groups[].topics[].partitions"),
        ("RecordGroupRebalanceRequest", "rebalance.members"),
        ("RecordGroupRebalanceRequest", "rebalance.members[].assignment"),
        ("RecordGroupRebalanceRequest", "rebalance.members[].assignment[].partitions"),
        ("DeleteGroupsRequest", "groups"),
        ("WriteTransactionRequest", "transaction.topics"),
        ("WriteTransactionRequest", "transaction.topics[].partitions"),
        ("WriteTransactionRequest", "transaction.groups"),
        ("TxnOffsetCommitRequest", "offsets.topics"),
        ("TxnOffsetCommitRequest", "offsets.topics[].partitions"),
        ("CreateAclsRequest", "acls"),
        ("DeleteAclsRequest", "filters"),
        ("AlterClientQuotasRequest", "entries"),
        ("AlterClientQuotasRequest", "entries[].entity"),
        ("AlterClientQuotasRequest", "entries[].ops"),
        ("DescribeClientQuotasRequest", "components"),
        ("AlterUserScramCredentialsRequest", "deletions"),
        ("AlterUserScramCredentialsRequest", "upsertions"),
        ("DescribeUserScramCredentialsRequest", "users"),
    }


@pytest.mark.parametrize(
    ("request_name", "field", "path"),
    [case for case in client_request_lists() if case[:2] not in BOUNDED_BY_THE_IMAGE],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_every_list_of_every_client_request_is_bounded(
    request_name: str, field: str, path: list[FieldDescriptor]
) -> None:
    request = with_long_list(getattr(controller_pb2, request_name), path, OVER_EVERY_BOUND)
    with pytest.raises(ValidationError) as refused:
        check_request_bounds(request, RECORDS_MAX)
    assert refused.value.code == E.INVALID_REQUEST
    assert refused.value.message.startswith(f"{field}: {OVER_EVERY_BOUND} entries, at most ")


def test_bounds_count_nested_lists_over_the_whole_request() -> None:
    """Partitions spread over many topics count together: one batch holds them all."""
    request = controller_pb2.OffsetCommitRequest(
        group="g",
        topics=[
            controller_pb2.OffsetCommitTopic(
                topic=f"t{i}", partitions=[controller_pb2.OffsetCommitPartition()] * 3
            )
            for i in range(3)
        ],
    )
    with pytest.raises(ValidationError, match=r"^topics\[\]\.partitions: 9 entries, at most 8 per request "):
        check_request_bounds(request, RECORDS_MAX)
    del request.topics[-1]
    check_request_bounds(request, RECORDS_MAX)  # 6
