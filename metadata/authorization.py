"""What the controller's callers may do (with mutual TLS on; without it, anyone may).

- The brokers' own RPCs (registration, heartbeats, ISR changes, producer ids, group
  commits and rebalances) need a broker certificate, and one whose id is the broker the
  request speaks for: a client certificate cannot register as a broker, nor broker 101
  heartbeat for broker 102. Brokers apply the same rule to a follower's fetch
  (``raftka.broker.replica.follower_check``).
- Admin operations need a super user (``authorizer.super_users``) or an ACL: create,
  delete, and alter topics and their configs, elect leaders, delete groups, and manage
  ACLs and SCRAM credentials (and describe those: DESCRIBE on the cluster, as Kafka). A broker forwarding a
  client's request is judged as that client (``raftka.security.grpc_gate``), never as itself,
  so a broker cannot lend its rights to a Kafka client; a broker asking for itself has
  no admin rights unless an operator gave them. A commit that names the coordinator
  forwarding it (``coordinator_id``) must come with that broker's certificate too.
- Reads as Kafka judges them: describing named topics needs DESCRIBE on each, their
  configs DESCRIBE_CONFIGS, a group's committed offsets DESCRIBE on the group and on
  each topic named, client quotas DESCRIBE_CONFIGS on the cluster; a listing of every
  topic (or of every offset a group committed) holds only the topics the caller may
  DESCRIBE, a listing of every topic's configs only those it may DESCRIBE_CONFIGS
  (``may``). The cluster's brokers (DescribeCluster) are open to every certificate of
  the cluster, as Kafka's DescribeCluster; the quorum's methods have their own rules
  (``raftka.metadata.quorum_authorization``).

Every method of the Controller service has a rule here (``controller_rules``); the gate
refuses a method without one.
- Offset commits, from a member through its coordinator or from outside the group (a
  reset), need READ on the group and on each topic, as Kafka's OffsetCommit.

The checks use the ACLs of the image this controller has replayed; a refused request is
answered whole, so nothing of it is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from raftka.metadata import acls
from raftka.metadata.acls import Authorizer
from raftka.security.grpc_gate import Denial, Rule, anyone, by_name
from raftka.security.principal import BROKER, Principal, current_host, current_principal
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
Pb = controller_pb2
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["Controller"]

BROKER_METHODS = frozenset(
    {
        "BrokerRegistration",
        "BrokerHeartbeat",
        "AlterPartition",
        "AllocateProducerIds",
        "CommitGroupOffsets",
        "RecordGroupRebalance",
        "WriteTransaction",
        "TxnOffsetCommit",
    }
)
_CODES = {acls.TOPIC: E.TOPIC_AUTHORIZATION_FAILED, acls.GROUP: E.GROUP_AUTHORIZATION_FAILED}
# (operation, resource type, resource name): one right a request needs
Need = tuple[str, str, str]


def _cluster(operation: str) -> Callable[[Any], Iterator[Need]]:
    def needs(_: Any) -> Iterator[Need]:
        yield operation, acls.CLUSTER, acls.CLUSTER_NAME

    return needs


def _configs_needs(operation: str, topics: Iterable[str], brokers: Sequence[object]) -> Iterator[Need]:
    """Kafka's rule: a topic's configs on the topic, a broker's on the cluster."""
    for topic in topics:
        yield operation, acls.TOPIC, topic
    if brokers:
        yield operation, acls.CLUSTER, acls.CLUSTER_NAME


_NEEDS: dict[str, Callable[[Any], Iterator[Need]]] = {
    "CreateTopics": lambda r: ((acls.CREATE, acls.TOPIC, t.name) for t in r.topics),
    "DeleteTopics": lambda r: ((acls.DELETE, acls.TOPIC, name) for name in r.names),
    "CreatePartitions": lambda r: ((acls.ALTER, acls.TOPIC, t.name) for t in r.topics),
    "AlterConfigs": lambda r: _configs_needs(acls.ALTER_CONFIGS, (t.topic for t in r.topics), r.brokers),
    "DescribeConfigs": lambda r: _configs_needs(acls.DESCRIBE_CONFIGS, r.topics, r.brokers),
    "DescribeTopics": lambda r: ((acls.DESCRIBE, acls.TOPIC, name) for name in r.names),
    "ElectLeaders": _cluster(acls.ALTER),
    "AlterPartitionReassignments": _cluster(acls.ALTER),  # Kafka's rule
    "ListPartitionReassignments": _cluster(acls.DESCRIBE),
    "UnregisterBroker": _cluster(acls.ALTER),  # Kafka's rule
    "DeleteGroups": lambda r: ((acls.DELETE, acls.GROUP, group) for group in r.groups),
    "OffsetCommit": lambda r: _group_and_topics(acls.READ, r.group, r.topics),
    "OffsetFetch": lambda r: _group_and_topics(acls.DESCRIBE, r.group, r.topics),
    "CreateAcls": _cluster(acls.ALTER),
    "DeleteAcls": _cluster(acls.ALTER),
    "DescribeAcls": _cluster(acls.DESCRIBE),
    "AlterClientQuotas": _cluster(acls.ALTER_CONFIGS),  # Kafka's rule
    "DescribeClientQuotas": _cluster(acls.DESCRIBE_CONFIGS),  # Kafka's rule
    "AlterUserScramCredentials": _cluster(acls.ALTER),
    "DescribeUserScramCredentials": _cluster(acls.DESCRIBE),
}


