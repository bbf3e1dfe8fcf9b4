"""What the controller's callers may do (with mutual TLS on; without it, anyone may).

- The brokers' own RPCs (registration, heartbeats, ISR changes, producer ids, group
  commits and rebalances) need a broker certificate, and one whose id is the broker the
  request speaks for: a client certificate cannot register as a broker, nor broker 101
  heartbeat for broker 102. Brokers apply the same rule to a follower's fetch
  (``raftka.broker.replica.follower_check``).
- Admin operations need a super user (``authorizer.super_users``) or an ACL: create,
  delete, and alter topics and their configs, elect leaders, delete groups, commit
  offsets from outside a group (a reset), and manage ACLs and SCRAM credentials (and
  describe those: DESCRIBE on the cluster, as Kafka). A broker forwarding a
  client's request is judged as that client (``raftka.security.grpc_gate``), never as itself,
  so a broker cannot lend its rights to a Kafka client; a broker asking for itself has
  no admin rights unless an operator gave them. A commit that names the coordinator
  forwarding it (``coordinator_id``) must come with that broker's certificate too.
- Reads (list and describe topics, configs, the cluster, committed offsets) are open to
  every certificate of the cluster.

The checks use the ACLs of the image this controller has replayed; a refused request is
answered whole, so nothing of it is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from raftka.metadata import acls
from raftka.metadata.acls import Authorizer
from raftka.security.grpc_gate import Denial, Policy
from raftka.security.principal import BROKER, Principal
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
Pb = controller_pb2

BROKER_METHODS = frozenset(
    {
        "BrokerRegistration",
        "BrokerHeartbeat",
        "AlterPartition",
        "AllocateProducerIds",
        "CommitGroupOffsets",
        "RecordGroupRebalance",
    }
)
_CODES = {acls.TOPIC: E.TOPIC_AUTHORIZATION_FAILED, acls.GROUP: E.GROUP_AUTHORIZATION_FAILED}
# (operation, resource type, resource name): one right a request needs
Need = tuple[str, str, str]


def _cluster(operation: str) -> Callable[[Any], Iterator[Need]]:
    def needs(_: Any) -> Iterator[Need]:
        yield operation, acls.CLUSTER, acls.CLUSTER_NAME

    return needs


_NEEDS: dict[str, Callable[[Any], Iterator[Need]]] = {
    "CreateTopics": lambda r: ((acls.CREATE, acls.TOPIC, t.name) for t in r.topics),
    "DeleteTopics": lambda r: ((acls.DELETE, acls.TOPIC, name) for name in r.names),
    "CreatePartitions": lambda r: ((acls.ALTER, acls.TOPIC, t.name) for t in r.topics),
    "AlterConfigs": lambda r: ((acls.ALTER_CONFIGS, acls.TOPIC, t.topic) for t in r.topics),
    "ElectLeaders": _cluster(acls.ALTER),
    "DeleteGroups": lambda r: ((acls.DELETE, acls.GROUP, group) for group in r.groups),
    "OffsetCommit": lambda r: iter([(acls.ALTER, acls.GROUP, r.group)]),
    "CreateAcls": _cluster(acls.ALTER),
    "DeleteAcls": _cluster(acls.ALTER),
    "DescribeAcls": _cluster(acls.DESCRIBE),
    "AlterUserScramCredentials": _cluster(acls.ALTER),
    "DescribeUserScramCredentials": _cluster(acls.DESCRIBE),
}


def controller_policy(authorizer: Authorizer) -> Policy:
    def policy(method: str, caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
        if method in BROKER_METHODS:
            return broker_problem(method, caller, getattr(request, "broker_id", None))
        if method == "OffsetCommit" and request.HasField("coordinator_id"):
            problem = broker_problem(method, caller, request.coordinator_id)
            if problem is not None:
                return problem
        needs = _NEEDS.get(method)
        if needs is None:
            return None  # a read
        acting = forwarded if forwarded is not None else caller.name
        for operation, resource_type, name in needs(request):
            if not _allowed(authorizer, acting, operation, resource_type, name):
                what = "the cluster" if resource_type == acls.CLUSTER else f"{resource_type.lower()} {name!r}"
                return Denial(
                    _CODES.get(resource_type, E.CLUSTER_AUTHORIZATION_FAILED),
                    f"{acting} may not {operation} {what} (needs a super user or an ACL allowing it)",
                )
        return None

    return policy


def _allowed(authorizer: Authorizer, principal: str, operation: str, resource_type: str, name: str) -> bool:
    """Kafka's rule for creating a topic: CREATE on the topic or on the cluster."""
    if authorizer.allowed(principal, operation, resource_type, name):
        return True
    return operation == acls.CREATE and authorizer.allowed(
        principal, operation, acls.CLUSTER, acls.CLUSTER_NAME
    )


def broker_problem(what: str, caller: Principal, broker_id: int | None) -> Denial | None:
    """Refused unless ``caller`` is a broker's certificate, and broker ``broker_id``'s when the
    request speaks for one: ``what`` (an RPC, or a follower's Fetch) is only a broker's to make."""
    if caller.role != BROKER:
        return Denial(
            E.CLUSTER_AUTHORIZATION_FAILED, f"{what} is for brokers: {caller} is not a broker's certificate"
        )
    if broker_id is not None and broker_id != caller.node_id:
        return Denial(
            E.CLUSTER_AUTHORIZATION_FAILED,
            f"{what} for broker {broker_id}: the certificate is broker {caller.node_id}'s",
        )
    return None
