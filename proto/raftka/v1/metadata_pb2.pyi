from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConfigResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_RESOURCE_UNKNOWN: _ClassVar[ConfigResourceType]
    CONFIG_RESOURCE_BROKER: _ClassVar[ConfigResourceType]
    CONFIG_RESOURCE_TOPIC: _ClassVar[ConfigResourceType]

class TransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_EMPTY: _ClassVar[TransactionState]
    TXN_ONGOING: _ClassVar[TransactionState]
    TXN_PREPARE_COMMIT: _ClassVar[TransactionState]
    TXN_PREPARE_ABORT: _ClassVar[TransactionState]
    TXN_COMPLETE_COMMIT: _ClassVar[TransactionState]
    TXN_COMPLETE_ABORT: _ClassVar[TransactionState]
    TXN_DEAD: _ClassVar[TransactionState]
CONFIG_RESOURCE_UNKNOWN: ConfigResourceType
CONFIG_RESOURCE_BROKER: ConfigResourceType
CONFIG_RESOURCE_TOPIC: ConfigResourceType
TXN_EMPTY: TransactionState
TXN_ONGOING: TransactionState
TXN_PREPARE_COMMIT: TransactionState
TXN_PREPARE_ABORT: TransactionState
TXN_COMPLETE_COMMIT: TransactionState
TXN_COMPLETE_ABORT: TransactionState
TXN_DEAD: TransactionState