def _group_and_topics(operation: str, group: str, topics: Iterable[Any]) -> Iterator[Need]:
    """Kafka's rule for offsets: ``operation`` on the group, then on each topic."""
    yield operation, acls.GROUP, group
    for topic in topics:
        yield operation, acls.TOPIC, topic.topic


def controller_rules(authorizer: Authorizer) -> dict[str, Rule]:
    """A rule for every method of the Controller service (``raftka.security.grpc_gate``
    refuses a method without one)."""
    rules: dict[str, Rule] = {name: _needs_rule(authorizer, needs) for name, needs in _NEEDS.items()}
    rules |= {name: _broker_rule(name) for name in BROKER_METHODS}
    rules["OffsetCommit"] = _offset_commit_rule(rules["OffsetCommit"])
    rules |= {
        "ListTopics": anyone,  # the listing holds only the topics the caller may DESCRIBE
        "DescribeCluster": anyone,  # the brokers and the controller, as Kafka's DescribeCluster
    }
    return by_name(CONTROLLER_SERVICE, rules)


def _needs_rule(authorizer: Authorizer, needs: Callable[[Any], Iterator[Need]]) -> Rule:
    """Every right ``needs`` names, for the caller or the client a broker forwards for."""

    def rule(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
        acting = forwarded if forwarded is not None else caller.name
        host = current_host.get()  # the client's, when a broker forwards for it
        for operation, resource_type, name in needs(request):
            if not _allowed(authorizer, acting, operation, resource_type, name, host):
                what = "the cluster" if resource_type == acls.CLUSTER else f"{resource_type.lower()} {name!r}"
                return Denial(
                    _CODES.get(resource_type, E.CLUSTER_AUTHORIZATION_FAILED),
                    f"{acting} may not {operation} {what} (needs a super user or an ACL allowing it)",
                )
        return None

    return rule


def _broker_rule(method: str) -> Rule:
    def rule(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
        return broker_problem(method, caller, getattr(request, "broker_id", None))

    return rule


def _offset_commit_rule(needs: Rule) -> Rule:
    """A commit naming the coordinator forwarding it comes with that broker's certificate."""

    def rule(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
        if request.HasField("coordinator_id"):
            problem = broker_problem("OffsetCommit", caller, request.coordinator_id)
            if problem is not None:
                return problem
        return needs(caller, forwarded, request)

    return rule


def cluster_rule(authorizer: Authorizer, operation: str) -> Rule:
    """``operation`` on the cluster, for the caller or the client a broker forwards for."""
    return _needs_rule(authorizer, _cluster(operation))


def may(authorizer: Authorizer, operation: str) -> Callable[[str], bool]:
    """Whether the caller of the request being handled may ``operation`` a topic (a listing
    holds only those); with no principal (no TLS), every topic. A broker sees every topic:
    one forwarding a client's listing has kept only what that client may see."""

    def allowed(topic: str) -> bool:
        caller = current_principal.get()
        return (
            caller is None
            or caller.role == BROKER
            or authorizer.allowed(caller.name, operation, acls.TOPIC, topic, current_host.get())
        )

    return allowed


def _allowed(
    authorizer: Authorizer, principal: str, operation: str, resource_type: str, name: str, host: str
) -> bool:
    """Kafka's rule for creating a topic: CREATE on the topic or on the cluster."""
    if authorizer.allowed(principal, operation, resource_type, name, host):
        return True
    return operation == acls.CREATE and authorizer.allowed(
        principal, operation, acls.CLUSTER, acls.CLUSTER_NAME, host
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
