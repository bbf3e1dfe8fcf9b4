"""Kafka's IncrementalAlterConfigs (API 44, what ``kafka-configs --alter`` and
``kafka-reassign-partitions --throttle`` send) for topics and brokers, forwarded to the active
controller as a KRaft broker forwards it: one controller request per resource, so each is
judged (ALTER_CONFIGS on the topic, or on the cluster for a broker or the broker default,
``""``) and answered on its own, as Kafka answers them. SET and DELETE only: APPEND and
SUBTRACT are refused, naming the config (SET the whole list instead).
"""

from __future__ import annotations

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import INVALID_REQUEST, kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.v1 import controller_pb2

C = controller_pb2
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
OPERATIONS = {0: C.ALTER_CONFIG_SET, 1: C.ALTER_CONFIG_DELETE}  # Kafka's SET, DELETE
R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


class ConfigApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [KafkaApi(IncrementalAlterConfigsRequest, 0, 1, self.incremental_alter_configs)]

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, version: int
    ) -> IncrementalAlterConfigsResponse:
        responses = []
        for i, resource in enumerate(request.resources):
            code, message = await self._alter(i, resource, request.validate_only)
            responses.append(
                R(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)

    async def _alter(self, i: int, resource, validate_only: bool) -> tuple[int, str | None]:  # noqa: ANN001 - a request resource
        ours = C.AlterConfigsRequest(validate_only=validate_only)
        if resource.resource_type == TOPIC_RESOURCE:
            entry = ours.topics.add(topic=resource.resource_name)
        elif resource.resource_type == BROKER_RESOURCE:
            entry = ours.brokers.add(broker=resource.resource_name)
        else:
            why = f"resources[{i}].resource_type: {resource.resource_type} is not a topic (2) or a broker (4)"
            return INVALID_REQUEST, why
        for j, config in enumerate(resource.configs):
            op = OPERATIONS.get(config.config_operation)
            if op is None:
                why = (
                    f"resources[{i}].configs[{j}].config_operation: {config.config_operation} on "
                    f"{config.name!r}: only SET (0) and DELETE (1); SET the whole list instead"
                )
                return INVALID_REQUEST, why
            entry.ops.add(name=config.name, value=config.value or "", op=op)
        answer = await self._api.forward(lambda stub: stub.AlterConfigs, ours, C.AlterConfigsResponse)
        if answer.status.error != C.NONE:
            code, message = answer.status.error, answer.status.message
        else:
            [result] = answer.topics if resource.resource_type == TOPIC_RESOURCE else answer.brokers
            code, message = result.error, result.message
        return kafka_error(code), kafka_message(code, message)
