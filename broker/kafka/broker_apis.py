"""Kafka's UnregisterBroker (API 64, what ``kafka-cluster unregister`` sends), forwarded to the
active controller as a KRaft broker forwards it; the controller judges the caller (ALTER on
the cluster)."""

from __future__ import annotations

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.broker.kafka.schemas import UnregisterBrokerRequest, UnregisterBrokerResponse
from raftka.v1 import controller_pb2

C = controller_pb2


class BrokerApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [KafkaApi(UnregisterBrokerRequest, 0, 0, self.unregister_broker)]

    async def unregister_broker(
        self, request: UnregisterBrokerRequest, version: int
    ) -> UnregisterBrokerResponse:
        answer = await self._api.forward(
            lambda stub: stub.UnregisterBroker,
            C.UnregisterBrokerRequest(broker_id=request.broker_id),
            C.UnregisterBrokerResponse,
        )
        code = answer.status.error
        return UnregisterBrokerResponse(
            throttle_time_ms=0,
            error_code=kafka_error(code),
            error_message=kafka_message(code, answer.status.message),
        )
