"""ACLs: what they are in the image, which requests may be made of them, and the
authorizer that reads them (Kafka's StandardAuthorizer, cut down).

An ACL allows or denies one principal one operation on resources: a topic, a group or
the cluster (named ``kafka-cluster``), by name (LITERAL, ``*`` for all) or by a name
prefix (PREFIXED). A principal is allowed an operation when it is a super user
(``authorizer.super_users``), or when some ACL allows it and none denies it; ``ALL``
matches every operation, ``User:*`` every principal. Hosts are not matched (``*``).

ACLs are records in the metadata log (``AccessControlEntryRecord``), so every node
replays the same ones; an ACL's id is a digest of its fields, so the same ACL created
twice is one ACL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields

from raftka.v1 import controller_pb2, metadata_pb2

TOPIC = "TOPIC"
GROUP = "GROUP"
CLUSTER = "CLUSTER"
CLUSTER_NAME = "kafka-cluster"
LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
WILDCARD = "*"
ALLOW = "ALLOW"
DENY = "DENY"
ALL = "ALL"
CREATE, DELETE, ALTER, ALTER_CONFIGS = "CREATE", "DELETE", "ALTER", "ALTER_CONFIGS"
DESCRIBE, READ, WRITE = "DESCRIBE", "READ", "WRITE"

RESOURCE_TYPES = (TOPIC, GROUP, CLUSTER)
PATTERN_TYPES = (LITERAL, PREFIXED)
OPERATIONS = (ALL, CREATE, DELETE, ALTER, ALTER_CONFIGS, DESCRIBE, READ, WRITE)
PERMISSION_TYPES = (ALLOW, DENY)
NAME_CHARS_MAX = 1_000  # a principal or a resource name
ACLS_MAX = 10_000  # ACLs in the cluster; more are refused
ACLS_PER_REQUEST_MAX = 1_000


@dataclass(frozen=True, slots=True)
class Acl:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str

    @property
    def id(self) -> str:
        text = "\0".join(getattr(self, f.name) for f in fields(self))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def to_pb(self) -> controller_pb2.AclBinding:
        return controller_pb2.AclBinding(**{f.name: getattr(self, f.name) for f in fields(self)})

    def record(self) -> metadata_pb2.AccessControlEntryRecord:
        return metadata_pb2.AccessControlEntryRecord(
            id=self.id, **{f.name: getattr(self, f.name) for f in fields(self)}
        )

    def covers(self, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (WILDCARD, name)


def from_pb(message: controller_pb2.AclBinding | metadata_pb2.AccessControlEntryRecord) -> Acl:
    return Acl(**{f.name: getattr(message, f.name) for f in fields(Acl)})


def binding_problem(binding: controller_pb2.AclBinding, where: str) -> str | None:
    """Why ``binding`` is not an ACL that can be created (None: it can); names the field."""
    for name, allowed in (
        ("resource_type", RESOURCE_TYPES),
        ("pattern_type", PATTERN_TYPES),
        ("operation", OPERATIONS),
        ("permission_type", PERMISSION_TYPES),
    ):
        if getattr(binding, name) not in allowed:
            return f"{where}.{name}: {getattr(binding, name)!r} is not one of {', '.join(allowed)}"
    if not binding.principal.startswith("User:") or len(binding.principal) == len("User:"):
        return f"{where}.principal: expected User:NAME (User:CN=...,OU=...,O=... or User:*), got {binding.principal!r}"
    if binding.host != WILDCARD:
        return f"{where}.host: only {WILDCARD!r} (raftka does not match hosts), got {binding.host!r}"
    if not binding.resource_name:
        return f"{where}.resource_name: empty"
    if binding.resource_type == CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"{where}.resource_name: the cluster's is {CLUSTER_NAME!r}, got {binding.resource_name!r}"
    if binding.pattern_type == PREFIXED and binding.resource_name == WILDCARD:
        return f"{where}.resource_name: a PREFIXED pattern of {WILDCARD!r}: use LITERAL {WILDCARD!r} for every resource"
    for name in ("principal", "resource_name"):
        if len(getattr(binding, name)) > NAME_CHARS_MAX:
            return f"{where}.{name}: longer than {NAME_CHARS_MAX} characters"
    return None


def matches(acl: Acl, acl_filter: controller_pb2.AclBinding) -> bool:
    """``acl`` has every field ``acl_filter`` sets ("" in a filter matches anything)."""
    return all(
        not getattr(acl_filter, f.name) or getattr(acl_filter, f.name) == getattr(acl, f.name)
        for f in fields(Acl)
    )


class Authorizer:
    """Decides with the ACLs of the latest image the node has replayed."""

    def __init__(self, super_users: Iterable[str], acls: Callable[[], Mapping[str, Acl]]) -> None:
        self.super_users = frozenset(super_users)
        self._acls = acls

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        verdict = False
        for acl in self._acls().values():
            if (
                acl.principal in (principal, "User:*")
                and acl.operation in (operation, ALL)
                and acl.covers(resource_type, name)
            ):
                if acl.permission_type == DENY:
                    return False
                verdict = True
        return verdict
