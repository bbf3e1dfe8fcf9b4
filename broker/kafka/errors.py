"""raftka's error codes (``raftka.v1.ErrorCode``, Kafka's names) as Kafka's numbers.

raftka numbers its codes in its own order; a Kafka client reads Kafka's. Every code has
an entry (a unit test checks, and checks each number against kafka-python's table); a
code Kafka has no equivalent for would be sent as UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode

UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
FETCH_SESSION_ID_NOT_FOUND = 70
UNKNOWN_TOPIC_ID = 100

KAFKA_ERRORS: dict[int, int] = {
    E.NONE: 0,
    E.NOT_CONTROLLER: 41,
    E.TOPIC_ALREADY_EXISTS: 36,
    E.INVALID_TOPIC_EXCEPTION: 17,
    E.INVALID_REPLICATION_FACTOR: 38,
    E.INVALID_PARTITIONS: 37,
    E.UNKNOWN_TOPIC_OR_PARTITION: 3,
    E.INVALID_CONFIG: 40,
    E.INVALID_REQUEST: INVALID_REQUEST,
    E.STALE_BROKER_EPOCH: 77,
    E.INVALID_UPDATE_VERSION: 95,
    E.BROKER_ID_NOT_REGISTERED: 102,
    E.DUPLICATE_BROKER_REGISTRATION: 101,
    E.REQUEST_TIMED_OUT: 7,
    E.ELECTION_NOT_NEEDED: 84,
    E.PREFERRED_LEADER_NOT_AVAILABLE: 80,
    E.FENCED_LEADER_EPOCH: 74,
    E.INELIGIBLE_REPLICA: 107,
    E.INVALID_GROUP_ID: 24,
    E.OFFSET_METADATA_TOO_LARGE: 12,
    E.UNKNOWN_SERVER_ERROR: UNKNOWN_SERVER_ERROR,
    E.INVALID_REPLICA_ASSIGNMENT: 39,
    E.NOT_LEADER_OR_FOLLOWER: 6,
    E.LEADER_NOT_AVAILABLE: 5,
    E.UNKNOWN_LEADER_EPOCH: 75,
    E.CORRUPT_MESSAGE: 2,
    E.INVALID_RECORD: 87,
    E.MESSAGE_TOO_LARGE: 10,
    E.INVALID_TIMESTAMP: 32,
    E.OFFSET_OUT_OF_RANGE: 1,
    E.NOT_ENOUGH_REPLICAS: 19,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: 20,
    E.KAFKA_STORAGE_ERROR: 56,
    E.UNSUPPORTED_VERSION: UNSUPPORTED_VERSION,
    E.OUT_OF_ORDER_SEQUENCE_NUMBER: 45,
    E.INVALID_PRODUCER_EPOCH: 47,
    E.NOT_COORDINATOR: 16,
    E.COORDINATOR_NOT_AVAILABLE: 15,
    E.ILLEGAL_GENERATION: 22,
    E.INCONSISTENT_GROUP_PROTOCOL: 23,
    E.UNKNOWN_MEMBER_ID: 25,
    E.INVALID_SESSION_TIMEOUT: 26,
    E.REBALANCE_IN_PROGRESS: 27,
    E.MEMBER_ID_REQUIRED: 79,
    E.GROUP_ID_NOT_FOUND: 69,
    E.NON_EMPTY_GROUP: 68,
    E.GROUP_MAX_SIZE_REACHED: 81,
    E.FENCED_INSTANCE_ID: 82,
}


def kafka_error(code: int) -> int:
    """Kafka's number for raftka's ``code``."""
    return KAFKA_ERRORS.get(code, UNKNOWN_SERVER_ERROR)


def kafka_message(code: int, message: str) -> str | None:
    """Kafka's error_message field: null without an error."""
    return None if code == E.NONE else message or None
