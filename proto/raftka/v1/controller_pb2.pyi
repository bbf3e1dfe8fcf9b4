from raftka.v1 import metadata_pb2 as _metadata_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    NOT_CONTROLLER: _ClassVar[ErrorCode]
    TOPIC_ALREADY_EXISTS: _ClassVar[ErrorCode]
    INVALID_TOPIC_EXCEPTION: _ClassVar[ErrorCode]
    INVALID_REPLICATION_FACTOR: _ClassVar[ErrorCode]
    INVALID_PARTITIONS: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorCode]
    INVALID_CONFIG: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    STALE_BROKER_EPOCH: _ClassVar[ErrorCode]
    INVALID_UPDATE_VERSION: _ClassVar[ErrorCode]
    BROKER_ID_NOT_REGISTERED: _ClassVar[ErrorCode]
    DUPLICATE_BROKER_REGISTRATION: _ClassVar[ErrorCode]
    REQUEST_TIMED_OUT: _ClassVar[ErrorCode]
    ELECTION_NOT_NEEDED: _ClassVar[ErrorCode]
    PREFERRED_LEADER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    FENCED_LEADER_EPOCH: _ClassVar[ErrorCode]
    INELIGIBLE_REPLICA: _ClassVar[ErrorCode]
    INVALID_GROUP_ID: _ClassVar[ErrorCode]
    OFFSET_METADATA_TOO_LARGE: _ClassVar[ErrorCode]
    UNKNOWN_SERVER_ERROR: _ClassVar[ErrorCode]
    INVALID_REPLICA_ASSIGNMENT: _ClassVar[ErrorCode]
    NOT_LEADER_OR_FOLLOWER: _ClassVar[ErrorCode]
    LEADER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    UNKNOWN_LEADER_EPOCH: _ClassVar[ErrorCode]
    CORRUPT_MESSAGE: _ClassVar[ErrorCode]
    INVALID_RECORD: _ClassVar[ErrorCode]
    MESSAGE_TOO_LARGE: _ClassVar[ErrorCode]
    INVALID_TIMESTAMP: _ClassVar[ErrorCode]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: _ClassVar[ErrorCode]
    KAFKA_STORAGE_ERROR: _ClassVar[ErrorCode]
    UNSUPPORTED_VERSION: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    INVALID_PRODUCER_EPOCH: _ClassVar[ErrorCode]
    OFFSET_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorCode]
    ILLEGAL_GENERATION: _ClassVar[ErrorCode]
    INCONSISTENT_GROUP_PROTOCOL: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER_ID: _ClassVar[ErrorCode]
    INVALID_SESSION_TIMEOUT: _ClassVar[ErrorCode]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorCode]
    MEMBER_ID_REQUIRED: _ClassVar[ErrorCode]
    GROUP_ID_NOT_FOUND: _ClassVar[ErrorCode]
    NON_EMPTY_GROUP: _ClassVar[ErrorCode]
    GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorCode]
    FENCED_INSTANCE_ID: _ClassVar[ErrorCode]
    CLUSTER_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    TOPIC_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    GROUP_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    RESOURCE_NOT_FOUND: _ClassVar[ErrorCode]
    UNSUPPORTED_SASL_MECHANISM: _ClassVar[ErrorCode]
    UNACCEPTABLE_CREDENTIAL: _ClassVar[ErrorCode]
    DUPLICATE_RESOURCE: _ClassVar[ErrorCode]
    SASL_AUTHENTICATION_FAILED: _ClassVar[ErrorCode]
    OPERATION_NOT_ATTEMPTED: _ClassVar[ErrorCode]
    INVALID_TXN_STATE: _ClassVar[ErrorCode]
    INVALID_PRODUCER_ID_MAPPING: _ClassVar[ErrorCode]
    INVALID_TRANSACTION_TIMEOUT: _ClassVar[ErrorCode]
    CONCURRENT_TRANSACTIONS: _ClassVar[ErrorCode]
    TRANSACTION_COORDINATOR_FENCED: _ClassVar[ErrorCode]
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    PRODUCER_FENCED: _ClassVar[ErrorCode]
    TRANSACTIONAL_ID_NOT_FOUND: _ClassVar[ErrorCode]
    UNSTABLE_OFFSET_COMMIT: _ClassVar[ErrorCode]
    TRANSACTION_ABORTABLE: _ClassVar[ErrorCode]
    NO_REASSIGNMENT_IN_PROGRESS: _ClassVar[ErrorCode]
    NEW_LEADER_ELECTED: _ClassVar[ErrorCode]

