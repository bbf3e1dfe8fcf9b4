"""ACL requests (``raftka acls add|list|remove``), pure functions of the image like the
other ``*_ops`` modules. A create writes one AccessControlEntryRecord per ACL not there
yet; a delete one RemoveAccessControlEntryRecord per ACL a filter matches; both commit
as one batch, or nothing is written."""

from __future__ import annotations

from dataclasses import astuple

from raftka.metadata import acls
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, refuse
from raftka.v1 import controller_pb2, metadata_pb2


def create(image: MetadataImage, request: controller_pb2.CreateAclsRequest) -> Plan:
    response = controller_pb2.CreateAclsResponse()
    new: dict[str, acls.Acl] = {}
    for i, binding in enumerate(request.acls):
        problem = acls.binding_problem(binding, f"acls[{i}]")
        if problem is not None:
            return refuse(response, ErrorCode.INVALID_REQUEST, problem)
        acl = acls.from_pb(binding)
        if acl.id not in image.acls:
            new[acl.id] = acl
    if len(image.acls) + len(new) > acls.ACLS_MAX:
        return refuse(
            response,
            ErrorCode.INVALID_REQUEST,
            f"acls: the cluster would hold more than {acls.ACLS_MAX} ACLs",
        )
    return Plan(response, [MetadataRecord(access_control_entry=acl.record()) for acl in new.values()])


def delete(image: MetadataImage, request: controller_pb2.DeleteAclsRequest) -> Plan:
    response = controller_pb2.DeleteAclsResponse()
    if not request.filters:
        return refuse(
            response, ErrorCode.INVALID_REQUEST, "filters: name at least one (an empty filter matches all)"
        )
    doomed = {
        acl_id: acl
        for acl_id, acl in sorted(image.acls.items())
        if any(acls.matches(acl, acl_filter) for acl_filter in request.filters)
    }
    response.deleted.extend(acl.to_pb() for acl in doomed.values())
    records = [
        MetadataRecord(remove_access_control_entry=metadata_pb2.RemoveAccessControlEntryRecord(id=acl_id))
        for acl_id in doomed
    ]
    return Plan(response, records)


def describe(
    image: MetadataImage, request: controller_pb2.DescribeAclsRequest
) -> controller_pb2.DescribeAclsResponse:
    response = controller_pb2.DescribeAclsResponse()
    matching = [acl for acl in image.acls.values() if acls.matches(acl, request.filter)]
    response.acls.extend(acl.to_pb() for acl in sorted(matching, key=astuple))
    return response