class BrokerEndpoint(_message.Message):
    __slots__ = ("name", "host", "port")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    name: str
    host: str
    port: int
    def __init__(self, name: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class RegisterBrokerRecord(_message.Message):
    __slots__ = ("broker_id", "incarnation_id", "broker_epoch", "endpoints", "rack", "fenced", "log_dir_id", "crashed")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_ID_FIELD_NUMBER: _ClassVar[int]
    CRASHED_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: _containers.RepeatedCompositeFieldContainer[BrokerEndpoint]
    rack: str
    fenced: bool
    log_dir_id: bytes
    crashed: bool
    def __init__(self, broker_id: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., broker_epoch: _Optional[int] = ..., endpoints: _Optional[_Iterable[_Union[BrokerEndpoint, _Mapping]]] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ..., log_dir_id: _Optional[bytes] = ..., crashed: _Optional[bool] = ...) -> None: ...

class UnregisterBrokerRecord(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class FenceBrokerRecord(_message.Message):
    __slots__ = ("id", "epoch")
    ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    id: int
    epoch: int
    def __init__(self, id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class UnfenceBrokerRecord(_message.Message):
    __slots__ = ("id", "epoch")
    ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    id: int
    epoch: int
    def __init__(self, id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class TopicRecord(_message.Message):
    __slots__ = ("name", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ...) -> None: ...

class PartitionRecord(_message.Message):
    __slots__ = ("partition_id", "topic_id", "replicas", "isr", "leader", "leader_epoch", "partition_epoch", "elr", "last_known_elr", "adding_replicas", "removing_replicas")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ELR_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_ELR_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    topic_id: bytes
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: _containers.RepeatedScalarFieldContainer[int]
    last_known_elr: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_id: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., elr: _Optional[_Iterable[int]] = ..., last_known_elr: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class BrokerIdList(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PartitionChangeRecord(_message.Message):
    __slots__ = ("partition_id", "topic_id", "isr", "leader", "replicas", "elr", "last_known_elr", "adding_replicas", "removing_replicas")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ELR_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_ELR_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    topic_id: bytes
    isr: BrokerIdList
    leader: int
    replicas: BrokerIdList
    elr: BrokerIdList
    last_known_elr: BrokerIdList
    adding_replicas: BrokerIdList
    removing_replicas: BrokerIdList
    def __init__(self, partition_id: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., isr: _Optional[_Union[BrokerIdList, _Mapping]] = ..., leader: _Optional[int] = ..., replicas: _Optional[_Union[BrokerIdList, _Mapping]] = ..., elr: _Optional[_Union[BrokerIdList, _Mapping]] = ..., last_known_elr: _Optional[_Union[BrokerIdList, _Mapping]] = ..., adding_replicas: _Optional[_Union[BrokerIdList, _Mapping]] = ..., removing_replicas: _Optional[_Union[BrokerIdList, _Mapping]] = ...) -> None: ...

class RemoveTopicRecord(_message.Message):
    __slots__ = ("topic_id",)
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    def __init__(self, topic_id: _Optional[bytes] = ...) -> None: ...

class ConfigRecord(_message.Message):
    __slots__ = ("resource_type", "resource_name", "name", "value")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str
    def __init__(self, resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class FeatureLevelRecord(_message.Message):
    __slots__ = ("name", "feature_level")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    feature_level: int
    def __init__(self, name: _Optional[str] = ..., feature_level: _Optional[int] = ...) -> None: ...

class ProducerIdsRecord(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "next_producer_id")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEXT_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    next_producer_id: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., next_producer_id: _Optional[int] = ...) -> None: ...

class NoOpRecord(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OffsetCommitRecord(_message.Message):
    __slots__ = ("group", "topic_id", "partition", "offset", "metadata", "commit_timestamp_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic_id: bytes
    partition: int
    offset: int
    metadata: str
    commit_timestamp_ms: int
    def __init__(self, group: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_timestamp_ms: _Optional[int] = ...) -> None: ...

class RemoveGroupOffsetsRecord(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMemberRecord(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "assignment", "session_timeout_ms", "rebalance_timeout_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    assignment: _containers.RepeatedCompositeFieldContainer[GroupAssignedTopic]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., assignment: _Optional[_Iterable[_Union[GroupAssignedTopic, _Mapping]]] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ...) -> None: ...

class GroupAssignedTopic(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class TransactionTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class TransactionRecord(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "last_producer_id", "last_producer_epoch", "state", "timeout_ms", "topics", "groups", "start_time_ms", "last_update_time_ms", "coordinator", "coordinator_broker_epoch", "coordinator_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    state: TransactionState
    timeout_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[TransactionTopic]
    groups: _containers.RepeatedScalarFieldContainer[str]
    start_time_ms: int
    last_update_time_ms: int
    coordinator: int
    coordinator_broker_epoch: int
    coordinator_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., last_producer_id: _Optional[int] = ..., last_producer_epoch: _Optional[int] = ..., state: _Optional[_Union[TransactionState, str]] = ..., timeout_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TransactionTopic, _Mapping]]] = ..., groups: _Optional[_Iterable[str]] = ..., start_time_ms: _Optional[int] = ..., last_update_time_ms: _Optional[int] = ..., coordinator: _Optional[int] = ..., coordinator_broker_epoch: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class TxnOffsetCommitRecord(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group", "topic_id", "partition", "offset", "metadata", "commit_timestamp_ms")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group: str
    topic_id: bytes
    partition: int
    offset: int
    metadata: str
    commit_timestamp_ms: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_timestamp_ms: _Optional[int] = ...) -> None: ...

class RemoveTransactionRecord(_message.Message):
    __slots__ = ("transactional_id",)
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    def __init__(self, transactional_id: _Optional[str] = ...) -> None: ...

class GroupRebalanceRecord(_message.Message):
    __slots__ = ("group", "generation_id", "protocol_type", "protocol_name", "leader", "members", "coordinator", "timestamp_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberRecord]
    coordinator: int
    timestamp_ms: int
    def __init__(self, group: _Optional[str] = ..., generation_id: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMemberRecord, _Mapping]]] = ..., coordinator: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class AccessControlEntryRecord(_message.Message):
    __slots__ = ("id", "resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str
    def __init__(self, id: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[str] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[str] = ..., permission_type: _Optional[str] = ...) -> None: ...

class RemoveAccessControlEntryRecord(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ClientQuotaEntity(_message.Message):
    __slots__ = ("entity_type", "entity_name")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    entity_name: str
    def __init__(self, entity_type: _Optional[str] = ..., entity_name: _Optional[str] = ...) -> None: ...

class ClientQuotaRecord(_message.Message):
    __slots__ = ("entity", "key", "value", "remove")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[ClientQuotaEntity]
    key: str
    value: float
    remove: bool
    def __init__(self, entity: _Optional[_Iterable[_Union[ClientQuotaEntity, _Mapping]]] = ..., key: _Optional[str] = ..., value: _Optional[float] = ..., remove: _Optional[bool] = ...) -> None: ...

class UserScramCredentialRecord(_message.Message):
    __slots__ = ("name", "mechanism", "salt", "stored_key", "server_key", "iterations")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    STORED_KEY_FIELD_NUMBER: _ClassVar[int]
    SERVER_KEY_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ..., salt: _Optional[bytes] = ..., stored_key: _Optional[bytes] = ..., server_key: _Optional[bytes] = ..., iterations: _Optional[int] = ...) -> None: ...

class RemoveUserScramCredentialRecord(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class ScramDecoyKeyRecord(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    def __init__(self, key: _Optional[bytes] = ...) -> None: ...

class MetadataRecord(_message.Message):
    __slots__ = ("register_broker", "unregister_broker", "fence_broker", "unfence_broker", "topic", "partition", "partition_change", "remove_topic", "config", "feature_level", "producer_ids", "no_op", "offset_commit", "remove_group_offsets", "group_rebalance", "access_control_entry", "remove_access_control_entry", "client_quota", "user_scram_credential", "remove_user_scram_credential", "transaction", "txn_offset_commit", "remove_transaction", "scram_decoy_key")
    REGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_BROKER_FIELD_NUMBER: _ClassVar[int]
    FENCE_BROKER_FIELD_NUMBER: _ClassVar[int]
    UNFENCE_BROKER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_CHANGE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_IDS_FIELD_NUMBER: _ClassVar[int]
    NO_OP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_COMMIT_FIELD_NUMBER: _ClassVar[int]
    REMOVE_GROUP_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    GROUP_REBALANCE_FIELD_NUMBER: _ClassVar[int]
    ACCESS_CONTROL_ENTRY_FIELD_NUMBER: _ClassVar[int]
    REMOVE_ACCESS_CONTROL_ENTRY_FIELD_NUMBER: _ClassVar[int]
    CLIENT_QUOTA_FIELD_NUMBER: _ClassVar[int]
    USER_SCRAM_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    REMOVE_USER_SCRAM_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    TXN_OFFSET_COMMIT_FIELD_NUMBER: _ClassVar[int]
    REMOVE_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    SCRAM_DECOY_KEY_FIELD_NUMBER: _ClassVar[int]
    register_broker: RegisterBrokerRecord
    unregister_broker: UnregisterBrokerRecord
    fence_broker: FenceBrokerRecord
    unfence_broker: UnfenceBrokerRecord
    topic: TopicRecord
    partition: PartitionRecord
    partition_change: PartitionChangeRecord
    remove_topic: RemoveTopicRecord
    config: ConfigRecord
    feature_level: FeatureLevelRecord
    producer_ids: ProducerIdsRecord
    no_op: NoOpRecord
    offset_commit: OffsetCommitRecord
    remove_group_offsets: RemoveGroupOffsetsRecord
    group_rebalance: GroupRebalanceRecord
    access_control_entry: AccessControlEntryRecord
    remove_access_control_entry: RemoveAccessControlEntryRecord
    client_quota: ClientQuotaRecord
    user_scram_credential: UserScramCredentialRecord
    remove_user_scram_credential: RemoveUserScramCredentialRecord
    transaction: TransactionRecord
    txn_offset_commit: TxnOffsetCommitRecord
    remove_transaction: RemoveTransactionRecord
    scram_decoy_key: ScramDecoyKeyRecord
    def __init__(self, register_broker: _Optional[_Union[RegisterBrokerRecord, _Mapping]] = ..., unregister_broker: _Optional[_Union[UnregisterBrokerRecord, _Mapping]] = ..., fence_broker: _Optional[_Union[FenceBrokerRecord, _Mapping]] = ..., unfence_broker: _Optional[_Union[UnfenceBrokerRecord, _Mapping]] = ..., topic: _Optional[_Union[TopicRecord, _Mapping]] = ..., partition: _Optional[_Union[PartitionRecord, _Mapping]] = ..., partition_change: _Optional[_Union[PartitionChangeRecord, _Mapping]] = ..., remove_topic: _Optional[_Union[RemoveTopicRecord, _Mapping]] = ..., config: _Optional[_Union[ConfigRecord, _Mapping]] = ..., feature_level: _Optional[_Union[FeatureLevelRecord, _Mapping]] = ..., producer_ids: _Optional[_Union[ProducerIdsRecord, _Mapping]] = ..., no_op: _Optional[_Union[NoOpRecord, _Mapping]] = ..., offset_commit: _Optional[_Union[OffsetCommitRecord, _Mapping]] = ..., remove_group_offsets: _Optional[_Union[RemoveGroupOffsetsRecord, _Mapping]] = ..., group_rebalance: _Optional[_Union[GroupRebalanceRecord, _Mapping]] = ..., access_control_entry: _Optional[_Union[AccessControlEntryRecord, _Mapping]] = ..., remove_access_control_entry: _Optional[_Union[RemoveAccessControlEntryRecord, _Mapping]] = ..., client_quota: _Optional[_Union[ClientQuotaRecord, _Mapping]] = ..., user_scram_credential: _Optional[_Union[UserScramCredentialRecord, _Mapping]] = ..., remove_user_scram_credential: _Optional[_Union[RemoveUserScramCredentialRecord, _Mapping]] = ..., transaction: _Optional[_Union[TransactionRecord, _Mapping]] = ..., txn_offset_commit: _Optional[_Union[TxnOffsetCommitRecord, _Mapping]] = ..., remove_transaction: _Optional[_Union[RemoveTransactionRecord, _Mapping]] = ..., scram_decoy_key: _Optional[_Union[ScramDecoyKeyRecord, _Mapping]] = ...) -> None: ...