class AlterConfigOpType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALTER_CONFIG_SET: _ClassVar[AlterConfigOpType]
    ALTER_CONFIG_DELETE: _ClassVar[AlterConfigOpType]
NONE: ErrorCode
NOT_CONTROLLER: ErrorCode
TOPIC_ALREADY_EXISTS: ErrorCode
INVALID_TOPIC_EXCEPTION: ErrorCode
INVALID_REPLICATION_FACTOR: ErrorCode
INVALID_PARTITIONS: ErrorCode
UNKNOWN_TOPIC_OR_PARTITION: ErrorCode
INVALID_CONFIG: ErrorCode
INVALID_REQUEST: ErrorCode
STALE_BROKER_EPOCH: ErrorCode
INVALID_UPDATE_VERSION: ErrorCode
BROKER_ID_NOT_REGISTERED: ErrorCode
DUPLICATE_BROKER_REGISTRATION: ErrorCode
REQUEST_TIMED_OUT: ErrorCode
ELECTION_NOT_NEEDED: ErrorCode
PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode
FENCED_LEADER_EPOCH: ErrorCode
INELIGIBLE_REPLICA: ErrorCode
INVALID_GROUP_ID: ErrorCode
OFFSET_METADATA_TOO_LARGE: ErrorCode
UNKNOWN_SERVER_ERROR: ErrorCode
INVALID_REPLICA_ASSIGNMENT: ErrorCode
NOT_LEADER_OR_FOLLOWER: ErrorCode
LEADER_NOT_AVAILABLE: ErrorCode
UNKNOWN_LEADER_EPOCH: ErrorCode
CORRUPT_MESSAGE: ErrorCode
INVALID_RECORD: ErrorCode
MESSAGE_TOO_LARGE: ErrorCode
INVALID_TIMESTAMP: ErrorCode
OFFSET_OUT_OF_RANGE: ErrorCode
NOT_ENOUGH_REPLICAS: ErrorCode
NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode
KAFKA_STORAGE_ERROR: ErrorCode
UNSUPPORTED_VERSION: ErrorCode
OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode
INVALID_PRODUCER_EPOCH: ErrorCode
OFFSET_NOT_AVAILABLE: ErrorCode
NOT_COORDINATOR: ErrorCode
COORDINATOR_NOT_AVAILABLE: ErrorCode
ILLEGAL_GENERATION: ErrorCode
INCONSISTENT_GROUP_PROTOCOL: ErrorCode
UNKNOWN_MEMBER_ID: ErrorCode
INVALID_SESSION_TIMEOUT: ErrorCode
REBALANCE_IN_PROGRESS: ErrorCode
MEMBER_ID_REQUIRED: ErrorCode
GROUP_ID_NOT_FOUND: ErrorCode
NON_EMPTY_GROUP: ErrorCode
GROUP_MAX_SIZE_REACHED: ErrorCode
FENCED_INSTANCE_ID: ErrorCode
CLUSTER_AUTHORIZATION_FAILED: ErrorCode
TOPIC_AUTHORIZATION_FAILED: ErrorCode
GROUP_AUTHORIZATION_FAILED: ErrorCode
RESOURCE_NOT_FOUND: ErrorCode
UNSUPPORTED_SASL_MECHANISM: ErrorCode
UNACCEPTABLE_CREDENTIAL: ErrorCode
DUPLICATE_RESOURCE: ErrorCode
SASL_AUTHENTICATION_FAILED: ErrorCode
OPERATION_NOT_ATTEMPTED: ErrorCode
INVALID_TXN_STATE: ErrorCode
INVALID_PRODUCER_ID_MAPPING: ErrorCode
INVALID_TRANSACTION_TIMEOUT: ErrorCode
CONCURRENT_TRANSACTIONS: ErrorCode
TRANSACTION_COORDINATOR_FENCED: ErrorCode
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode
PRODUCER_FENCED: ErrorCode
TRANSACTIONAL_ID_NOT_FOUND: ErrorCode
UNSTABLE_OFFSET_COMMIT: ErrorCode
TRANSACTION_ABORTABLE: ErrorCode
NO_REASSIGNMENT_IN_PROGRESS: ErrorCode
NEW_LEADER_ELECTED: ErrorCode
ALTER_CONFIG_SET: AlterConfigOpType
ALTER_CONFIG_DELETE: AlterConfigOpType

