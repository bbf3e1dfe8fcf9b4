"""Kafka's AlterClientQuotas and DescribeClientQuotas (what ``kafka-configs.sh --entity-type
users|clients`` and Admin clients send).

AlterClientQuotas is forwarded to the active controller, as a KRaft broker forwards it;
DescribeClientQuotas is answered from the broker's own image, with the controller's
filter rules (``raftka.metadata.quota_ops``), to a caller with DESCRIBE_CONFIGS on the
cluster (Kafka's check; anyone else is answered CLUSTER_AUTHORIZATION_FAILED: the quotas
name users and client ids). A null entity name is the default entity.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from raftka.broker.authorization import refusal
from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.metadata import acls, quota_ops
from raftka.v1 import controller_pb2, metadata_pb2

E = controller_pb2.ErrorCode
C = controller_pb2


class QuotaApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(DescribeClientQuotasRequest, 0, 1, self.describe_client_quotas),
            KafkaApi(AlterClientQuotasRequest, 0, 1, self.alter_client_quotas),
        ]

    async def alter_client_quotas(
        self, request: AlterClientQuotasRequest, version: int
    ) -> AlterClientQuotasResponse:
        ours = C.AlterClientQuotasRequest(validate_only=request.validate_only)
        for entry in request.entries:
            ours.entries.add(
                entity=_entity(entry.entity),
                ops=[C.ClientQuotaOp(key=op.key, value=op.value, remove=op.remove) for op in entry.ops],
            )
        answer = await self._api.forward(
            lambda stub: stub.AlterClientQuotas, ours, C.AlterClientQuotasResponse
        )
        refused = answer.status.error != E.NONE
        results = []
        for i, entry in enumerate(request.entries):
            outcome = None if refused or i >= len(answer.entries) else answer.entries[i]
            code, message = (
                (answer.status.error, answer.status.message)
                if outcome is None
                else (outcome.error, outcome.message)
            )
            results.append(
                AlterClientQuotasResponse.EntryData(
                    error_code=kafka_error(code),
                    error_message=kafka_message(code, message),
                    entity=[
                        AlterClientQuotasResponse.EntryData.EntityData(
                            entity_type=e.entity_type, entity_name=e.entity_name
                        )
                        for e in entry.entity
                    ],
                )
            )
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=results)

    async def describe_client_quotas(
        self, request: DescribeClientQuotasRequest, version: int
    ) -> DescribeClientQuotasResponse:
        ours = C.DescribeClientQuotasRequest(strict=request.strict)
        for component in request.components:
            ours.components.add(
                entity_type=component.entity_type,
                match_type=component.match_type,
                match=component.match or "",
            )
        auth = self._api.authorizer
        caller = auth.caller()
        if auth.allows(caller, acls.DESCRIBE_CONFIGS, acls.CLUSTER, acls.CLUSTER_NAME):
            answer = quota_ops.describe(self._api.image, ours)
        else:
            assert caller is not None
            answer = C.DescribeClientQuotasResponse()
            answer.status.error, answer.status.message = refusal(
                caller, acls.DESCRIBE_CONFIGS, acls.CLUSTER, acls.CLUSTER_NAME
            )
        code = answer.status.error
        if code != E.NONE:
            return DescribeClientQuotasResponse(
                throttle_time_ms=0,
                error_code=kafka_error(code),
                error_message=kafka_message(code, answer.status.message),
                entries=None,
            )
        DR = DescribeClientQuotasResponse.EntryData
        entries = [
            DR(
                entity=[
                    DR.EntityData(
                        entity_type=c.entity_type,
                        entity_name=c.entity_name if c.HasField("entity_name") else None,
                    )
                    for c in entry.entity
                ],
                values=[DR.ValueData(key=key, value=value) for key, value in sorted(entry.values.items())],
            )
            for entry in answer.entries
        ]
        return DescribeClientQuotasResponse(
            throttle_time_ms=0, error_code=0, error_message=None, entries=entries
        )


def _entity(components: Iterable) -> list[metadata_pb2.ClientQuotaEntity]:  # Kafka's EntityData
    out = []
    for component in components:
        entity = metadata_pb2.ClientQuotaEntity(entity_type=component.entity_type)
        if component.entity_name is not None:
            entity.entity_name = component.entity_name
        out.append(entity)
    return out
