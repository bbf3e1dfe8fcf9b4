"""Request validation with Kafka's rules: checked before any record is built.

The controller runs every check here before it turns a request into records, so bad
input is answered with a typed error code and a message naming the field and the value,
and nothing is appended to the log. Checks that need the image (does the topic exist?)
stay with the controller; these need only the request and a few numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from raftka.v1 import controller_pb2

ErrorCode = controller_pb2.ErrorCode

TOPIC_NAME_MAX_CHARS = 249  # Kafka's limit: a partition directory name must fit in 255 bytes
GROUP_ID_MAX_CHARS = 249
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default
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


def _invalid_topic(message: str) -> ValidationError:
    return ValidationError(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