class Status(_message.Message):
    __slots__ = ("error", "message", "controller_id", "controller_address")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    controller_id: int
    controller_address: str
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_address: _Optional[str] = ...) -> None: ...

class CreatableTopic(_message.Message):
    __slots__ = ("name", "num_partitions", "replication_factor", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_partitions: int
    replication_factor: int
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatableTopic]
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatableTopic, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class TopicResult(_message.Message):
    __slots__ = ("name", "topic_id", "error", "message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    error: ErrorCode
    message: str
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class PartitionsIncrease(_message.Message):
    __slots__ = ("name", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[PartitionsIncrease]
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[PartitionsIncrease, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicListing(_message.Message):
    __slots__ = ("name", "topic_id", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    partitions: int
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partitions: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicListing]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicListing, _Mapping]]] = ...) -> None: ...

class DescribeTopicsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "leader", "leader_epoch", "partition_epoch", "replicas", "isr", "elr", "last_known_elr", "adding_replicas", "removing_replicas")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    ELR_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_ELR_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    elr: _containers.RepeatedScalarFieldContainer[int]
    last_known_elr: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., elr: _Optional[_Iterable[int]] = ..., last_known_elr: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class TopicDescription(_message.Message):
    __slots__ = ("name", "topic_id", "error", "message", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    error: ErrorCode
    message: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ...) -> None: ...

class DescribeTopicsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicDescription]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicDescription, _Mapping]]] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("name", "value", "is_default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    is_default: bool
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., is_default: _Optional[bool] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("topics", "brokers")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    brokers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., brokers: _Optional[_Iterable[str]] = ...) -> None: ...

class BrokerConfigs(_message.Message):
    __slots__ = ("broker", "error", "message", "entries")
    BROKER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    broker: str
    error: ErrorCode
    message: str
    entries: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, broker: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class TopicConfigs(_message.Message):
    __slots__ = ("topic", "error", "message", "entries")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    error: ErrorCode
    message: str
    entries: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, topic: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("status", "topics", "brokers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfigs]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerConfigs]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicConfigs, _Mapping]]] = ..., brokers: _Optional[_Iterable[_Union[BrokerConfigs, _Mapping]]] = ...) -> None: ...

class AlterConfigOp(_message.Message):
    __slots__ = ("name", "value", "op")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    op: AlterConfigOpType
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., op: _Optional[_Union[AlterConfigOpType, str]] = ...) -> None: ...

class AlterTopicConfigs(_message.Message):
    __slots__ = ("topic", "ops")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    ops: _containers.RepeatedCompositeFieldContainer[AlterConfigOp]
    def __init__(self, topic: _Optional[str] = ..., ops: _Optional[_Iterable[_Union[AlterConfigOp, _Mapping]]] = ...) -> None: ...

