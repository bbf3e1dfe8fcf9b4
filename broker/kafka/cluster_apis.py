"""Kafka's Metadata, CreateTopics, DeleteTopics and DescribeConfigs.

Metadata and DescribeConfigs are answered from the broker's own metadata image, as a
Kafka broker answers from its metadata cache; CreateTopics and DeleteTopics are
forwarded to the active controller, as a KRaft broker forwards them. Metadata names this
broker as the controller: Kafka clients send admin requests to the controller a broker
names, and every raftka broker forwards them.

Metadata naming a topic that does not exist creates it when the client allows it and
``kafka.auto_create_topics_enable`` is on (Kafka's default), answering
LEADER_NOT_AVAILABLE meanwhile, so the client asks again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from raftka.broker.authorization import Caller, RequestAuthorizer
from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.endpoints import kafka_endpoints
from raftka.broker.kafka.errors import INVALID_REQUEST, UNKNOWN_TOPIC_ID, kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.broker.kafka.topic_ids import id_bytes
from raftka.metadata import acls
from raftka.metadata.broker_configs import BROKER_CONFIGS, CLUSTER_DEFAULT
from raftka.metadata.image import NO_LEADER, MetadataImage, TopicImage
from raftka.metadata.topic_configs import TOPIC_CONFIGS, describe_configs
from raftka.node.config import NodeConfig
from raftka.node.logs import RateLimitedLog
from raftka.v1 import controller_pb2, metadata_pb2

E = controller_pb2.ErrorCode
C = controller_pb2
log = structlog.get_logger("raftka.broker.kafka")

LEADER_NOT_AVAILABLE = kafka_error(E.LEADER_NOT_AVAILABLE)
TOPIC_AUTHORIZATION_FAILED = kafka_error(E.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_AUTHORIZATION_FAILED = kafka_error(E.CLUSTER_AUTHORIZATION_FAILED)
UNKNOWN_TOPIC_OR_PARTITION = kafka_error(E.UNKNOWN_TOPIC_OR_PARTITION)
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # DescribeConfigs resource types
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3  # config sources
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7}
DEFAULT_FROM_BROKER = -1  # CreateTopics: num_partitions or replication_factor left to the broker
NOT_CREATED_LOG_INTERVAL_S = 60.0
PARTITIONS_PER_SLICE = 2_000  # a Metadata answer's partitions made between returns to the loop (~10-20 ms)
MR = MetadataResponse.MetadataResponseTopic
DR = DescribeConfigsResponse.DescribeConfigsResult


class ClusterApis:
    def __init__(self, api: BrokerApi, config: NodeConfig) -> None:
        self._api = api
        self._config = config
        self._broker_id = config.node_id
        self._not_created = RateLimitedLog(log, NOT_CREATED_LOG_INTERVAL_S)  # any client names bad topics

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(MetadataRequest, 0, 12, self.metadata),
            KafkaApi(CreateTopicsRequest, 0, 7, self.create_topics),
            KafkaApi(DeleteTopicsRequest, 0, 6, self.delete_topics),
            KafkaApi(DescribeConfigsRequest, 0, 4, self.describe_configs),
        ]

    # metadata ---------------------------------------------------------------------------

    async def metadata(self, request: MetadataRequest, version: int) -> MetadataResponse:
        image = self._api.image
        endpoints = kafka_endpoints(image)
        asked = request.topics
        auth = self._api.authorizer
        caller = auth.caller()
        if asked is None or (version == 0 and not asked):  # null (v0: empty) means every topic
            by_name = sorted(image.topics_by_id.values(), key=lambda t: t.name)
            describable = auth.allowed_names(caller, acls.DESCRIBE, acls.TOPIC, (t.name for t in by_name))
            shown = [t for t in by_name if t.name in describable]
            topics = await _in_slices(shown, lambda t: self._topic(t, endpoints))
        else:
            topics = await _in_slices(asked, lambda t: self._asked_topic(image, t, endpoints))
            named = [t.name for t in topics if t.name is not None]  # None: an unknown topic id
            describable = auth.allowed_names(caller, acls.DESCRIBE, acls.TOPIC, named)
            topics = [
                t if t.name is None or t.name in describable else _unauthorized_topic(t, by_id=a.name is None)
                for a, t in zip(asked, topics, strict=True)
            ]
            missing = [t.name for t in topics if t.error_code == UNKNOWN_TOPIC_OR_PARTITION]
            allowed = version < 4 or request.allow_auto_topic_creation
            if missing and allowed and self._config.kafka.auto_create_topics_enable:
                creatable = set(missing)
                if not auth.allows(caller, acls.CREATE, acls.CLUSTER, acls.CLUSTER_NAME):
                    creatable = auth.allowed_names(caller, acls.CREATE, acls.TOPIC, missing)
                codes = await self._auto_create([name for name in missing if name in creatable])
                for topic in topics:
                    if topic.error_code == UNKNOWN_TOPIC_OR_PARTITION and topic.name not in creatable:
                        topic.error_code = TOPIC_AUTHORIZATION_FAILED
                    topic.error_code = codes.get(topic.name, topic.error_code)
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=e.broker_id, host=e.host, port=e.port, rack=e.rack
                )
                for e in sorted(endpoints.values(), key=lambda e: e.broker_id)
            ],
            cluster_id=self._api.cluster_id,
            controller_id=self._broker_id,
            topics=topics,
        )

    def _asked_topic(
        self, image: MetadataImage, asked: MetadataRequest.MetadataRequestTopic, endpoints: dict
    ) -> MR:
        if asked.name is None:  # v10+: by id
            topic = image.topics_by_id.get(id_bytes(asked.topic_id))
            if topic is None:
                return MR(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=asked.topic_id, partitions=[])
            return self._topic(topic, endpoints)
        topic = image.topic(asked.name)
        if topic is None:
            return MR(
                error_code=UNKNOWN_TOPIC_OR_PARTITION,
                name=asked.name,
                topic_id=uuid.UUID(int=0),
                partitions=[],
            )
        return self._topic(topic, endpoints)

    async def _auto_create(self, names: list[str]) -> dict[str, int]:
        """Create ``names`` in one CreateTopics: LEADER_NOT_AVAILABLE for each being
        created (the client asks again), else why it cannot be."""
        if not names:
            return {}
        kafka = self._config.kafka
        request = C.CreateTopicsRequest(
            topics=[
                C.CreatableTopic(
                    name=name,
                    num_partitions=kafka.num_partitions,
                    replication_factor=kafka.default_replication_factor,
                )
                for name in dict.fromkeys(names)
            ]
        )
        answer = await self._api.forward(lambda stub: stub.CreateTopics, request, C.CreateTopicsResponse)
        outcomes = {t.name: t.error for t in answer.topics}
        codes = {}
        for name in names:
            code = answer.status.error or outcomes.get(name, E.UNKNOWN_SERVER_ERROR)
            if code == E.NONE:
                log.info("topic auto-created", topic=name)
            if code in (E.NONE, E.TOPIC_ALREADY_EXISTS):
                codes[name] = LEADER_NOT_AVAILABLE
            else:
                self._not_created.log(
                    logging.INFO, "topic not auto-created", topic=name, error=C.ErrorCode.Name(code)
                )
                codes[name] = kafka_error(
                    E.UNKNOWN_TOPIC_OR_PARTITION if code == E.REQUEST_TIMED_OUT else code
                )
        return codes

    @staticmethod
    def _topic(topic: TopicImage, endpoints: dict) -> MR:
        partitions = []
        for index in sorted(topic.partitions):
            state = topic.partitions[index]
            online = state.leader != NO_LEADER and state.leader in endpoints
            partitions.append(
                MR.MetadataResponsePartition(
                    error_code=0 if online else LEADER_NOT_AVAILABLE,
                    partition_index=index,
                    leader_id=state.leader if online else -1,
                    leader_epoch=state.leader_epoch,
                    replica_nodes=list(state.replicas),
                    isr_nodes=list(state.isr),
                    offline_replicas=[r for r in state.replicas if r not in endpoints],
                )
            )
        return MR(
            error_code=0,
            name=topic.name,
            topic_id=uuid.UUID(bytes=topic.topic_id),
            is_internal=False,
            partitions=partitions,
        )

    # topics -----------------------------------------------------------------------------

    async def create_topics(self, request: CreateTopicsRequest, version: int) -> CreateTopicsResponse:
        kafka = self._config.kafka
        results: dict[str, CreateTopicsResponse.CreatableTopicResult] = {}
        ours = C.CreateTopicsRequest(validate_only=request.validate_only)
        auth = self._api.authorizer
        caller = auth.caller()
        creatable = {t.name for t in request.topics}
        if not auth.allows(caller, acls.CREATE, acls.CLUSTER, acls.CLUSTER_NAME):
            creatable = auth.allowed_names(caller, acls.CREATE, acls.TOPIC, creatable)
        for topic in request.topics:
            problem = _create_problem(topic)
            if problem is not None:
                results[topic.name] = _created(topic.name, INVALID_REQUEST, problem)
                continue
            if topic.name not in creatable:
                why = f"{caller.principal if caller else ''} may not CREATE topic {topic.name!r}"
                results[topic.name] = _created(topic.name, TOPIC_AUTHORIZATION_FAILED, why)
                continue
            ours.topics.add(
                name=topic.name,
                num_partitions=kafka.num_partitions
                if topic.num_partitions == DEFAULT_FROM_BROKER
                else topic.num_partitions,
                replication_factor=(
                    kafka.default_replication_factor
                    if topic.replication_factor == DEFAULT_FROM_BROKER
                    else topic.replication_factor
                ),
                configs={c.name: c.value for c in topic.configs},
            )
        if ours.topics:
            answer = await self._api.forward(lambda stub: stub.CreateTopics, ours, C.CreateTopicsResponse)
            outcomes = {t.name: t for t in answer.topics}
            for asked in ours.topics:
                outcome = outcomes.get(asked.name)
                code = (
                    answer.status.error if answer.status.error != E.NONE or outcome is None else outcome.error
                )
                message = (
                    answer.status.message
                    if answer.status.error != E.NONE or outcome is None
                    else outcome.message
                )
                result = _created(asked.name, kafka_error(code), kafka_message(code, message))
                if code == E.NONE:
                    result.topic_id = (
                        uuid.UUID(bytes=outcome.topic_id) if outcome.topic_id else uuid.UUID(int=0)
                    )
                    result.num_partitions = asked.num_partitions
                    result.replication_factor = asked.replication_factor
                    result.configs = [
                        CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs(
                            name=name,
                            value=value,
                            read_only=False,
                            config_source=DEFAULT_CONFIG if is_default else DYNAMIC_TOPIC_CONFIG,
                            is_sensitive=False,
                        )
                        for name, value, is_default in describe_configs(dict(asked.configs))
                    ]
                results[asked.name] = result
        return CreateTopicsResponse(throttle_time_ms=0, topics=[results[t.name] for t in request.topics])

    async def delete_topics(self, request: DeleteTopicsRequest, version: int) -> DeleteTopicsResponse:
        image = self._api.image
        asked: list[tuple[str | None, uuid.UUID]] = []
        by_id: set[str] = set()  # names the request gave only as topic ids
        if version >= 6:
            for t in request.topics:
                known = (
                    image.topics_by_id.get(id_bytes(t.topic_id)) if t.name is None else image.topic(t.name)
                )
                if t.name is None and known is not None:
                    by_id.add(known.name)
                asked.append(
                    (
                        t.name if known is None else known.name,
                        t.topic_id if known is None else uuid.UUID(bytes=known.topic_id),
                    )
                )
        else:
            asked = [(name, uuid.UUID(int=0)) for name in request.topic_names]
        auth = self._api.authorizer
        caller = auth.caller()
        deletable = auth.allowed_names(
            caller, acls.DELETE, acls.TOPIC, (n for n, _ in asked if n is not None)
        )
        describable = deletable | auth.allowed_names(caller, acls.DESCRIBE, acls.TOPIC, by_id - deletable)
        names = [name for name, _ in asked if name in deletable]
        answer = C.DeleteTopicsResponse()
        if names:
            answer = await self._api.forward(
                lambda stub: stub.DeleteTopics, C.DeleteTopicsRequest(names=names), C.DeleteTopicsResponse
            )
        outcomes = {t.name: t for t in answer.topics}
        results = []
        for name, topic_id in asked:
            outcome = outcomes.get(name) if name is not None else None
            if name is None:
                code, message = UNKNOWN_TOPIC_ID, "no topic with that id"
            elif name in by_id and name not in describable:  # Kafka: its name is not told
                name, code = None, TOPIC_AUTHORIZATION_FAILED
                message = f"{caller.principal if caller else ''} may not DESCRIBE topic id {topic_id}"
            elif name not in deletable:
                code = TOPIC_AUTHORIZATION_FAILED
                message = f"{caller.principal if caller else ''} may not DELETE topic {name!r}"
            elif answer.status.error != E.NONE or outcome is None:
                code, message = (
                    kafka_error(answer.status.error or E.UNKNOWN_SERVER_ERROR),
                    answer.status.message,
                )
            else:
                code, message = kafka_error(outcome.error), outcome.message
            results.append(
                DeleteTopicsResponse.DeletableTopicResult(
                    name=name, topic_id=topic_id, error_code=code, error_message=message if code else None
                )
            )
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    # configs ----------------------------------------------------------------------------

    async def describe_configs(
        self, request: DescribeConfigsRequest, version: int
    ) -> DescribeConfigsResponse:
        image = self._api.image
        auth = self._api.authorizer
        caller = auth.caller()
        results = []
        for resource in request.resources:
            keys = None if resource.configuration_keys is None else set(resource.configuration_keys)
            refused = _configs_refusal(auth, caller, resource.resource_type, resource.resource_name)
            if refused is not None:
                result = refused
            elif resource.resource_type == TOPIC_RESOURCE:
                result = self._topic_configs(image, resource.resource_name, request.include_synonyms)
            elif resource.resource_type == BROKER_RESOURCE:
                result = self._broker_configs(image, resource.resource_name, request.include_synonyms)
            else:
                why = f"resource_type: {resource.resource_type} is not a topic (2) or a broker (4)"
                result = DR(error_code=INVALID_REQUEST, error_message=why, configs=[])
            result.resource_type, result.resource_name = resource.resource_type, resource.resource_name
            if keys is not None:
                result.configs = [c for c in result.configs if c.name in keys]
            results.append(result)
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    @staticmethod
    def _topic_configs(image: MetadataImage, name: str, synonyms: bool) -> DR:
        if image.topic(name) is None:
            return DR(
                error_code=kafka_error(E.UNKNOWN_TOPIC_OR_PARTITION),
                error_message=f"no topic {name!r}",
                configs=[],
            )
        explicit = image.configs.get((metadata_pb2.CONFIG_RESOURCE_TOPIC, name), {})
        entries = []
        for key, value, is_default in describe_configs(explicit):
            source = DEFAULT_CONFIG if is_default else DYNAMIC_TOPIC_CONFIG
            known = TOPIC_CONFIGS.get(key)
            entries.append(
                _config_entry(
                    key,
                    value,
                    source,
                    read_only=False,
                    synonyms=synonyms,
                    kind=known.kind if known else "STRING",
                    doc=known.doc if known else None,
                )
            )
        return DR(error_code=0, error_message=None, configs=entries)

    def _broker_configs(self, image: MetadataImage, name: str, synonyms: bool) -> DR:
        if name not in ("", str(self._broker_id)):
            return DR(
                error_code=INVALID_REQUEST,
                error_message=f"this is broker {self._broker_id}: ask broker {name}",
                configs=[],
            )
        entries = [
            _config_entry(
                key,
                str(value).lower() if isinstance(value, bool) else str(value),
                STATIC_BROKER_CONFIG,
                read_only=True,
                synonyms=synonyms,
                kind=_kind(value),
                doc=None,
            )
            for key, value in _static_keys(self._config)
        ]
        entries += _dynamic_broker_entries(image, name, synonyms)
        return DR(error_code=0, error_message=None, configs=entries)


async def _in_slices(topics: Iterable[Any], answer: Callable[[Any], MR]) -> list[MR]:
    """``answer`` for each topic, back to the loop after every ``PARTITIONS_PER_SLICE``
    partitions answered: a Metadata answer names every partition of the topics it lists,
    and 100,000 of them took the loop for 2 to 3 s in one go (the broker's heartbeats
    wait behind it). The image was read once, so the answer is still one image's."""
    answers, since = [], 0
    for topic in topics:
        answers.append(answer(topic))
        since += len(answers[-1].partitions)
        if since >= PARTITIONS_PER_SLICE:
            since = 0
            await asyncio.sleep(0)
    return answers


