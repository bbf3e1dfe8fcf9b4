"""Kafka's CreateAcls, DescribeAcls and DeleteAcls, forwarded to the active controller as
CreateTopics is (so ``kafka-acls`` and confluent-kafka's ``AdminClient.create_acls`` work).

Kafka's numbers for resource types, pattern types, operations and permissions become
raftka's names (``raftka.metadata.acls``) and back. The controller judges the request as
the client's principal (ALTER on the cluster to create or delete, DESCRIBE to list) and
checks each ACL, naming the field it refuses; an ACL that is not valid is refused alone
here, the others created. A filter's ``ANY`` (or null) matches everything; ``MATCH``
(every ACL that would apply to a name) is refused, raftka's filters match fields exactly.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import INVALID_REQUEST, kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.metadata import acls
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
C = controller_pb2
ANY = 1  # every Kafka ACL enum: ANY in a filter
RESOURCE_TYPES = {2: acls.TOPIC, 3: acls.GROUP, 4: acls.CLUSTER, 5: acls.TRANSACTIONAL_ID}
PATTERN_TYPES = {3: acls.LITERAL, 4: acls.PREFIXED}
MATCH = 2
OPERATIONS = {
    2: acls.ALL,
    3: acls.READ,
    4: acls.WRITE,
    5: acls.CREATE,
    6: acls.DELETE,
    7: acls.ALTER,
    8: acls.DESCRIBE,
    9: acls.CLUSTER_ACTION,
    10: acls.DESCRIBE_CONFIGS,
    11: acls.ALTER_CONFIGS,
    12: acls.IDEMPOTENT_WRITE,
}
PERMISSIONS = {2: acls.DENY, 3: acls.ALLOW}


def _number(names: dict[int, str], name: str) -> int:
    return next(number for number, known in names.items() if known == name)


class FilterError(ValueError):
    pass


class AclApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(DescribeAclsRequest, 0, 3, self.describe_acls),
            KafkaApi(CreateAclsRequest, 0, 3, self.create_acls),
            KafkaApi(DeleteAclsRequest, 0, 3, self.delete_acls),
        ]

    async def create_acls(self, request: CreateAclsRequest, version: int) -> CreateAclsResponse:
        results: list[tuple[int, str | None] | None] = []
        ours = C.CreateAclsRequest()
        for i, creation in enumerate(request.creations):
            binding = C.AclBinding(
                resource_type=RESOURCE_TYPES.get(creation.resource_type, str(creation.resource_type)),
                resource_name=creation.resource_name,
                pattern_type=PATTERN_TYPES.get(
                    creation.resource_pattern_type, str(creation.resource_pattern_type)
                ),
                principal=creation.principal,
                host=creation.host,
                operation=OPERATIONS.get(creation.operation, str(creation.operation)),
                permission_type=PERMISSIONS.get(creation.permission_type, str(creation.permission_type)),
            )
            problem = acls.binding_problem(binding, f"creations[{i}]")
            results.append(None if problem is None else (INVALID_REQUEST, problem))
            if problem is None:
                ours.acls.append(binding)
        status = C.Status()
        if ours.acls:
            answer = await self._api.forward(lambda stub: stub.CreateAcls, ours, C.CreateAclsResponse)
            status = answer.status
        code, message = kafka_error(status.error), kafka_message(status.error, status.message)
        return CreateAclsResponse(
            throttle_time_ms=0,
            results=[
                CreateAclsResponse.AclCreationResult(
                    error_code=code if r is None else r[0], error_message=message if r is None else r[1]
                )
                for r in results
            ],
        )

    async def describe_acls(self, request: DescribeAclsRequest, version: int) -> DescribeAclsResponse:
        try:
            acl_filter = _filter(request)
        except FilterError as e:
            return DescribeAclsResponse(
                throttle_time_ms=0, error_code=INVALID_REQUEST, error_message=str(e), resources=[]
            )
        answer = await self._api.forward(
            lambda stub: stub.DescribeAcls, C.DescribeAclsRequest(filter=acl_filter), C.DescribeAclsResponse
        )
        by_resource: dict[tuple[str, str, str], list[Any]] = {}
        for acl in answer.acls:
            by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                DescribeAclsResponse.DescribeAclsResource.AclDescription(
                    principal=acl.principal,
                    host=acl.host,
                    operation=_number(OPERATIONS, acl.operation),
                    permission_type=_number(PERMISSIONS, acl.permission_type),
                )
            )
        status = answer.status
        return DescribeAclsResponse(
            throttle_time_ms=0,
            error_code=kafka_error(status.error),
            error_message=kafka_message(status.error, status.message),
            resources=[
                DescribeAclsResponse.DescribeAclsResource(
                    resource_type=_number(RESOURCE_TYPES, kind),
                    resource_name=name,
                    pattern_type=_number(PATTERN_TYPES, pattern),
                    acls=described,
                )
                for (kind, name, pattern), described in by_resource.items()
            ],
        )

    async def delete_acls(self, request: DeleteAclsRequest, version: int) -> DeleteAclsResponse:
        results = []
        for asked in request.filters:
            try:
                acl_filter = _filter(asked)
            except FilterError as e:
                results.append(_deleted(INVALID_REQUEST, str(e), []))
                continue
            answer = await self._api.forward(
                lambda stub: stub.DeleteAcls, C.DeleteAclsRequest(filters=[acl_filter]), C.DeleteAclsResponse
            )
            status = answer.status
            matching = [
                DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl(
                    error_code=0,
                    error_message=None,
                    resource_type=_number(RESOURCE_TYPES, acl.resource_type),
                    resource_name=acl.resource_name,
                    pattern_type=_number(PATTERN_TYPES, acl.pattern_type),
                    principal=acl.principal,
                    host=acl.host,
                    operation=_number(OPERATIONS, acl.operation),
                    permission_type=_number(PERMISSIONS, acl.permission_type),
                )
                for acl in answer.deleted
            ]
            results.append(
                _deleted(kafka_error(status.error), kafka_message(status.error, status.message), matching)
            )
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _deleted(code: int, message: str | None, matching: list) -> Any:
    return DeleteAclsResponse.DeleteAclsFilterResult(
        error_code=code, error_message=message, matching_acls=matching
    )


def _filter(asked: Any) -> C.AclBinding:
    """raftka's filter for a Kafka one: "" matches any value (Kafka's ANY or null)."""

    def field(names: dict[int, str], number: int, what: str) -> str:
        if number == ANY:
            return ""
        if number not in names:
            raise FilterError(
                f"{what}: {number} is not one raftka has ({', '.join(map(str, names))} or 1, ANY)"
            )
        return names[number]

    if asked.pattern_type_filter == MATCH:
        raise FilterError("pattern_type_filter: MATCH is not supported: name LITERAL, PREFIXED or ANY")
    return C.AclBinding(
        resource_type=field(RESOURCE_TYPES, asked.resource_type_filter, "resource_type_filter"),
        resource_name=asked.resource_name_filter or "",
        pattern_type=field(PATTERN_TYPES, asked.pattern_type_filter, "pattern_type_filter"),
        principal=asked.principal_filter or "",
        host=asked.host_filter or "",
        operation=field(OPERATIONS, asked.operation, "operation"),
        permission_type=field(PERMISSIONS, asked.permission_type, "permission_type"),
    )