class AlterBrokerConfigs(_message.Message):
    __slots__ = ("broker", "ops")
    BROKER_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    broker: str
    ops: _containers.RepeatedCompositeFieldContainer[AlterConfigOp]
    def __init__(self, broker: _Optional[str] = ..., ops: _Optional[_Iterable[_Union[AlterConfigOp, _Mapping]]] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "brokers")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[AlterTopicConfigs]
    validate_only: bool
    brokers: _containers.RepeatedCompositeFieldContainer[AlterBrokerConfigs]
    def __init__(self, topics: _Optional[_Iterable[_Union[AlterTopicConfigs, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., brokers: _Optional[_Iterable[_Union[AlterBrokerConfigs, _Mapping]]] = ...) -> None: ...

class BrokerConfigsResult(_message.Message):
    __slots__ = ("broker", "error", "message")
    BROKER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    broker: str
    error: ErrorCode
    message: str
    def __init__(self, broker: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("status", "topics", "brokers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerConfigsResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ..., brokers: _Optional[_Iterable[_Union[BrokerConfigsResult, _Mapping]]] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("broker_id",)
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    def __init__(self, broker_id: _Optional[int] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class BrokerRegistrationRequest(_message.Message):
    __slots__ = ("broker_id", "incarnation_id", "listeners", "rack", "previous_broker_epoch", "log_dir_id")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    incarnation_id: str
    listeners: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.BrokerEndpoint]
    rack: str
    previous_broker_epoch: int
    log_dir_id: bytes
    def __init__(self, broker_id: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., listeners: _Optional[_Iterable[_Union[_metadata_pb2.BrokerEndpoint, _Mapping]]] = ..., rack: _Optional[str] = ..., previous_broker_epoch: _Optional[int] = ..., log_dir_id: _Optional[bytes] = ...) -> None: ...

class BrokerRegistrationResponse(_message.Message):
    __slots__ = ("status", "broker_epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: Status
    broker_epoch: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "current_metadata_offset", "want_fence", "want_shut_down", "offline_replicas", "wiped_replicas")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WANT_FENCE_FIELD_NUMBER: _ClassVar[int]
    WANT_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    WIPED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    offline_replicas: _containers.RepeatedCompositeFieldContainer[OfflineTopicReplicas]
    wiped_replicas: _containers.RepeatedCompositeFieldContainer[OfflineTopicReplicas]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., current_metadata_offset: _Optional[int] = ..., want_fence: _Optional[bool] = ..., want_shut_down: _Optional[bool] = ..., offline_replicas: _Optional[_Iterable[_Union[OfflineTopicReplicas, _Mapping]]] = ..., wiped_replicas: _Optional[_Iterable[_Union[OfflineTopicReplicas, _Mapping]]] = ...) -> None: ...

class OfflineTopicReplicas(_message.Message):
    __slots__ = ("topic_id", "partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("status", "is_caught_up", "is_fenced", "should_shut_down")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    IS_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    IS_FENCED_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    status: Status
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., is_caught_up: _Optional[bool] = ..., is_fenced: _Optional[bool] = ..., should_shut_down: _Optional[bool] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerDescription(_message.Message):
    __slots__ = ("broker_id", "endpoints", "rack", "fenced", "epoch", "in_controlled_shutdown")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_CONTROLLED_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    endpoints: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.BrokerEndpoint]
    rack: str
    fenced: bool
    epoch: int
    in_controlled_shutdown: bool
    def __init__(self, broker_id: _Optional[int] = ..., endpoints: _Optional[_Iterable[_Union[_metadata_pb2.BrokerEndpoint, _Mapping]]] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ..., epoch: _Optional[int] = ..., in_controlled_shutdown: _Optional[bool] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("status", "cluster_id", "controller_id", "brokers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    cluster_id: str
    controller_id: int
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerDescription]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., brokers: _Optional[_Iterable[_Union[BrokerDescription, _Mapping]]] = ...) -> None: ...

class AlterPartitionData(_message.Message):
    __slots__ = ("partition", "leader_epoch", "new_isr", "partition_epoch", "new_isr_broker_epochs")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_BROKER_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader_epoch: int
    new_isr: _containers.RepeatedScalarFieldContainer[int]
    partition_epoch: int
    new_isr_broker_epochs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., partition_epoch: _Optional[int] = ..., new_isr_broker_epochs: _Optional[_Iterable[int]] = ...) -> None: ...

class AlterPartitionTopic(_message.Message):
    __slots__ = ("topic_id", "partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionData]
    def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionData, _Mapping]]] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "topics")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[AlterPartitionTopic]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[AlterPartitionTopic, _Mapping]]] = ...) -> None: ...

class AlterPartitionResult(_message.Message):
    __slots__ = ("topic_id", "partition", "error", "message", "leader", "leader_epoch", "isr", "partition_epoch")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partition: int
    error: ErrorCode
    message: str
    leader: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    partition_epoch: int
    def __init__(self, topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., partition_epoch: _Optional[int] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("status", "partitions")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionResult, _Mapping]]] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class ElectLeadersResult(_message.Message):
    __slots__ = ("topic", "partition", "error", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error: ErrorCode
    message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("status", "partitions")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    partitions: _containers.RepeatedCompositeFieldContainer[ElectLeadersResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[ElectLeadersResult, _Mapping]]] = ...) -> None: ...

class ReassignablePartition(_message.Message):
    __slots__ = ("partition", "replicas")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    replicas: _metadata_pb2.BrokerIdList
    def __init__(self, partition: _Optional[int] = ..., replicas: _Optional[_Union[_metadata_pb2.BrokerIdList, _Mapping]] = ...) -> None: ...

class ReassignableTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[ReassignablePartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ReassignablePartition, _Mapping]]] = ...) -> None: ...

class AlterPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ReassignableTopic]
    def __init__(self, topics: _Optional[_Iterable[_Union[ReassignableTopic, _Mapping]]] = ...) -> None: ...

class ReassignmentResult(_message.Message):
    __slots__ = ("topic", "partition", "error", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error: ErrorCode
    message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AlterPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("status", "partitions")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    partitions: _containers.RepeatedCompositeFieldContainer[ReassignmentResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[ReassignmentResult, _Mapping]]] = ...) -> None: ...

class ListPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class OngoingReassignment(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "adding_replicas", "removing_replicas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class ListPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("status", "reassignments")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    reassignments: _containers.RepeatedCompositeFieldContainer[OngoingReassignment]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., reassignments: _Optional[_Iterable[_Union[OngoingReassignment, _Mapping]]] = ...) -> None: ...

class AllocateProducerIdsRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AllocateProducerIdsResponse(_message.Message):
    __slots__ = ("status", "producer_id_start", "producer_id_len")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_START_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_LEN_FIELD_NUMBER: _ClassVar[int]
    status: Status
    producer_id_start: int
    producer_id_len: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., producer_id_start: _Optional[int] = ..., producer_id_len: _Optional[int] = ...) -> None: ...

class CommitGroupOffsetsRequest(_message.Message):
    __slots__ = ("groups", "broker_id", "broker_epoch")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest]
    broker_id: int
    broker_epoch: int
    def __init__(self, groups: _Optional[_Iterable[_Union[OffsetCommitRequest, _Mapping]]] = ..., broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class CommitGroupOffsetsResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    groups: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[OffsetCommitResponse, _Mapping]]] = ...) -> None: ...

class RecordGroupRebalanceRequest(_message.Message):
    __slots__ = ("rebalance", "broker_id", "broker_epoch")
    REBALANCE_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    rebalance: _metadata_pb2.GroupRebalanceRecord
    broker_id: int
    broker_epoch: int
    def __init__(self, rebalance: _Optional[_Union[_metadata_pb2.GroupRebalanceRecord, _Mapping]] = ..., broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class RecordGroupRebalanceResponse(_message.Message):
    __slots__ = ("status", "recorded_generation_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORDED_GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    status: Status
    recorded_generation_id: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., recorded_generation_id: _Optional[int] = ...) -> None: ...

class WriteTransactionRequest(_message.Message):
    __slots__ = ("transaction", "broker_id", "broker_epoch")
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transaction: _metadata_pb2.TransactionRecord
    broker_id: int
    broker_epoch: int
    def __init__(self, transaction: _Optional[_Union[_metadata_pb2.TransactionRecord, _Mapping]] = ..., broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class WriteTransactionResponse(_message.Message):
    __slots__ = ("status", "transaction")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    status: Status
    transaction: _metadata_pb2.TransactionRecord
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., transaction: _Optional[_Union[_metadata_pb2.TransactionRecord, _Mapping]] = ...) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "offsets")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    offsets: OffsetCommitRequest
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., offsets: _Optional[_Union[OffsetCommitRequest, _Mapping]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, groups: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResult(_message.Message):
    __slots__ = ("group", "error", "message")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group: str
    error: ErrorCode
    message: str
    def __init__(self, group: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    groups: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[DeleteGroupsResult, _Mapping]]] = ...) -> None: ...

class OffsetCommitPartition(_message.Message):
    __slots__ = ("partition", "offset", "metadata")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    metadata: str
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class OffsetCommitTopic(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group", "topics", "generation_id", "member_id", "group_instance_id", "coordinator_id", "coordinator_epoch")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitTopic]
    generation_id: int
    member_id: str
    group_instance_id: str
    coordinator_id: int
    coordinator_epoch: int
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitTopic, _Mapping]]] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., coordinator_id: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class PartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error: ErrorCode
    message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("status", "partitions")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionResult, _Mapping]]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group", "topics", "require_stable")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    require_stable: bool
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class FetchedOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata", "error", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    error: ErrorCode
    message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("status", "offsets")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    offsets: _containers.RepeatedCompositeFieldContainer[FetchedOffset]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., offsets: _Optional[_Iterable[_Union[FetchedOffset, _Mapping]]] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str
    def __init__(self, resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[str] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[str] = ..., permission_type: _Optional[str] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("status", "deleted")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    deleted: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., deleted: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclBinding
    def __init__(self, filter: _Optional[_Union[AclBinding, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("status", "acls")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class ClientQuotaOp(_message.Message):
    __slots__ = ("key", "value", "remove")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: float
    remove: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ..., remove: _Optional[bool] = ...) -> None: ...

class ClientQuotaAlteration(_message.Message):
    __slots__ = ("entity", "ops")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.ClientQuotaEntity]
    ops: _containers.RepeatedCompositeFieldContainer[ClientQuotaOp]
    def __init__(self, entity: _Optional[_Iterable[_Union[_metadata_pb2.ClientQuotaEntity, _Mapping]]] = ..., ops: _Optional[_Iterable[_Union[ClientQuotaOp, _Mapping]]] = ...) -> None: ...

class AlterClientQuotasRequest(_message.Message):
    __slots__ = ("entries", "validate_only")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ClientQuotaAlteration]
    validate_only: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[ClientQuotaAlteration, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class ClientQuotaAlterationResult(_message.Message):
    __slots__ = ("error", "message", "entity")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    error: ErrorCode
    message: str
    entity: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.ClientQuotaEntity]
    def __init__(self, error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., entity: _Optional[_Iterable[_Union[_metadata_pb2.ClientQuotaEntity, _Mapping]]] = ...) -> None: ...

class AlterClientQuotasResponse(_message.Message):
    __slots__ = ("status", "entries")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    entries: _containers.RepeatedCompositeFieldContainer[ClientQuotaAlterationResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[ClientQuotaAlterationResult, _Mapping]]] = ...) -> None: ...

