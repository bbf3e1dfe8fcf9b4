"""ACLs: what they are in the image, which requests may be made of them, and the
authorizer that reads them, deciding as Kafka's StandardAuthorizer does.

An ACL allows or denies one principal one operation on resources: a topic, a group or
the cluster (named ``kafka-cluster``), by name (LITERAL, ``*`` for all) or by a name
prefix (PREFIXED), from one host (a client's IP address, or ``*`` for any). The
decision for (principal, host, operation, resource):

- a super user (``authorizer.super_users``) is allowed everything;
- else the ACLs whose pattern covers the resource are read: one that DENIES this
  principal (or ``User:*``) from this host (or ``*``) this operation (or ``ALL``) refuses,
  whatever allows it (deny wins, regardless of order);
- else one that ALLOWS it allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows
  DESCRIBE, and one of ALTER_CONFIGS allows DESCRIBE_CONFIGS (implied only by ALLOWs: a
  DENY of READ does not deny DESCRIBE);
- else, when no ACL at all covers the resource (for anyone), the answer is
  ``authorizer.allow_everyone_if_no_acl_found`` (Kafka's key, off by default: refused);
  when some do, refused.

ACLs are records in the metadata log (``AccessControlEntryRecord``), so every node
replays the same ones; an ACL's id is a digest of its fields, so the same ACL created
twice is one ACL.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields

from raftka.v1 import controller_pb2, metadata_pb2

TOPIC = "TOPIC"
GROUP = "GROUP"
CLUSTER = "CLUSTER"
TRANSACTIONAL_ID = "TRANSACTIONAL_ID"
CLUSTER_NAME = "kafka-cluster"
LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
WILDCARD = "*"
ALLOW = "ALLOW"
DENY = "DENY"
ALL = "ALL"
CREATE, DELETE, ALTER, ALTER_CONFIGS = "CREATE", "DELETE", "ALTER", "ALTER_CONFIGS"
DESCRIBE, READ, WRITE = "DESCRIBE", "READ", "WRITE"
DESCRIBE_CONFIGS, CLUSTER_ACTION, IDEMPOTENT_WRITE = "DESCRIBE_CONFIGS", "CLUSTER_ACTION", "IDEMPOTENT_WRITE"
ANY_PRINCIPAL = "User:*"

RESOURCE_TYPES = (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID)
PATTERN_TYPES = (LITERAL, PREFIXED)
OPERATIONS = (
    ALL,
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
)
# Operations an ALLOW implies besides its own (Kafka's IMPLIES_DESCRIBE, IMPLIES_DESCRIBE_CONFIGS)
IMPLIED_BY = {
    DESCRIBE: frozenset({READ, WRITE, DELETE, ALTER}),
    DESCRIBE_CONFIGS: frozenset({ALTER_CONFIGS}),
}
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
    host_problem = _host_problem(binding.host)
    if host_problem is not None:
        return f"{where}.host: {host_problem}"
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


def _host_problem(host: str) -> str | None:
    """Kafka matches a client by its IP address as written (``getHostAddress``), so an ACL's
    host is ``*`` or an IP address in its usual form."""
    if host == WILDCARD:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"{WILDCARD!r} or an IP address (hosts are matched by the client's address), got {host!r}"
    if str(address) != host:
        return f"write the address as {address} (the form a client's address is matched in), got {host!r}"
    return None


def matches(acl: Acl, acl_filter: controller_pb2.AclBinding) -> bool:
    """``acl`` has every field ``acl_filter`` sets ("" in a filter matches anything)."""
    return all(
        not getattr(acl_filter, f.name) or getattr(acl_filter, f.name) == getattr(acl, f.name)
        for f in fields(Acl)
    )


class Authorizer:
    """Decides with the ACLs of the latest image the node has replayed."""

    def __init__(
        self,
        super_users: Iterable[str],
        acls: Callable[[], Mapping[str, Acl]],
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self._acls = acls
        self._no_acl_verdict = allow_everyone_if_no_acl_found

    def allowed(self, principal: str, operation: str, resource_type: str, name: str, host: str = "") -> bool:
        """Whether ``principal`` connected from ``host`` (an IP address; "": unknown, so
        only ``*`` ACLs match it) may do ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        covered = allowed = False
        for acl in self._acls().values():
            if not acl.covers(resource_type, name):
                continue
            covered = True
            verdict = _verdict(acl, principal, host, operation)
            if verdict == DENY:
                return False
            allowed = allowed or verdict == ALLOW
        return allowed or (not covered and self._no_acl_verdict)

    def allowed_on_any(self, principal: str, operation: str, resource_type: str, host: str = "") -> bool:
        """Whether some resource of ``resource_type`` allows ``operation`` (Kafka's
        ``authorizeByResourceType``, KIP-679: an idempotent producer needs WRITE on some
        topic): an ALLOW of it for this principal and host that no matching DENY covers."""
        if principal in self.super_users:
            return True
        mine = [a for a in self._acls().values() if a.resource_type == resource_type]
        if not mine:
            return self._no_acl_verdict
        denies = [a for a in mine if _verdict(a, principal, host, operation) == DENY]
        return any(
            _verdict(a, principal, host, operation) == ALLOW
            and not any(_pattern_covers(d, a) for d in denies)
            for a in mine
        )


def _verdict(acl: Acl, principal: str, host: str, operation: str) -> str | None:
    """ALLOW or DENY if ``acl`` speaks about this principal, host and operation, else None
    (the resource is checked by the caller). Kafka's ``StandardAuthorizerData.findResult``."""
    if acl.principal not in (principal, ANY_PRINCIPAL) or acl.host not in (WILDCARD, host):
        return None
    if acl.operation == ALL or acl.operation == operation:
        return acl.permission_type
    if acl.permission_type == ALLOW and acl.operation in IMPLIED_BY.get(operation, ()):
        return ALLOW
    return None


def _pattern_covers(deny: Acl, allow: Acl) -> bool:
    """Every resource ``allow`` names is one ``deny`` names too."""
    if deny.pattern_type == LITERAL and deny.resource_name == WILDCARD:
        return True
    if deny.pattern_type == PREFIXED:
        return allow.resource_name.startswith(deny.resource_name)
    return allow.pattern_type == LITERAL and allow.resource_name == deny.resource_name
