"""Config requests, of topics and of brokers: describe, and Kafka's incremental alter.

Values are validated and normalized by ``raftka.metadata.topic_configs``; an alteration is
checked against the configs as they would be after it (``min.insync.replicas`` must not
exceed the replication factor). Only keys whose value really changes become
ConfigRecords, so a repeated alter writes nothing. A new min.insync.replicas or
unclean.leader.election.enable applies to the topic's partitions in the same batch
(``eligible_leaders.after_config_change``). Broker configs
(``raftka.metadata.broker_configs``) are named by a broker id or ``""`` for the default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raftka.metadata import elections, eligible_leaders
from raftka.metadata.broker_configs import BROKER_CONFIGS, check_broker_name, validate_broker_config
from raftka.metadata.image import BROKER, TOPIC, MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates
from raftka.metadata.topic_configs import (
    TOPIC_CONFIGS,
    check_compaction_lags,
    check_min_insync_replicas,
    describe_configs,
    validate_config,
)
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2, metadata_pb2

SET = controller_pb2.ALTER_CONFIG_SET
DELETE = controller_pb2.ALTER_CONFIG_DELETE


def describe(
    image: MetadataImage, request: controller_pb2.DescribeConfigsRequest
) -> controller_pb2.DescribeConfigsResponse:
    """Every topic's configs when ``topics`` is empty."""
    response = controller_pb2.DescribeConfigsResponse()
    for name in list(request.topics) or sorted(image.topic_ids_by_name):
        entry = response.topics.add(topic=name)
        if name not in image.topic_ids_by_name:
            entry.error, entry.message = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {name!r} does not exist",
            )
            continue
        explicit = image.configs.get((TOPIC, name), {})
        for key, value, is_default in describe_configs(explicit):
            entry.entries.add(name=key, value=value, is_default=is_default)
    for name in request.brokers:
        result = response.brokers.add(broker=name)
        try:
            check_broker_name(name)
        except ValidationError as e:
            result.error, result.message = e.code, e.message
            continue
        explicit = image.configs.get((BROKER, name), {})
        for key, value, is_default in describe_configs(explicit, BROKER_CONFIGS):
            result.entries.add(name=key, value=value, is_default=is_default)
    return response


def alter(
    image: MetadataImage,
    request: controller_pb2.AlterConfigsRequest,
    may_lead: elections.MayLead = elections.anyone,
) -> Plan:
    """``may_lead``: who an offline partition the new configs let elect may choose
    (the controller's: not a broker in controlled shutdown or reporting it offline)."""
    response = controller_pb2.AlterConfigsResponse()
    repeated = duplicates(t.topic for t in request.topics)
    records: list[MetadataRecord] = []
    for alteration in request.topics:
        result = response.topics.add(name=alteration.topic)
        try:
            if alteration.topic in repeated:
                raise ValidationError(
                    ErrorCode.INVALID_REQUEST, f"topic {alteration.topic!r} appears more than once"
                )
            changes = _changes(image, alteration, may_lead)
        except ValidationError as e:
            result.error, result.message = e.code, e.message
            continue
        result.topic_id = image.topic_ids_by_name[alteration.topic]
        if not request.validate_only:
            records.extend(changes)
    repeated = duplicates(b.broker for b in request.brokers)
    for broker_alteration in request.brokers:
        broker_result = response.brokers.add(broker=broker_alteration.broker)
        try:
            if broker_alteration.broker in repeated:
                raise ValidationError(
                    ErrorCode.INVALID_REQUEST, f"broker {broker_alteration.broker!r} appears more than once"
                )
            check_broker_name(broker_alteration.broker)
            current = image.configs.get((BROKER, broker_alteration.broker), {})
            after = _altered(current, broker_alteration.ops, BROKER_CONFIGS, validate_broker_config, "broker")
        except ValidationError as e:
            broker_result.error, broker_result.message = e.code, e.message
            continue
        if not request.validate_only:
            records.extend(_config_records(BROKER, broker_alteration.broker, current, after))
    return Plan(response, records)


def _changes(
    image: MetadataImage, alteration: controller_pb2.AlterTopicConfigs, may_lead: elections.MayLead
) -> list[MetadataRecord]:
    name = alteration.topic
    topic = image.topic(name)
    if topic is None:
        raise ValidationError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    current = image.configs.get((TOPIC, name), {})
    after = _altered(current, alteration.ops, TOPIC_CONFIGS, validate_config, "topic")
    replication_factor = min((len(p.replicas) for p in topic.partitions.values()), default=0)
    check_min_insync_replicas(after, replication_factor)
    check_compaction_lags(after)
    records = _config_records(TOPIC, name, current, after)
    if eligible_leaders.policy(after) != eligible_leaders.policy(current):
        records += eligible_leaders.after_config_change(
            image, topic, eligible_leaders.policy(after), may_lead
        )
    return records


def _altered(
    current: Mapping[str, str],
    ops: list[controller_pb2.AlterConfigOp],
    definitions: Mapping[str, object],
    validate: Callable[[str, str], str],
    entity: str,
) -> dict[str, str]:
    """The explicit configs after ``ops``, each value validated; the first bad op raises."""
    repeated = duplicates(op.name for op in ops)
    if repeated:
        raise ValidationError(
            ErrorCode.INVALID_REQUEST, f"config {sorted(repeated)[0]!r} appears more than once"
        )
    after = dict(current)
    for op in ops:
        if op.op == SET:
            after[op.name] = validate(op.name, op.value)
        elif op.op == DELETE:
            if op.name not in definitions and op.name not in current:
                raise ValidationError(ErrorCode.INVALID_CONFIG, f"unknown {entity} config {op.name!r}")
            after.pop(op.name, None)
        else:
            raise ValidationError(ErrorCode.INVALID_REQUEST, f"config {op.name!r}: unknown operation {op.op}")
    return after


def _config_records(
    resource_type: int, name: str, current: Mapping[str, str], after: Mapping[str, str]
) -> list[MetadataRecord]:
    """One ConfigRecord per key whose value really changes (unset value: deleted)."""
    records = []
    for key in sorted(current.keys() | after.keys()):
        if current.get(key) == after.get(key):
            continue
        record = metadata_pb2.ConfigRecord(resource_type=resource_type, resource_name=name, name=key)
        if key in after:
            record.value = after[key]
        records.append(MetadataRecord(config=record))
    return records
