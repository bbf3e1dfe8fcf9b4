"""Client quota requests (Kafka's AlterClientQuotas and DescribeClientQuotas, ``raftka
quotas``), pure functions of the image like the other ``*_ops`` modules.

An alteration is checked per entry, as Kafka does: an entry with a bad entity, key or
value is answered with INVALID_REQUEST naming the field and writes nothing; the others
become one ClientQuotaRecord per key whose value really changes, all in one batch.
"""

from __future__ import annotations

from raftka.metadata import quotas
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates, refuse
from raftka.metadata.quotas import QuotaEntity
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def alter(image: MetadataImage, request: controller_pb2.AlterClientQuotasRequest) -> Plan:
    response = controller_pb2.AlterClientQuotasResponse()
    problems = [
        quotas.entity_problem(e.entity, f"entries[{i}].entity") for i, e in enumerate(request.entries)
    ]
    entities = [
        None if p else quotas.entity_of(e.entity) for e, p in zip(request.entries, problems, strict=True)
    ]
    repeated = duplicates(e for e in entities if e is not None)
    records: list[MetadataRecord] = []
    added: set[QuotaEntity] = set()
    for i, (entry, entity, problem) in enumerate(zip(request.entries, entities, problems, strict=True)):
        result = response.entries.add(entity=entry.entity)
        try:
            if entity is None:
                raise ValidationError(ErrorCode.INVALID_REQUEST, problem or "")
            if entity in repeated:
                raise ValidationError(
                    ErrorCode.INVALID_REQUEST, f"entries[{i}].entity: {entity} appears twice"
                )
            changes = _changes(image, entity, entry, f"entries[{i}]")
        except ValidationError as e:
            result.error, result.message = e.code, e.message
            continue
        if entity not in image.client_quotas and changes:
            added.add(entity)
        if not request.validate_only:
            records.extend(changes)
    if len(image.client_quotas) + len(added) > quotas.ENTITIES_MAX:
        return refuse(
            response,
            ErrorCode.INVALID_REQUEST,
            f"entries: the cluster would hold quotas for more than {quotas.ENTITIES_MAX} entities",
        )
    return Plan(response, records)


def _changes(
    image: MetadataImage, entity: QuotaEntity, entry: controller_pb2.ClientQuotaAlteration, where: str
) -> list[MetadataRecord]:
    repeated = duplicates(op.key for op in entry.ops)
    if repeated:
        raise ValidationError(
            ErrorCode.INVALID_REQUEST, f"{where}.ops: key {sorted(repeated)[0]!r} appears twice"
        )
    current = image.client_quotas.get(entity, {})
    records = []
    for j, op in enumerate(entry.ops):
        field = f"{where}.ops[{j}]"
        if op.remove:
            if op.key not in quotas.KEYS:
                raise ValidationError(
                    ErrorCode.INVALID_REQUEST,
                    f"{field}.key: {op.key!r} is not one of {', '.join(quotas.KEYS)}",
                )
            if op.key in current:
                records.append(MetadataRecord(client_quota=quotas.record(entity, op.key, None)))
            continue
        problem = quotas.value_problem(op.key, op.value, field)
        if problem is not None:
            raise ValidationError(ErrorCode.INVALID_REQUEST, problem)
        if current.get(op.key) != op.value:
            records.append(MetadataRecord(client_quota=quotas.record(entity, op.key, op.value)))
    return records


def describe(
    image: MetadataImage, request: controller_pb2.DescribeClientQuotasRequest
) -> controller_pb2.DescribeClientQuotasResponse:
    response = controller_pb2.DescribeClientQuotasResponse()
    problem = _filter_problem(request)
    if problem is not None:
        response.status.error, response.status.message = ErrorCode.INVALID_REQUEST, problem
        return response
    for entity, values in sorted(image.client_quotas.items(), key=lambda item: item[0].sort_key()):
        if _matches(entity, request):
            response.entries.add(entity=entity.to_pb(), values=dict(values))
    return response


def _filter_problem(request: controller_pb2.DescribeClientQuotasRequest) -> str | None:
    seen: set[str] = set()
    for i, component in enumerate(request.components):
        field = f"components[{i}]"
        if component.entity_type not in quotas.ENTITY_TYPES:
            return f"{field}.entity_type: {component.entity_type!r} is not one of {', '.join(quotas.ENTITY_TYPES)}"
        if component.entity_type in seen:
            return f"{field}.entity_type: {component.entity_type!r} appears twice"
        seen.add(component.entity_type)
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return f"{field}.match_type: {component.match_type} is not 0 (exact), 1 (default) or 2 (any)"
        if component.match_type == MATCH_EXACT and not component.match:
            return f"{field}.match: an exact match needs a name"
    return None


def _matches(entity: QuotaEntity, request: controller_pb2.DescribeClientQuotasRequest) -> bool:
    names = dict(entity.components())  # type -> name, None for the default
    for component in request.components:
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not request.strict or set(names) <= {c.entity_type for c in request.components}