def _static_keys(config: NodeConfig) -> Iterable[tuple[str, object]]:
    """The broker's own keys, as its config file names them (``broker.rack``)."""
    yield "node_id", config.node_id
    for table, values in (("broker", config.broker), ("kafka", config.kafka)):
        for f in dataclasses.fields(values):
            yield f"{table}.{f.name}", getattr(values, f.name)


def _dynamic_broker_entries(
    image: MetadataImage, name: str, synonyms: bool
) -> list[DR.DescribeConfigsResourceResult]:
    """The dynamic broker configs (``raftka configs alter --broker``) as this broker runs with
    them: its own value, else the cluster default, else the built-in default (Kafka's sources)."""
    own = image.configs.get((metadata_pb2.CONFIG_RESOURCE_BROKER, name), {}) if name else {}
    shared = image.configs.get((metadata_pb2.CONFIG_RESOURCE_BROKER, CLUSTER_DEFAULT), {})
    entries = []
    for key, definition in BROKER_CONFIGS.items():
        if key in own:
            value, source = own[key], DYNAMIC_BROKER_CONFIG
        elif key in shared:
            value, source = shared[key], DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            value, source = definition.default, DEFAULT_CONFIG
        entries.append(
            _config_entry(
                key,
                value,
                source,
                read_only=False,
                synonyms=synonyms,
                kind=definition.kind,
                doc=definition.doc,
            )
        )
    return entries


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "BOOLEAN"
    return "LONG" if isinstance(value, int) else "STRING"


