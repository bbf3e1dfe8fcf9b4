"""Topic requests: create, delete, add partitions, list and describe.

Pure functions of the controller's latest image (see ``raftka.metadata.plan``). One request
becomes one batch: a topic is a TopicRecord, one PartitionRecord per partition and its
ConfigRecords; topics that fail validation get their own error and add nothing, the
others go ahead (Kafka's per-topic results).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from raftka.metadata.image import TOPIC, BrokerRegistration, MetadataImage
from raftka.metadata.placement import place_new_partitions, place_replicas, topic_seed
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates
from raftka.metadata.topic_configs import check_compaction_lags, check_min_insync_replicas, validate_configs
from raftka.metadata.validation import (
    ValidationError,
    validate_new_topic_name,
    validate_partition_count,
    validate_partition_increase,
    validate_replication_factor,
    validate_topic_name_collision,
)
from raftka.v1 import controller_pb2, metadata_pb2


class Limits:
    """What one request may ask for: ``records_max`` is raft's largest batch."""

    __slots__ = ("max_partitions", "records_max")

    def __init__(self, max_partitions: int, records_max: int) -> None:
        self.max_partitions = max_partitions
        self.records_max = records_max


def create_topics(
    image: MetadataImage,
    request: controller_pb2.CreateTopicsRequest,
    limits: Limits,
    new_topic_id: Callable[[], bytes],
    shutting_down: Collection[int] = (),
) -> Plan:
    """``shutting_down``: brokers in controlled shutdown, given no replica (Kafka's usable
    brokers): they are about to leave every ISR and could never lead."""
    response = controller_pb2.CreateTopicsResponse()
    repeated = duplicates(t.name for t in request.topics)
    live = _usable(image, shutting_down)
    normalized = {name.replace(".", "_"): name for name in image.topic_ids_by_name}
    records: list[MetadataRecord] = []
    for topic in request.topics:
        result = response.topics.add(name=topic.name)
        try:
            if topic.name in repeated:
                raise ValidationError(
                    ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} appears more than once"
                )
            new = _new_topic(image, topic, live, normalized, limits, len(records), new_topic_id)
        except ValidationError as e:
            result.error, result.message = e.code, e.message
            continue
        normalized[topic.name.replace(".", "_")] = topic.name
        if not request.validate_only:
            result.topic_id = new[0].topic.topic_id
            records.extend(new)
    return Plan(response, records)


def _usable(image: MetadataImage, shutting_down: Collection[int]) -> list[BrokerRegistration]:
    return [b for b in image.unfenced_brokers() if b.broker_id not in shutting_down]


def _new_topic(
    image: MetadataImage,
    topic: controller_pb2.CreatableTopic,
    live: list[BrokerRegistration],
    normalized: dict[str, str],
    limits: Limits,
    records_so_far: int,
    new_topic_id: Callable[[], bytes],
) -> list[MetadataRecord]:
    name = topic.name
    validate_new_topic_name(name)
    if name in image.topic_ids_by_name:
        raise ValidationError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    clash = normalized.get(name.replace(".", "_"))
    validate_topic_name_collision(name, [clash] if clash is not None else [])
    validate_partition_count(topic.num_partitions, limits.max_partitions)
    validate_replication_factor(topic.replication_factor, len(live))
    configs = validate_configs(dict(topic.configs))
    check_min_insync_replicas(configs, topic.replication_factor)
    check_compaction_lags(configs)
    needed = 1 + topic.num_partitions + len(configs)
    if needed > limits.records_max:
        raise ValidationError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {name!r} needs {needed} records and one request may write at most "
            f"{limits.records_max}: create it with fewer partitions, then add partitions",
        )
    if records_so_far + needed > limits.records_max:
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"the request needs more than {limits.records_max} records: create fewer topics per request",
        )
    topic_id = new_topic_id()
    records = [MetadataRecord(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id))]
    assignments = place_replicas(
        live, topic.num_partitions, topic.replication_factor, seed=topic_seed(topic_id)
    )
    records += _partition_records(topic_id, 0, assignments)
    records += [
        MetadataRecord(
            config=metadata_pb2.ConfigRecord(resource_type=TOPIC, resource_name=name, name=key, value=value)
        )
        for key, value in configs.items()
    ]
    return records


def _partition_records(
    topic_id: bytes, first: int, assignments: list[tuple[int, ...]]
) -> list[MetadataRecord]:
    return [
        MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                partition_id=first + i,
                topic_id=topic_id,
                replicas=replicas,
                isr=replicas,
                leader=replicas[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
        for i, replicas in enumerate(assignments)
    ]


def delete_topics(image: MetadataImage, request: controller_pb2.DeleteTopicsRequest) -> Plan:
    response = controller_pb2.DeleteTopicsResponse()
    repeated = duplicates(request.names)
    records = []
    for name in request.names:
        result = response.topics.add(name=name)
        topic = image.topic(name)
        if name in repeated:
            result.error, result.message = ErrorCode.INVALID_REQUEST, f"topic {name!r} appears more than once"
        elif topic is None:
            result.error, result.message = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {name!r} does not exist",
            )
        else:
            result.topic_id = topic.topic_id
            records.append(
                MetadataRecord(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic.topic_id))
            )
    return Plan(response, records)


def create_partitions(
    image: MetadataImage,
    request: controller_pb2.CreatePartitionsRequest,
    limits: Limits,
    shutting_down: Collection[int] = (),
) -> Plan:
    """``shutting_down``: as for ``create_topics``."""
    response = controller_pb2.CreatePartitionsResponse()
    repeated = duplicates(t.name for t in request.topics)
    live = _usable(image, shutting_down)
    records: list[MetadataRecord] = []
    for increase in request.topics:
        result = response.topics.add(name=increase.name)
        topic = image.topic(increase.name)
        try:
            if increase.name in repeated:
                raise ValidationError(
                    ErrorCode.INVALID_REQUEST, f"topic {increase.name!r} appears more than once"
                )
            if topic is None:
                raise ValidationError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {increase.name!r} does not exist"
                )
            result.topic_id = topic.topic_id
            current = len(topic.partitions)
            validate_partition_increase(current, increase.count, limits.max_partitions)
            if len(records) + increase.count - current > limits.records_max:
                raise ValidationError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"adding {increase.count - current} partitions needs more than the "
                    f"{limits.records_max} records one request may write: add them in steps",
                )
            validate_replication_factor(len(topic.partitions[0].replicas), len(live))
            existing = [topic.partitions[p].replicas for p in range(current)]
            added = place_new_partitions(
                live, existing, increase.count - current, seed=topic_seed(topic.topic_id)
            )
            new = _partition_records(topic.topic_id, current, added)
        except ValidationError as e:
            result.error, result.message = e.code, e.message
            continue
        if not request.validate_only:
            records.extend(new)
    return Plan(response, records)


def list_topics(image: MetadataImage) -> controller_pb2.ListTopicsResponse:
    response = controller_pb2.ListTopicsResponse()
    for name, topic_id in sorted(image.topic_ids_by_name.items()):
        topic = image.topics_by_id[topic_id]
        response.topics.add(name=name, topic_id=topic_id, partitions=len(topic.partitions))
    return response


def describe_topics(
    image: MetadataImage, request: controller_pb2.DescribeTopicsRequest
) -> controller_pb2.DescribeTopicsResponse:
    response = controller_pb2.DescribeTopicsResponse()
    names = list(request.names) or sorted(image.topic_ids_by_name)
    for name in names:
        description = response.topics.add(name=name)
        topic = image.topic(name)
        if topic is None:
            description.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            description.message = f"topic {name!r} does not exist"
            continue
        description.topic_id = topic.topic_id
        for partition_id, state in sorted(topic.partitions.items()):
            description.partitions.add(
                partition=partition_id,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                replicas=state.replicas,
                isr=state.isr,
                elr=state.elr,
                last_known_elr=state.last_known_elr,
                adding_replicas=state.adding_replicas,
                removing_replicas=state.removing_replicas,
            )
    return response