class ClientQuotaFilterComponent(_message.Message):
    __slots__ = ("entity_type", "match_type", "match")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCH_TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    match_type: int
    match: str
    def __init__(self, entity_type: _Optional[str] = ..., match_type: _Optional[int] = ..., match: _Optional[str] = ...) -> None: ...

class DescribeClientQuotasRequest(_message.Message):
    __slots__ = ("components", "strict")
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    components: _containers.RepeatedCompositeFieldContainer[ClientQuotaFilterComponent]
    strict: bool
    def __init__(self, components: _Optional[_Iterable[_Union[ClientQuotaFilterComponent, _Mapping]]] = ..., strict: _Optional[bool] = ...) -> None: ...

class ClientQuotaValues(_message.Message):
    __slots__ = ("entity", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.ClientQuotaEntity]
    values: _containers.ScalarMap[str, float]
    def __init__(self, entity: _Optional[_Iterable[_Union[_metadata_pb2.ClientQuotaEntity, _Mapping]]] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class DescribeClientQuotasResponse(_message.Message):
    __slots__ = ("status", "entries")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    entries: _containers.RepeatedCompositeFieldContainer[ClientQuotaValues]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[ClientQuotaValues, _Mapping]]] = ...) -> None: ...

class ScramCredentialUpsertion(_message.Message):
    __slots__ = ("name", "mechanism", "iterations", "salt", "salted_password")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    SALTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ..., iterations: _Optional[int] = ..., salt: _Optional[bytes] = ..., salted_password: _Optional[bytes] = ...) -> None: ...

class ScramCredentialDeletion(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsRequest(_message.Message):
    __slots__ = ("deletions", "upsertions")
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    UPSERTIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[ScramCredentialDeletion]
    upsertions: _containers.RepeatedCompositeFieldContainer[ScramCredentialUpsertion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[ScramCredentialDeletion, _Mapping]]] = ..., upsertions: _Optional[_Iterable[_Union[ScramCredentialUpsertion, _Mapping]]] = ...) -> None: ...

class UserScramResult(_message.Message):
    __slots__ = ("user", "error", "message")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    user: str
    error: ErrorCode
    message: str
    def __init__(self, user: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsResponse(_message.Message):
    __slots__ = ("status", "results")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    results: _containers.RepeatedCompositeFieldContainer[UserScramResult]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., results: _Optional[_Iterable[_Union[UserScramResult, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsRequest(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, users: _Optional[_Iterable[str]] = ...) -> None: ...

class ScramCredentialInfo(_message.Message):
    __slots__ = ("mechanism", "iterations")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    mechanism: str
    iterations: int
    def __init__(self, mechanism: _Optional[str] = ..., iterations: _Optional[int] = ...) -> None: ...

class DescribedUserScram(_message.Message):
    __slots__ = ("user", "error", "message", "credentials")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    user: str
    error: ErrorCode
    message: str
    credentials: _containers.RepeatedCompositeFieldContainer[ScramCredentialInfo]
    def __init__(self, user: _Optional[str] = ..., error: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., credentials: _Optional[_Iterable[_Union[ScramCredentialInfo, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsResponse(_message.Message):
    __slots__ = ("status", "users")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    users: _containers.RepeatedCompositeFieldContainer[DescribedUserScram]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., users: _Optional[_Iterable[_Union[DescribedUserScram, _Mapping]]] = ...) -> None: ...
