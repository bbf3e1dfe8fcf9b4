"""Request validation: every Kafka rule, its error code, and a message naming the problem."""

from __future__ import annotations

import pytest
from raftka.v1 import controller_pb2

from metadata.validation import (
    ValidationError,
    validate_committed_offset,
    validate_group_id,
    validate_partition_count,
    validate_partition_increase,
    validate_replication_factor,
    validate_topic_name,
    validate_topic_name_collision,
)

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
    assert says in error.value.message
    assert str(error.value) == error.value.message


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