def _config_entry(
    name: str, value: str, source: int, *, read_only: bool, synonyms: bool, kind: str, doc: str | None
) -> DR.DescribeConfigsResourceResult:
    entry = DR.DescribeConfigsResourceResult
    return entry(
        name=name,
        value=value,
        read_only=read_only,
        config_source=source,
        is_default=source == DEFAULT_CONFIG,
        is_sensitive=False,
        synonyms=[entry.DescribeConfigsSynonym(name=name, value=value, source=source)] if synonyms else [],
        config_type=CONFIG_TYPES[kind],
        documentation=doc,
    )


def _configs_refusal(
    auth: RequestAuthorizer, caller: Caller | None, resource_type: int, name: str
) -> DR | None:
    """Kafka's DESCRIBE_CONFIGS check: on the topic, or on the cluster for a broker's."""
    if resource_type == TOPIC_RESOURCE and not auth.allows(caller, acls.DESCRIBE_CONFIGS, acls.TOPIC, name):
        code = TOPIC_AUTHORIZATION_FAILED
    elif resource_type == BROKER_RESOURCE and not auth.allows(
        caller, acls.DESCRIBE_CONFIGS, acls.CLUSTER, acls.CLUSTER_NAME
    ):
        code = CLUSTER_AUTHORIZATION_FAILED
    else:
        return None
    assert caller is not None
    return DR(error_code=code, error_message=f"{caller.principal} may not DESCRIBE_CONFIGS it", configs=[])


def _unauthorized_topic(topic: MR, by_id: bool) -> MR:
    """Kafka's answer for a topic the client may not describe, whether it exists or not:
    asked by name, the name; asked by id (v10+), the id and no name (a name is what the
    client may not learn; Kafka does not hold topic ids secret)."""
    return MR(
        error_code=TOPIC_AUTHORIZATION_FAILED,
        name=None if by_id else topic.name,
        topic_id=topic.topic_id if by_id else uuid.UUID(int=0),
        is_internal=False,
        partitions=[],
    )


def _create_problem(topic: CreateTopicsRequest.CreatableTopic) -> str | None:
    if topic.assignments:
        return "assignments: raftka places replicas itself; give num_partitions and replication_factor"
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        return f"configs: {nulls[0]} has no value"
    return None


def _created(name: str, code: int, message: str | None) -> CreateTopicsResponse.CreatableTopicResult:
    return CreateTopicsResponse.CreatableTopicResult(
        name=name,
        topic_id=uuid.UUID(int=0),
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )
